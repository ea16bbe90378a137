#include "wire/dictionary.h"

#include <utility>

#include "common/utf8.h"

namespace mcp::wire {

void Dictionary::reset() {
  block_->Clear();
  strings_.clear();
  pair_sets_.clear();
  block_->add_strings();    // 0: ""
  block_->add_pair_sets();  // 0: no pairs
  strings_.emplace(std::string(), 0);
}

uint32_t Dictionary::string(std::string_view raw) {
  if (raw.empty()) return 0;
  if (auto it = strings_.find(raw); it != strings_.end()) return it->second;
  const auto index = static_cast<uint32_t>(block_->strings_size());
  std::string* s = block_->add_strings();
  // Repaired once per distinct string per block, not per event.
  if (is_valid_utf8(raw)) s->assign(raw);
  else append_valid_utf8(*s, raw);
  strings_.emplace(std::string(raw), index);
  return index;
}

uint32_t Dictionary::intern_scratch() {
  const auto key = [&](const Pair& p) -> const std::string& { return block_->strings(static_cast<int>(p.k)); };
  // Insertion sort: sets are small, it is stable and allocates nothing.
  for (size_t i = 1; i < scratch_.size(); ++i)
    for (size_t j = i; j > 0 && key(scratch_[j]) < key(scratch_[j - 1]); --j) std::swap(scratch_[j], scratch_[j - 1]);
  scratch_key_.clear();
  for (const auto& p : scratch_) {
    scratch_key_.append(reinterpret_cast<const char*>(&p.k), sizeof(uint32_t));
    scratch_key_.append(reinterpret_cast<const char*>(&p.v), sizeof(uint32_t));
  }
  if (auto it = pair_sets_.find(std::string_view(scratch_key_)); it != pair_sets_.end()) return it->second;
  const auto index = static_cast<uint32_t>(block_->pair_sets_size());
  auto* set = block_->add_pair_sets();
  for (const auto& p : scratch_) {
    set->add_keys(p.k);
    set->add_values(p.v);
  }
  pair_sets_.emplace(scratch_key_, index);
  return index;
}

}  // namespace mcp::wire
