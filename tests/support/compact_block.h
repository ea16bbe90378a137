// Hand-built compact batches (EventBlock, capability "events-v2") for broker tests, made with
// the generated classes only, so the broker's decoder is tested against the contract in
// proto/mcp/v1/sampling.proto and not against its own encoder.
#pragma once
#include <cstdint>

#include "mcp/v1/sampling.pb.h"

namespace mcp::test {

// Event i: kind syscall, probe "syscall:getppid", comm "app", service "api" for odd i else
// "checkout", tags {zone: "a"} unless i % 3 == 0 ({zone: "b"}), args[0] = first_arg + i,
// keep-all threshold; event 0 also carries CUDA names and attributes.
inline mcp::v1::EventBlock compact_block(int events, uint64_t first_arg = 0) {
  mcp::v1::EventBlock b;
  for (const char* s : {"", "checkout", "api", "syscall:getppid", "app", "zone", "a", "b",
                        "cudaLaunchKernel", "vec_add", "k", "v"})
    b.add_strings(s);
  b.add_pair_sets();                                         // 0: none
  auto* a = b.add_pair_sets();                               // 1: zone=a
  a->add_keys(5);
  a->add_values(6);
  auto* z = b.add_pair_sets();                               // 2: zone=b
  z->add_keys(5);
  z->add_values(7);
  auto* kv = b.add_pair_sets();                              // 3: k=v
  kv->add_keys(10);
  kv->add_values(11);
  for (int i = 0; i < events; ++i) {
    auto* e = b.add_events();
    e->set_ts_ns(1'700'000'000'000'000'000ull + static_cast<uint64_t>(i));
    e->set_kind(mcp::v1::EVENT_KIND_SYSCALL);
    e->set_probe(3);
    e->set_pid(42);
    e->set_tid(43);
    e->set_comm(4);
    e->set_service(i % 2 ? 2 : 1);
    e->set_tags(i % 3 ? 1 : 2);
    e->add_args(first_arg + static_cast<uint64_t>(i));
    e->set_threshold(UINT64_MAX);
    if (i == 0) {
      e->mutable_cuda()->set_api(8);
      e->mutable_cuda()->set_kernel(9);
      e->mutable_cuda()->add_grid(4);
      e->set_attributes(3);
      e->set_ret(-5);
      e->set_has_ret(true);
    }
  }
  return b;
}

inline mcp::v1::AgentMessage compact_batch_message(uint64_t sequence, const mcp::v1::EventBlock& block) {
  mcp::v1::AgentMessage m;
  m.mutable_batch()->set_sequence(sequence);
  block.SerializeToString(m.mutable_batch()->mutable_events());
  return m;
}

}  // namespace mcp::test
