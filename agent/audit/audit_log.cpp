#include "audit/audit_log.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace mcp::audit {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kHashField = ",\"hash\":\"";
constexpr size_t kHashHex = 64;
// `,"hash":"` + 64 hex + `"}`
constexpr size_t kHashTail = kHashField.size() + kHashHex + 2;
const std::string kGenesis(kHashHex, '0');

std::string file_name(uint64_t first_seq) {
  char name[40];
  std::snprintf(name, sizeof(name), "audit-%012llu.jsonl", static_cast<unsigned long long>(first_seq));
  return name;
}

// The line's body (hash field taken out), or nullopt when it does not end in one.
std::optional<std::string> body_of(std::string_view line, std::string* hash) {
  if (line.size() < kHashTail + 2 || !line.ends_with("\"}")) return std::nullopt;
  const size_t at = line.size() - kHashTail;
  if (line.substr(at, kHashField.size()) != kHashField) return std::nullopt;
  *hash = std::string(line.substr(at + kHashField.size(), kHashHex));
  return std::string(line.substr(0, at)) + "}";
}

}  // namespace

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

std::string record_hash(std::string_view line_without_hash) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(line_without_hash.data()), line_without_hash.size(), digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

AuditLog::AuditLog(AuditOptions options) : options_(std::move(options)) {
  std::error_code ec;
  fs::create_directories(options_.dir, ec);
  if (ec) throw runtime_error("audit log: cannot create " + options_.dir.string() + ": " + ec.message());
  ::chmod(options_.dir.c_str(), 0700);
  last_hash_ = kGenesis;
  const auto files = trail_files(options_.dir);
  if (!files.empty()) {
    // Continue the chain: the last complete record of the newest file.
    file_ = files.back();
    std::ifstream in(file_, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t complete = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (complete < text.size()) fs::resize_file(file_, complete, ec);  // a torn line was never written
    text.resize(complete);
    if (complete > 0) {
      text.pop_back();  // the last record's newline
      const std::string last = text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
      std::string hash;
      const auto body = body_of(last, &hash);
      const auto j = body ? nlohmann::json::parse(*body, nullptr, false) : nlohmann::json();
      if (!j.is_object() || !j.contains("seq") || !j["seq"].is_number_unsigned())
        throw runtime_error("audit log: " + file_.string() + " does not end in a record; run `mcp-agent audit verify` on it");
      seq_ = j["seq"].get<uint64_t>();
      last_hash_ = hash;
    }
  }
  open_next(true);
}

AuditLog::~AuditLog() {
  if (fd_ >= 0) ::close(fd_);
}

void AuditLog::open_next(bool continue_newest) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  // A new file, unless a restart finds the newest one still young and small.
  struct stat st {};
  const bool reuse = continue_newest && !file_.empty() && ::stat(file_.c_str(), &st) == 0 &&
                     static_cast<uint64_t>(st.st_size) < options_.max_bytes &&
                     std::chrono::system_clock::now() - std::chrono::system_clock::from_time_t(st.st_mtime) <
                         options_.max_age;
  if (!reuse) file_ = options_.dir / file_name(seq_ + 1);
  fd_ = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) throw runtime_error("audit log: cannot open " + file_.string() + ": " + std::strerror(errno));
  file_bytes_ = ::fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  opened_ = std::chrono::steady_clock::now();
}

bool AuditLog::write_line(const std::string& line) {
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n == static_cast<ssize_t>(line.size())) {
    file_bytes_ += line.size();
    return true;
  }
  // A short write (ENOSPC) leaves part of a record: cut it off, or the chain breaks there.
  if (n > 0 && ::ftruncate(fd_, static_cast<off_t>(file_bytes_)) != 0) file_bytes_ += static_cast<uint64_t>(n);
  return false;
}

void AuditLog::record(const rules::RuleSet& rules, const rules::Decision& decision, const Event& event) {
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
  if (fired.empty()) return;
  std::lock_guard lock(mu_);
  if (file_bytes_ >= options_.max_bytes || std::chrono::steady_clock::now() - opened_ >= options_.max_age) {
    try {
      open_next(false);
    } catch (const Error&) {
      failures_++;
      return;
    }
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
  j["prev"] = last_hash_;
  // Traced processes choose comm and services: invalid UTF-8 is replaced, never thrown on.
  const std::string body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string hash = record_hash(body);
  std::string line = body.substr(0, body.size() - 1);
  line += kHashField;
  line += hash;
  line += "\"}\n";
  if (fd_ < 0 || !write_line(line)) {
    failures_++;
    return;
  }
  seq_++;
  last_hash_ = hash;
  records_++;
  if (observer_) observer_(seq_, event.ts_ns, hash, std::string_view(line).substr(0, line.size() - 1));
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

fs::path AuditLog::current_file() const {
  std::lock_guard lock(mu_);
  return file_;
}

VerifyResult verify_chain(const std::vector<fs::path>& files) {
  VerifyResult r;
  std::string prev = kGenesis;
  uint64_t seq = 0;
  bool first = true;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      r.where = file.string();
      r.reason = "cannot read the file";
      return r;
    }
    std::string line;
    size_t number = 0;
    while (std::getline(in, line)) {
      number++;
      r.where = file.string() + ":" + std::to_string(number);
      std::string hash;
      const auto body = body_of(line, &hash);
      if (!body) {
        r.reason = "not a record (no hash at its end)";
        return r;
      }
      if (record_hash(*body) != hash) {
        r.reason = "its hash does not match its content: the record was changed";
        return r;
      }
      const auto j = nlohmann::json::parse(*body, nullptr, false);
      if (!j.is_object() || !j.contains("seq") || !j["seq"].is_number_unsigned() || !j.contains("prev") ||
          !j["prev"].is_string()) {
        r.reason = "not a record (no seq or prev)";
        return r;
      }
      const uint64_t s = j["seq"].get<uint64_t>();
      // The chain may start past 1 when older files were removed by retention: the first
      // record read is taken as it is (first_seq says where the checked chain starts).
      if (first) r.first_seq = s;
      if (!first && (s != seq + 1 || j["prev"].get<std::string>() != prev)) {
        r.reason = s != seq + 1 ? "seq " + std::to_string(s) + " follows " + std::to_string(seq) +
                                      ": a record before it was removed or inserted"
                                : "its prev is not the hash of the record before: the chain is broken here";
        return r;
      }
      first = false;
      seq = s;
      prev = hash;
      r.records++;
    }
    if (!in.eof()) {
      r.reason = "read error";
      return r;
    }
  }
  r.ok = true;
  r.where.clear();
  return r;
}

}  // namespace mcp::audit
