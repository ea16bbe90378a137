// Decoding raw ring-buffer records built with the real ABI structs of bpf/mcp_abi.h.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "mcp_abi.h"
#include "pipeline/decoder.h"

namespace mcp::pipeline {
namespace {

mcp_call_event make_call(uint16_t kind) {
  mcp_call_event e;
  std::memset(&e, 0, sizeof(e));
  e.hdr.ktime_ns = 123456789012ull;
  e.hdr.cgroup_id = 0xabcdef01234ull;
  e.hdr.threshold = 1ull << 62;
  e.hdr.pid = 4242;
  e.hdr.tid = 4243;
  e.hdr.probe_id = 7;
  e.hdr.kind = kind;
  e.hdr.cpu = 3;
  e.hdr.size = sizeof(e);
  std::memcpy(e.hdr.comm, "workload", 9);
  for (int i = 0; i < MCP_MAX_ARGS; i++) e.args[i] = 1000 + i;
  e.args[5] = UINT64_MAX;
  return e;
}

struct Lookup {
  std::vector<uint32_t> asked;
  ProbeRef ref{"/usr/bin/workload:target", 6};
  ProbeNameLookup fn() {
    return [this](uint32_t id) {
      asked.push_back(id);
      return ref;
    };
  }
};

TEST(DecodeRecord, UprobeCarriesEveryHeaderFieldAndSixArgs) {
  const auto rec = make_call(MCP_KIND_UPROBE);
  Lookup names;
  Event ev;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.kind, EventKind::kUprobe);
  EXPECT_EQ(ev.ktime_ns, 123456789012ull);
  EXPECT_EQ(ev.cgroup_id, 0xabcdef01234ull);
  EXPECT_EQ(ev.threshold, 1ull << 62);
  EXPECT_DOUBLE_EQ(ev.weight(), 4.0);
  EXPECT_EQ(ev.pid, 4242u);
  EXPECT_EQ(ev.tid, 4243u);
  EXPECT_EQ(ev.cpu, 3u);
  EXPECT_EQ(ev.probe_id, 7u);
  EXPECT_EQ(ev.probe, "/usr/bin/workload:target");
  EXPECT_EQ(names.asked, std::vector<uint32_t>{7});
  EXPECT_EQ(ev.comm_view(), "workload");
  EXPECT_EQ(ev.nargs, 6);
  for (int i = 0; i < 5; i++) EXPECT_EQ(ev.args[i], 1000u + i);
  EXPECT_EQ(ev.args[5], UINT64_MAX);
  EXPECT_FALSE(ev.has_ret);
  EXPECT_FALSE(ev.has_duration);
}

TEST(DecodeRecord, UretprobeHasSignedReturnAndDurationWhenFlagged) {
  auto rec = make_call(MCP_KIND_URETPROBE);
  rec.hdr.flags = MCP_EV_HAS_RET | MCP_EV_HAS_DURATION;
  rec.ret = -22;
  rec.duration_ns = 1500000;
  Lookup names;
  Event ev;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.kind, EventKind::kUretprobe);
  EXPECT_TRUE(ev.has_ret);
  EXPECT_EQ(ev.ret, -22);
  EXPECT_TRUE(ev.has_duration);
  EXPECT_EQ(ev.duration_ns, 1500000u);
}

TEST(DecodeRecord, FlagsGovernRetAndDurationIndependently) {
  auto rec = make_call(MCP_KIND_SYSCALL);
  rec.hdr.flags = MCP_EV_HAS_RET;
  rec.ret = 5;
  Lookup names;
  Event ev;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_TRUE(ev.has_ret);
  EXPECT_FALSE(ev.has_duration);
  rec.hdr.flags = MCP_EV_HAS_DURATION;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_FALSE(ev.has_ret);  // not left over from the previous record
  EXPECT_TRUE(ev.has_duration);
}

TEST(DecodeRecord, SyscallArityTruncatesArgs) {
  auto rec = make_call(MCP_KIND_SYSCALL);
  Lookup names;
  names.ref = {"syscall:getppid", 0};
  Event ev;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.kind, EventKind::kSyscall);
  EXPECT_EQ(ev.probe, "syscall:getppid");
  EXPECT_EQ(ev.nargs, 0);
  names.ref = {"syscall:openat", 4};
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.nargs, 4);
  EXPECT_EQ(ev.args[3], 1003u);
  names.ref = {"syscall:bogus", 9};  // never more than the six captured
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.nargs, MCP_MAX_ARGS);
}

// Issue 36: a uprobe's declared count trims its arguments as a syscall's arity does; an
// undeclared one carries all six registers, marked so the table leaves them out.
TEST(DecodeRecord, UprobeArgumentsFollowTheDeclaredCount) {
  for (const uint16_t kind : {MCP_KIND_UPROBE, MCP_KIND_URETPROBE}) {
    auto rec = make_call(kind);
    Lookup names;
    names.ref = {"/bin/x:f", 2, true};
    Event ev;
    ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
    EXPECT_EQ(ev.nargs, 2);
    EXPECT_TRUE(ev.args_declared);
    names.ref = {"/bin/x:g", 6, false};
    ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
    EXPECT_EQ(ev.nargs, 6);
    EXPECT_FALSE(ev.args_declared);
    names.ref = {"syscall:openat", 4};  // a reused event is declared again
    rec.hdr.kind = MCP_KIND_SYSCALL;
    ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
    EXPECT_TRUE(ev.args_declared);
  }
}

mcp_usdt_event make_usdt(uint8_t nargs, uint8_t str_args, uint8_t str_ok) {
  mcp_usdt_event e;
  std::memset(&e, 0, sizeof(e));
  e.call = make_call(MCP_KIND_USDT);
  e.call.hdr.size = sizeof(e);
  e.nargs = nargs;
  e.str_args = str_args;
  e.str_ok = str_ok;
  return e;
}

TEST(DecodeRecord, UsdtCarriesItsDeclaredArgCountAndStringsAsArgAttributes) {
  // Strings read for arguments 1 and 3 (slots 0 and 1); argument 4's read failed (slot 2).
  auto rec = make_usdt(5, 0b11010, 0b01010);
  std::strcpy(rec.str[0], "/tmp/script.py");
  std::memset(rec.str[1], 'x', MCP_STR_ARG_LEN);  // no NUL: cut at the slot's end
  std::strcpy(rec.str[2], "stale");
  Lookup names;
  Event ev;
  ev.attributes.emplace_back("old", "enrichment");
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.kind, EventKind::kUsdt);
  EXPECT_EQ(to_string(ev.kind), "usdt");
  EXPECT_EQ(ev.nargs, 5);
  EXPECT_EQ(ev.args[1], 1001u);
  EXPECT_FALSE(ev.has_ret);
  const std::vector<std::pair<std::string, std::string>> want = {{"arg1", "/tmp/script.py"},
                                                                 {"arg3", std::string(MCP_STR_ARG_LEN, 'x')}};
  EXPECT_EQ(ev.attributes, want);
}

TEST(DecodeRecord, UsdtWithMoreThanSixArgumentsShowsSixAndTruncatedUsdtIsRejected) {
  auto rec = make_usdt(12, 0, 0);
  Lookup names;
  Event ev;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.nargs, MCP_MAX_ARGS);
  EXPECT_TRUE(ev.attributes.empty());
  rec.call.hdr.size = sizeof(mcp_call_event);
  EXPECT_FALSE(decode_record(&rec, sizeof(mcp_call_event), names.fn(), ev));
}

TEST(DecodeRecord, AStackTrailerGivesItsFramesAndCountsPastTheArraysAreClamped) {
  mcp_call_stack_event rec;
  std::memset(&rec, 0, sizeof(rec));
  rec.call = make_call(MCP_KIND_UPROBE);
  rec.call.hdr.size = sizeof(rec);
  rec.call.hdr.flags = MCP_EV_HAS_STACK;
  rec.stack.user_frames = 2;
  rec.stack.kernel_frames = 1;
  rec.stack.user_ips[0] = 0x401000;
  rec.stack.user_ips[1] = 0x401234;
  rec.stack.kernel_ips[0] = 0xffffffff81000000ull;
  rec.stack.user_ids[0].status = MCP_BUILD_ID_VALID;
  rec.stack.user_ids[0].build_id[0] = 0xab;
  rec.stack.user_ids[0].offset_or_ip = 0x1000;
  rec.stack.user_ids[1].status = MCP_BUILD_ID_IP;
  rec.stack.user_ids[1].offset_or_ip = 0x401234;
  Lookup names;
  Event ev;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.captured_stack.user, (std::vector<uint64_t>{0x401000, 0x401234}));
  EXPECT_EQ(ev.captured_stack.kernel, (std::vector<uint64_t>{0xffffffff81000000ull}));
  ASSERT_EQ(ev.captured_stack.user_ids.size(), 2u);
  EXPECT_TRUE(ev.captured_stack.user_ids[0].valid);
  EXPECT_EQ(ev.captured_stack.user_ids[0].build_id[0], 0xab);
  EXPECT_EQ(ev.captured_stack.user_ids[0].file_offset, 0x1000u);
  EXPECT_FALSE(ev.captured_stack.user_ids[1].valid);

  rec.stack.user_frames = 1000;  // a bad count cannot read past the record
  rec.stack.kernel_frames = 65535;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.captured_stack.user.size(), static_cast<size_t>(MCP_MAX_STACK_DEPTH));
  EXPECT_EQ(ev.captured_stack.kernel.size(), static_cast<size_t>(MCP_MAX_STACK_DEPTH));

  rec.call.hdr.size = sizeof(rec) - 8;  // flagged, but the trailer is cut
  EXPECT_FALSE(decode_record(&rec, sizeof(rec) - 8, names.fn(), ev));

  // A reused event loses the previous record's stack.
  const auto plain = make_call(MCP_KIND_UPROBE);
  ev.stack.push_back({1, "f", 0, "m"});
  ASSERT_TRUE(decode_record(&plain, sizeof(plain), names.fn(), ev));
  EXPECT_TRUE(ev.captured_stack.empty());
  EXPECT_TRUE(ev.stack.empty());
}

TEST(DecodeRecord, TruncatedRecordsAreRejected) {
  const auto rec = make_call(MCP_KIND_UPROBE);
  Lookup names;
  Event ev;
  EXPECT_FALSE(decode_record(&rec, 0, names.fn(), ev));
  EXPECT_FALSE(decode_record(&rec, sizeof(mcp_event_header) - 1, names.fn(), ev));
  EXPECT_FALSE(decode_record(&rec, sizeof(mcp_event_header), names.fn(), ev));  // header only, no payload
  EXPECT_FALSE(decode_record(&rec, sizeof(rec) - 1, names.fn(), ev));
  EXPECT_TRUE(names.asked.empty());
}

TEST(DecodeRecord, HeaderClaimingMoreThanTheBufferIsRejected) {
  auto rec = make_call(MCP_KIND_UPROBE);
  rec.hdr.size = sizeof(rec) + 8;
  Lookup names;
  Event ev;
  EXPECT_FALSE(decode_record(&rec, sizeof(rec), names.fn(), ev));
}

TEST(DecodeRecord, UnknownKindIsRejected) {
  auto rec = make_call(MCP_KIND_UPROBE);
  rec.hdr.kind = 99;
  Lookup names;
  Event ev;
  EXPECT_FALSE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_TRUE(names.asked.empty());
}

TEST(DecodeRecord, UnalignedBufferDecodes) {
  const auto rec = make_call(MCP_KIND_UPROBE);
  std::vector<unsigned char> buf(sizeof(rec) + 1);
  std::memcpy(buf.data() + 1, &rec, sizeof(rec));
  Lookup names;
  Event ev;
  ASSERT_TRUE(decode_record(buf.data() + 1, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.args[0], 1000u);
  EXPECT_EQ(ev.pid, 4242u);
}

TEST(DecodeRecord, FullLengthCommWithoutNulIsTerminated) {
  auto rec = make_call(MCP_KIND_UPROBE);
  std::memset(rec.hdr.comm, 'a', sizeof(rec.hdr.comm));
  Lookup names;
  Event ev;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.comm_view(), std::string(15, 'a'));
  // A shorter comm replaces a longer one completely.
  std::memset(rec.hdr.comm, 0, sizeof(rec.hdr.comm));
  std::memcpy(rec.hdr.comm, "sh", 2);
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.comm_view(), "sh");
}

TEST(DecodeRecord, ReusedEventLosesPreviousEnrichment) {
  const auto rec = make_call(MCP_KIND_UPROBE);
  Lookup names;
  Event ev;
  ev.ts_ns = 111;
  ev.hlc = 222;
  ev.service = "checkout";
  ev.container_id = "abc123";
  ev.pod_uid = "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f";
  ev.tags = {{"env", "prod"}};
  ev.attributes = {{"trace_id", "deadbeef"}};
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.ts_ns, 0u);
  EXPECT_EQ(ev.hlc, 0u);
  EXPECT_TRUE(ev.service.empty());
  EXPECT_TRUE(ev.container_id.empty());
  EXPECT_TRUE(ev.pod_uid.empty());
  EXPECT_TRUE(ev.tags.empty());
  EXPECT_TRUE(ev.attributes.empty());
}

}  // namespace
// The kernel writes the trace id of a decision made on it (MCP_EV_CONSISTENT); a record of a
// random draw carries none, whatever its trace_id words hold.
TEST(DecodeRecord, TraceIdOnlyWithAConsistentDecision) {
  auto rec = make_call(MCP_KIND_URETPROBE);
  rec.hdr.flags = MCP_EV_HAS_RET | MCP_EV_HAS_DURATION | MCP_EV_CONSISTENT;
  rec.trace_id[0] = 0x4bf92f3577b34da6ull;
  rec.trace_id[1] = 0xa3ce929d0e0e4736ull;
  Lookup names;
  Event ev;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_TRUE(ev.consistent);
  EXPECT_TRUE(ev.has_trace_id());
  EXPECT_EQ(ev.trace_id_hi, 0x4bf92f3577b34da6ull);
  EXPECT_EQ(ev.trace_id_lo, 0xa3ce929d0e0e4736ull);
  rec.hdr.flags &= ~MCP_EV_CONSISTENT;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_FALSE(ev.has_trace_id());
  EXPECT_EQ(ev.trace_id_hi, 0u);
  EXPECT_EQ(ev.trace_id_lo, 0u);
}

// A record of the size before trace ids (128 bytes) is too short now: rejected, not misread.
TEST(DecodeRecord, RecordWithoutTheTraceIdWordsIsRejected) {
  auto rec = make_call(MCP_KIND_UPROBE);
  rec.hdr.size = 128;
  Lookup names;
  Event ev;
  EXPECT_FALSE(decode_record(&rec, 128, names.fn(), ev));
}

// A launch reported at its entry comes as its own, shorter record kind (issue 18: less
// ring-buffer memory per launch): decoded into the same CUDA event, no ret or duration.
namespace {
mcp_cuda_launch_event make_launch() {
  mcp_cuda_launch_event e;
  std::memset(&e, 0, sizeof(e));
  e.hdr.ktime_ns = 5555;
  e.hdr.threshold = UINT64_MAX;
  e.hdr.pid = 77;
  e.hdr.tid = 78;
  e.hdr.probe_id = 3;
  e.hdr.kind = MCP_KIND_CUDA_LAUNCH;
  e.hdr.size = sizeof(e);
  std::memcpy(e.hdr.comm, "trainer", 8);
  e.api = MCP_CUDA_LAUNCH_HANDLE;
  e.regs[0] = 0x7000;                     // kernel handle
  e.regs[1] = (uint64_t{2} << 32) | 4;    // grid 4 x 2
  e.regs[2] = 1;
  e.regs[3] = (uint64_t{1} << 32) | 64;  // block 64 x 1
  e.regs[4] = 1;
  e.stack_args[0] = 128;  // shared memory
  e.stack_args[1] = 0x51;  // stream
  e.code_inode = 99;
  e.code_file_offset = 0x1230;
  return e;
}
}  // namespace

TEST(DecodeRecord, CudaLaunchAtEntryRecordCarriesGeometryStreamAndCodePlace) {
  const auto rec = make_launch();
  Lookup names;
  Event ev;
  ASSERT_TRUE(decode_record(&rec, sizeof(rec), names.fn(), ev));
  EXPECT_EQ(ev.kind, EventKind::kCuda);
  EXPECT_EQ(ev.pid, 77u);
  EXPECT_EQ(ev.comm_view(), "trainer");
  EXPECT_EQ(ev.cuda.api_id, uint32_t{MCP_CUDA_LAUNCH_HANDLE});
  EXPECT_EQ(ev.cuda.function, 0x7000u);
  EXPECT_EQ(ev.cuda.grid, (std::array<uint32_t, 3>{4, 2, 1}));
  EXPECT_EQ(ev.cuda.block, (std::array<uint32_t, 3>{64, 1, 1}));
  EXPECT_EQ(ev.cuda.shared_mem, 128u);
  EXPECT_EQ(ev.cuda.stream, 0x51u);
  EXPECT_EQ(ev.cuda.code_inode, 99u);
  EXPECT_EQ(ev.cuda.code_offset, 0x1230u);
  EXPECT_FALSE(ev.has_ret);
  EXPECT_FALSE(ev.has_duration);
  EXPECT_EQ(ev.args[0], 0x7000u);
}

TEST(DecodeRecord, TruncatedCudaLaunchRecordsAreRejected) {
  const auto rec = make_launch();
  Lookup names;
  Event ev;
  EXPECT_FALSE(decode_record(&rec, sizeof(mcp_event_header), names.fn(), ev));
  EXPECT_FALSE(decode_record(&rec, sizeof(rec) - 1, names.fn(), ev));
  auto overclaiming = rec;
  overclaiming.hdr.size = sizeof(rec) + 8;  // claims more than there is
  EXPECT_FALSE(decode_record(&overclaiming, sizeof(overclaiming), names.fn(), ev));
  EXPECT_TRUE(names.asked.empty());
}

// Only launches are reported at entry: a bookkeeping API (its name is not in this record)
// or an unknown one in a launch record is malformed, not guessed at.
TEST(DecodeRecord, CudaLaunchRecordOfANonLaunchApiIsRejected) {
  auto rec = make_launch();
  for (uint32_t api : {uint32_t{MCP_CUDA_GET_FUNCTION}, uint32_t{MCP_CUDA_MEMCPY}, 200u}) {
    rec.api = api;
    Lookup names;
    Event ev;
    EXPECT_FALSE(decode_record(&rec, sizeof(rec), names.fn(), ev)) << api;
  }
}

}  // namespace mcp::pipeline
