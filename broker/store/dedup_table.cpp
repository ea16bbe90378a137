#include "broker/store/dedup_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/safe_file.h"
#include "common/unique_handle.h"

namespace mcp::broker {

void write_file_atomically(const std::filesystem::path& file, const std::string& text);

namespace {

std::filesystem::path bindings_of(const std::filesystem::path& file) {
  return file.string() + ".bindings";
}

// The state file's directory, checked (owner, mode) and held open: every write goes through it
// with O_NOFOLLOW, so a link planted beside the state cannot redirect what the broker (root) writes.
SafeDir state_dir(const std::filesystem::path& file) {
  return SafeDir(file.has_parent_path() ? file.parent_path() : std::filesystem::path("."), "broker state");
}

std::string hex_of(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

DedupTable::DedupTable(std::filesystem::path file, uint64_t now_us) : file_(std::move(file)) {
  if (file_.empty()) return;
  const uint64_t loaded_s = now_us / 1000000;
  try {
    if (std::filesystem::exists(file_)) {
      std::ifstream in(file_);
      const auto json = nlohmann::json::parse(in);
      for (const auto& [agent, value] : json.items()) {
        Agent& a = agents_[agent];
        a.seen_s = loaded_s;
        if (!value.is_object()) {
          a.incarnations[0].sequence = value.get<uint64_t>();  // before credentials were bound
          continue;
        }
        if (value.contains("sequence")) a.incarnations[0].sequence = value.at("sequence").get<uint64_t>();
        a.credential = value.value("credential", "");
        a.seen_s = value.value("seen", loaded_s);
        if (value.contains("incarnations"))
          for (const auto& [inc, seq] : value.at("incarnations").items())
            a.incarnations[std::stoull(inc, nullptr, 16)].sequence = seq.get<uint64_t>();
        for (auto& [inc, c] : a.incarnations) c.used_us = a.seen_s * 1000000;  // in use when last seen
      }
    }
    std::ifstream bindings(bindings_of(file_));
    std::string line;
    while (std::getline(bindings, line)) {
      // A line cut by a crash is the last one and bound nothing that was acknowledged.
      const auto json = nlohmann::json::parse(line, nullptr, false);
      if (json.is_discarded() || !json.is_object()) continue;
      Agent& a = agents_[json.value("agent", "")];
      if (a.credential.empty()) a.credential = json.value("credential", "");
      a.seen_s = std::max(a.seen_s, loaded_s);
    }
  } catch (const std::exception& e) {
    throw runtime_error("broker: bad " + file_.string() + ": " + e.what());
  }
}

Admission DedupTable::check(const std::string& agent, uint64_t incarnation,
                            const std::string& credential, uint64_t sequence, uint64_t now_us) const {
  const auto sat_add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  uint64_t mark = 0;
  if (const auto it = agents_.find(agent); it != agents_.end()) {
    if (!it->second.credential.empty() && it->second.credential != credential)
      return Admission::kForeignCredential;
    const auto& incs = it->second.incarnations;
    if (const auto c = incs.find(incarnation); c != incs.end()) {
      mark = c->second.sequence;
    } else if (incs.size() >= kMaxIncarnations) {
      const auto lru = std::min_element(incs.begin(), incs.end(), [](const auto& a, const auto& b) {
        return a.second.used < b.second.used;
      });
      if (now_us < sat_add(lru->second.used_us, kIncarnationIdleUs)) return Admission::kIncarnationsInUse;
    }
  }
  if (sequence <= mark) return Admission::kDuplicate;
  uint64_t bound = sat_add(mark, kSequenceWindow);
  if (incarnation == 0) bound = std::max(bound, sat_add(now_us, kClockAllowanceUs));
  return sequence > bound ? Admission::kBeyondWindow : Admission::kNew;
}

DedupTable::Count& DedupTable::count_of(const std::string& agent, uint64_t incarnation, uint64_t now_us) {
  auto& incs = agents_[agent].incarnations;
  if (!incs.count(incarnation) && incs.size() >= kMaxIncarnations) {
    incs.erase(std::min_element(incs.begin(), incs.end(), [](const auto& a, const auto& b) {
      return a.second.used < b.second.used;
    }));
  }
  Count& c = incs[incarnation];
  c.used = ++tick_;
  c.used_us = std::max(c.used_us, now_us);
  return c;
}

bool DedupTable::record(const std::string& agent, uint64_t incarnation,
                        const std::string& credential, uint64_t sequence, uint64_t now_us) {
  Count& c = count_of(agent, incarnation, now_us);
  c.sequence = std::max(c.sequence, sequence);
  Agent& a = agents_[agent];
  a.seen_s = std::max(a.seen_s, now_us / 1000000);
  if (!a.credential.empty() || credential.empty()) return false;
  a.credential = credential;
  append_binding(agent, credential);
  return true;
}

void DedupTable::advance(const std::string& agent, uint64_t incarnation, uint64_t sequence, uint64_t now_us) {
  Count& c = count_of(agent, incarnation, now_us);
  c.sequence = std::max(c.sequence, sequence);
  // The journal's batches were seen when the file says (a repair is no sighting); only an id
  // the file lacks (killed before its snapshot) counts from now.
  Agent& a = agents_[agent];
  if (a.seen_s == 0) a.seen_s = now_us / 1000000;
}

size_t DedupTable::expire(uint64_t now_us, std::chrono::seconds idle) {
  if (idle.count() <= 0) return 0;
  const uint64_t now_s = now_us / 1000000;
  const auto idle_s = static_cast<uint64_t>(idle.count());
  return std::erase_if(agents_, [&](const auto& kv) { return kv.second.seen_s + idle_s < now_s; });
}

uint64_t DedupTable::high_water(const std::string& agent, uint64_t incarnation) const {
  const auto it = agents_.find(agent);
  if (it == agents_.end()) return 0;
  const auto c = it->second.incarnations.find(incarnation);
  return c == it->second.incarnations.end() ? 0 : c->second.sequence;
}

std::string DedupTable::credential(const std::string& agent) const {
  const auto it = agents_.find(agent);
  return it == agents_.end() ? std::string() : it->second.credential;
}

void DedupTable::append_binding(const std::string& agent, const std::string& credential) const {
  if (file_.empty()) return;
  const std::string line = nlohmann::json{{"agent", agent}, {"credential", credential}}.dump() + "\n";
  const SafeDir dir = state_dir(file_);
  const std::string name = bindings_of(file_).filename().string();
  const UniqueFd fd(dir.open(name, O_WRONLY | O_APPEND | O_CREAT, 0600));
  if (!fd) throw runtime_error("broker: cannot write " + bindings_of(file_).string() + ": " + open_error_text(errno));
  if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    throw runtime_error("broker: cannot write " + bindings_of(file_).string() + ": " + std::strerror(errno));
}

void DedupTable::persist() const {
  if (file_.empty()) return;
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [agent, a] : agents_) {
    nlohmann::json entry = {{"credential", a.credential}, {"seen", a.seen_s}};
    nlohmann::json incs = nlohmann::json::object();
    for (const auto& [inc, c] : a.incarnations) {
      if (inc == 0)
        entry["sequence"] = c.sequence;
      else
        incs[hex_of(inc)] = c.sequence;
    }
    if (!incs.empty()) entry["incarnations"] = std::move(incs);
    json[agent] = std::move(entry);
  }
  write_file_atomically(file_, json.dump());
  std::error_code ec;
  std::filesystem::remove(bindings_of(file_), ec);  // every binding is in the snapshot now
}

void write_file_atomically(const std::filesystem::path& file, const std::string& text) {
  // Through the checked directory, under a name nobody can guess: a link planted at a fixed
  // FILE.tmp would have the broker (root) write credential identities wherever it points.
  if (!state_dir(file).replace(file.filename().string(), text, 0600))
    throw runtime_error("broker: cannot write " + file.string() + ": " + open_error_text(errno));
}

}  // namespace mcp::broker
