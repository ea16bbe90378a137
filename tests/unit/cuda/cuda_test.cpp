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
  reg.cuda.api_id = MCP_CUDA_GET_KERNEL;
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

TEST(DecodeCuda, DriverLaunchExReadsTheLaunchConfig) {
  auto c = record(MCP_CUDA_CU_LAUNCH_EX);
  const uint32_t words[7] = {8, 4, 2, 32, 2, 1, 512};  // grid, block, sharedMemBytes
  std::memcpy(c.deref, words, sizeof(words));
  c.deref[4] = 0x66;  // hStream, after 4 bytes of padding
  c.regs[1] = 0xf00;
  CudaInfo out;
  ASSERT_TRUE(pipeline::decode_cuda(c, out));
  EXPECT_EQ(out.grid, (std::array<uint32_t, 3>{8, 4, 2}));
  EXPECT_EQ(out.block, (std::array<uint32_t, 3>{32, 2, 1}));
  EXPECT_EQ(out.shared_mem, 512u);
  EXPECT_EQ(out.stream, 0x66u);
  EXPECT_EQ(out.function, 0xf00u);
}

TEST(DecodeCuda, ANameRegistrationCarriesItsHandleAndName) {
  auto c = record(MCP_CUDA_GET_FUNCTION);
  c.deref[0] = 0xabc0;
  std::strcpy(c.name, "_Z6vecAddPfi");
  CudaInfo out;
  ASSERT_TRUE(pipeline::decode_cuda(c, out));
  EXPECT_TRUE(out.internal);
  EXPECT_EQ(out.function, 0xabc0u);
  EXPECT_EQ(out.kernel, "_Z6vecAddPfi");
  std::memset(c.name, 'x', sizeof(c.name));  // no NUL: never read past the field
  ASSERT_TRUE(pipeline::decode_cuda(c, out));
  EXPECT_EQ(out.kernel.size(), sizeof(c.name));
}

Event bookkeeping(uint32_t api_id, uint64_t function, uint64_t graph, int64_t ret = 0) {
  Event e;
  e.kind = EventKind::kCuda;
  e.pid = 42;
  e.ret = ret;
  e.cuda.internal = true;
  e.cuda.api_id = api_id;
  e.cuda.function = function;
  e.cuda.graph = graph;
  return e;
}

Event driver_launch(uint64_t function) {
  Event e = launch(function, 0, 0);
  e.pid = 42;
  e.cuda.api = "cuLaunchKernel";
  e.cuda.api_id = MCP_CUDA_CU_LAUNCH;
  return e;
}

TEST(KernelSymbolizer, DriverLaunchesAreNamedByTheirLookupAndFailedLookupsAreIgnored) {
  cuda::KernelSymbolizer s;
  auto module_fn = bookkeeping(MCP_CUDA_GET_FUNCTION, 0x100, 0);
  module_fn.cuda.kernel = "_Z6vecAddPfi";
  EXPECT_FALSE(s.process(module_fn));
  auto kernel = bookkeeping(MCP_CUDA_GET_FUNCTION, 0x200, 0);
  kernel.cuda.kernel = "saxpy";
  EXPECT_FALSE(s.process(kernel));
  auto function_of_kernel = bookkeeping(MCP_CUDA_KERNEL_FUNCTION, 0x300, 0);
  function_of_kernel.args[1] = 0x200;  // the CUkernel
  EXPECT_FALSE(s.process(function_of_kernel));
  auto failed = bookkeeping(MCP_CUDA_GET_FUNCTION, 0x400, 0, 500);  // CUDA_ERROR_NOT_FOUND
  failed.cuda.kernel = "missing";
  EXPECT_FALSE(s.process(failed));
  auto cut = bookkeeping(MCP_CUDA_GET_FUNCTION, 0x500, 0);
  cut.cuda.kernel = std::string(255, 'k');  // as long as BPF copies: cut
  EXPECT_FALSE(s.process(cut));

  const std::pair<uint64_t, std::string> expected[] = {{0x100, "vecAdd(float*, int)"},
                                                       {0x200, "saxpy"},
                                                       {0x300, "saxpy"},
                                                       {0x400, "kernel@0x400"},
                                                       {0x500, std::string(255, 'k') + "..."}};
  for (const auto& [handle, name] : expected) {
    auto e = driver_launch(handle);
    ASSERT_TRUE(s.process(e));
    EXPECT_EQ(e.cuda.kernel, name);
  }
  auto other_process = driver_launch(0x100);
  other_process.pid = 43;
  ASSERT_TRUE(s.process(other_process));
  EXPECT_EQ(other_process.cuda.kernel, "kernel@0x100") << "handles are per process";
}

TEST(KernelSymbolizer, GraphLaunchesCarryTheirGraphAndTheKernelNodesItHadWhenInstantiated) {
  cuda::KernelSymbolizer s;
  auto feed = [&](Event e) { EXPECT_FALSE(s.process(e)); };
  feed(bookkeeping(MCP_CUDA_GRAPH_NEW, 0, 0x9000));
  for (int i = 0; i < 2; i++) feed(bookkeeping(MCP_CUDA_GRAPH_ADD_KERNEL, 0, 0x9000));
  feed(bookkeeping(MCP_CUDA_GRAPH_ADD_KERNEL, 0, 0x9000, 1));  // failed: no node
  feed(bookkeeping(MCP_CUDA_GRAPH_INSTANTIATE, 0xe1, 0x9000));
  feed(bookkeeping(MCP_CUDA_GRAPH_ADD_KERNEL, 0, 0x9000));  // after instantiation: not in e1
  feed(bookkeeping(MCP_CUDA_GRAPH_NEW, 0, 0x9000));  // the handle reused: starts over
  feed(bookkeeping(MCP_CUDA_GRAPH_INSTANTIATE, 0xe2, 0x9000));
  feed(bookkeeping(MCP_CUDA_GRAPH_CAPTURED, 0, 0x9100));
  feed(bookkeeping(MCP_CUDA_GRAPH_ADD_KERNEL, 0, 0x9100));
  feed(bookkeeping(MCP_CUDA_GRAPH_INSTANTIATE, 0xe3, 0x9100));

  auto graph_launch = [&](uint64_t exec) {
    Event e;
    e.kind = EventKind::kCuda;
    e.pid = 42;
    e.cuda.api = "cudaGraphLaunch";
    e.cuda.api_id = MCP_CUDA_GRAPH_LAUNCH;
    e.cuda.function = exec;
    EXPECT_TRUE(s.process(e));
    return e.cuda;
  };
  const auto e1 = graph_launch(0xe1), e2 = graph_launch(0xe2), e3 = graph_launch(0xe3), unseen = graph_launch(0xe4);
  EXPECT_EQ(e1.graph, 0x9000u);
  EXPECT_EQ(e1.graph_kernel_nodes, std::optional<uint32_t>(2));
  EXPECT_EQ(e2.graph, 0x9000u);
  EXPECT_EQ(e2.graph_kernel_nodes, std::optional<uint32_t>(0));
  EXPECT_EQ(e3.graph, 0x9100u);
  EXPECT_EQ(e3.graph_kernel_nodes, std::nullopt) << "captured: its kernels are not counted";
  EXPECT_EQ(unseen.graph, 0u);
  EXPECT_EQ(unseen.graph_kernel_nodes, std::nullopt);
  EXPECT_TRUE(unseen.kernel.empty());
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
    if (spec.api == MCP_CUDA_GET_FUNCTION) {  // (CUfunction* / CUkernel*, module / library, name)
      EXPECT_TRUE(spec.internal);
      EXPECT_EQ(spec.ret_deref_arg, 1);
      EXPECT_EQ(spec.name_arg, 3);
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
