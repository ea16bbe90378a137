#include "audit/audit_log.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/error.h"
#include "common/safe_file.h"

namespace mcp::audit {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMacField = ",\"mac\":\"";
constexpr size_t kMacHex = 64;
// `,"mac":"` + 64 hex + `"}`
constexpr size_t kMacTail = kMacField.size() + kMacHex + 2;
const std::string kGenesis(kMacHex, '0');
// A seal's MAC covers this prefix too, so no seal line can pass for a record or the reverse.
constexpr std::string_view kSealDomain = "mcp-audit-seal\n";

std::string file_name(uint64_t first_seq) {
  char name[40];
  std::snprintf(name, sizeof(name), "audit-%012llu.jsonl", static_cast<unsigned long long>(first_seq));
  return name;
}

std::string hex(const unsigned char* p, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; i++) {
    out.push_back(kHex[p[i] >> 4]);
    out.push_back(kHex[p[i] & 15]);
  }
  return out;
}

std::string hmac_hex(const Key& key, std::string_view prefix, std::string_view data) {
  std::string msg(prefix);
  msg += data;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), out, &n);
  return hex(out, n);
}

// The line's body (mac field taken out), or nullopt when it does not end in one.
std::optional<std::string> body_of(std::string_view line, std::string* mac) {
  if (line.size() < kMacTail + 2 || !line.ends_with("\"}")) return std::nullopt;
  const size_t at = line.size() - kMacTail;
  if (line.substr(at, kMacField.size()) != kMacField) return std::nullopt;
  *mac = std::string(line.substr(at + kMacField.size(), kMacHex));
  return std::string(line.substr(0, at)) + "}";
}

// `body` (a JSON object) with `,"mac":"<mac>"` appended inside it, and a newline.
std::string with_mac(const std::string& body, const std::string& mac) {
  return body.substr(0, body.size() - 1) + std::string(kMacField) + mac + "\"}\n";
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// seq and prev of a record body, or nullopt.
std::optional<std::pair<uint64_t, std::string>> link_of(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("seq") || !j["seq"].is_number_unsigned() || !j.contains("prev") ||
      !j["prev"].is_string())
    return std::nullopt;
  return std::pair{j["seq"].get<uint64_t>(), j["prev"].get<std::string>()};
}

std::optional<Key> parse_key(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  Key key{};
  if (text.size() != key.size() * 2) return std::nullopt;
  for (size_t i = 0; i < key.size(); i++) {
    const auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return key;
}

std::optional<Key> read_key_fd(int fd) {
  char buf[160];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  return n > 0 ? parse_key(std::string(buf, static_cast<size_t>(n))) : std::nullopt;
}

// The writer's key: read, or created on a first start. A key that others can read or swap
// (a symlink, group or world bits) lets them forge records, so it is refused.
Key open_key(const fs::path& file, bool trail_exists) {
  int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    struct stat st {};
    const bool private_file = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077) == 0;
    const auto key = private_file ? read_key_fd(fd) : std::nullopt;
    ::close(fd);
    if (!private_file) throw runtime_error("audit key " + file.string() + " must be a regular file only its owner can read (0600)");
    if (!key) throw runtime_error("audit key " + file.string() + " does not hold 64 hex digits");
    return *key;
  }
  if (errno != ENOENT) throw runtime_error("audit key " + file.string() + ": " + std::strerror(errno));
  // A new key for an old trail would make it unverifiable from here on.
  if (trail_exists)
    throw runtime_error("audit key " + file.string() + " is missing but the trail exists: restore the key, or move the trail aside");
  Key key{};
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1) throw runtime_error("audit key: no random bytes");
  fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw runtime_error("cannot create the audit key " + file.string() + ": " + std::strerror(errno));
  const std::string text = hex(key.data(), key.size()) + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) {
    ::unlink(file.c_str());
    throw runtime_error("cannot write the audit key " + file.string());
  }
  return key;
}

std::string seal_mac(const Key& key, std::string_view body) { return hmac_hex(key, kSealDomain, body); }

// The seal in `file` when its MAC holds under `key`; else nullopt and why.
std::optional<Seal> read_seal(const fs::path& file, const Key& key, std::string* why) {
  std::ifstream in(file, std::ios::binary);
  std::string line;
  if (!in || !std::getline(in, line)) {
    *why = "cannot read the seal: a trail without its seal cannot be shown whole";
    return std::nullopt;
  }
  std::string mac;
  const auto body = body_of(line, &mac);
  if (!body || seal_mac(key, *body) != mac) {
    *why = "the seal's MAC does not match its content under this key: the seal was changed or is another trail's";
    return std::nullopt;
  }
  const auto j = nlohmann::json::parse(*body, nullptr, false);
  Seal s;
  try {
    s.first_seq = j.at("first_seq").get<uint64_t>();
    s.first_prev = j.at("first_prev").get<std::string>();
    s.last_seq = j.at("last_seq").get<uint64_t>();
    s.last_mac = j.at("last_mac").get<std::string>();
    s.last_file = j.at("last_file").get<std::string>();
    s.files = j.at("files").get<uint64_t>();
    s.ts_ns = j.at("ts_ns").get<uint64_t>();
  } catch (const nlohmann::json::exception&) {
    *why = "the seal lacks a field";
    return std::nullopt;
  }
  if (s.first_seq == 0) {
    *why = "the seal's first_seq is 0";
    return std::nullopt;
  }
  return s;
}

}  // namespace

fs::path default_key_file(const fs::path& dir) {
  fs::path d = dir.lexically_normal();
  if (d.filename().empty()) d = d.parent_path();  // "trail/"
  return d.string() + ".key";
}

Key read_key(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw runtime_error("audit key " + file.string() + ": " + std::strerror(errno));
  const auto key = read_key_fd(fd);
  ::close(fd);
  if (!key) throw runtime_error("audit key " + file.string() + " does not hold 64 hex digits");
  return *key;
}

fs::path seal_file(const fs::path& dir) { return dir / "audit.seal"; }

std::vector<fs::path> trail_files(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("audit-") && name.ends_with(".jsonl")) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string record_mac(const Key& key, std::string_view line_without_mac) { return hmac_hex(key, "", line_without_mac); }

AuditLog::AuditLog(AuditOptions options) : options_(std::move(options)) {
  std::error_code ec;
  fs::create_directories(options_.dir, ec);
  if (ec) throw runtime_error("audit log: cannot create " + options_.dir.string() + ": " + ec.message());
  // Root writes here: a directory another user could plant links in is refused, and that is
  // checked before it is tightened, as links may be planted already (common/safe_file.h).
  dir_ = SafeDir(options_.dir, "audit log");
  ::fchmod(dir_.fd(), 0700);
  if (options_.key_file.empty()) options_.key_file = default_key_file(options_.dir);
  last_mac_ = first_prev_ = kGenesis;
  const auto files = trail_files(options_.dir);
  // Continue the chain from the newest file holding a complete record.
  std::string last_body, last_mac;
  for (auto it = files.rbegin(); it != files.rend() && last_body.empty(); ++it) {
    // Read and cut below by name: through a link that would be someone else's file.
    if (fs::is_symlink(*it))
      throw runtime_error("audit log: " + it->string() + ": " + open_error_text(ELOOP));
    std::string text = slurp(*it);
    const size_t complete = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (complete < text.size()) fs::resize_file(*it, complete, ec);  // a torn line was never written
    if (complete == 0) continue;
    text.resize(complete - 1);  // the last record's newline
    const std::string last = text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
    const auto body = body_of(last, &last_mac);
    const auto link = body ? link_of(*body) : std::nullopt;
    if (!link) throw runtime_error("audit log: " + it->string() + " does not end in a record; run `mcp-agent audit verify` on it");
    seq_ = link->first;
    last_body = *body;
  }
  const fs::path seal_path = seal_file(options_.dir);
  key_ = open_key(options_.key_file, seq_ > 0 || fs::exists(seal_path));
  if (seq_ > 0) {
    if (record_mac(key_, last_body) != last_mac)
      throw runtime_error("audit log: the last record in " + options_.dir.string() + " was not written with the key " +
                          options_.key_file.string() + "; run `mcp-agent audit verify` on it");
    last_mac_ = last_mac;
  }
  // Never seal over a trail shorter than its seal: that would vouch for the cut.
  std::string why;
  if (const auto seal = read_seal(seal_path, key_, &why)) {
    if (seal->last_seq > seq_ || (seal->last_seq == seq_ && seal->last_mac != last_mac_))
      throw runtime_error("audit log: " + options_.dir.string() + " ends at seq " + std::to_string(seq_) +
                          " but its seal says seq " + std::to_string(seal->last_seq) +
                          ": records were removed; run `mcp-agent audit verify`, and move the trail aside to start anew");
    first_seq_ = seal->first_seq;
    first_prev_ = seal->first_prev;
    // Files before the seal's first are what an interrupted prune() left.
    for (const auto& f : files)
      if (f.filename().string() < file_name(first_seq_)) fs::remove(f, ec);
  } else if (seq_ > 0 || fs::exists(seal_path)) {
    throw runtime_error("audit log: " + seal_path.string() + ": " + why);
  }
  if (auto e = open_next(true); !e.empty()) throw runtime_error("audit log: " + e);
  write_seal();
}

AuditLog::~AuditLog() {
  std::lock_guard lock(mu_);
  write_seal();  // a clean exit leaves nothing unsealed
  if (fd_ >= 0) ::close(fd_);
}

std::string AuditLog::open_next(bool continue_newest) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  // A new file, unless a restart finds the newest one still young and small.
  struct stat st {};
  const bool reuse = continue_newest && !file_.empty() && ::stat(file_.c_str(), &st) == 0 &&
                     static_cast<uint64_t>(st.st_size) < options_.max_bytes &&
                     std::chrono::system_clock::now() - std::chrono::system_clock::from_time_t(st.st_mtime) <
                         options_.max_age;
  if (!reuse) file_ = options_.dir / file_name(seq_ + 1);
  fd_ = dir_.open(file_.filename().string(), O_WRONLY | O_CREAT | O_APPEND);
  if (fd_ < 0) return "cannot open " + file_.string() + ": " + std::strerror(errno);
  file_bytes_ = ::fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  opened_ = std::chrono::steady_clock::now();
  return "";
}

int AuditLog::write_line(const std::string& line) {
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n == static_cast<ssize_t>(line.size())) {
    file_bytes_ += line.size();
    return 0;
  }
  const int err = n < 0 ? errno : ENOSPC;  // a short write to a file: the space ran out
  // A short write leaves part of a record: cut it off, or the chain breaks there.
  if (n > 0 && ::ftruncate(fd_, static_cast<off_t>(file_bytes_)) != 0) file_bytes_ += static_cast<uint64_t>(n);
  return err;
}

bool AuditLog::prune() {
  if (options_.max_files == 0) return false;
  const auto files = trail_files(options_.dir);
  if (files.size() <= options_.max_files) return false;
  const size_t cut = files.size() - options_.max_files;
  if (files[cut] == file_) {
    first_seq_ = seq_ + 1;
    first_prev_ = last_mac_;
  } else {
    std::ifstream in(files[cut], std::ios::binary);
    std::string line, mac;
    const auto body = std::getline(in, line) ? body_of(line, &mac) : std::nullopt;
    const auto link = body ? link_of(*body) : std::nullopt;
    if (!link) return false;  // keep what cannot be chained to; verify will say why
    first_seq_ = link->first;
    first_prev_ = link->second;
  }
  // The seal moves to the new head before the old files go: a crash in between leaves files
  // the next start removes, never a seal naming a file that is gone.
  write_seal(options_.max_files);
  if (!seal_error_.empty()) return true;
  std::error_code ec;
  for (size_t i = 0; i < cut; i++) fs::remove(files[i], ec);
  return true;
}

void AuditLog::write_seal(uint64_t files) {
  const fs::path path = seal_file(options_.dir);
  // The records a seal vouches for reach the disk before it does.
  if (fd_ >= 0 && ::fdatasync(fd_) != 0) return failed(seal_error_, "cannot sync " + file_.string() + ": " + std::strerror(errno));
  nlohmann::ordered_json j;
  j["first_seq"] = first_seq_;
  j["first_prev"] = first_prev_;
  j["last_seq"] = seq_;
  j["last_mac"] = last_mac_;
  j["last_file"] = file_.filename().string();
  j["files"] = files ? files : trail_files(options_.dir).size();
  j["ts_ns"] = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::system_clock::now().time_since_epoch()).count());
  const std::string body = j.dump();
  const std::string line = with_mac(body, seal_mac(key_, body));
  // Written aside and renamed: a crash leaves the old seal or the new one, never half of one.
  if (!dir_.replace(path.filename().string(), line))
    return failed(seal_error_, "cannot write the seal " + path.string() + ": " + std::strerror(errno));
  succeeded(seal_error_);
  unsealed_ = 0;
}

void AuditLog::failed(std::string& slot, std::string what) {
  const auto now = std::chrono::steady_clock::now();
  // At once on the first failure, then at most every 10 s: a full disk fails every record.
  if (slot.empty() || now - said_ >= std::chrono::seconds(10)) {
    spdlog::error("audit log: {}; events whose record cannot be written are not exported ({} so far)", what, dropped_);
    said_ = now;
  }
  slot = std::move(what);
}

void AuditLog::succeeded(std::string& slot) {
  if (slot.empty()) return;
  spdlog::warn("audit log: writing again after: {} ({} events were not exported)", slot, dropped_);
  slot.clear();
}

bool AuditLog::record(const rules::RuleSet& rules, const rules::Decision& decision, const Event& event) {
  nlohmann::json fired = nlohmann::json::array();
  std::vector<std::string> redacted;
  for (uint32_t i : decision.fired) {
    const rules::Rule& r = rules.rule(i);
    const auto& a = r.actions;
    if (!a.exempt.value_or(false) && a.redact.empty() && a.audit.empty()) continue;
    fired.push_back({{"rule", r.name}, {"when", r.condition_text}, {"clauses", a.audit}});
    for (const auto& f : a.redact)
      if (std::find(redacted.begin(), redacted.end(), f.spelling) == redacted.end()) redacted.push_back(f.spelling);
  }
  if (fired.empty()) return true;
  std::lock_guard lock(mu_);
  const auto fail = [&](std::string what) {
    failures_++;
    if (!decision.drop) dropped_++;
    failed(write_error_, std::move(what));
    return false;
  };
  if (fd_ < 0 || file_bytes_ >= options_.max_bytes || std::chrono::steady_clock::now() - opened_ >= options_.max_age) {
    if (auto e = open_next(false); !e.empty()) return fail(e);
    if (!prune()) write_seal();
  }
  nlohmann::ordered_json j;
  j["seq"] = seq_ + 1;
  j["ts_ns"] = event.ts_ns;
  j["node"] = options_.node;
  j["probe"] = std::string(event.probe);
  j["pid"] = event.pid;
  j["comm"] = std::string(event.comm_view());
  j["service"] = event.service;
  j["rules"] = std::move(fired);
  j["exempt"] = decision.exempt;
  j["redacted"] = redacted;
  j["prev"] = last_mac_;
  // Traced processes choose comm and services: invalid UTF-8 is replaced, never thrown on.
  const std::string body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string mac = record_mac(key_, body);
  const std::string line = with_mac(body, mac);
  if (const int err = write_line(line)) return fail("cannot write " + file_.string() + ": " + std::strerror(err));
  succeeded(write_error_);
  seq_++;
  last_mac_ = mac;
  records_++;
  if (++unsealed_ >= options_.seal_every || !seal_error_.empty()) write_seal();  // a failed seal is retried
  if (observer_) observer_(seq_, event.ts_ns, mac, std::string_view(line).substr(0, line.size() - 1));
  return true;
}

void AuditLog::set_observer(Observer observer) {
  std::lock_guard lock(mu_);
  observer_ = std::move(observer);
}

uint64_t AuditLog::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

uint64_t AuditLog::failures() const {
  std::lock_guard lock(mu_);
  return failures_;
}

uint64_t AuditLog::dropped_events() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

std::string AuditLog::health_problem() const {
  std::lock_guard lock(mu_);
  const std::string& what = write_error_.empty() ? seal_error_ : write_error_;
  if (what.empty()) return "";
  return "audit log: " + what + " (" + std::to_string(dropped_) + " events not exported)";
}

fs::path AuditLog::current_file() const {
  std::lock_guard lock(mu_);
  return file_;
}

VerifyResult verify_trail(const std::vector<fs::path>& files, const fs::path& seal_path, const Key& key) {
  VerifyResult r;
  const auto seal = read_seal(seal_path, key, &r.reason);
  if (!seal) {
    r.where = seal_path.string();
    return r;
  }
  const fs::path dir = seal_path.parent_path();
  r.first_seq = seal->first_seq;
  uint64_t seq = seal->first_seq - 1;  // of the last record read
  std::string prev = seal->first_prev;
  bool newest_seen = false;
  size_t number = 0;  // lines of the file read last
  for (const auto& file : files) {
    // Files are named for their first record: a name out of turn is a file or records missing.
    const std::string name = file.filename().string(), want = file_name(seq + 1);
    if (name != want) {
      r.where = file.string();
      r.reason = &file == &files.front()
                     ? "the seal says the trail starts with " + want + ": the files or records before it are missing"
                     : "the chain reaches this file at seq " + std::to_string(seq + 1) + ", its name says " + name +
                           ": a file or records before it are missing, or it was renamed";
      return r;
    }
    newest_seen |= name == seal->last_file;
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      r.where = file.string();
      r.reason = "cannot read the file";
      return r;
    }
    std::string line;
    number = 0;
    while (std::getline(in, line)) {
      number++;
      r.where = file.string() + ":" + std::to_string(number);
      std::string mac;
      const auto body = body_of(line, &mac);
      if (!body) {
        r.reason = "not a record (no mac at its end)";
        return r;
      }
      if (record_mac(key, *body) != mac) {
        r.reason = "its MAC does not match its content under this key: the record was changed";
        return r;
      }
      const auto link = link_of(*body);
      if (!link) {
        r.reason = "not a record (no seq or prev)";
        return r;
      }
      const auto& [s, p] = *link;
      if (s != seq + 1) {
        r.reason = "seq " + std::to_string(s) + " where seq " + std::to_string(seq + 1) + " belongs: " +
                   (s > seq + 1 ? "records before it were removed" : "records were inserted or reordered");
        return r;
      }
      if (p != prev) {
        r.reason = "its prev is not the MAC of the record before: the chain is broken here";
        return r;
      }
      if (s == seal->last_seq && mac != seal->last_mac) {
        r.reason = "it is not the record the seal names as seq " + std::to_string(s) + ": the trail was rewritten";
        return r;
      }
      seq = s;
      prev = mac;
      r.records++;
    }
    if (!in.eof()) {
      r.reason = "read error";
      return r;
    }
  }
  // The ends: nothing the seal vouches for may be missing.
  if (!newest_seen) {
    r.where = (dir / seal->last_file).string();
    r.reason = "missing: the seal names it as the newest file";
    return r;
  }
  if (seq < seal->last_seq) {
    r.where = files.back().string() + ":" + std::to_string(number + 1);
    r.reason = "the trail ends at seq " + std::to_string(seq) + " but the seal says it reached seq " +
               std::to_string(seal->last_seq) + ": records were cut off";
    return r;
  }
  if (files.size() < seal->files) {
    r.where = dir.string();
    r.reason = std::to_string(files.size()) + " files where the seal counts " + std::to_string(seal->files) +
               ": a file was removed";
    return r;
  }
  r.unsealed = seq - seal->last_seq;
  r.ok = true;
  r.where.clear();
  return r;
}

}  // namespace mcp::audit
