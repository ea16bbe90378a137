#include "wire/block_check.h"

#include <algorithm>

#include "wire/kind.h"

namespace mcp::wire {
namespace {

constexpr int kMaxArgs = 6;      // Event::args
constexpr int kMaxTriplet = 3;   // CudaInfo::grid / block: x, y, z

BlockError out_of_range(int event, const char* field, uint64_t index) {
  return {"event " + std::to_string(event) + ": " + field + " index " + std::to_string(index) + " out of range"};
}

BlockError too_many(int event, const char* field, int n, int most) {
  return {"event " + std::to_string(event) + ": " + field + " has " + std::to_string(n) + " values (at most " +
          std::to_string(most) + ")"};
}

}  // namespace

std::optional<BlockError> check_block(const mcp::v1::EventBlock& block) {
  const auto strings = static_cast<uint64_t>(block.strings_size());
  const auto sets = static_cast<uint64_t>(block.pair_sets_size());
  if (strings > 0 && !block.strings(0).empty()) return BlockError{"EventBlock strings[0] is not empty"};
  if (sets > 0 && block.pair_sets(0).keys_size() + block.pair_sets(0).values_size() > 0)
    return BlockError{"EventBlock pair_sets[0] is not empty"};
  const auto str_ok = [&](uint64_t i) { return i == 0 || i < strings; };
  const auto set_ok = [&](uint64_t i) { return i == 0 || i < sets; };
  for (int i = 0; i < block.pair_sets_size(); ++i) {
    const auto& set = block.pair_sets(i);
    if (set.keys_size() != set.values_size())
      return BlockError{"EventBlock pair set " + std::to_string(i) + " has " + std::to_string(set.keys_size()) +
                        " keys but " + std::to_string(set.values_size()) + " values"};
    const auto bad_pair = [&](const char* side, uint32_t index) {
      return BlockError{"EventBlock pair set " + std::to_string(i) + ": " + side + " string index " +
                        std::to_string(index) + " out of range"};
    };
    for (int k = 0; k < set.keys_size(); ++k) {
      if (!str_ok(set.keys(k))) return bad_pair("key", set.keys(k));
      if (!str_ok(set.values(k))) return bad_pair("value", set.values(k));
    }
  }
  for (int i = 0; i < block.events_size(); ++i) {
    const auto& e = block.events(i);
    if (!kind_from_wire(e.kind())) return BlockError{"event " + std::to_string(i) + ": unknown kind " + std::to_string(e.kind())};
    if (!str_ok(e.probe())) return out_of_range(i, "probe", e.probe());
    if (!str_ok(e.comm())) return out_of_range(i, "comm", e.comm());
    if (!str_ok(e.container_id())) return out_of_range(i, "container_id", e.container_id());
    if (!str_ok(e.pod_uid())) return out_of_range(i, "pod_uid", e.pod_uid());
    if (!str_ok(e.pod_name())) return out_of_range(i, "pod_name", e.pod_name());
    if (!str_ok(e.pod_namespace())) return out_of_range(i, "pod_namespace", e.pod_namespace());
    if (!str_ok(e.container_name())) return out_of_range(i, "container_name", e.container_name());
    if (!set_ok(e.pod_labels())) return out_of_range(i, "pod_labels", e.pod_labels());
    if (!str_ok(e.service())) return out_of_range(i, "service", e.service());
    if (!str_ok(e.th())) return out_of_range(i, "th", e.th());
    if (!set_ok(e.tags())) return out_of_range(i, "tags", e.tags());
    if (!set_ok(e.attributes())) return out_of_range(i, "attributes", e.attributes());
    if (e.args_size() > kMaxArgs) return too_many(i, "args", e.args_size(), kMaxArgs);
    if (e.has_cuda()) {
      const auto& c = e.cuda();
      if (!str_ok(c.api())) return out_of_range(i, "cuda.api", c.api());
      if (!str_ok(c.kernel())) return out_of_range(i, "cuda.kernel", c.kernel());
      if (c.grid_size() > kMaxTriplet) return too_many(i, "cuda.grid", c.grid_size(), kMaxTriplet);
      if (c.block_size() > kMaxTriplet) return too_many(i, "cuda.block", c.block_size(), kMaxTriplet);
    }
    if (e.threshold() == 0)
      return BlockError{"event " + std::to_string(i) + " has threshold 0 (probability 0, infinite weight)"};
  }
  return std::nullopt;
}

const std::string& block_string(const mcp::v1::EventBlock& block, uint32_t index) {
  static const std::string empty;
  return index != 0 && index < static_cast<uint32_t>(block.strings_size()) ? block.strings(static_cast<int>(index))
                                                                           : empty;
}

}  // namespace mcp::wire
