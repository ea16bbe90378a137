// CUDA userspace: decoding each API's raw registers (SysV ABI layouts in
// bpf/mcp_abi.h) and naming kernels from (file inode, offset) or a handle.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "cuda/cuda_targets.h"
#include "cuda/kernel_symbolizer.h"
#include "loader/elf_symbols.h"
#include "pipeline/decoder.h"

extern "C" __attribute__((noinline, used)) int mcp_fake_kernel_stub(int x) { return x * 3; }

namespace mcp {
namespace {

mcp_cuda_event record(uint32_t api) {
  mcp_cuda_event c{};
  c.hdr.kind = MCP_KIND_CUDA;
  c.hdr.threshold = UINT64_MAX;
  c.hdr.size = sizeof(c);
  c.api = api;
  return c;
}

TEST(DecodeCuda, LaunchSplitsDim3RegisterPairsAndReadsStackArguments) {
  auto c = record(MCP_CUDA_LAUNCH);
  c.regs[0] = 0x1234;
  c.regs[1] = (uint64_t{2} << 32) | 4;  // grid.x = 4, grid.y = 2
  c.regs[2] = 1;
  c.regs[3] = (uint64_t{1} << 32) | 64;
  c.regs[4] = 1;
  c.stack_args[0] = 256;  // shared memory
  c.stack_args[1] = 0xabc;  // stream
  CudaInfo out;
  ASSERT_TRUE(pipeline::decode_cuda(c, out));
  EXPECT_EQ(out.function, 0x1234u);
  EXPECT_EQ(out.grid, (std::array<uint32_t, 3>{4, 2, 1}));
  EXPECT_EQ(out.block, (std::array<uint32_t, 3>{64, 1, 1}));
  EXPECT_EQ(out.shared_mem, 256u);
  EXPECT_EQ(out.stream, 0xabcu);
}

TEST(DecodeCuda, LaunchExCReadsTheConfigStruct) {
  auto c = record(MCP_CUDA_LAUNCH_EXC);
  const uint32_t dims[6] = {8, 4, 2, 32, 2, 1};
  std::memcpy(c.deref, dims, sizeof(dims));
  c.deref[3] = 1024;
  c.deref[4] = 0x77;
  c.regs[1] = 0x5555;
  CudaInfo out;
  ASSERT_TRUE(pipeline::decode_cuda(c, out));
  EXPECT_EQ(out.grid, (std::array<uint32_t, 3>{8, 4, 2}));
  EXPECT_EQ(out.block, (std::array<uint32_t, 3>{32, 2, 1}));
  EXPECT_EQ(out.shared_mem, 1024u);
  EXPECT_EQ(out.stream, 0x77u);
  EXPECT_EQ(out.function, 0x5555u);
}

TEST(DecodeCuda, DriverLaunchTakesBlockZAndMoreFromTheStack) {
  auto c = record(MCP_CUDA_CU_LAUNCH);
  for (int i = 0; i < 6; i++) c.regs[i] = static_cast<uint64_t>(i + 1);  // f, gx, gy, gz, bx, by
  c.stack_args[0] = 7;   // bz
  c.stack_args[1] = 48;  // shared
  c.stack_args[2] = 9;   // stream
  CudaInfo out;
  ASSERT_TRUE(pipeline::decode_cuda(c, out));
  EXPECT_EQ(out.grid, (std::array<uint32_t, 3>{2, 3, 4}));
  EXPECT_EQ(out.block, (std::array<uint32_t, 3>{5, 6, 7}));
  EXPECT_EQ(out.shared_mem, 48u);
  EXPECT_EQ(out.stream, 9u);
}

TEST(DecodeCuda, MemcpyAndMallocCarryBytesUnknownApiIsRejected) {
  auto m = record(MCP_CUDA_MEMCPY_ASYNC);
  m.regs[2] = 4096;
  m.regs[3] = 1;  // cudaMemcpyHostToDevice
  m.regs[4] = 0x9;
  CudaInfo out;
  ASSERT_TRUE(pipeline::decode_cuda(m, out));
  EXPECT_EQ(out.bytes, 4096u);
  EXPECT_EQ(out.memcpy_kind, 1u);
  EXPECT_EQ(out.stream, 0x9u);
  auto bad = record(200);
  EXPECT_FALSE(pipeline::decode_cuda(bad, out));
}

struct Self {
  uint64_t inode;
  uint64_t offset;  // of mcp_fake_kernel_stub in this test binary
};

Self locate_self() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  path[n] = 0;
  struct stat st;
  stat(path, &st);
  const auto symbols = loader::ElfSymbols::load(path);
  return {st.st_ino, *symbols.file_offset_of("mcp_fake_kernel_stub")};
}

Event launch(uint64_t function, uint64_t inode, uint64_t offset) {
  Event e;
  e.kind = EventKind::kCuda;
  e.pid = static_cast<uint32_t>(getpid());
  e.cuda.api = "cudaLaunchKernel";
  e.cuda.grid = {1, 1, 1};
  e.cuda.function = function;
  e.cuda.code_inode = inode;
  e.cuda.code_offset = offset;
  return e;
}

TEST(KernelSymbolizer, NamesALaunchFromItsFileAndOffset) {
  const auto self = locate_self();
  cuda::KernelSymbolizer s;
  auto e = launch(0xdead, self.inode, self.offset);
  ASSERT_TRUE(s.process(e));
  EXPECT_EQ(e.cuda.kernel, "mcp_fake_kernel_stub");
}

TEST(KernelSymbolizer, NamesAHandleLaunchThroughItsRegistrationAndHidesTheRegistration) {
  const auto self = locate_self();
  cuda::KernelSymbolizer s;
  Event reg;
  reg.kind = EventKind::kCuda;
  reg.pid = static_cast<uint32_t>(getpid());
  reg.cuda.internal = true;
  reg.cuda.function = 0x7000;  // the handle __cudaGetKernel wrote
  reg.cuda.code_inode = self.inode;
  reg.cuda.code_offset = self.offset;
  EXPECT_FALSE(s.process(reg)) << "bookkeeping is not shown";
  auto e = launch(0x7000, 0, 0);  // a handle: not in any file
  ASSERT_TRUE(s.process(e));
  EXPECT_EQ(e.cuda.kernel, "mcp_fake_kernel_stub");
  auto unknown = launch(0x8000, 0, 0);
  ASSERT_TRUE(s.process(unknown));
  EXPECT_EQ(unknown.cuda.kernel, "kernel@0x8000");
}

TEST(KernelSymbolizer, FreeReportsTheBytesItsMallocReturned) {
  cuda::KernelSymbolizer s;
  Event m;
  m.kind = EventKind::kCuda;
  m.pid = 42;
  m.cuda.api = "cudaMalloc";
  m.cuda.bytes = 1 << 20;
  m.cuda.function = 0xd000;  // the device pointer
  ASSERT_TRUE(s.process(m));
  Event f = m;
  f.cuda = {};
  f.cuda.api = "cudaFree";
  f.cuda.function = 0xd000;
  ASSERT_TRUE(s.process(f));
  EXPECT_EQ(f.cuda.bytes, 1u << 20);
  Event again = f;
  again.cuda.bytes = 0;
  ASSERT_TRUE(s.process(again));
  EXPECT_EQ(again.cuda.bytes, 0u) << "a pointer is freed once";
}

TEST(CudaTargets, TheRuntimeLaunchEntryPointsAreKnownWithTheirArgumentRules) {
  int launches = 0;
  for (const auto& spec : cuda::api_specs()) {
    if (spec.api == MCP_CUDA_LAUNCH || spec.api == MCP_CUDA_LAUNCH_HANDLE) {
      EXPECT_EQ(spec.vma_arg, 1) << spec.symbol;
      launches++;
    }
    if (spec.api == MCP_CUDA_GET_KERNEL) {
      EXPECT_TRUE(spec.internal);
      EXPECT_EQ(spec.ret_deref_arg, 1);
      EXPECT_EQ(spec.vma_arg, 2);
    }
  }
  EXPECT_EQ(launches, 4);
}

// A file holding `code` at file offset 32 (zeros before it).
std::string code_file(std::initializer_list<unsigned char> code) {
  char path[] = "/tmp/mcp-cuda-code-XXXXXX";
  const int fd = mkstemp(path);
  std::vector<unsigned char> bytes(32, 0);
  bytes.insert(bytes.end(), code);
  bytes.resize(64, 0xcc);
  EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
  return path;
}

TEST(CudaTargets, ALaunchEntryThatOnlyJumpsElsewhereIsRecognised) {
  // CUDA 13's __cudaLaunchKernel: push %rbp; mov %rsp,%rbp; pop %rbp; jmp +0x100 (from offset 42)
  const auto thunk = code_file({0x55, 0x48, 0x89, 0xe5, 0x5d, 0xe9, 0x00, 0x01, 0x00, 0x00});
  EXPECT_EQ(cuda::tail_jump_target(thunk, 32), std::optional<uint64_t>(32 + 10 + 0x100));
  const auto backwards = code_file({0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 0xf0, 0xff, 0xff, 0xff});  // endbr64; jmp -16
  EXPECT_EQ(cuda::tail_jump_target(backwards, 32), std::optional<uint64_t>(32 + 9 - 16));
  // a function with a body of its own (push; mov; sub $0x20,%rsp; ...) is probed
  const auto body = code_file({0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x20, 0xe8, 0, 0, 0, 0});
  EXPECT_EQ(cuda::tail_jump_target(body, 32), std::nullopt);
  EXPECT_EQ(cuda::tail_jump_target("/nonexistent/libcudart.so", 0), std::nullopt);
  for (const auto& f : {thunk, backwards, body}) unlink(f.c_str());
}

}  // namespace
}  // namespace mcp
