#include "broker/dedup_table.h"

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
    for (const auto& [agent, seq] : json.items()) marks_[agent] = seq.get<uint64_t>();
  } catch (const std::exception& e) {
    throw runtime_error("broker: bad " + file_.string() + ": " + e.what());
  }
}

bool DedupTable::accept(const std::string& agent, uint64_t sequence) {
  uint64_t& mark = marks_[agent];
  if (sequence <= mark) return false;
  mark = sequence;
  return true;
}

uint64_t DedupTable::high_water(const std::string& agent) const {
  const auto it = marks_.find(agent);
  return it == marks_.end() ? 0 : it->second;
}

void DedupTable::persist() const {
  if (file_.empty()) return;
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [agent, seq] : marks_) json[agent] = seq;
  write_file_atomically(file_, json.dump());
}

void write_file_atomically(const std::filesystem::path& file, const std::string& text) {
  const auto tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) throw runtime_error("broker: cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) throw runtime_error("broker: cannot rename " + tmp + ": " + ec.message());
}

}  // namespace mcp::broker
