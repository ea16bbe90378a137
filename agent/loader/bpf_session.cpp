#include "loader/bpf_session.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <fstream>
#include <mutex>
#include <random>
#include <string>

#include "common/error.h"
#include "loader/bpf_object_fit.h"
#include "loader/kernel_features.h"
#include "loader/usdt_spec_ids.h"
#include "mcp_abi.h"
#include "mcp_bpf.skel.h"

namespace mcp::loader {
namespace {

// libbpf's messages: debug unless a load fails, then the verifier log is printed whole.
std::string g_libbpf_log;
std::mutex g_libbpf_log_mu;

int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
  // The verifier log arrives as one message of any size.
  va_list copy;
  va_copy(copy, args);
  const int n = vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string line(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) vsnprintf(line.data(), line.size() + 1, fmt, args);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  {
    std::lock_guard lock(g_libbpf_log_mu);
    if (g_libbpf_log.size() < (16u << 20)) g_libbpf_log += line + "\n";
  }
  if (level == LIBBPF_WARN) spdlog::debug("libbpf: {}", line);
  else spdlog::trace("libbpf: {}", line);
  return 0;
}

bool has_capability(int cap) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> cap) & 1;
  return false;
}

uint64_t round_ringbuf(uint64_t bytes) {
  uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  while (size < bytes) size <<= 1;
  return size;
}

}  // namespace

void check_environment() {
  constexpr int kCapSysAdmin = 21, kCapPerfmon = 38, kCapBpf = 39;
  if (geteuid() != 0 && !(has_capability(kCapBpf) && has_capability(kCapPerfmon)) &&
      !has_capability(kCapSysAdmin))
    throw runtime_error("needs root (or CAP_BPF and CAP_PERFMON) to load BPF programs");
  if (const std::string missing = KernelFeatures::get().unsupported(); !missing.empty()) throw runtime_error(missing);
}

std::unique_ptr<BpfSession> BpfSession::open(const SessionOptions& options) {
  check_environment();
  libbpf_set_print(libbpf_print);
  std::unique_ptr<BpfSession> s(new BpfSession());
  s->ncpus_ = libbpf_num_possible_cpus();
  s->skel_.reset(mcp_bpf__open());
  if (!s->skel_) throw runtime_error("cannot open the BPF object: " + errno_text(errno));
  s->skel()->rodata->targ_tgid = static_cast<uint32_t>(options.target_tgid);
  s->skel()->rodata->follow_children = options.follow_children;
  s->target_tgid_ = options.target_tgid;
  s->follow_children_ = options.follow_children;
  s->skel()->rodata->self_tgid = static_cast<uint32_t>(getpid());
  s->skel()->rodata->wakeup_bytes = options.wakeup_bytes;
  s->skel()->rodata->quotas_enabled = options.quotas;
  s->skel()->rodata->cuda_slow_ns = options.cuda_slow_ns;
  s->skel()->rodata->cuda_hold_ns = options.cuda_hold_ns;
  if (options.ringbuf_bytes > kMaxRingbufBytes)
    throw runtime_error("ring buffer of " + std::to_string(options.ringbuf_bytes) + " bytes is over the 1 GiB limit");
  s->ringbuf_bytes_ = round_ringbuf(options.ringbuf_bytes);
  for (auto& f : s->window_fraction_) f.store(1, std::memory_order_relaxed);
  const char* windows_env = getenv("MCP_SAMPLING_WINDOWS");
  s->windows_enabled_ = options.sampling_windows && !(windows_env && std::string(windows_env) == "off");
  s->window_seed_ = std::random_device{}();
  s->map_io_ = options.map_io ? options.map_io : std::make_shared<const MapIo>();
  bpf_map__set_max_entries(s->skel()->maps.events, static_cast<uint32_t>(s->ringbuf_bytes_));
  s->probe_slots_ = std::clamp<uint32_t>(options.probe_slots, 2, MCP_MAX_PROBES);
  bpf_map__set_max_entries(s->skel()->maps.counters, s->probe_slots_);
  bpf_map__set_max_entries(s->skel()->maps.probe_configs, s->probe_slots_);
  // What the kernel lacks is named once, and the programs take their fallbacks.
  const KernelFeatures& kf = KernelFeatures::get();
  static std::once_flag named;
  std::call_once(named, [&] {
    for (const auto& line : kf.off_lines()) spdlog::warn("{}", line);
  });
  fit_to_kernel(s->skel(), kf);
  s->attach_cookie_ = kf.attach_cookie;
  s->task_pt_regs_ = kf.task_pt_regs;
  s->find_vma_ = kf.find_vma;
  s->uprobe_sessions_ = kf.uprobe_sessions;
  s->uprobe_multi_ = kf.uprobe_multi;
  s->usdt_multi_ = kf.uprobe_multi && kf.attach_cookie;
  // Every USDT site with its own argument specs takes a spec (a python3 has ~50 sites of one
  // probe; bpftrace traces 15,000). libbpf's per-process address table is needed only where
  // the kernel has no cookies.
  s->usdt_specs_ = std::make_shared<UsdtSpecIds>(kUsdtSpecs);
  bpf_map__set_max_entries(s->skel()->maps.__bpf_usdt_specs, kUsdtSpecs);
  bpf_map__set_max_entries(s->skel()->maps.__bpf_usdt_ip_to_spec_id, kf.attach_cookie ? 1 : 4 * kUsdtSpecs);
  spdlog::info("latency uprobes: {}", s->uprobe_sessions_ ? "uprobe sessions (BPF_TRACE_UPROBE_SESSION)"
                                                          : "entry uprobe + uretprobe (no uprobe sessions)");
  // Attachment is per probe with a cookie; nothing auto-attaches.
  {
    std::lock_guard lock(g_libbpf_log_mu);
    g_libbpf_log.clear();
  }
  if (int err = mcp_bpf__load(s->skel()); err) {
    // The verifier's log only behind -v: the line names the kernel and what it lacks.
    std::string off;
    for (const auto& f : kf.list())
      if (!f.present) off += std::string(off.empty() ? "" : ", ") + f.name;
    {
      std::lock_guard lock(g_libbpf_log_mu);
      if (spdlog::should_log(spdlog::level::debug)) fprintf(stderr, "%s", g_libbpf_log.c_str());
    }
    throw runtime_error("loading the BPF programs failed on kernel " + kf.release + ": " + errno_text(err) +
                        (off.empty() ? "" : " (features off: " + off + ")") +
                        (spdlog::should_log(spdlog::level::debug) ? "; verifier log above" : "; -v shows the verifier log"));
  }
  const long page = sysconf(_SC_PAGESIZE);
  const int rb = bpf_map__fd(s->skel()->maps.events);
  void* cons = mmap(nullptr, page, PROT_READ, MAP_SHARED, rb, 0);
  void* prod = mmap(nullptr, page, PROT_READ, MAP_SHARED, rb, page);
  if (cons != MAP_FAILED) s->consumer_pos_ = static_cast<const volatile uint64_t*>(cons);
  if (prod != MAP_FAILED) s->producer_pos_ = static_cast<const volatile uint64_t*>(prod);
  return s;
}

uint64_t BpfSession::ringbuf_pending_bytes() const {
  if (!consumer_pos_ || !producer_pos_) return 0;
  return *producer_pos_ - *consumer_pos_;
}

BpfSession::~BpfSession() {
  // The window thread and the reapers first (they close links and read maps), then every
  // link, then the object the links' programs belong to.
  stop_windows();
  const long page = sysconf(_SC_PAGESIZE);
  if (consumer_pos_) munmap(const_cast<uint64_t*>(consumer_pos_), page);
  if (producer_pos_) munmap(const_cast<uint64_t*>(producer_pos_), page);
  probes_.clear();
  batch_links_.clear();
  process_links_.clear();
  lib_watch_link_.reset();
  lib_ring_.reset();
  skel_.reset();
}

std::map<std::string, uint64_t> BpfSession::program_runs() const {
  std::map<std::string, uint64_t> out;
  bpf_program* prog;
  bpf_object__for_each_program(prog, skel()->obj) {
    const int fd = bpf_program__fd(prog);
    if (fd < 0) continue;  // not loaded (autoload off)
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) out[bpf_program__name(prog)] = info.run_cnt;
  }
  return out;
}

// Only uprobes hand their arguments to the decision: a syscall or CUDA probe configured with a
// trace-id argument still draws at random (bpf/sample.bpf.h mcp_sample callers).
bool BpfSession::decides_on_trace_id(const ProbeInfo& info) const {
  return info.family == ProbeFamily::kUprobe && trace_id_probes_[info.id % MCP_MAX_PROBES];
}

std::optional<ProbeInfo> BpfSession::probe(uint32_t id) const {
  std::shared_lock lock(mu_);
  auto it = probes_.find(id);
  if (it == probes_.end()) return std::nullopt;
  ProbeInfo info = it->second->info;
  info.trace_id = decides_on_trace_id(info);
  return info;
}

std::string_view BpfSession::probe_name(uint32_t id) const {
  std::shared_lock lock(mu_);
  auto it = probes_.find(id);
  if (it != probes_.end()) return *names_.find(it->second->info.name);
  // A removed probe's records still in the ring keep their name (the id is quarantined).
  auto r = retired_names_.find(id);
  if (r != retired_names_.end()) return *names_.find(r->second);
  return "unknown";
}

std::pair<uint8_t, bool> BpfSession::probe_nargs(uint32_t id) const {
  std::shared_lock lock(mu_);
  auto it = probes_.find(id);
  if (it == probes_.end()) return {MCP_MAX_ARGS, true};
  return {it->second->info.nargs, it->second->info.args_declared};
}

std::vector<ProbeInfo> BpfSession::probes() const {
  std::shared_lock lock(mu_);
  std::vector<ProbeInfo> out;
  for (auto& [id, p] : probes_) {
    out.push_back(p->info);
    out.back().trace_id = decides_on_trace_id(p->info);
  }
  return out;
}

int BpfSession::ringbuf_fd() const { return bpf_map__fd(skel()->maps.events); }

}  // namespace mcp::loader
