// The one validator of untrusted blocks (wire/block_check.h), as the broker's ingest and the
// subscriber's decoder both meet it: each defect is refused with a reason naming the field,
// and the decoder reads nothing of a refused block. Blocks are hand-built with the generated
// classes (support/compact_block.h), so the check is held to the proto's contract, not to our
// encoder.
#include "wire/block_check.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "../../support/compact_block.h"
#include "wire/event_block.h"

namespace mcp::wire {
namespace {

using mcp::test::compact_block;

struct Case {
  const char* name;
  std::function<void(mcp::v1::EventBlock&)> spoil;
  const char* reason;  // what the error must say
};

// compact_block(2): 12 strings, pair sets 0 (none), 1 zone=a, 2 zone=b, 3 k=v; event 0 carries
// CUDA names, a grid of 1 and attributes; both events one arg.
const std::vector<Case>& hostile_cases() {
  static const std::vector<Case> cases = {
      {"probe one past", [](auto& b) { b.mutable_events(1)->set_probe(12); }, "event 1: probe index 12 out of range"},
      {"probe far", [](auto& b) { b.mutable_events(0)->set_probe(1000); }, "probe index 1000"},
      {"comm", [](auto& b) { b.mutable_events(0)->set_comm(UINT32_MAX); }, "comm index 4294967295"},
      {"service", [](auto& b) { b.mutable_events(0)->set_service(static_cast<uint32_t>(b.strings_size())); }, "service index"},
      {"th", [](auto& b) { b.mutable_events(0)->set_th(77); }, "th index 77"},
      {"container_id", [](auto& b) { b.mutable_events(0)->set_container_id(77); }, "container_id index"},
      {"pod_uid", [](auto& b) { b.mutable_events(0)->set_pod_uid(77); }, "pod_uid index"},
      {"pod_name", [](auto& b) { b.mutable_events(0)->set_pod_name(77); }, "pod_name index"},
      {"pod_namespace", [](auto& b) { b.mutable_events(0)->set_pod_namespace(77); }, "pod_namespace index"},
      {"container_name", [](auto& b) { b.mutable_events(0)->set_container_name(77); }, "container_name index"},
      {"pod_labels set", [](auto& b) { b.mutable_events(0)->set_pod_labels(9); }, "pod_labels index 9"},
      {"tags set one past", [](auto& b) { b.mutable_events(1)->set_tags(4); }, "event 1: tags index 4"},
      {"attributes set", [](auto& b) { b.mutable_events(0)->set_attributes(9); }, "attributes index 9"},
      {"pair key", [](auto& b) { b.mutable_pair_sets(1)->set_keys(0, 500); }, "pair set 1: key string index 500"},
      {"pair value", [](auto& b) { b.mutable_pair_sets(2)->set_values(0, 99); }, "pair set 2: value string index 99"},
      {"pair lengths", [](auto& b) { b.mutable_pair_sets(1)->add_keys(1); }, "pair set 1 has 2 keys but 1 values"},
      {"kind unknown", [](auto& b) { b.mutable_events(0)->set_kind(static_cast<mcp::v1::EventKind>(77)); }, "unknown kind 77"},
      {"kind unset", [](auto& b) { b.mutable_events(0)->set_kind(mcp::v1::EVENT_KIND_UNSPECIFIED); }, "unknown kind 0"},
      {"args", [](auto& b) { for (int i = 0; i < 6; ++i) b.mutable_events(0)->add_args(1); }, "args has 7 values (at most 6)"},
      {"cuda api", [](auto& b) { b.mutable_events(0)->mutable_cuda()->set_api(400); }, "cuda.api index 400"},
      {"cuda kernel", [](auto& b) { b.mutable_events(0)->mutable_cuda()->set_kernel(UINT32_MAX); }, "cuda.kernel index"},
      {"cuda grid", [](auto& b) { for (int i = 0; i < 3; ++i) b.mutable_events(0)->mutable_cuda()->add_grid(1); }, "cuda.grid has 4 values"},
      {"cuda block", [](auto& b) { for (int i = 0; i < 4; ++i) b.mutable_events(0)->mutable_cuda()->add_block(1); }, "cuda.block has 4 values"},
      {"threshold 0", [](auto& b) { b.mutable_events(0)->set_threshold(0); }, "event 0 has threshold 0"},
      {"strings[0]", [](auto& b) { b.set_strings(0, "x"); }, "strings[0] is not empty"},
      {"no strings, index 5", [](auto& b) { b.clear_strings(); }, "pair set 1: key string index 5"},
      {"pair_sets[0]", [](auto& b) { b.mutable_pair_sets(0)->add_keys(0); b.mutable_pair_sets(0)->add_values(0); }, "pair_sets[0] is not empty"},
  };
  return cases;
}

TEST(BlockCheck, AWellFormedBlockPasses) {
  EXPECT_FALSE(check_block(compact_block(60)).has_value());
  EXPECT_FALSE(check_block(mcp::v1::EventBlock{}).has_value());
}

TEST(BlockCheck, EachDefectIsRefusedNamingTheField) {
  for (const auto& c : hostile_cases()) {
    auto bad = compact_block(2);
    c.spoil(bad);
    const auto error = check_block(bad);
    ASSERT_TRUE(error.has_value()) << c.name;
    EXPECT_NE(error->reason.find(c.reason), std::string::npos) << c.name << ": " << error->reason;
  }
}

// The decoder refuses the same blocks with the same reason and keeps nothing of them.
TEST(BlockCheck, TheDecoderRefusesWhatTheCheckRefuses) {
  EventBlockDecoder dec;
  for (const auto& c : hostile_cases()) {
    auto bad = compact_block(2);
    c.spoil(bad);
    std::string error;
    EXPECT_FALSE(dec.parse(bad.SerializeAsString(), error)) << c.name;
    EXPECT_EQ(error, check_block(bad)->reason) << c.name;
    EXPECT_EQ(dec.size(), 0u) << c.name;
  }
  std::string error;
  EXPECT_FALSE(dec.parse("\xff\xff\xff", error));
  EXPECT_FALSE(error.empty());
  EXPECT_TRUE(dec.parse(compact_block(2).SerializeAsString(), error)) << error;
  EXPECT_EQ(dec.size(), 2u);
}

// Index 0 means unset even when a dictionary is empty: a block without strings or pair sets.
TEST(BlockCheck, EmptyDictionariesMeanUnset) {
  mcp::v1::EventBlock bare;
  auto* e = bare.add_events();
  e->set_kind(mcp::v1::EVENT_KIND_SYSCALL);
  e->set_threshold(UINT64_MAX);
  EXPECT_FALSE(check_block(bare).has_value());
  EXPECT_EQ(block_string(bare, 0), "");
  EXPECT_EQ(block_string(bare, 5), "") << "unchecked readers see \"\" out of range";
  EventBlockDecoder dec;
  std::string error;
  ASSERT_TRUE(dec.parse(bare.SerializeAsString(), error)) << error;
  Event out;
  uint64_t id = 0;
  dec.get(0, out, id);
  EXPECT_EQ(out.kind, EventKind::kSyscall);
  EXPECT_EQ(out.probe, "");
  EXPECT_TRUE(out.tags.empty());
  e->set_probe(1);
  EXPECT_NE(check_block(bare)->reason.find("probe index 1 out of range"), std::string::npos);
}

}  // namespace
}  // namespace mcp::wire
