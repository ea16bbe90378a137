// Event: one kept kernel event after decoding, the unit every sink consumes
// (formatters, forwarder, broker conversion). Plain value type, cheap to copy;
// `probe` points into the probe table owned by the loader and outlives every event.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

namespace mcp {

enum class EventKind : uint8_t { kUprobe, kUretprobe, kSyscall, kCuda, kUsdt };

std::string_view to_string(EventKind kind);

// The attribute a USDT probe's string argument N (0..5) is carried as: "arg0".."arg5", the
// names bpftrace gives them; "" past 5.
std::string_view string_arg_attribute(unsigned n);

// Sampling threshold semantics (bpf/sample_math.h): `threshold` is the acceptance threshold
// A, p = A / 2^64, UINT64_MAX keeps all; the adjusted count (weight) is 1/p. A random draw
// keeps when draw < A; a trace-id decision is OpenTelemetry's: keep iff R >= 2^56 - (A >> 8).
double threshold_to_probability(uint64_t threshold);
uint64_t probability_to_threshold(double p);
// OpenTelemetry's `th` (tracestate ot=th:) for acceptance threshold A: the rejection
// threshold 2^56 - (A >> 8) as 14 hex digits with trailing zeros trimmed; "0" keeps all.
std::string otel_th(uint64_t threshold);

// CUDA launch / API details; present when kind == kCuda.
struct CudaInfo {
  std::string api;                    // e.g. "cudaLaunchKernel"
  std::string kernel;                 // demangled kernel name, empty when not a launch
                                      // (a name registration: the name as registered)
  std::array<uint32_t, 3> grid{};     // launches only
  std::array<uint32_t, 3> block{};
  uint64_t shared_mem = 0;
  uint64_t stream = 0;
  uint64_t bytes = 0;                 // memcpy / malloc / free
  uint32_t memcpy_kind = 0;
  bool launch = false;                // a kernel or graph launch (else another API call)
  bool slow_mode = false;             // taken while the process was in slow-launch mode
  std::vector<uint64_t> user_stack;   // only in slow mode
  // cudaGraphLaunch: the graph its executable graph was instantiated from (0: not seen), and
  // the kernel nodes that graph had then (unset: not known, e.g. a captured graph).
  uint64_t graph = 0;
  std::optional<uint32_t> graph_kernel_nodes;
  // Symbolisation inputs (not printed): the launched function's address, or its
  // kernel handle, and where that address lies in its file.
  uint64_t function = 0;
  uint64_t code_inode = 0;
  uint64_t code_offset = 0;
  bool internal = false;              // bookkeeping (handles, graphs), not shown to users
  uint32_t api_id = 0;                // enum mcp_cuda_api (agent only, not on the wire)
};

// One named stack frame (--stack): bpftrace's ustack/kstack line as data.
struct StackFrame {
  uint64_t addr = 0;    // the instruction address (0: not known, only the build id's offset)
  std::string sym;      // demangled function name; "[unknown]" when it cannot be named
  uint64_t offset = 0;  // from the function's start; for "[unknown]", the offset in the module
  std::string module;   // the file's path, "[kernel]", or "[unknown]" (the build id when known)
  bool operator==(const StackFrame&) const = default;
};

// A stack as the kernel took it, before naming (agent only, not on the wire): addresses,
// and for user frames the file's build id and the frame's offset in the file.
struct CapturedStack {
  std::vector<uint64_t> kernel;
  std::vector<uint64_t> user;
  struct BuildIdFrame {
    std::array<uint8_t, 20> build_id{};
    uint64_t file_offset = 0;
    bool valid = false;  // the kernel read the build id (else only the address is known)
  };
  std::vector<BuildIdFrame> user_ids;  // one per user frame
  bool empty() const { return kernel.empty() && user.empty(); }
  void clear() {
    kernel.clear();
    user.clear();
    user_ids.clear();
  }
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
  // False: a uprobe nobody declared the argument count of (ProbeSpec::args); nargs is 6, every
  // register, which the table leaves out. Not carried on the wire.
  bool args_declared = true;
  bool has_ret = false;
  int64_t ret = 0;
  bool has_duration = false;
  uint64_t duration_ns = 0;
  uint64_t threshold = UINT64_MAX;
  bool consistent = false;  // decided on the trace id (OTel consistent sampling): has a `th`
  // Kept inside a sampling window (MCP_EV_WINDOWED): the kernel's threshold is the in-window
  // rate, which the runtime scales by the window coverage. Not carried on the wire.
  bool windowed = false;
  // The W3C trace id that decision used, as big-endian halves (hi = bytes 0..7, lo = bytes
  // 8..15; OTel's randomness R is lo's low 56 bits). Zero when not known (a random draw, an
  // older agent); an `N:u64` id is {0, the argument}.
  uint64_t trace_id_hi = 0;
  uint64_t trace_id_lo = 0;
  // Enrichment, filled by later pipeline stages; empty by default.
  std::string service;
  std::string container_id;  // the container runtime's id (k8s/pod_identity.h)
  std::string pod_uid;       // the Kubernetes pod's metadata.uid
  // From the API server's pod watch (k8s/pod_names.h); empty without API access.
  std::string pod;           // metadata.name
  std::string pod_namespace; // metadata.namespace
  std::string container;     // the container's name in the pod spec
  std::vector<std::pair<std::string, std::string>> pod_labels;  // the configured labels, by key
  std::vector<std::pair<std::string, std::string>> tags;
  std::vector<std::pair<std::string, std::string>> attributes;
  CudaInfo cuda;            // meaningful when kind == kCuda
  // --stack: what the kernel took (decoder), then the frames, kernel's first, innermost
  // first (the stack symbolizer, enrich/stack_symbolizer.h). JSON "stack"; on the wire and in
  // OTLP the attribute code.stacktrace.
  CapturedStack captured_stack;
  std::vector<StackFrame> stack;

  std::string_view comm_view() const;
  bool has_trace_id() const { return (trace_id_hi | trace_id_lo) != 0; }
  double weight() const { return 1.0 / threshold_to_probability(threshold); }
};

}  // namespace mcp
