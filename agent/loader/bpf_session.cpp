#include "loader/bpf_session.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <random>
#include <string>
#include <system_error>
#include <tuple>

#include "common/error.h"
#include "loader/kernel_features.h"
#include "loader/perf_attach.h"
#include "loader/proc_maps.h"
#include "loader/usdt_notes.h"
#include "loader/usdt_spec.h"
#include "clock/clock_source.h"
#include "common/event.h"
#include "mcp_abi.h"
#include "mcp_bpf.skel.h"

// A function of the agent itself with a breakpoint placed on it for a moment: what one trap
// costs on this machine (BpfSession::measure_trap_cost). extern "C" and used: it must exist.
extern "C" __attribute__((noinline, used)) long mcp_trap_calibration_target(long x) {
  __asm__ volatile("" ::: "memory");
  return x + 1;
}

namespace mcp::loader {
namespace {

int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::nanoseconds(t.time_since_epoch()).count();
}

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

void ensure_tracefs() {
  struct stat st;
  if (stat("/sys/kernel/tracing/events", &st) == 0) return;
  if (mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr) != 0 &&
      stat("/sys/kernel/debug/tracing/events", &st) != 0)
    throw runtime_error("tracefs is not mounted at /sys/kernel/tracing and mounting it failed: " +
                        std::string(std::strerror(errno)));
}

uint64_t round_ringbuf(uint64_t bytes) {
  uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  while (size < bytes) size <<= 1;
  return size;
}

// The tracepoint format lists __syscall_nr then one field per argument.
uint8_t syscall_arity(const std::string& format_path) {
  std::ifstream f(format_path);
  std::string line;
  bool after_nr = false;
  uint8_t n = 0;
  while (std::getline(f, line)) {
    if (line.find("__syscall_nr") != std::string::npos) after_nr = true;
    else if (after_nr && line.find("field:") != std::string::npos) n++;
  }
  return after_nr ? std::min<uint8_t>(n, MCP_MAX_ARGS) : MCP_MAX_ARGS;
}

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

// From the kernel's uapi (6.13+); Debian 12's headers and libbpf 1.1 predate them.
constexpr uint32_t kBpfTraceUprobeSession = 57;  // enum bpf_attach_type BPF_TRACE_UPROBE_SESSION
constexpr uint32_t kBpfTraceUprobeMulti = 48;    // enum bpf_attach_type BPF_TRACE_UPROBE_MULTI

// The link_create part of union bpf_attr, uprobe_multi variant (include/uapi/linux/bpf.h).
struct UprobeMultiLinkAttr {
  uint32_t prog_fd;
  uint32_t target_fd;
  uint32_t attach_type;
  uint32_t flags;
  uint64_t path;
  uint64_t offsets;
  uint64_t ref_ctr_offsets;
  uint64_t cookies;
  uint32_t cnt;
  uint32_t multi_flags;
  uint32_t pid;
  uint32_t pad;
};
static_assert(sizeof(UprobeMultiLinkAttr) == 64, "link_create.uprobe_multi layout");

// One uprobe_multi link of one or more offsets of `path`, each with its cookie: a uprobe
// session (`attach_type` kBpfTraceUprobeSession: the program runs at entry and, when the entry
// returns 0, at return) or entry-only multi.
int attach_uprobe_link(bpf_program* prog, uint32_t attach_type, const std::string& path,
                       const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies, pid_t pid,
                       const std::vector<uint64_t>& ref_ctr_offsets = {}) {
  UprobeMultiLinkAttr attr{};
  if (!ref_ctr_offsets.empty()) attr.ref_ctr_offsets = reinterpret_cast<uint64_t>(ref_ctr_offsets.data());
  attr.prog_fd = static_cast<uint32_t>(bpf_program__fd(prog));
  attr.attach_type = attach_type;
  attr.path = reinterpret_cast<uint64_t>(path.c_str());
  attr.offsets = reinterpret_cast<uint64_t>(offsets.data());
  attr.cookies = reinterpret_cast<uint64_t>(cookies.data());
  attr.cnt = static_cast<uint32_t>(offsets.size());
  attr.pid = pid > 0 ? static_cast<uint32_t>(pid) : 0;
  return static_cast<int>(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr)));
}

// A uprobe's or USDT probe's description: a uprobe's argument count as declared, else all six
// registers, undeclared (a USDT record carries its note's count).
ProbeInfo file_probe_info(uint32_t id, std::string name, const std::string& symbol, bool latency,
                          const ProbeConfig& config, bool usdt) {
  ProbeInfo info{id, std::move(name), ProbeFamily::kUprobe, latency};
  info.symbol = symbol;
  if (!usdt && config.args >= 0) info.nargs = static_cast<uint8_t>(std::min<int>(config.args, MCP_MAX_ARGS));
  else info.args_declared = usdt;
  return info;
}

// Before 5.12 the verifier refuses a fetching atomic (BPF_FETCH, cmpxchg, xchg) anywhere in a
// program, even in a branch it would prune: those sit only on paths the programs take when
// mcp_fetch_atomics is set (bpf/compat.bpf.h), so there they become no-ops (ja +0). The
// count of instructions stays, so libbpf's relocations still point where they did.
void strip_fetch_atomics(bpf_object* obj) {
  bpf_program* prog;
  bpf_object__for_each_program(prog, obj) {
    const bpf_insn* in = bpf_program__insns(prog);
    std::vector<bpf_insn> insns(in, in + bpf_program__insn_cnt(prog));
    size_t n = 0;
    for (auto& insn : insns)
      if (insn.code == (BPF_STX | BPF_ATOMIC | BPF_W) || insn.code == (BPF_STX | BPF_ATOMIC | BPF_DW))
        if (insn.imm != BPF_ADD) {
          insn = bpf_insn{BPF_JMP | BPF_JA, 0, 0, 0, 0};
          n++;
        }
    if (n && bpf_program__set_insns(prog, insns.data(), insns.size()) != 0)
      throw runtime_error(std::string("cannot rewrite program ") + bpf_program__name(prog) + "'s atomics");
  }
}

// The object as this kernel can load it (bpf/compat.bpf.h): each fallback's load-time switch,
// the one CUDA build that loads (with bpf_find_vma or cuda_nofv.bpf.c), per-thread maps as LRU
// hashes without task storage, and multi and session programs only where they attach (libbpf
// 1.1 has no section name for them, so their attach type is set by hand).
void fit_to_kernel(mcp_bpf* skel, const KernelFeatures& kf) {
  skel->rodata->mcp_attach_cookie = kf.attach_cookie;
  skel->rodata->mcp_task_btf = kf.task_btf;
  skel->rodata->mcp_task_storage = kf.task_storage;
  skel->rodata->mcp_fetch_atomics = kf.fetch_atomics;
  skel->rodata->mcp_task_pt_regs = kf.task_pt_regs;
  skel->rodata->mcp_ancestor_cgroup = kf.ancestor_cgroup;
  for (bpf_program* prog : {skel->progs.mcp_cuda_launch, skel->progs.mcp_cuda_entry, skel->progs.mcp_cuda_return,
                            skel->progs.mcp_lib_mmap, skel->progs.mcp_lib_sys_exit})
    bpf_program__set_autoload(prog, kf.find_vma);
  for (bpf_program* prog : {skel->progs.mcp_cuda_launch_nofv, skel->progs.mcp_cuda_entry_nofv,
                            skel->progs.mcp_cuda_return_nofv})
    bpf_program__set_autoload(prog, !kf.find_vma);
  if (!kf.fetch_atomics) strip_fetch_atomics(skel->obj);
  if (!kf.task_storage)
    for (bpf_map* m : {skel->maps.syscall_entries, skel->maps.cuda_timed, skel->maps.cuda_runtime_call}) {
      bpf_map__set_type(m, BPF_MAP_TYPE_LRU_HASH);
      bpf_map__set_map_flags(m, 0);
      bpf_map__set_max_entries(m, 16384);
    }
  for (bpf_program* prog : {skel->progs.mcp_uprobe_session, skel->progs.mcp_cuda_session, skel->progs.mcp_uprobe_multi,
                            skel->progs.mcp_cuda_launch_multi, skel->progs.mcp_usdt_multi}) {
    const bool multi = prog == skel->progs.mcp_uprobe_multi || prog == skel->progs.mcp_cuda_launch_multi ||
                       prog == skel->progs.mcp_usdt_multi;
    // The CUDA session and multi programs are built with bpf_find_vma (session.bpf.c): without
    // it they do not load, and CUDA probes take the nofv programs (perf-attached). The USDT
    // program finds its spec by cookie.
    const bool cuda = prog == skel->progs.mcp_cuda_session || prog == skel->progs.mcp_cuda_launch_multi;
    const bool usdt = prog == skel->progs.mcp_usdt_multi;
    if ((multi ? kf.uprobe_multi : kf.uprobe_sessions) && (!cuda || kf.find_vma) && (!usdt || kf.attach_cookie))
      bpf_program__set_expected_attach_type(
          prog, static_cast<bpf_attach_type>(multi ? kBpfTraceUprobeMulti : kBpfTraceUprobeSession));
    else
      bpf_program__set_autoload(prog, false);
  }
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
  s->skel_ = mcp_bpf__open();
  if (!s->skel_) throw runtime_error("cannot open the BPF object: " + errno_text(errno));
  s->skel_->rodata->targ_tgid = static_cast<uint32_t>(options.target_tgid);
  s->skel_->rodata->follow_children = options.follow_children;
  s->target_tgid_ = options.target_tgid;
  s->follow_children_ = options.follow_children;
  s->skel_->rodata->self_tgid = static_cast<uint32_t>(getpid());
  s->skel_->rodata->wakeup_bytes = options.wakeup_bytes;
  s->skel_->rodata->quotas_enabled = options.quotas;
  s->skel_->rodata->cuda_slow_ns = options.cuda_slow_ns;
  s->skel_->rodata->cuda_hold_ns = options.cuda_hold_ns;
  if (options.ringbuf_bytes > kMaxRingbufBytes)
    throw runtime_error("ring buffer of " + std::to_string(options.ringbuf_bytes) + " bytes is over the 1 GiB limit");
  s->ringbuf_bytes_ = round_ringbuf(options.ringbuf_bytes);
  for (auto& f : s->window_fraction_) f.store(1, std::memory_order_relaxed);
  const char* windows_env = getenv("MCP_SAMPLING_WINDOWS");
  s->windows_enabled_ = options.sampling_windows && !(windows_env && std::string(windows_env) == "off");
  s->window_seed_ = std::random_device{}();
  bpf_map__set_max_entries(s->skel_->maps.events, static_cast<uint32_t>(s->ringbuf_bytes_));
  s->probe_slots_ = std::clamp<uint32_t>(options.probe_slots, 2, MCP_MAX_PROBES);
  bpf_map__set_max_entries(s->skel_->maps.counters, s->probe_slots_);
  bpf_map__set_max_entries(s->skel_->maps.probe_configs, s->probe_slots_);
  // What the kernel lacks is named once, and the programs take their fallbacks.
  const KernelFeatures& kf = KernelFeatures::get();
  static std::once_flag named;
  std::call_once(named, [&] {
    for (const auto& line : kf.off_lines()) spdlog::warn("{}", line);
  });
  fit_to_kernel(s->skel_, kf);
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
  bpf_map__set_max_entries(s->skel_->maps.__bpf_usdt_specs, kUsdtSpecs);
  bpf_map__set_max_entries(s->skel_->maps.__bpf_usdt_ip_to_spec_id, kf.attach_cookie ? 1 : 4 * kUsdtSpecs);
  spdlog::info("latency uprobes: {}", s->uprobe_sessions_ ? "uprobe sessions (BPF_TRACE_UPROBE_SESSION)"
                                                          : "entry uprobe + uretprobe (no uprobe sessions)");
  // Attachment is per probe with a cookie; nothing auto-attaches.
  {
    std::lock_guard lock(g_libbpf_log_mu);
    g_libbpf_log.clear();
  }
  if (int err = mcp_bpf__load(s->skel_); err) {
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
  const int rb = bpf_map__fd(s->skel_->maps.events);
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
  stop_windows();
  const long page = sysconf(_SC_PAGESIZE);
  if (consumer_pos_) munmap(const_cast<uint64_t*>(consumer_pos_), page);
  if (producer_pos_) munmap(const_cast<uint64_t*>(producer_pos_), page);
  for (auto& [id, p] : probes_)
    for (auto& target : p->targets)
      for (auto& l : target.links) l.destroy();
  for (auto* l : process_links_) bpf_link__destroy(l);
  if (lib_watch_link_) bpf_link__destroy(lib_watch_link_);
  if (lib_ring_) ring_buffer__free(lib_ring_);
  if (skel_) mcp_bpf__destroy(skel_);
}

uint32_t BpfSession::allocate_id() {
  // A removed probe's records may still sit in the ring: its id waits until the
  // consumer has read past the producer position of its detach.
  const uint64_t consumed = consumer_pos_ ? *consumer_pos_ : UINT64_MAX;
  for (uint32_t id = 1; id < probe_slots_; id++) {
    if (probes_.count(id)) continue;
    if (auto g = grouped_.find(id); g != grouped_.end()) {
      if (!g->second.expired()) continue;
      grouped_.erase(g);
    }
    auto q = quarantine_.find(id);
    if (q != quarantine_.end() && consumed < q->second) continue;
    return id;
  }
  throw runtime_error("too many probes (at most " + std::to_string(probe_slots_ - 1) + ")");
}

uint32_t BpfSession::reserve_id(const ProbeConfig& config) {
  uint32_t id;
  {
    std::unique_lock lock(mu_);
    id = allocate_id();
    quarantine_.erase(id);
    retired_names_.erase(id);
    swept_orphans_[id] = 0;
  }
  // Before attaching: a reused id starts from zero, and the first hit already sees
  // its threshold. Zeroing after attach would erase what the first hits counted.
  std::vector<mcp_counters> zeros(ncpus_, mcp_counters{});
  bpf_map_update_elem(bpf_map__fd(skel_->maps.counters), &id, zeros.data(), BPF_ANY);
  configure(id, config);
  return id;
}

void BpfSession::Link::destroy() {
  if (link) bpf_link__destroy(link);
  if (fd >= 0) close(fd);
  link = nullptr;
  fd = -1;
  shared.reset();
}

BpfSession::SharedLink::~SharedLink() {
  close(fd);
  if (after_close) after_close();
}

// Indexes into __bpf_usdt_specs for the agent's own USDT links: taken at attach, given back
// once the link is closed (no site can read the spec any more).
struct BpfSession::UsdtSpecIds {
  explicit UsdtSpecIds(uint32_t n) : capacity(n) {}
  std::vector<uint32_t> take(size_t n) {
    std::lock_guard lock(mu);
    if (n > free.size() + (capacity - next))
      throw runtime_error("USDT specs are full: " + std::to_string(n) + " more wanted, " +
                          std::to_string(free.size() + (capacity - next)) + " of " + std::to_string(capacity) +
                          " free (detach other USDT probes)");
    std::vector<uint32_t> out;
    while (out.size() < n) {
      if (free.empty()) {
        out.push_back(next++);
      } else {
        out.push_back(free.back());
        free.pop_back();
      }
    }
    return out;
  }
  void give_back(const std::vector<uint32_t>& ids) {
    std::lock_guard lock(mu);
    free.insert(free.end(), ids.begin(), ids.end());
  }
  std::mutex mu;
  const uint32_t capacity;
  uint32_t next = 0;
  std::vector<uint32_t> free;
};

BpfSession::Link BpfSession::attach_usdt_sites(uint32_t id, const UprobeTarget& target, pid_t pid) {
  const auto [provider, name] = split_usdt_name(target.symbol);
  // One spec per distinct argument string (sites that pass constants differ), one offset per site.
  std::vector<UsdtProbe> sites;
  for (auto& p : read_usdt_probes(target.binary))
    if (p.provider == provider && p.name == name) sites.push_back(std::move(p));
  if (sites.empty()) throw runtime_error("USDT probe " + target.probe_name() + ": no site in " + target.binary);
  std::map<std::string, size_t> spec_of;
  std::vector<UsdtSpec> specs;
  for (const auto& site : sites) {
    if (site.file_offset == 0)
      throw runtime_error("USDT probe " + target.probe_name() + ": a site at " + fmt::format("{:#x}", site.address) +
                          " is in no loaded executable segment of " + target.binary);
    if (spec_of.emplace(site.args, specs.size()).second) specs.push_back(parse_usdt_spec(site.args, id));
  }
  const std::vector<uint32_t> spec_ids = usdt_specs_->take(specs.size());
  auto give_back = [pool = usdt_specs_, spec_ids] { pool->give_back(spec_ids); };
  const int map = bpf_map__fd(skel_->maps.__bpf_usdt_specs);
  for (size_t i = 0; i < specs.size(); i++)
    if (bpf_map_update_elem(map, &spec_ids[i], &specs[i], BPF_ANY) != 0) {
      const int err = errno;
      give_back();
      throw runtime_error("cannot write USDT spec " + std::to_string(spec_ids[i]) + ": " + errno_text(err));
    }
  std::vector<uint64_t> offsets, ref_ctrs, cookies;
  bool semaphores = false;
  for (const auto& site : sites) {
    offsets.push_back(site.file_offset);
    ref_ctrs.push_back(site.semaphore_offset);
    semaphores |= site.semaphore_offset != 0;
    cookies.push_back(spec_ids[spec_of.at(site.args)]);
  }
  const int fd = attach_uprobe_link(skel_->progs.mcp_usdt_multi, kBpfTraceUprobeMulti, target.binary, offsets, cookies,
                                    pid, semaphores ? ref_ctrs : std::vector<uint64_t>{});
  if (fd < 0) {
    const int err = errno;
    give_back();
    throw runtime_error("cannot attach USDT probe " + target.probe_name() + " (" + std::to_string(sites.size()) +
                        " sites, one uprobe_multi link): " + errno_text(err));
  }
  return Link{nullptr, -1, std::make_shared<const SharedLink>(fd, std::move(give_back))};
}

uint32_t BpfSession::register_probe(ProbeInfo info, std::vector<Link> links, const Programs& progs, pid_t pid,
                                    const UprobeTarget& target) {
  auto p = std::make_unique<Probe>();
  p->info = std::move(info);
  p->progs = progs;
  p->pid = pid;
  const uint32_t id = p->info.id;
  std::unique_lock lock(mu_);
  if (!links.empty()) p->targets.push_back({next_target_key_++, std::move(links), target});
  names_.insert(p->info.name);
  probes_[id] = std::move(p);
  quarantine_.erase(id);
  return id;
}

std::vector<BpfSession::Link> BpfSession::attach_uprobes(uint32_t id, const UprobeTarget& target, pid_t pid,
                                                         const Programs& progs) {
  std::vector<Link> links;
  if (target.usdt) {
    // Without cookies libbpf attaches a USDT probe through a per-process address table: the
    // traced process (--pid, or the command trace started) stands in for "everywhere", its
    // forked children aside.
    if (!attach_cookie_ && pid <= 0 && target_tgid_ > 0) pid = target_tgid_;
    if (!attach_cookie_ && pid <= 0)
      throw runtime_error("USDT probe " + target.probe_name() +
                          " system-wide is off: needs bpf_get_attach_cookie (5.15); give it a pid or a command");
    if (usdt_multi_) {
      links.push_back(attach_usdt_sites(id, target, pid));
      return links;
    }
    const auto [provider, name] = split_usdt_name(target.symbol);
    LIBBPF_OPTS(bpf_usdt_opts, opts, .usdt_cookie = id);
    bpf_link* link = bpf_program__attach_usdt(progs.entry, pid > 0 ? pid : -1, target.binary.c_str(),
                                              provider.c_str(), name.c_str(), &opts);
    if (!link) throw runtime_error("cannot attach USDT probe " + target.probe_name() + ": " + errno_text(errno));
    links.push_back({link, -1});
    return links;
  }
  if (progs.session) {
    const int fd = attach_uprobe_link(progs.session, progs.multi ? kBpfTraceUprobeMulti : kBpfTraceUprobeSession,
                                      target.binary, {target.offset}, {id}, pid);
    if (fd < 0)
      throw runtime_error("cannot attach uprobe session to " + target.name() + ":" + target.symbol + ": " +
                          errno_text(errno));
    links.push_back({nullptr, fd});
    return links;
  }
  for (auto [prog, retprobe] : {std::pair{progs.entry, false}, std::pair{progs.ret, true}}) {
    if (!prog) continue;
    if (!attach_cookie_) {
      try {
        links.push_back({nullptr, attach_uprobe_copy(prog, skel_->maps.probe_cookie, id, retprobe, target.binary,
                                                     target.offset, pid)});
      } catch (const Error& e) {
        for (auto& l : links) l.destroy();
        throw runtime_error("cannot attach uprobe to " + target.name() + ":" + target.symbol + ": " + e.what());
      }
      continue;
    }
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = id, .retprobe = retprobe);
    bpf_link* link = bpf_program__attach_uprobe_opts(prog, pid > 0 ? pid : -1, target.binary.c_str(),
                                                     target.offset, &opts);
    if (!link) {
      const int err = errno;
      for (auto& l : links) l.destroy();
      throw runtime_error("cannot attach uprobe to " + target.name() + ":" + target.symbol + ": " + errno_text(err));
    }
    links.push_back({link, -1});
  }
  return links;
}

BpfSession::Programs BpfSession::uprobe_programs(bool latency) const {
  Programs progs;
  if (!latency) progs.entry = skel_->progs.mcp_uprobe_entry;
  else if (uprobe_sessions_) progs.session = skel_->progs.mcp_uprobe_session;
  else progs = {skel_->progs.mcp_uprobe_latency_entry, skel_->progs.mcp_uretprobe};
  return progs;
}

BpfSession::Programs BpfSession::usdt_programs() const { return {skel_->progs.mcp_usdt}; }

uint32_t BpfSession::add_uprobe(const UprobeTarget& target, bool latency, pid_t pid, const ProbeConfig& config) {
  if (target.usdt && latency) throw usage_error("USDT probe " + target.probe_name() + ": a USDT probe has no return");
  const uint32_t id = reserve_id(config);
  Programs progs = target.usdt ? usdt_programs() : uprobe_programs(latency);
  if (!target.usdt && config.windowed && windows_enabled_ && uprobe_multi_ && !latency)
    progs = {nullptr, nullptr, skel_->progs.mcp_uprobe_multi, true};
  auto links = attach_uprobes(id, target, pid, progs);
  register_probe(file_probe_info(id, target.probe_name(), target.symbol, latency, config, target.usdt),
                 std::move(links), progs, pid, target);
  if (config.windowed) enable_windows(id, config.threshold);
  return id;
}

bool BpfSession::can_group(const ProbeConfig& config, bool latency) const {
  return (latency ? uprobe_sessions_ : uprobe_multi_) &&
         !(config.windowed && windows_enabled_ && threshold_to_probability(config.threshold) < kWindowMaxRate);
}

std::vector<uint32_t> BpfSession::add_uprobe_group(const std::vector<UprobeTarget>& targets, bool latency, pid_t pid,
                                                   const std::vector<ProbeConfig>& configs) {
  if (targets.empty() || targets.size() != configs.size() || !(latency ? uprobe_sessions_ : uprobe_multi_))
    throw runtime_error("uprobe group: nothing to attach, or no uprobe_multi links (sessions, with latency) in this kernel");
  const Programs progs = latency ? Programs{nullptr, nullptr, skel_->progs.mcp_uprobe_session, false}
                                 : Programs{nullptr, nullptr, skel_->progs.mcp_uprobe_multi, true};
  std::vector<uint32_t> ids;
  const auto undo = [&] {
    for (uint32_t id : ids) remove_probe(id);
  };
  std::vector<uint64_t> offsets, cookies;
  try {
    for (size_t i = 0; i < targets.size(); i++) {
      if (targets[i].usdt || targets[i].binary != targets[0].binary)
        throw runtime_error("uprobe group: " + targets[i].probe_name() + " is not a function of " +
                            targets[0].binary);
      // Registered one by one: an id is taken once its probe exists.
      const uint32_t id = reserve_id(configs[i]);
      ids.push_back(register_probe(file_probe_info(id, targets[i].probe_name(), targets[i].symbol, latency,
                                                   configs[i], false),
                                   {}, progs, pid));
      offsets.push_back(targets[i].offset);
      cookies.push_back(id);
    }
  } catch (...) {
    undo();
    throw;
  }
  const int fd = attach_uprobe_link(progs.session, progs.multi ? kBpfTraceUprobeMulti : kBpfTraceUprobeSession,
                                    targets[0].binary, offsets, cookies, pid);
  if (fd < 0) {
    const int err = errno;
    undo();
    throw runtime_error("cannot attach " + std::to_string(targets.size()) + " uprobes to " + targets[0].name() +
                        " (one uprobe_multi link): " + errno_text(err));
  }
  const auto shared = std::make_shared<const SharedLink>(fd);
  std::unique_lock lock(mu_);
  for (size_t i = 0; i < ids.size(); i++) {
    Link link;
    link.shared = shared;
    probes_.at(ids[i])->targets.push_back({next_target_key_++, {std::move(link)}, targets[i]});
    grouped_[ids[i]] = shared;
  }
  return ids;
}

uint32_t BpfSession::add_uprobe_without_file(const std::string& shown, const std::string& symbol, bool latency,
                                             const ProbeConfig& config, bool usdt) {
  const uint32_t id = reserve_id(config);
  return register_probe(file_probe_info(id, file_probe_name(shown, symbol, usdt), symbol, latency && !usdt, config, usdt),
                        {}, usdt ? usdt_programs() : uprobe_programs(latency));
}

uint32_t BpfSession::add_cuda_probe(const UprobeTarget& target, pid_t pid, const ProbeConfig& config, bool internal) {
  const uint32_t id = reserve_id(config);
  Programs progs;
  const bool at_entry = config.cuda_flags & MCP_CUDA_CFG_AT_ENTRY;
  if (at_entry && config.windowed && windows_enabled_ && uprobe_multi_ && find_vma_)
    progs = {nullptr, nullptr, skel_->progs.mcp_cuda_launch_multi, true};  // windowed: cheap to attach
  else if (at_entry) progs.entry = find_vma_ ? skel_->progs.mcp_cuda_launch : skel_->progs.mcp_cuda_launch_nofv;
  else if (uprobe_sessions_ && find_vma_) progs.session = skel_->progs.mcp_cuda_session;
  else if (find_vma_) progs = {skel_->progs.mcp_cuda_entry, skel_->progs.mcp_cuda_return};
  else progs = {skel_->progs.mcp_cuda_entry_nofv, skel_->progs.mcp_cuda_return_nofv};
  auto links = attach_uprobes(id, target, pid, progs);
  ProbeInfo info{id, target.name() + ":" + target.symbol, ProbeFamily::kCuda, !at_entry};
  info.internal = internal;
  info.symbol = target.symbol;
  register_probe(std::move(info), std::move(links), progs, pid, target);
  if (config.windowed && !internal) enable_windows(id, config.threshold);
  return id;
}

std::map<std::string, uint64_t> BpfSession::program_runs() const {
  std::map<std::string, uint64_t> out;
  bpf_program* prog;
  bpf_object__for_each_program(prog, skel_->obj) {
    const int fd = bpf_program__fd(prog);
    if (fd < 0) continue;  // not loaded (autoload off)
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) out[bpf_program__name(prog)] = info.run_cnt;
  }
  return out;
}


uint32_t BpfSession::add_syscall(const std::string& name, const ProbeConfig& config, bool latency) {
  ensure_tracefs();
  struct stat st;
  const std::string dir = "/sys/kernel/tracing/events/syscalls/sys_enter_" + name;
  if (name.empty() || name.find('/') != std::string::npos || stat(dir.c_str(), &st) != 0)
    throw runtime_error("unknown syscall '" + name + "' (no tracepoint syscalls:sys_enter_" + name + ")");
  const uint32_t id = reserve_id(config);
  std::vector<Link> links;
  std::vector<std::pair<bpf_program*, const char*>> progs;
  // Without bpf_task_pt_regs the exit cannot read the arguments: entry and exit then.
  if (latency || !task_pt_regs_)
    progs = {{skel_->progs.mcp_sys_enter, "sys_enter_"}, {skel_->progs.mcp_sys_exit, "sys_exit_"}};
  else progs = {{skel_->progs.mcp_sys_exit_only, "sys_exit_"}};
  for (auto [prog, tp] : progs) {
    if (!attach_cookie_) {
      try {
        links.push_back({nullptr, attach_tracepoint_copy(prog, skel_->maps.probe_cookie, id, "syscalls", tp + name)});
      } catch (const Error& e) {
        for (auto& l : links) l.destroy();
        throw;
      }
      continue;
    }
    LIBBPF_OPTS(bpf_tracepoint_opts, opts, .bpf_cookie = id);
    bpf_link* link = bpf_program__attach_tracepoint_opts(prog, "syscalls", (tp + name).c_str(), &opts);
    if (!link) {
      const int err = errno;
      for (auto& l : links) l.destroy();
      throw runtime_error("cannot attach tracepoint syscalls:" + std::string(tp) + name + ": " + errno_text(err));
    }
    links.push_back({link, -1});
  }
  ProbeInfo info{id, "syscall:" + name, ProbeFamily::kSyscall, latency, syscall_arity(dir + "/format")};
  return register_probe(std::move(info), std::move(links), Programs{});
}

void BpfSession::remove_probe(uint32_t id) {
  std::lock_guard toggle(toggle_mu_);
  window_fraction_[id % MCP_MAX_PROBES].store(1, std::memory_order_relaxed);
  std::unique_ptr<Probe> p;
  {
    std::unique_lock lock(mu_);
    auto it = probes_.find(id);
    if (it == probes_.end()) return;
    p = std::move(it->second);
    probes_.erase(it);
  }
  // A group member: the link fires for its id until the last member goes, so keep nothing.
  bool grouped;
  {
    std::shared_lock lock(mu_);
    grouped = grouped_.count(id) > 0;
  }
  if (grouped) {
    const mcp_probe_config none{};  // threshold 0, no trace-id argument: nothing kept
    bpf_map_update_elem(bpf_map__fd(skel_->maps.probe_configs), &id, &none, BPF_ANY);
  }
  {
    std::unique_lock lock(mu_);
    retired_names_[id] = p->info.name;
    if (batching_) {
      // Not reusable before the batch has closed its links and set the real position.
      quarantine_[id] = UINT64_MAX;
      batch_ids_.push_back(id);
      for (auto& target : p->targets)
        batch_links_.insert(batch_links_.end(), target.links.begin(), target.links.end());
      return;
    }
  }
  for (auto& target : p->targets)
    for (auto& l : target.links) l.destroy();
  retire({id});
}

void BpfSession::retire(const std::vector<uint32_t>& ids) {
  // After detaching, nothing new can be written for these ids: drop their stale pending
  // entries, and quarantine them up to the current producer position.
  for (uint32_t id : ids) sweep_pending(id);
  std::unique_lock lock(mu_);
  for (uint32_t id : ids) quarantine_[id] = producer_pos_ ? *producer_pos_ : 0;
}

BpfSession::DetachBatch::DetachBatch(BpfSession& session) : session_(session) {
  std::unique_lock lock(session_.mu_);
  session_.batching_ = true;
}

BpfSession::DetachBatch::~DetachBatch() {
  std::lock_guard toggle(session_.toggle_mu_);
  std::vector<uint32_t> ids;
  std::vector<Link> links;
  {
    std::unique_lock lock(session_.mu_);
    session_.batching_ = false;
    ids.swap(session_.batch_ids_);
    links.swap(session_.batch_links_);
  }
  close_together(links);
  session_.retire(ids);
}

void BpfSession::close_together(std::vector<Link>& links) {
  std::atomic<size_t> next{0};
  auto close_some = [&] {
    for (size_t i; (i = next.fetch_add(1)) < links.size();) links[i].destroy();
  };
  {
    std::vector<std::jthread> closers;
    try {
      for (size_t n = 1; n < std::min(links.size(), kClosers); n++) closers.emplace_back(close_some);
    } catch (const std::system_error&) {
      // No more threads: the ones started and this one close the rest.
    }
    close_some();
  }
  links.clear();
}

void BpfSession::detach_all() {
  stop_windows();
  std::lock_guard toggle(toggle_mu_);
  std::vector<Link> links;
  {
    std::unique_lock lock(mu_);
    for (auto& [id, p] : probes_) {
      for (auto& target : p->targets) links.insert(links.end(), target.links.begin(), target.links.end());
      p->targets.clear();
    }
  }
  close_together(links);
  sweep_pending(0);
  finish_estimates();
}

void BpfSession::finish_estimates() {
  // Nothing traps any more: what was kept since the last tick, or in the window open at the
  // end, joins the estimates (a program shorter than one tick would otherwise have none).
  std::unique_lock lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  const auto traps = read_traps();
  for (auto& [id, p] : probes_) {
    if (!p->windows || !p->windows->estimate || p->windows->detached) continue;
    auto& w = *p->windows;
    if (!w.schedule) {
      account_calls(id, w, steady_ns(now), 0, false);
    } else if (w.schedule->close_at()) {
      account_window(id, w, now, traps);
      w.detached = true;
    }
  }
}

void BpfSession::sweep_pending(uint32_t id, uint64_t before_ktime) {
  // Latency entries still pending once their probe is detached never return.
  const int fd = bpf_map__fd(skel_->maps.call_entries);
  std::vector<mcp_call_key> doomed;
  mcp_call_key key{}, next{};
  const mcp_call_key* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    // The value starts with the entry's ktime_ns (struct mcp_call_entry, bpf/maps.bpf.h).
    uint64_t value[16];
    if ((id == 0 || next.probe_id == id) &&
        (before_ktime == UINT64_MAX || (bpf_map_lookup_elem(fd, &next, value) == 0 && value[0] < before_ktime)))
      doomed.push_back(next);
    key = next;
    prev = &key;
  }
  std::unique_lock lock(mu_);
  for (const auto& k : doomed) {
    if (bpf_map_delete_elem(fd, &k) == 0 && k.probe_id < MCP_MAX_PROBES) swept_orphans_[k.probe_id]++;
  }
}

void BpfSession::track_process_tree() {
  // The exit program also counts kept syscalls that never returned (exit_group): always on.
  if (target_tgid_ <= 0) {
    if (bpf_link* link = bpf_program__attach(skel_->progs.mcp_process_exit)) process_links_.push_back(link);
    else throw runtime_error(std::string("cannot attach mcp_process_exit: ") + errno_text(errno));
    return;
  }
  const int fd = bpf_map__fd(skel_->maps.traced_tgids);
  const uint8_t one = 1;
  // The root, and with children followed its live descendants (by /proc's children lists).
  std::vector<pid_t> todo{target_tgid_};
  std::set<pid_t> seen;
  while (!todo.empty()) {
    const pid_t pid = todo.back();
    todo.pop_back();
    if (!seen.insert(pid).second) continue;
    uint32_t key = static_cast<uint32_t>(pid);
    bpf_map_update_elem(fd, &key, &one, BPF_ANY);
    if (!follow_children_) continue;
    std::error_code ec;
    const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
    DIR* d = opendir(task_dir.c_str());
    if (!d) continue;
    while (dirent* t = readdir(d)) {
      if (t->d_name[0] == '.') continue;
      std::ifstream f(task_dir + "/" + t->d_name + "/children");
      pid_t child;
      while (f >> child) todo.push_back(child);
    }
    closedir(d);
  }
  std::vector<bpf_program*> progs{skel_->progs.mcp_process_exit};
  if (follow_children_) progs.push_back(skel_->progs.mcp_process_fork);
  for (auto* prog : progs) {
    bpf_link* link = bpf_program__attach(prog);
    if (!link) throw runtime_error(std::string("cannot attach ") + bpf_program__name(prog) + ": " + errno_text(errno));
    process_links_.push_back(link);
  }
  // A process that exited between the /proc walk and the attach left no exit event.
  for (pid_t pid : seen)
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      uint32_t key = static_cast<uint32_t>(pid);
      bpf_map_delete_elem(fd, &key);
    }
}

bool BpfSession::tree_alive() const {
  if (target_tgid_ <= 0) return true;
  uint32_t key;
  return bpf_map_get_next_key(bpf_map__fd(skel_->maps.traced_tgids), nullptr, &key) == 0;
}

bool BpfSession::traces(pid_t pid) const {
  if (pid == getpid()) return false;
  if (target_tgid_ <= 0 || pid == target_tgid_) return true;
  if (!follow_children_) return false;
  uint32_t key = static_cast<uint32_t>(pid);
  uint8_t v;
  return bpf_map_lookup_elem(bpf_map__fd(skel_->maps.traced_tgids), &key, &v) == 0;
}

void BpfSession::watch_libraries() {
  std::lock_guard lock(lib_mu_);
  if (!find_vma_ || lib_watchers_++ > 0) return;
  lib_watch_link_ = bpf_program__attach(skel_->progs.mcp_lib_mmap);
  if (!lib_watch_link_) {
    // No syscall tracepoints (tracefs not mounted): the raw syscall exit, filtered on mmap.
    const int err = errno;
    lib_watch_link_ = bpf_program__attach(skel_->progs.mcp_lib_sys_exit);
    if (!lib_watch_link_) {
      lib_watchers_ = 0;
      throw runtime_error("cannot watch library mappings (tracepoint syscalls/sys_exit_mmap: " + errno_text(err) +
                          "; raw tracepoint sys_exit: " + errno_text(errno) + ")");
    }
    spdlog::warn("CUDA discovery: syscall tracepoints unavailable ({}); watching mmap through the raw sys_exit "
                 "tracepoint, which runs at every syscall exit on the node", errno_text(err));
  }
}

void BpfSession::unwatch_libraries() {
  std::lock_guard lock(lib_mu_);
  if (lib_watchers_ == 0 || --lib_watchers_ > 0) return;
  bpf_link__destroy(std::exchange(lib_watch_link_, nullptr));
}

std::vector<mcp_lib_mapped> BpfSession::take_mapped_libraries() {
  std::lock_guard lock(lib_mu_);
  if (!lib_ring_) {
    auto on_record = [](void* ctx, void* data, size_t size) -> int {
      if (size < sizeof(mcp_lib_mapped)) return 0;
      mcp_lib_mapped rec;
      std::memcpy(&rec, data, sizeof(rec));
      rec.name[sizeof(rec.name) - 1] = '\0';
      static_cast<std::vector<mcp_lib_mapped>*>(ctx)->push_back(rec);
      return 0;
    };
    lib_ring_ = ring_buffer__new(bpf_map__fd(skel_->maps.lib_events), on_record, &lib_pending_, nullptr);
    if (!lib_ring_) return {};
  }
  ring_buffer__consume(lib_ring_);
  return std::exchange(lib_pending_, {});
}

void BpfSession::set_runtime_file(const mcp_file_key& key, uint8_t kind) {
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.cuda_runtime_files), &key, &kind, BPF_ANY) != 0)
    throw runtime_error("cannot record a CUDA runtime file (cuda_runtime_files full?): " + errno_text(errno));
}

void BpfSession::erase_runtime_file(const mcp_file_key& key) {
  bpf_map_delete_elem(bpf_map__fd(skel_->maps.cuda_runtime_files), &key);
}

void BpfSession::follow_uprobe(uint32_t id, const UprobeTarget& target) { attach_file(id, target); }

uint64_t BpfSession::attach_file(uint32_t id, const UprobeTarget& target) {
  std::lock_guard toggle(toggle_mu_);
  Programs progs;
  pid_t pid;
  {
    std::shared_lock lock(mu_);
    auto it = probes_.find(id);
    if (it == probes_.end() || !(it->second->progs.entry || it->second->progs.session))
      throw runtime_error("probe " + std::to_string(id) + " is not a uprobe");
    progs = it->second->progs;
    pid = it->second->pid;
  }
  auto links = attach_uprobes(id, target, pid, progs);
  std::unique_lock lock(mu_);
  auto it = probes_.find(id);
  if (it == probes_.end()) {  // removed meanwhile (add/remove run on one thread: never)
    for (auto& l : links) l.destroy();
    throw runtime_error("probe " + std::to_string(id) + " was removed");
  }
  const uint64_t key = next_target_key_++;
  it->second->targets.push_back({key, std::move(links), target});
  return key;
}

void BpfSession::detach_file(uint32_t id, uint64_t key) {
  std::lock_guard toggle(toggle_mu_);
  std::vector<Link> links;
  {
    std::unique_lock lock(mu_);
    auto it = probes_.find(id);
    if (it == probes_.end()) return;
    auto& targets = it->second->targets;
    auto t = std::find_if(targets.begin(), targets.end(), [&](const Target& x) { return x.key == key; });
    if (t == targets.end()) return;
    links = std::move(t->links);
    targets.erase(t);
  }
  for (auto& l : links) l.destroy();
}

void BpfSession::drop_earlier_targets(uint32_t id) {
  std::lock_guard toggle(toggle_mu_);
  std::vector<Target> old;
  {
    std::unique_lock lock(mu_);
    auto it = probes_.find(id);
    if (it == probes_.end() || it->second->targets.size() < 2) return;
    auto& targets = it->second->targets;
    old.assign(std::make_move_iterator(targets.begin()), std::make_move_iterator(targets.end() - 1));
    targets.erase(targets.begin(), targets.end() - 1);
  }
  for (auto& target : old)
    for (auto& l : target.links) l.destroy();
}

void BpfSession::put_scope(uint32_t probe_id, uint64_t cgroup_id, uint64_t value) {
  const mcp_scope_key key{probe_id, 0, cgroup_id};
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.scope_cgroups), &key, &value, BPF_ANY))
    throw runtime_error("cannot add cgroup " + std::to_string(cgroup_id) + " to scope_cgroups (at most " +
                        std::to_string(MCP_MAX_SCOPE_CGROUPS) + " tenant and probe cgroups): " + errno_text(errno));
}

void BpfSession::erase_scope(uint32_t probe_id, uint64_t cgroup_id) {
  const mcp_scope_key key{probe_id, 0, cgroup_id};
  bpf_map_delete_elem(bpf_map__fd(skel_->maps.scope_cgroups), &key);  // ENOENT: already gone
}

namespace {

mcp_prefix_key prefix_key(uint32_t probe_id, const TraceIdPrefix& prefix) {
  mcp_prefix_key key{};
  key.prefixlen = 32 + prefix.bits();
  key.probe_id = probe_id;
  std::copy(prefix.bytes.begin(), prefix.bytes.end(), key.id);
  return key;
}

}  // namespace

void BpfSession::put_trace_prefix(uint32_t probe_id, const TraceIdPrefix& prefix, uint32_t slot, uint64_t threshold) {
  const mcp_prefix_key key = prefix_key(probe_id, prefix);
  const mcp_prefix_rule rule{threshold, slot, 0};
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.trace_prefixes), &key, &rule, BPF_ANY))
    throw runtime_error("cannot add trace-id prefix " + prefix.digits + " (at most " +
                        std::to_string(MCP_MAX_TRACE_PREFIXES - 1) + " prefix rules): " + errno_text(errno));
}

void BpfSession::erase_trace_prefix(uint32_t probe_id, const TraceIdPrefix& prefix) {
  const mcp_prefix_key key = prefix_key(probe_id, prefix);
  bpf_map_delete_elem(bpf_map__fd(skel_->maps.trace_prefixes), &key);  // ENOENT: already gone
}

void BpfSession::clear_prefix_counters(uint32_t slot) {
  std::vector<mcp_counters> zeros(ncpus_, mcp_counters{});
  bpf_map_update_elem(bpf_map__fd(skel_->maps.prefix_counters), &slot, zeros.data(), BPF_ANY);
}

ProbeCounters BpfSession::prefix_counters(uint32_t slot) const {
  return read_counters(bpf_map__fd(skel_->maps.prefix_counters), slot);
}

// Only uprobes hand their arguments to the decision: a syscall or CUDA probe configured with a
// trace-id argument still draws at random (bpf/sample.bpf.h mcp_sample callers).
bool BpfSession::decides_on_trace_id(const ProbeInfo& info) const {
  return info.family == ProbeFamily::kUprobe && trace_id_probes_[info.id % MCP_MAX_PROBES];
}

void BpfSession::configure(uint32_t id, const ProbeConfig& config) {
  mcp_probe_config value{};
  value.threshold = config.threshold;
  value.trace_id_arg = config.trace_id_arg >= 0 ? static_cast<uint8_t>(config.trace_id_arg + 1) : 0;
  value.trace_id_format = config.trace_id_integer   ? MCP_TRACE_ID_INTEGER
                          : config.trace_id_bytes16 ? MCP_TRACE_ID_BYTES16
                                                    : MCP_TRACE_ID_HEX32;
  value.cgroup_id = config.scoped ? MCP_CGROUP_SCOPE_SET : 0;
  value.cuda_api = config.cuda_api;
  value.vma_arg = config.vma_arg;
  value.entry_deref_arg = config.entry_deref_arg;
  value.ret_deref_arg = config.ret_deref_arg;
  value.cuda_flags = config.cuda_flags;
  value.name_arg = config.name_arg;
  value.string_args = config.string_args;
  value.stack = config.stack;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.probe_configs), &id, &value, BPF_ANY))
    throw runtime_error("cannot update probe_configs: " + errno_text(errno));
  std::unique_lock lock(mu_);
  trace_id_probes_[id % MCP_MAX_PROBES] = value.trace_id_arg != 0;
}

void BpfSession::set_threshold(uint32_t id, uint64_t threshold) {
  {
    std::unique_lock lock(mu_);
    auto it = probes_.find(id);
    if (it != probes_.end() && it->second->windows) {
      it->second->windows->rate = threshold_to_probability(threshold);
      apply_window_plan(id, *it->second->windows);
      lock.unlock();
      window_cv_.notify_all();
      return;
    }
  }
  write_threshold(id, threshold);
}

void BpfSession::write_threshold(uint32_t id, uint64_t threshold, std::optional<uint64_t> window_end_ns) {
  mcp_probe_config value{};
  const int fd = bpf_map__fd(skel_->maps.probe_configs);
  // Only this agent writes the map, and the read-modify-write keeps the rest of the probe's
  // settings (trace id, CUDA): a failed read would zero them, so it stops here.
  if (bpf_map_lookup_elem(fd, &id, &value))
    throw runtime_error("cannot read probe_configs[" + std::to_string(id) + "]: " + errno_text(errno));
  value.threshold = threshold;
  if (window_end_ns) value.window_end_ns = *window_end_ns;
  if (bpf_map_update_elem(fd, &id, &value, BPF_ANY))
    throw runtime_error("cannot update probe_configs: " + errno_text(errno));
}

uint64_t BpfSession::threshold(uint32_t id) const {
  {
    std::shared_lock lock(mu_);
    auto it = probes_.find(id);
    if (it != probes_.end() && it->second->windows) return probability_to_threshold(it->second->windows->rate);
  }
  mcp_probe_config value{};
  bpf_map_lookup_elem(bpf_map__fd(skel_->maps.probe_configs), &id, &value);
  return value.threshold;
}

ProbeCounters BpfSession::read_counters(int map_fd, uint32_t key) const {
  std::vector<mcp_counters> values(ncpus_);
  ProbeCounters out;
  if (bpf_map_lookup_elem(map_fd, &key, values.data()) != 0) return out;
  for (const auto& v : values) {
    out.seen += v.seen;
    out.kept += v.kept;
    out.lost += v.lost;
    out.quota_dropped += v.quota_dropped;
    out.orphaned += v.orphaned;
  }
  return out;
}

ProbeCounters BpfSession::counters(uint32_t id) const {
  ProbeCounters c = read_counters(bpf_map__fd(skel_->maps.counters), id);
  std::shared_lock lock(mu_);
  if (id < MCP_MAX_PROBES) c.orphaned += swept_orphans_[id];
  return c;
}

std::vector<ProbeCounters> BpfSession::all_counters() const {
  std::vector<ProbeCounters> out(MCP_MAX_PROBES);
  // Ids are taken lowest first: reading up to the highest one in use (or quarantined) copies
  // what a few probes use, not the whole per-CPU array, each tick.
  uint32_t used = 1;
  {
    std::shared_lock lock(mu_);
    if (!probes_.empty()) used = std::max(used, probes_.rbegin()->first + 1);
    if (!quarantine_.empty()) used = std::max(used, quarantine_.rbegin()->first + 1);
  }
  std::vector<uint32_t> keys(used);
  std::vector<mcp_counters> values(static_cast<size_t>(used) * ncpus_);
  uint32_t count = used, out_batch = 0;
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  const int err = bpf_map_lookup_batch(bpf_map__fd(skel_->maps.counters), nullptr, &out_batch, keys.data(),
                                       values.data(), &count, &opts);
  if (err && errno != ENOENT) {
    for (uint32_t id = 0; id < used; id++) out[id] = counters(id);  // no batch ops: one by one
    return out;
  }
  for (uint32_t i = 0; i < count; i++) {
    if (keys[i] >= MCP_MAX_PROBES) continue;
    ProbeCounters& c = out[keys[i]];
    for (int cpu = 0; cpu < ncpus_; cpu++) {
      const auto& v = values[static_cast<size_t>(i) * ncpus_ + cpu];
      c.seen += v.seen;
      c.kept += v.kept;
      c.lost += v.lost;
      c.quota_dropped += v.quota_dropped;
      c.orphaned += v.orphaned;
    }
  }
  std::shared_lock lock(mu_);
  for (uint32_t id = 0; id < MCP_MAX_PROBES; id++) out[id].orphaned += swept_orphans_[id];
  return out;
}

ProbeCounters BpfSession::tenant_counters(uint32_t bucket) const {
  return read_counters(bpf_map__fd(skel_->maps.tenant_counters), bucket);
}

void BpfSession::set_quota(uint32_t bucket, double rate_per_sec, uint64_t burst,
                           const std::vector<double>& cpu_shares) {
  if (bucket >= MCP_TENANT_BUCKETS) throw usage_error("tenant bucket out of range");
  // Each CPU refills its own bucket at its share of the rate: no shared writes.
  constexpr double kMaxRateMilli = 1.8e9;  // keeps the kernel's refill product in 64 bits
  std::vector<mcp_quota_config> values(ncpus_);
  for (int cpu = 0; cpu < ncpus_; cpu++) {
    const double share = cpu_shares.size() == static_cast<size_t>(ncpus_) ? cpu_shares[cpu] : 1.0 / ncpus_;
    if (burst == 0) continue;
    values[cpu].rate_milli = static_cast<uint64_t>(std::min(kMaxRateMilli, rate_per_sec * share * 1000.0));
    // The rate is split, the burst is not: a tenant that moves to a CPU with a small
    // share finds up to a whole burst saved there and is not cut off before the next
    // re-split. The price is bounded: a burst at most once per CPU.
    values[cpu].burst_milli = std::max<uint64_t>(1000, burst * 1000);
  }
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.quota_configs), &bucket, values.data(), BPF_ANY))
    throw runtime_error("cannot update quota_configs: " + errno_text(errno));
}

std::vector<uint64_t> BpfSession::tenant_demand_per_cpu(uint32_t bucket) const {
  std::vector<uint64_t> out(ncpus_, 0);
  std::vector<mcp_counters> values(ncpus_);
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.tenant_counters), &bucket, values.data()) != 0) return out;
  for (int i = 0; i < ncpus_; i++) out[i] = values[i].kept + values[i].quota_dropped;
  return out;
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

int BpfSession::ringbuf_fd() const { return bpf_map__fd(skel_->maps.events); }

void BpfSession::apply_window_plan(uint32_t id, Windows& w) {
  const auto now = std::chrono::steady_clock::now();
  const int64_t now_ns = steady_ns(now);
  const WindowPlan wanted = plan_windows(w.rate);
  // A rate that could use windows samples calls first (loader/estimate_modes.h).
  if (wanted.fraction < 1) {
    const auto period = static_cast<int64_t>(static_cast<double>(std::chrono::nanoseconds(kWindowLength).count()) /
                                             wanted.fraction);
    if (!w.estimate) {
      w.estimate.emplace(estimate_policy_, now_ns, period);
      restart_ticks(id, w);
    } else {
      w.estimate->set_period(period);
    }
  }
  const bool calls = w.estimate && w.estimate->mode() == EstimateMode::kCalls;
  w.plan = w.allowed && !calls ? wanted : WindowPlan{1, w.rate};
  if (w.plan.fraction >= 1) {
    w.schedule.reset();
  } else if (!w.schedule || w.schedule->fraction() != w.plan.fraction) {
    w.schedule.emplace(w.plan.fraction, kWindowLength, window_seed_++, now_ns);
    // Attached already (the first plan, or a rate change): the window owed now, if any, is this one.
    if (!w.detached && w.schedule->at(now_ns, false).open) {
      w.schedule->opened(now_ns);
      mark_window_open(id, w, now);
    }
    if (w.started == std::chrono::steady_clock::time_point{}) w.started = now;
  }
  gate_window(id, w);
  w.stats.fraction = w.plan.fraction;
  window_changes_++;
  window_fraction_[id % MCP_MAX_PROBES].store(w.plan.fraction, std::memory_order_relaxed);
  if ((w.schedule || w.estimate) && !window_thread_.joinable() && !windows_stopped_) {
    window_thread_ = std::jthread([this](std::stop_token stop) { window_loop(stop); });
    for (size_t i = 0; i < kReapers; i++) reapers_.emplace_back([this](std::stop_token stop) { reap_loop(stop); });
  }
}

void BpfSession::gate_window(uint32_t id, const Windows& w) {
  const bool in_window = w.schedule && !w.detached && w.schedule->close_at();
  write_threshold(id, w.detached && w.schedule ? 0 : probability_to_threshold(w.plan.inner),
                  in_window ? static_cast<uint64_t>(w.schedule->close_at()) : 0);
}

void BpfSession::restart_ticks(uint32_t id, Windows& w) {
  const auto c = read_counters(bpf_map__fd(skel_->maps.counters), id);
  w.tick_kept = c.kept;
  w.tick_seen = c.seen;
}

bool BpfSession::account_calls(uint32_t id, Windows& w, int64_t now_ns, double share, bool may_window) {
  const auto c = read_counters(bpf_map__fd(skel_->maps.counters), id);
  const bool changed = w.estimate->on_calls_tick(now_ns, c.kept - std::min(c.kept, w.tick_kept), w.rate,
                                                 c.seen - std::min(c.seen, w.tick_seen), share, trap_cost_ns(),
                                                 may_window);
  w.tick_kept = c.kept;
  w.tick_seen = c.seen;
  return changed;
}

bool BpfSession::account_window(uint32_t id, Windows& w, std::chrono::steady_clock::time_point end,
                                const std::vector<uint64_t>& traps) {
  // The kernel counted from the open to the window's end (or `end`, if the close came early).
  const auto counted = std::min(end, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(w.schedule->close_at())));
  if (counted > w.on_since) w.stats.covered_ns += static_cast<uint64_t>(std::chrono::nanoseconds(counted - w.on_since).count());
  if (!w.estimate) return false;
  // The traps of every probe while this one's breakpoints were in place: what they took of
  // the busiest CPU bounds what the window missed.
  const uint64_t kept = read_counters(bpf_map__fd(skel_->maps.counters), id).kept;
  return w.estimate->on_window(steady_ns(end), kept - std::min(kept, w.kept_at_open), w.rate,
                               trap_share(w.traps_at_open, traps, std::chrono::nanoseconds(end - w.on_since).count()));
}

void BpfSession::log_mode(const Probe& p) const {
  const auto& e = *p.windows->estimate;
  spdlog::info("probe {}: {} ({})", p.info.name, estimate_mode_name(e.mode()), e.reason());
}

std::vector<uint64_t> BpfSession::read_traps() const {
  std::vector<uint64_t> out(static_cast<size_t>(ncpus_));
  const uint32_t zero = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.trap_counts), &zero, out.data()))
    spdlog::debug("cannot read trap_counts: {}", errno_text(errno));
  return out;
}

double BpfSession::trap_share(const std::vector<uint64_t>& before, const std::vector<uint64_t>& after, int64_t ns) const {
  uint64_t most = 0;
  for (size_t i = 0; i < after.size(); i++) most = std::max(most, after[i] - (i < before.size() ? before[i] : 0));
  return ns > 0 ? static_cast<double>(most) * trap_cost_ns() / static_cast<double>(ns) : 0.0;
}

void BpfSession::measure_trap_cost() {
  // The file offset of the function, from where this process has it mapped.
  const auto fn = reinterpret_cast<uint64_t>(&mcp_trap_calibration_target);
  UprobeTarget target;
  target.symbol = "mcp_trap_calibration_target";
  for (const auto& m : read_proc_maps(getpid()))
    if (m.executable && fn >= m.start && fn < m.end) {
      target.binary = m.path;
      target.offset = fn - m.start + m.offset;
    }
  constexpr int kCalls = 200;
  volatile long sink = 0;
  const auto per_call = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; i++) sink = sink + mcp_trap_calibration_target(i);
    return static_cast<double>(std::chrono::nanoseconds(std::chrono::steady_clock::now() - t0).count()) / kCalls;
  };
  // Unknown, the cost is taken high: windows are then trusted less, never more.
  double cost = 20000;
  try {
    if (target.binary.empty()) throw runtime_error("the agent's own code is not in /proc/self/maps");
    const Programs progs = uprobe_multi_ ? Programs{nullptr, nullptr, skel_->progs.mcp_uprobe_multi, true}
                                         : uprobe_programs(false);
    const double bare = per_call();
    auto links = attach_uprobes(0, target, getpid(), progs);  // probe 0: keeps nothing
    std::vector<double> runs;
    for (int i = 0; i < 5; i++) runs.push_back(per_call());
    for (auto& l : links) l.destroy();
    // The quickest run: a busy machine only adds time (the thread preempted), never takes it.
    // The kept path (a ring record, the arguments) costs more than this one: a margin.
    cost = std::max(500.0, 1.5 * (*std::min_element(runs.begin(), runs.end()) - bare) + 300);
  } catch (const Error& e) {
    spdlog::warn("cannot measure a uprobe trap's cost ({}): taking {:.0f} us", e.what(), cost / 1000);
  }
  spdlog::debug("one uprobe trap costs about {:.1f} us here", cost / 1000);
  trap_cost_ns_.store(cost, std::memory_order_relaxed);
}

void BpfSession::mark_window_open(uint32_t id, Windows& w, std::chrono::steady_clock::time_point now) {
  w.on_since = now;
  w.kept_at_open = read_counters(bpf_map__fd(skel_->maps.counters), id).kept;
  w.traps_at_open = read_traps();
}

void BpfSession::enable_windows(uint32_t id, uint64_t threshold) {
  if (!windows_enabled_) return;
  if (trap_cost_ns() == 0 && plan_windows(threshold_to_probability(threshold)).fraction < 1) measure_trap_cost();
  {
    std::unique_lock lock(mu_);
    auto it = probes_.find(id);
    if (it == probes_.end()) return;
    auto& w = it->second->windows.emplace();
    w.rate = threshold_to_probability(threshold);
    w.on_since = std::chrono::steady_clock::now();
    apply_window_plan(id, w);
  }
  window_cv_.notify_all();
}

void BpfSession::set_windows_allowed(uint32_t id, bool allowed) {
  {
    std::unique_lock lock(mu_);
    auto it = probes_.find(id);
    if (it == probes_.end() || !it->second->windows || it->second->windows->allowed == allowed) return;
    auto& w = *it->second->windows;
    w.allowed = allowed;
    if (!allowed && w.estimate)
      w.estimate->sample_calls(steady_ns(std::chrono::steady_clock::now()),
                               "steered by the rate controller: every call is sampled");
    apply_window_plan(id, w);
  }
  window_cv_.notify_all();
}

std::optional<EstimateTracker> BpfSession::estimate_tracker(uint32_t id) const {
  std::shared_lock lock(mu_);
  auto it = probes_.find(id);
  if (it == probes_.end() || !it->second->windows) return std::nullopt;
  return it->second->windows->estimate;
}

std::optional<WindowStats> BpfSession::window_stats(uint32_t id) const {
  std::shared_lock lock(mu_);
  auto it = probes_.find(id);
  if (it == probes_.end() || !it->second->windows ||
      (it->second->windows->started == std::chrono::steady_clock::time_point{} && !it->second->windows->estimate))
    return std::nullopt;
  const auto& w = *it->second->windows;
  const auto now = std::chrono::steady_clock::now();
  WindowStats s = w.stats;
  // Since windows first started (a probe still sampling calls has none yet).
  if (w.started != std::chrono::steady_clock::time_point{})
    s.elapsed_ns = static_cast<uint64_t>(std::chrono::nanoseconds(now - w.started).count());
  if (!w.detached && w.schedule && w.schedule->close_at()) {
    const auto end = std::min(now, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(w.schedule->close_at())));
    if (end > w.on_since) s.covered_ns += static_cast<uint64_t>(std::chrono::nanoseconds(end - w.on_since).count());
  }
  return s;
}

void BpfSession::window_loop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::vector<std::pair<uint32_t, bool>> todo;  // (id, open)
    {
      std::unique_lock lock(mu_);
      const auto now = std::chrono::steady_clock::now();
      const int64_t now_ns = std::chrono::nanoseconds(now.time_since_epoch()).count();
      auto wake = now + std::chrono::seconds(1);
      if (now_ns - last_tick_ns_ >= kEstimateTick.count()) tick_estimates(now_ns);
      for (auto& [id, p] : probes_) {
        if (!p->windows) continue;
        auto& w = *p->windows;
        bool want_on = true;
        if (w.schedule) {
          const int64_t end = w.schedule->close_at();
          const auto d = w.schedule->at(now_ns, !w.detached);
          want_on = d.open;
          wake = std::min(wake, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(d.wake_ns)));
          // The open window grew (the next one was owed before it ended): so does the kernel's gate.
          if (!w.detached && end && w.schedule->close_at() != end) gate_window(id, w);
        }
        if (w.estimate && !w.schedule)  // sampling calls: judged every tick
          wake = std::min(wake, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(last_tick_ns_)) +
                                    kEstimateTick);
        if (want_on == w.detached) todo.emplace_back(id, want_on);
      }
      // Closes first: a window's count ends when its close starts, an open can wait.
      std::stable_partition(todo.begin(), todo.end(), [](const auto& t) { return !t.second; });
      if (todo.empty()) {
        // Until the next toggle, or a plan changed (a rate, a new probe).
        const uint64_t seen = window_changes_;
        window_cv_.wait_until(lock, stop, wake, [&] { return window_changes_ != seen; });
        continue;
      }
    }
    for (const auto& [id, open] : todo) open ? open_window(id) : close_window(id);
  }
}

void BpfSession::tick_estimates(int64_t now_ns) {
  auto traps = read_traps();
  const double share = last_tick_ns_ ? trap_share(tick_traps_, traps, now_ns - last_tick_ns_) : 0.0;
  const bool first = last_tick_ns_ == 0;
  last_tick_ns_ = now_ns;
  tick_traps_ = std::move(traps);
  if (first) return;  // a baseline: the share needs two readings
  for (auto& [id, p] : probes_) {
    // Every probe sampling calls (probation, windows not allowed): attached, counted call by call.
    if (!p->windows || !p->windows->estimate || p->windows->schedule || p->windows->detached) continue;
    if (account_calls(id, *p->windows, now_ns, share, p->windows->allowed)) {
      log_mode(*p);
      apply_window_plan(id, *p->windows);
    }
  }
}

void BpfSession::open_window(uint32_t id) {
  std::lock_guard toggle(toggle_mu_);
  std::vector<std::pair<uint64_t, UprobeTarget>> targets;
  Programs progs;
  pid_t pid;
  {
    std::shared_lock lock(mu_);
    auto it = probes_.find(id);
    if (windows_stopped_ || it == probes_.end() || !it->second->windows || !it->second->windows->detached) return;
    for (const auto& t : it->second->targets)
      if (t.links.empty()) targets.emplace_back(t.key, t.target);
    progs = it->second->progs;
    pid = it->second->pid;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::pair<uint64_t, std::vector<Link>>> made;
  for (const auto& [key, target] : targets) {
    try {
      made.emplace_back(key, attach_uprobes(id, target, pid, progs));
    } catch (const Error& e) {
      spdlog::warn("sampling window of probe {}: {}", id, e.what());  // the file went: the next window retries
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  auto it = probes_.find(id);
  for (auto& [key, links] : made) {
    Target* t = nullptr;
    if (it != probes_.end() && !windows_stopped_)
      for (auto& x : it->second->targets)
        if (x.key == key && x.links.empty()) t = &x;
    if (t) t->links = std::move(links);
    else for (auto& l : links) l.destroy();
  }
  if (it == probes_.end() || !it->second->windows) return;
  auto& w = *it->second->windows;
  w.detached = false;
  // Counted from here, for the window's full length: the kernel kept nothing while the attach ran.
  const auto opened = std::chrono::steady_clock::now();
  if (w.schedule) w.schedule->opened(steady_ns(opened));
  mark_window_open(id, w, opened);
  gate_window(id, w);
  if (w.schedule) w.stats.windows++;
  else if (w.estimate) restart_ticks(id, w);  // sampling calls again: the ticks count from here
  w.stats.attach_ns += static_cast<uint64_t>(std::chrono::nanoseconds(t1 - t0).count());
}

void BpfSession::close_window(uint32_t id) {
  std::lock_guard toggle(toggle_mu_);
  std::vector<Link> links;
  bool latency = false;
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::unique_lock lock(mu_);
    auto it = probes_.find(id);
    if (it == probes_.end() || !it->second->windows || it->second->windows->detached) return;
    for (auto& t : it->second->targets) {
      links.insert(links.end(), t.links.begin(), t.links.end());
      t.links.clear();
    }
    auto& w = *it->second->windows;
    w.detached = true;
    gate_window(id, w);  // nothing kept from here, though the breakpoints stay until the close
    const auto closed = std::chrono::steady_clock::now();
    if (w.schedule && w.schedule->close_at() && account_window(id, w, closed, read_traps())) {
      log_mode(*it->second);
      w.schedule->closed();
      apply_window_plan(id, w);
    }
    if (w.schedule) w.schedule->closed();
    latency = it->second->info.latency;
  }
  // Closing a uprobe removes its breakpoints at once, then waits for a grace period (tens
  // of ms here): the reapers wait, in parallel, so the schedule never does. A call entered
  // in the window returns unseen: its pending entry is swept as an orphan after the close.
  const auto closed_ktime = static_cast<uint64_t>(clock::SystemClockSource().monotonic_ns());
  size_t waiting;
  {
    std::lock_guard lock(reap_mu_);
    for (auto& l : links) reap_queue_.push_back({l, latency ? id : 0, closed_ktime});
    waiting = reap_queue_.size();
  }
  // A close must start now: its breakpoints stay in place until it does. When every reaper
  // is inside a close (waiting for its grace period), one more starts.
  if (reap_busy_.load() + waiting > reapers_.size() && reapers_.size() < kMaxReapers)
    reapers_.emplace_back([this](std::stop_token stop) { reap_loop(stop); });
  reap_cv_.notify_all();
  const auto t1 = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  if (auto it = probes_.find(id); it != probes_.end() && it->second->windows)
    it->second->windows->stats.attach_ns += static_cast<uint64_t>(std::chrono::nanoseconds(t1 - t0).count());
}

void BpfSession::reap_loop(std::stop_token stop) {
  for (;;) {
    Reap r;
    {
      std::unique_lock lock(reap_mu_);
      reap_cv_.wait(lock, stop, [&] { return !reap_queue_.empty(); });
      if (reap_queue_.empty()) return;  // stopped, and nothing left
      r = reap_queue_.front();
      reap_queue_.pop_front();
      reap_busy_++;
    }
    r.link.destroy();
    if (r.sweep_id) sweep_pending(r.sweep_id, r.before_ktime);
    reap_busy_--;
  }
}

void BpfSession::stop_windows() {
  {
    std::unique_lock lock(mu_);
    windows_stopped_ = true;
  }
  if (window_thread_.joinable()) {
    window_thread_.request_stop();
    window_cv_.notify_all();
    window_thread_.join();
  }
  for (auto& t : reapers_) t.request_stop();
  reap_cv_.notify_all();
  for (auto& t : reapers_) if (t.joinable()) t.join();
  reapers_.clear();
  // Whatever the reapers left (they stop between links): closed here.
  std::deque<Reap> rest;
  {
    std::lock_guard lock(reap_mu_);
    rest.swap(reap_queue_);
  }
  for (auto& r : rest) {
    r.link.destroy();
    if (r.sweep_id) sweep_pending(r.sweep_id, r.before_ktime);
  }
}

}  // namespace mcp::loader
