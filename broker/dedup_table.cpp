#include "broker/dedup_table.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace mcp::broker {

void write_file_atomically(const std::filesystem::path& file, const std::string& text);

DedupTable::DedupTable(std::filesystem::path file) : file_(std::move(file)) {
  if (file_.empty() || !std::filesystem::exists(file_)) return;
  std::ifstream in(file_);
  try {
    const auto json = nlohmann::json::parse(in);
    for (const auto& [agent, value] : json.items()) {
      Mark& m = marks_[agent];
      if (value.is_object()) {
        m.sequence = value.at("sequence").get<uint64_t>();
        m.credential = value.value("credential", "");
      } else {
        m.sequence = value.get<uint64_t>();  // before credentials were bound
      }
    }
  } catch (const std::exception& e) {
    throw runtime_error("broker: bad " + file_.string() + ": " + e.what());
  }
}

Admission DedupTable::check(const std::string& agent, const std::string& credential,
                            uint64_t sequence, uint64_t now_us) const {
  const auto it = marks_.find(agent);
  if (it == marks_.end()) return Admission::kNew;
  const Mark& m = it->second;
  if (!m.credential.empty() && m.credential != credential) return Admission::kForeignCredential;
  if (sequence <= m.sequence) return Admission::kDuplicate;
  const uint64_t by_mark = m.sequence > UINT64_MAX - kSequenceWindow ? UINT64_MAX : m.sequence + kSequenceWindow;
  const uint64_t by_clock = now_us > UINT64_MAX - kClockAllowanceUs ? UINT64_MAX : now_us + kClockAllowanceUs;
  if (sequence > std::max(by_mark, by_clock)) return Admission::kBeyondWindow;
  return Admission::kNew;
}

bool DedupTable::record(const std::string& agent, const std::string& credential, uint64_t sequence) {
  const auto [it, added] = marks_.try_emplace(agent);
  Mark& m = it->second;
  m.sequence = std::max(m.sequence, sequence);
  const bool bound = m.credential.empty() && !credential.empty();
  if (bound) m.credential = credential;
  return added || bound;
}

void DedupTable::advance(const std::string& agent, uint64_t sequence) {
  Mark& m = marks_[agent];
  m.sequence = std::max(m.sequence, sequence);
}

uint64_t DedupTable::high_water(const std::string& agent) const {
  const auto it = marks_.find(agent);
  return it == marks_.end() ? 0 : it->second.sequence;
}

std::string DedupTable::credential(const std::string& agent) const {
  const auto it = marks_.find(agent);
  return it == marks_.end() ? std::string() : it->second.credential;
}

void DedupTable::persist() const {
  if (file_.empty()) return;
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [agent, m] : marks_)
    json[agent] = {{"sequence", m.sequence}, {"credential", m.credential}};
  write_file_atomically(file_, json.dump());
}

void write_file_atomically(const std::filesystem::path& file, const std::string& text) {
  const auto tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) throw runtime_error("broker: cannot write " + tmp);
  }
  ::chmod(tmp.c_str(), 0600);  // credential identities and policies: the broker's only
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) throw runtime_error("broker: cannot rename " + tmp + ": " + ec.message());
}

}  // namespace mcp::broker
