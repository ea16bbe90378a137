// Sampling windows (loader/sampling_windows.h): a windowed probe below kWindowMaxRate is
// attached only a fraction of the time. The window thread opens and closes windows on their
// schedule and ticks the estimates of probes still sampling calls (loader/estimate_modes.h);
// reaper threads close the windows' links, whose close waits for an RCU grace period.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <string>
#include <vector>

#include "clock/clock_source.h"
#include "common/error.h"
#include "common/event.h"
#include "loader/bpf_session.h"
#include "loader/proc_maps.h"
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

}  // namespace

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
  // Mostly on the window thread, in the middle of a toggle: a failure is counted, not thrown.
  // The kernel then keeps the last gate: calls kept past a window's end (or none in it).
  try {
    write_threshold(id, w.detached && w.schedule ? 0 : probability_to_threshold(w.plan.inner),
                    in_window ? static_cast<uint64_t>(w.schedule->close_at()) : 0);
  } catch (const Error& e) {
    map_failures_.report("probe_configs", std::string(e.what()) + " (gating its sampling window)", 0);
  }
}

void BpfSession::restart_ticks(uint32_t id, Windows& w) {
  const auto c = read_counters(skel()->maps.counters, id);
  w.tick_kept = c.kept;
  w.tick_seen = c.seen;
}

bool BpfSession::account_calls(uint32_t id, Windows& w, int64_t now_ns, double share, bool may_window) {
  const auto c = read_counters(skel()->maps.counters, id);
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
  const uint64_t kept = read_counters(skel()->maps.counters, id).kept;
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
  if (map_io_->lookup(bpf_map__fd(skel()->maps.trap_counts), &zero, out.data()))
    map_failures_.report("trap_counts", "cannot read the traps per CPU", errno);
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
    const Programs progs = uprobe_multi_ ? Programs{nullptr, nullptr, skel()->progs.mcp_uprobe_multi, true}
                                         : uprobe_programs(false);
    const double bare = per_call();
    auto links = attach_uprobes(0, target, getpid(), progs);  // probe 0: keeps nothing
    std::vector<double> runs;
    for (int i = 0; i < 5; i++) runs.push_back(per_call());
    links.clear();  // detaches
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
  w.kept_at_open = read_counters(skel()->maps.counters, id).kept;
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
    else links.clear();  // removed, or windows stopped: detaches
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
      links.insert(links.end(), std::make_move_iterator(t.links.begin()), std::make_move_iterator(t.links.end()));
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
    for (auto& l : links) reap_queue_.push_back({std::move(l), latency ? id : 0, closed_ktime});
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
      r = std::move(reap_queue_.front());
      reap_queue_.pop_front();
      reap_busy_++;
    }
    r.link.reset();
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
    r.link.reset();
    if (r.sweep_id) sweep_pending(r.sweep_id, r.before_ktime);
  }
}

}  // namespace mcp::loader
