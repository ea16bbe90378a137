// Event: one kept kernel event after decoding, the unit every sink consumes
// (formatters, forwarder, broker conversion). Plain value type, cheap to copy;
// `probe` points into the probe table owned by the loader and outlives every event.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

namespace mcp {

enum class EventKind : uint8_t { kUprobe, kUretprobe, kSyscall, kCuda };

std::string_view to_string(EventKind kind);

// Sampling threshold semantics (shared with bpf/mcp_abi.h): an event is kept when a 64-bit
// random (or trace-id derived) value is below `threshold`; UINT64_MAX means "keep all".
// The probability is threshold / 2^64 and the adjusted count (weight) its inverse.
double threshold_to_probability(uint64_t threshold);
uint64_t probability_to_threshold(double p);

// CUDA launch / API details; present when kind == kCuda.
struct CudaInfo {
  std::string api;                    // e.g. "cudaLaunchKernel"
  std::string kernel;                 // demangled kernel name, empty when not a launch
  std::array<uint32_t, 3> grid{};     // launches only
  std::array<uint32_t, 3> block{};
  uint64_t shared_mem = 0;
  uint64_t stream = 0;
  uint64_t bytes = 0;                 // memcpy / malloc / free
  uint32_t memcpy_kind = 0;
  bool slow_mode = false;             // taken while the process was in slow-launch mode
  std::vector<uint64_t> user_stack;   // only in slow mode
  // Symbolisation inputs (not printed): the launched function's address, or its
  // kernel handle, and where that address lies in its file.
  uint64_t function = 0;
  uint64_t code_inode = 0;
  uint64_t code_offset = 0;
  bool internal = false;              // __cudaGetKernel bookkeeping, not shown to users
};

struct Event {
  uint64_t ts_ns = 0;       // wall clock, ns since the epoch
  uint64_t ktime_ns = 0;    // CLOCK_MONOTONIC as stamped by the kernel
  uint64_t hlc = 0;         // packed hybrid logical clock, 0 until stamped
  EventKind kind = EventKind::kUprobe;
  uint32_t probe_id = 0;
  std::string_view probe;   // "/path/bin:symbol" or "syscall:getppid"
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t cpu = 0;
  uint64_t cgroup_id = 0;
  std::array<char, 16> comm{};
  uint8_t nargs = 0;
  std::array<uint64_t, 6> args{};
  bool has_ret = false;
  int64_t ret = 0;
  bool has_duration = false;
  uint64_t duration_ns = 0;
  uint64_t threshold = UINT64_MAX;
  // Enrichment, filled by later pipeline stages; empty by default.
  std::string service;
  std::string container_id;
  std::vector<std::pair<std::string, std::string>> tags;
  std::vector<std::pair<std::string, std::string>> attributes;
  CudaInfo cuda;            // meaningful when kind == kCuda

  std::string_view comm_view() const;
  double weight() const { return 1.0 / threshold_to_probability(threshold); }
};

}  // namespace mcp
