// BpfSession: owns the loaded BPF object (the mcp skeleton) and the probes
// attached through it. Open = set load-time rodata, load (full verifier log on
// failure); then probes are added and removed at any time, each an RAII
// attachment whose id indexes the counters and configuration maps.
// Thread safety: add/remove from one thread; counters, thresholds and probe
// lookups may be used concurrently from the control and consumer threads.
// Its member functions are split by job: bpf_session.cpp (open, close, probe lookups),
// attach.cpp, detach.cpp, probe_ids.cpp (ids, quarantine), session_maps.cpp (KernelMaps),
// process_watch.cpp (the traced tree, library mappings), window_scheduler.cpp (sampling
// windows and the reapers); bpf_object_fit.h and uprobe_multi_link.h hold what needs no session.
#pragma once
#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_handle.h"
#include "loader/bpf_handles.h"
#include "loader/estimate_modes.h"
#include "loader/kernel_maps.h"
#include "loader/map_io.h"
#include "loader/sampling_windows.h"
#include "loader/target_resolver.h"
#include "mcp_abi.h"

struct bpf_program;
struct bpf_map;

namespace mcp::loader {

class UsdtSpecIds;

// The largest ring buffer: the map's size is 32 bits, and a bigger one is memory no node spares.
inline constexpr uint64_t kMaxRingbufBytes = uint64_t{1} << 30;
// USDT argument specs an agent holds (each distinct argument string of each USDT probe).
inline constexpr uint32_t kUsdtSpecs = 16384;

struct SessionOptions {
  pid_t target_tgid = 0;              // trace only this process tree (0: all)
  bool follow_children = true;        // the tree: target_tgid and its descendants (strace -f)
  uint64_t ringbuf_bytes = 16u << 20; // rounded up to a power of two >= page size, <= kMaxRingbufBytes
  uint64_t wakeup_bytes = 64u << 10;  // consumer wake-up backlog
  bool quotas = false;                // compile in the tenant quota step
  uint64_t cuda_slow_ns = 0;          // launches slower than this switch on slow mode (0: off)
  uint64_t cuda_hold_ns = 10000000000ull; // how long slow mode lasts
  // Probes configured windowed are sampled in time windows (loader/sampling_windows.h);
  // false, or MCP_SAMPLING_WINDOWS=off in the environment: every call is sampled.
  bool sampling_windows = true;
  // Probe ids 1..probe_slots-1 (at most MCP_MAX_PROBES). The per-CPU counter array is sized to
  // it: 40 bytes a slot on each CPU (330 KiB a CPU at the most), so a front end that knows how
  // many probes it will ever hold asks for fewer.
  uint32_t probe_slots = MCP_MAX_PROBES;
  // The map element calls (loader/map_io.h); null: libbpf's. Tests pass one that fails.
  std::shared_ptr<const MapIo> map_io;
};

struct ProbeConfig {
  uint64_t threshold = UINT64_MAX;
  int trace_id_arg = -1;      // -1: random draw; 0..5: argument holding the trace id
  bool trace_id_bytes16 = false;
  // CUDA probes (see mcp_probe_config): 1-based argument numbers, 0 = none.
  uint8_t cuda_api = 0;
  uint8_t vma_arg = 0;
  uint8_t entry_deref_arg = 0;
  uint8_t ret_deref_arg = 0;
  uint8_t cuda_flags = 0;     // MCP_CUDA_CFG_*
  uint8_t name_arg = 0;       // 1-based: copy this argument's string at return (mcp_probe_config)
  uint8_t string_args = 0;    // USDT: bit N reads argument N as a string (mcp_probe_config)
  uint8_t stack = 0;          // MCP_STACK_*: the stacks a kept event carries (not CUDA probes)
  int8_t args = -1;           // uprobe: the declared argument count (ProbeInfo::nargs); -1: none
  // Only tasks in or below the cgroups scope_cgroups holds for this probe id (written by
  // the control loop's scope table, runtime/scope_table.h); false: any task.
  bool scoped = false;
  bool trace_id_integer = false;  // the trace-id argument is the id itself
  // A uprobe or CUDA launch at a rate below kWindowMaxRate is attached only in sampling
  // windows (loader/sampling_windows.h). The front ends leave it off where every call must
  // be seen: trace-id decisions, timed CUDA launches (slow-launch detection), the rate
  // controller's probes.
  bool windowed = false;
};

// Checks privileges and BTF; throws mcp::Error with one line naming what is missing.
void check_environment();

class BpfSession : public KernelMaps {
 public:
  static std::unique_ptr<BpfSession> open(const SessionOptions& options);
  ~BpfSession() override;
  BpfSession(const BpfSession&) = delete;
  BpfSession& operator=(const BpfSession&) = delete;

  // Attach; return the new probe id. pid restricts a uprobe to one process (-1: all). A USDT
  // target (UprobeTarget::usdt) attaches the USDT program at each of its sites (no latency:
  // a USDT probe has no return); it is a kUprobe-family probe in every other respect.
  uint32_t add_uprobe(const UprobeTarget& target, bool latency, pid_t pid, const ProbeConfig& config);
  // Uprobes on functions of one file (a wildcard's matches, a configuration's probes of one
  // binary), one probe id each (own counters, configuration and name) attached by one
  // uprobe_multi link: one syscall and one descriptor however many functions. Only where
  // can_group() says so. Members are sampled per call at every rate, a later lower one
  // included: windows detach and attach a probe's own links. A member removed before the
  // others keeps nothing from then on; the link closes with the last member, and until then
  // the removed member's id is not reused. All or nothing.
  std::vector<uint32_t> add_uprobe_group(const std::vector<UprobeTarget>& targets, bool latency, pid_t pid,
                                         const std::vector<ProbeConfig>& configs);
  // The kernel has uprobe_multi links (and uprobe sessions, with latency), and the probe
  // would not start in sampling windows.
  bool can_group(const ProbeConfig& config, bool latency) const;
  // Without latency one program runs, at exit; with latency an entry program too.
  uint32_t add_syscall(const std::string& name, const ProbeConfig& config, bool latency = true);
  // CUDA API probe: entry and return programs on target, config.cuda_api set.
  // Latency uprobes and CUDA probes use one uprobe-session link where the kernel
  // has them (see uprobe_sessions()), else an entry uprobe and a uretprobe. A
  // launch with MCP_CUDA_CFG_AT_ENTRY in config.cuda_flags gets one entry uprobe
  // that reports it (no return probe: no ret, no duration).
  uint32_t add_cuda_probe(const UprobeTarget& target, pid_t pid, const ProbeConfig& config, bool internal);
  // Detaches; the id is quarantined (not reused, its name still resolves) until
  // the consumer has read past every record the probe could have written.
  void remove_probe(uint32_t id);
  // Many probes removed together (a reload's commit): while a batch is alive, remove_probe()
  // takes the probe out at once and leaves its links to the batch, which closes them all in
  // parallel when it ends, then sweeps and quarantines the ids. Closing a tracepoint or uprobe
  // link waits for an RCU grace period (tens of ms): one after another, the 300 links of a
  // 150-for-150 reload took 16 s; closed together they share the waits. Not nested.
  class DetachBatch {
   public:
    explicit DetachBatch(BpfSession& session);
    ~DetachBatch();
    DetachBatch(const DetachBatch&) = delete;
    DetachBatch& operator=(const DetachBatch&) = delete;

   private:
    BpfSession& session_;
  };
  // Detaches every probe, keeping their counters and names: call before the
  // final drain so nothing is kept after it. Pending entries (calls whose return
  // never came) are then counted orphaned.
  void detach_all();
  // The file a uprobe or CUDA probe is attached to was replaced (a new inode at its path):
  // attach probe `id`'s programs to `target` too, keeping its id, counters and
  // configuration. Earlier targets stay attached (processes still running the old file
  // keep being traced) until drop_earlier_targets(id). Throws and changes nothing on failure.
  void follow_uprobe(uint32_t id, const UprobeTarget& target);
  // Detaches every target of probe `id` but the newest one.
  void drop_earlier_targets(uint32_t id);

  // A uprobe with no file attached yet: its id, counters and configuration exist, and
  // files come and go with attach_file()/detach_file() (a container-aware probe: one file
  // per distinct binary its containers run). `shown` is the path as the probe names it.
  // usdt: symbol is a USDT probe's "PROVIDER:NAME" (UprobeTarget::usdt).
  uint32_t add_uprobe_without_file(const std::string& shown, const std::string& symbol, bool latency,
                                   const ProbeConfig& config, bool usdt = false);
  // Attaches probe `id`'s programs to one more file; returns the key detach_file() takes.
  // Throws and changes nothing on failure.
  uint64_t attach_file(uint32_t id, const UprobeTarget& target);
  // Detaches the file attach_file() returned `key` for (no-op once the probe is removed).
  void detach_file(uint32_t id, uint64_t key);

  void configure(uint32_t id, const ProbeConfig& config);
  // A windowed probe's threshold is its overall rate p: the kernel gets p / f, the window
  // thread attaches it a fraction f of the time; threshold() answers p.
  void set_threshold(uint32_t id, uint64_t threshold) override;
  uint64_t threshold(uint32_t id) const override;
  void set_windows_allowed(uint32_t id, bool allowed) override;
  // The coverage f a kept event of probe `id` was sampled with (1: always attached): its
  // weight is 1 / (f * the kernel's p / f). Lock-free, for the consumer thread.
  double window_fraction(uint32_t id) const {
    return window_fraction_[id % MCP_MAX_PROBES].load(std::memory_order_relaxed);
  }
  // What probe `id`'s windows did so far (nullopt: never windowed).
  std::optional<WindowStats> window_stats(uint32_t id) const;
  // How probe `id` is counted below kWindowMaxRate (loader/estimate_modes.h): its mode, why,
  // and what its range needs. nullopt: sampled by calls alone (rate >= 0.5, windows off).
  std::optional<EstimateTracker> estimate_tracker(uint32_t id) const;
  // What one breakpoint trap costs here (ns), measured when the first probe that may use
  // windows arrives; 0 before.
  double trap_cost_ns() const { return trap_cost_ns_.load(std::memory_order_relaxed); }
  ProbeCounters counters(uint32_t id) const;
  // Every probe id's counters with one batch lookup (index = probe id).
  std::vector<ProbeCounters> all_counters() const override;
  // Tenant quota bucket (0..63): rate per second for the whole node, split over
  // the CPUs' token buckets by `cpu_shares` (summing to 1; empty: evenly); each
  // CPU's bucket holds up to `burst`. burst == 0 removes the quota.
  void set_quota(uint32_t bucket, double rate_per_sec, uint64_t burst, const std::vector<double>& cpu_shares = {}) override;
  ProbeCounters tenant_counters(uint32_t bucket) const;
  // One entry of scope_cgroups (bpf/maps.bpf.h). put_scope throws mcp::Error (runtime)
  // when the map is full.
  void put_scope(uint32_t probe_id, uint64_t cgroup_id, uint64_t value) override;
  void erase_scope(uint32_t probe_id, uint64_t cgroup_id) override;
  // Per CPU: events of this bucket that were sampled in (kept + quota-dropped),
  // the demand the quota split follows.
  std::vector<uint64_t> tenant_demand_per_cpu(uint32_t bucket) const override;
  void put_trace_prefix(uint32_t probe_id, const TraceIdPrefix& prefix, uint32_t slot, uint64_t threshold) override;
  void erase_trace_prefix(uint32_t probe_id, const TraceIdPrefix& prefix) override;
  void clear_prefix_counters(uint32_t slot) override;
  ProbeCounters prefix_counters(uint32_t slot) const override;
  int ncpus() const override { return ncpus_; }

  // True when latency probes attach as uprobe sessions (BPF_TRACE_UPROBE_SESSION,
  // Linux 6.13+): a call the entry does not keep takes no return trap. False:
  // separate uretprobes, whose program runs on every call. Decided at open():
  // the kernel's BTF must name the attach type (KernelFeatures), and
  // MCP_UPROBE_SESSION=off forces the fallback.
  bool uprobe_sessions() const { return uprobe_sessions_; }
  // Runs of each loaded program (bpf_prog_info.run_cnt), by program name. The
  // kernel counts them only while BPF statistics are enabled (BPF_ENABLE_STATS,
  // or sysctl kernel.bpf_stats_enabled=1); otherwise all zero.
  std::map<std::string, uint64_t> program_runs() const;

  // Attaches the process exit program (orphans of exit_group) and, with
  // target_tgid set, the traced tree: seeds it with target_tgid and, following
  // children, its live descendants, and attaches the fork tracking.
  // tree_alive() turns false once every traced process has exited.
  void track_process_tree();
  bool tree_alive() const;
  // Whether the kernel side traces process `pid` (the target tree, or every process but
  // the agent when there is no target).
  bool traces(pid_t pid) const;

  // CUDA library discovery: while watched (a count: every watch() has its unwatch()), each
  // CUDA runtime or driver library a traced process maps executable is recorded
  // (struct mcp_lib_mapped). take_mapped_libraries() returns those recorded since the last
  // call, without waiting. The watch costs every mmap of a traced process one BPF run.
  // Only where the kernel has bpf_find_vma (watches_mappings()); elsewhere nothing is
  // recorded and the caller scans /proc instead.
  void watch_libraries();
  bool watches_mappings() const { return find_vma_; }
  void unwatch_libraries();
  std::vector<mcp_lib_mapped> take_mapped_libraries();
  // Files holding a CUDA runtime (cuda_runtime_files): a driver launch they make is nested.
  void set_runtime_file(const mcp_file_key& key, uint8_t kind);
  void erase_runtime_file(const mcp_file_key& key);

  std::optional<ProbeInfo> probe(uint32_t id) const;
  // Stable for the life of the probe: events keep a string_view to it.
  std::string_view probe_name(uint32_t id) const;
  // Its argument count, and whether it was declared (ProbeInfo).
  std::pair<uint8_t, bool> probe_nargs(uint32_t id) const;
  std::vector<ProbeInfo> probes() const override;

  int ringbuf_fd() const;
  uint64_t ringbuf_bytes() const { return ringbuf_bytes_; }
  // Bytes produced and not yet consumed (the ring's two position pages, read-only).
  uint64_t ringbuf_pending_bytes() const;
  // Map calls that failed where no caller could be told (loader/map_io.h MapFailures):
  // mcp_bpf_map_failures_total.
  uint64_t map_failures() const { return map_failures_.count(); }

 private:
  // A uprobe_multi link several probes share (add_uprobe_group): closed with the last.
  struct SharedLink {
    UniqueFd fd;
    std::function<void()> after_close;  // what the link held that its close frees (USDT specs)
    explicit SharedLink(UniqueFd f, std::function<void()> after = {})
        : fd(std::move(f)), after_close(std::move(after)) {}
    ~SharedLink();
    SharedLink(const SharedLink&) = delete;
    SharedLink& operator=(const SharedLink&) = delete;
  };
  // One attachment of a probe: a libbpf link, the fd of a link libbpf 1.1 cannot make
  // (uprobe_multi, uprobe sessions, perf events of program copies), or a probe's share of a
  // group's link. Detached when it goes (bpftrace's AttachedProbe): move-only, so a link
  // handed on (to a batch, a reaper) is closed once, by whoever holds it last. A close waits
  // for an RCU grace period: many go together through close_together() or the reapers.
  struct Link {
    Link() = default;
    explicit Link(bpf_link* l) : link(l) {}
    explicit Link(UniqueFd f) : fd(std::move(f)) {}
    explicit Link(std::shared_ptr<const SharedLink> s) : shared(std::move(s)) {}
    // Detaches now.
    void reset() { *this = Link{}; }
    BpfLinkHandle link;
    UniqueFd fd;
    std::shared_ptr<const SharedLink> shared;
  };
  // The programs of a probe: an entry (and return), or one session program.
  struct Programs {
    bpf_program* entry = nullptr;
    bpf_program* ret = nullptr;
    bpf_program* session = nullptr;  // used instead of entry+ret when set
    bool multi = false;              // `session` is an entry-only uprobe_multi program
  };
  // The links of one attached file.
  struct Target {
    uint64_t key = 0;  // attach_file()'s answer
    std::vector<Link> links;
    UprobeTarget target;  // to attach again when a sampling window opens
  };
  // A windowed probe's schedule and bookkeeping (under mu_).
  struct Windows {
    bool allowed = true;      // set_windows_allowed()
    double rate = 1;          // the overall p asked for
    WindowPlan plan;
    std::optional<WindowSchedule> schedule;  // set while plan.fraction < 1
    std::chrono::steady_clock::time_point on_since, started;
    bool detached = false;    // the links are down (between windows)
    WindowStats stats;
    std::optional<EstimateTracker> estimate;  // set once the rate could use windows
    // The open window's baselines: kept events and every CPU's traps at its start.
    uint64_t kept_at_open = 0;
    std::vector<uint64_t> traps_at_open;
    // Sampling calls: kept and seen at the last tick.
    uint64_t tick_kept = 0, tick_seen = 0;
  };
  struct Probe {
    ProbeInfo info;
    std::vector<Target> targets;  // per attached file, oldest first
    Programs progs;               // uprobe/CUDA: to follow a replaced file
    pid_t pid = -1;
    std::optional<Windows> windows;  // ProbeConfig::windowed
  };
  BpfSession() = default;
  uint32_t allocate_id();
  std::vector<Link> attach_uprobes(uint32_t id, const UprobeTarget& target, pid_t pid, const Programs& progs);
  // Picks a free id and readies its counters and configuration for attaching.
  uint32_t reserve_id(const ProbeConfig& config);
  Programs uprobe_programs(bool latency) const;
  Programs usdt_programs() const;
  // links empty: a probe without a file yet (add_uprobe_without_file).
  uint32_t register_probe(ProbeInfo info, std::vector<Link> links, const Programs& progs, pid_t pid = -1,
                          const UprobeTarget& target = {});
  // The probe's threshold (and, given, its window end) into probe_configs, the rest kept.
  void write_threshold(uint32_t id, uint64_t threshold, std::optional<uint64_t> window_end_ns = std::nullopt);
  // A per-CPU counters map's entry, summed; zeros (counted in map_failures_) when unreadable.
  ProbeCounters read_counters(const bpf_map* map, uint32_t key) const;
  // Deletes the pending latency entries of `id` (all ids: 0); counts them orphaned.
  // Only entries made before `before_ktime` (CLOCK_MONOTONIC ns) when given: a sampling
  // window's leftovers, not the next window's calls in flight.
  void sweep_pending(uint32_t id, uint64_t before_ktime = UINT64_MAX);
  // Sampling windows: the plan for `w` at its rate, written to the kernel (under mu_).
  void apply_window_plan(uint32_t id, Windows& w);
  // The kernel keeps calls (at the plan's in-window rate) only while the window is open: not
  // while an attach is still placing breakpoints, nor once a close has started.
  void gate_window(uint32_t id, const Windows& w);
  void enable_windows(uint32_t id, uint64_t threshold);
  // The open window's baselines, taken under mu_ once its breakpoints are in place.
  void mark_window_open(uint32_t id, Windows& w, std::chrono::steady_clock::time_point now);
  // Each CPU's trap count (trap_counts), and the busiest CPU's share of `ns` spent in traps
  // since `before`.
  std::vector<uint64_t> read_traps() const;
  double trap_share(const std::vector<uint64_t>& before, const std::vector<uint64_t>& after, int64_t ns) const;
  // Probes sampling calls to tell whether windows can count them: one tick (under mu_).
  void tick_estimates(int64_t now_ns);
  // The estimate's bookkeeping (under mu_): ticks of a probe sampling calls count from now;
  // one tick of it (true: its mode changed); a window that ended at `end` (covered time too;
  // true: the mode changed); the mode change in the log.
  void restart_ticks(uint32_t id, Windows& w);
  bool account_calls(uint32_t id, Windows& w, int64_t now_ns, double share, bool may_window);
  bool account_window(uint32_t id, Windows& w, std::chrono::steady_clock::time_point end,
                      const std::vector<uint64_t>& traps);
  void log_mode(const Probe& p) const;
  // After the last detach: the counts since the last tick or window join the estimates.
  void finish_estimates();
  // One trap's cost: time calls of a function of this process with and without a breakpoint.
  void measure_trap_cost();
  void window_loop(std::stop_token stop);
  // Opens (attaches every target) or closes (detaches, sweeps its pending entries) probe
  // `id`'s window; holds toggle_mu_.
  void open_window(uint32_t id);
  void close_window(uint32_t id);
  void stop_windows();
  // A closed window's link, destroyed by a reaper thread (closing waits for a grace period).
  struct Reap {
    Link link;
    uint32_t sweep_id = 0;       // a latency probe: sweep its entries older than before_ktime
    uint64_t before_ktime = 0;
  };
  void reap_loop(std::stop_token stop);
  static constexpr std::chrono::milliseconds kEstimateTick{100};  // probes sampling calls: how often judged
  static constexpr size_t kReapers = 4;      // started with the window thread
  static constexpr size_t kMaxReapers = 256;  // more start while every one is busy

  // Removed probes whose links are closed: their pending entries swept, their ids quarantined.
  void retire(const std::vector<uint32_t>& ids);
  // Closes the links on up to kClosers threads at once, and empties `links`.
  static void close_together(std::vector<Link>& links);
  static constexpr size_t kClosers = 32;
  // The open DetachBatch's removed probes (under mu_): their ids and the links left to close.
  bool batching_ = false;
  std::vector<uint32_t> batch_ids_;
  std::vector<Link> batch_links_;

  SkeletonHandle skel_;
  mcp_bpf* skel() const { return skel_.get(); }
  std::shared_ptr<const MapIo> map_io_;
  mutable MapFailures map_failures_;
  uint64_t ringbuf_bytes_ = 0;
  const volatile uint64_t* consumer_pos_ = nullptr;  // mmapped ring positions
  const volatile uint64_t* producer_pos_ = nullptr;
  int ncpus_ = 1;
  uint32_t probe_slots_ = MCP_MAX_PROBES;
  bool uprobe_sessions_ = false;
  bool uprobe_multi_ = false;   // KernelFeatures: multi links for groups and windowed entry probes
  bool attach_cookie_ = true;   // KernelFeatures: else each probe attaches a program copy
  // USDT probes attached by the agent (one uprobe_multi link each, specs written here) where
  // the kernel has multi links and cookies; else by libbpf, a perf uprobe per site.
  bool usdt_multi_ = false;
  std::shared_ptr<UsdtSpecIds> usdt_specs_;
  Link attach_usdt_sites(uint32_t id, const UprobeTarget& target, pid_t pid);
  bool task_pt_regs_ = true;    // KernelFeatures: else syscalls attach entry and exit
  bool find_vma_ = true;        // KernelFeatures: else the CUDA programs' nofv build, no mmap watch
  mutable std::shared_mutex mu_;
  std::map<uint32_t, std::unique_ptr<Probe>> probes_;
  // Removed probes: id -> ring producer position at detach; reusable once consumed past it.
  std::map<uint32_t, uint64_t> quarantine_;
  std::map<uint32_t, std::string> retired_names_;
  // Ids in a group link: not reused while the link lives (its cookies still name them).
  std::map<uint32_t, std::weak_ptr<const SharedLink>> grouped_;
  std::array<uint64_t, MCP_MAX_PROBES> swept_orphans_{};  // counted by sweep_pending
  std::array<bool, MCP_MAX_PROBES> trace_id_probes_{};   // configured with a trace-id argument
  bool decides_on_trace_id(const ProbeInfo& info) const;  // ProbeInfo::trace_id; under mu_
  std::vector<BpfLinkHandle> process_links_;
  // Window toggles exclude every other change of a probe's links (remove, files, detach_all).
  std::mutex toggle_mu_;
  std::condition_variable_any window_cv_;
  std::jthread window_thread_;
  bool windows_stopped_ = false;  // under mu_: detach_all() came, nothing attaches again
  bool windows_enabled_ = true;   // SessionOptions::sampling_windows
  uint64_t window_changes_ = 0;   // under mu_: plans changed (wakes the window thread)
  uint64_t window_seed_ = 0;
  std::array<std::atomic<double>, MCP_MAX_PROBES> window_fraction_{};
  std::atomic<double> trap_cost_ns_{0};
  EstimatePolicy estimate_policy_;
  std::vector<uint64_t> tick_traps_;  // window thread: every CPU's traps at the last tick
  int64_t last_tick_ns_ = 0;
  std::mutex reap_mu_;
  std::condition_variable_any reap_cv_;
  std::deque<Reap> reap_queue_;
  std::vector<std::jthread> reapers_;  // the window thread adds, stop_windows() joins
  std::atomic<size_t> reap_busy_{0};   // reapers inside a close
  BpfLinkHandle lib_watch_link_;  // under lib_mu_
  int lib_watchers_ = 0;
  RingBufferHandle lib_ring_;
  std::vector<mcp_lib_mapped> lib_pending_;
  std::mutex lib_mu_;
  uint64_t next_target_key_ = 1;  // under mu_
  bool follow_children_ = true;
  pid_t target_tgid_ = 0;
  // Interned probe names: never freed, so events may outlive their probe.
  std::set<std::string, std::less<>> names_;
};

}  // namespace mcp::loader
