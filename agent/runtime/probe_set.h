// ProbeSet: the configured probes (agent.yaml's probes, syscalls and CUDA libraries, for `run`
// and `trace --config`), keyed by the configuration's probe key, so a
// reload attaches, detaches or re-tunes exactly what changed. Also the per-probe
// enrichment (service, tags) the consumer thread reads while a reload rewrites it: each
// slot is an atomically swapped immutable value.
//
// Life of a probe:
//   waiting   its file is absent (a node without that binary or library yet). Logged once,
//             never an error; refresh() attaches it when the file appears.
//   attached  its programs are attached. When the file at its path is replaced (a new
//             inode: a package upgrade, `mv new old`), refresh() attaches to the new file
//             too and counts the switch; the old file stays attached until no process maps it.
//   failed    the file appeared but cannot be a target (not ELF, no such symbol), or
//             attaching failed; logged once, retried when the file changes again.
// A probe with `container:` names a path inside containers (runtime/container_probe.h): it is
// waiting until a matching container has the file, attached while one file or more is, and
// follows the node's containers on every refresh() (a /proc scan), from the first call of
// set_pod_names() on (the front ends call it once the runtime, and so the pod watch, started).
// A CUDA probe on target "*" (config::kCudaDiscover) discovers: it attaches the CUDA runtime
// and driver in the linker cache at once, those the traced processes already map on the
// first poll_libraries(), and from then on each one a traced process maps, from any path
// (pip wheels, conda, the driver's folder), as the kernel reports the mapping. A file is
// attached once, whichever CUDA probe found it first.
// Reloads are transactions (apply()): every new attachment is staged next to the running
// ones; only when all succeeded are the replaced ones detached. Attachments are RAII
// handles, so a failure detaches what the transaction attached and nothing else.
// Thread safety: every method may be called from any thread (one mutex), meta() is lock-free.
#pragma once
#include <array>
#include <atomic>
#include <functional>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "k8s/pod_names.h"
#include "cuda/cuda_attach.h"
#include "cuda/kernel_symbolizer.h"
#include "loader/attachment.h"
#include "loader/bpf_session.h"
#include "loader/proc_maps.h"
#include "loader/target_resolver.h"
#include "mcp_abi.h"
#include "reload/diff.h"
#include "runtime/container_probe.h"
#include "runtime/control_loop.h"
#include "enrich/probe_labels.h"

namespace mcp::runtime {

using enrich::ProbeLabels;
using enrich::ProbeMeta;

enum class ProbeState { kWaiting, kAttached, kFailed };
const char* state_name(ProbeState s);

struct ProbeStatus {
  std::string probe;   // "/usr/bin/x:fn", "syscall:openat", "cuda:libcudart.so"
  ProbeState state = ProbeState::kWaiting;
  std::string detail;  // why it waits or failed
  uint64_t reattaches = 0;
};

class ProbeSet final : public ProbeLabels {
 public:
  // uprobe_pid: uprobes fire in that process only (`trace --no-follow`); -1: in every process.
  ProbeSet(loader::BpfSession& session, ControlLoop& control, cuda::KernelSymbolizer& symbolizer,
           pid_t uprobe_pid = -1)
      : session_(session), control_(control), symbolizer_(symbolizer), uprobe_pid_(uprobe_pid) {}
  ~ProbeSet() override;
  // Called with each file a uprobe or USDT probe attaches to (the stack symbolizer learns its
  // build id, so frames in it are named even after the processes running it exit).
  void on_file_attached(std::function<void(const std::string&)> f) { on_file_ = std::move(f); }

  // The probe changes of one reload (or the first load), all or nothing: on success the
  // added probes are attached or waiting, the removed ones detached, the retuned ones
  // re-tuned. Throws mcp::Error naming the probe when one cannot be attached; then every
  // previous probe is still attached exactly as before.
  void apply(const reload::ConfigDiff& d);
  // Container-aware probes start following containers: now, and on every refresh().
  // `pods`: the pod watch (null: none configured), which must outlive the ProbeSet.
  void set_pod_names(const k8s::PodNames* pods);
  // Applies weighted service strategies: per-version targets for the probes they cover.
  void apply_services(const config::Config& cfg);

  // Periodic (the front ends call it every second): attaches waiting probes whose file
  // appeared, follows replaced files, detaches old files no process maps any more.
  // Never throws; each state change is logged once.
  void refresh();

  // As of the last change the set finished: never waits for a reload or a refresh in progress
  // (/healthz asks; a rejected reload once held it 7-9 s).
  std::vector<ProbeStatus> status() const;

  // The run thread, often (each poll): attaches the CUDA libraries processes mapped since
  // the last call (a "*" CUDA probe). Returns at once when another thread holds the set
  // (a refresh scanning /proc): the mappings wait in the kernel's ring for the next call.
  void poll_libraries();
  // One line per library discovery attached while processes were running: the file, the
  // process that mapped it and how long after the mapping its probes were in place (calls
  // in that gap are not seen). Files attached before any process mapped them are not listed.
  std::vector<std::string> discovered_libraries() const;

  // Consumer thread: enrichment of a probe id (null when unknown).
  std::shared_ptr<const ProbeMeta> meta(uint32_t probe_id) const override {
    return meta_[probe_id % MCP_MAX_PROBES].load(std::memory_order_acquire);
  }
  size_t size() const;

 private:
  // One attached probe id: on destruction the control loop forgets it, its enrichment is
  // cleared and the session detaches it.
  class Handle {
   public:
    Handle(ProbeSet& set, uint32_t id) : set_(&set), attachment_(set.session_, id) {}
    Handle(Handle&& o) noexcept : set_(std::exchange(o.set_, nullptr)), attachment_(std::move(o.attachment_)) {}
    Handle& operator=(Handle&& o) noexcept {
      if (this != &o) {
        release();
        set_ = std::exchange(o.set_, nullptr);
        attachment_ = std::move(o.attachment_);
      }
      return *this;
    }
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() { release(); }
    uint32_t id() const { return attachment_.id(); }

   private:
    void release();
    ProbeSet* set_ = nullptr;
    loader::Attachment attachment_;
  };

  // A CUDA file attached by one entry (kernel dev + inode): no other entry attaches it, staged
  // entries of the same apply() included. Released when the entry goes.
  class CudaClaim {
   public:
    CudaClaim(ProbeSet& set, const mcp_file_key& key) : set_(&set), key_{key.dev, key.ino} { set.claimed_.insert(key_); }
    CudaClaim(CudaClaim&& o) noexcept : set_(std::exchange(o.set_, nullptr)), key_(o.key_) {}
    CudaClaim& operator=(CudaClaim&&) = delete;
    CudaClaim(const CudaClaim&) = delete;
    ~CudaClaim() {
      if (set_) set_->claimed_.erase(key_);
    }

   private:
    ProbeSet* set_;
    std::pair<uint64_t, uint64_t> key_;
  };

  struct Entry {
    config::ProbeSpec spec;
    std::string name;
    ProbeState state = ProbeState::kWaiting;
    std::string detail;
    std::string watch_path;                 // the path whose inode a replacement changes
    loader::FileId file_id;                 // the file attached to now
    std::vector<loader::FileId> earlier;    // replaced files still attached
    std::optional<loader::FileId> failed_file;  // the file that failed (retry when it changes)
    std::vector<Handle> handles;            // every attached id (CUDA: one per API)
    bool grouped = false;                   // attached by a group's link (attach_groups)
    std::vector<uint32_t> tuned;            // the ids under rate control
    uint64_t reattaches = 0;
    uint64_t cache_stamp = 0;               // library names: linker cache seen at the last try
    std::unique_ptr<ContainerProbe> containers;  // `container:` probes: files and scope (after handles:
                                                 // its files go first)
    // CUDA: the files attached (kernel dev + inode), their runtime registrations, and for a
    // discovering probe ("*") the watch and what it found.
    uint64_t selector_cgroup = 0;           // selector_cgroup_id(spec.selector)
    std::vector<CudaClaim> cuda_files;      // each attached once for the whole set
    std::vector<cuda::RuntimeFileMark> runtime_marks;
    struct LibraryWatch {  // BpfSession::watch_libraries() while it lives
      loader::BpfSession& session;
      explicit LibraryWatch(loader::BpfSession& s) : session(s) { session.watch_libraries(); }
      ~LibraryWatch() { session.unwatch_libraries(); }
    };
    std::unique_ptr<LibraryWatch> library_watch;
    bool scan_pending = false;              // processes already running: scanned on the next poll
    std::chrono::steady_clock::time_point scanned_at;  // without a mapping watch: rescanned each second
    std::vector<std::string> discovered;    // discovered_libraries() lines
    std::vector<mcp_file_key> failed_files; // discovered files that cannot be attached (logged once)
  };

  Entry make_entry(const config::ProbeSpec& spec);
  // Records an attached id: its handle, scope, enrichment, and rate control when `tuned`.
  void add_handle(Entry& e, uint32_t id, std::shared_ptr<const ProbeMeta> meta, bool tuned);
  // A CUDA file's probes for entry `e` (nothing when some CUDA probe has it already).
  // Returns false when another probe has it.
  // The CUDA API probes attached in `file`: nullopt when another probe already traces it, 0 when
  // it has no CUDA API function (a file named like a CUDA library that is not one).
  std::optional<size_t> attach_cuda(Entry& e, const std::string& file, const mcp_file_key& key);
  bool cuda_file_attached(const mcp_file_key& key) const;
  // Discovery: the libraries every traced process maps now.
  void scan_cuda_libraries(Entry& e);
  // The CUDA libraries process `pid` maps now; `ktime_ns`: when a mapping was reported (0: unknown).
  void scan_process(Entry& e, pid_t pid, uint64_t ktime_ns);
  // `maps`: the mapping process's /proc/PID/maps, read once by the caller.
  void attach_discovered(Entry& e, const mcp_lib_mapped& rec, const std::vector<loader::Mapping>& maps);
  void tune_id(const Entry& e, uint32_t id);
  // Attaches `e` if its file is there; throws when the file cannot be a target.
  void try_attach(Entry& e);
  // apply(): the added uprobes that share a file (a wildcard's matches) attached by one link
  // each file (BpfSession::add_uprobe_group) into grouped_ids_, whose ids try_attach takes.
  // One that cannot be grouped (its file or symbol missing, windowed, an old kernel) is left to
  // try_attach, which attaches it alone or says why not.
  void attach_groups(const std::vector<config::ProbeSpec>& added);
  void follow(Entry& e, const loader::FileId& now);
  // One /proc scan for every container-aware probe (only `fresh` ones when given).
  void update_containers(const std::vector<Entry*>& fresh = {});
  void tune(const Entry& e);
  void set_state(Entry& e, ProbeState s, std::string detail);
  // Detaches what `e` attached and marks it failed (retried when its file changes).
  void fail(Entry& e, const std::string& why);
  loader::ProbeConfig base_config(const config::ProbeSpec& spec) const;

  loader::BpfSession& session_;
  ControlLoop& control_;
  cuda::KernelSymbolizer& symbolizer_;
  std::function<void(const std::string&)> on_file_;
  const pid_t uprobe_pid_;
  const k8s::PodNames* pods_ = nullptr;
  bool follow_containers_ = false;  // set_pod_names() was called
  // Declared after taking mu_ in each method that changes entries_: copies their states into
  // status_ as the method returns.
  class StatusPublisher {
   public:
    explicit StatusPublisher(ProbeSet& set) : set_(set) {}
    ~StatusPublisher();
   private:
    ProbeSet& set_;
  };

  mutable std::mutex mu_;
  mutable std::mutex status_mu_;  // guards status_ only; never held while taking mu_
  std::vector<ProbeStatus> status_;
  std::set<std::pair<uint64_t, uint64_t>> claimed_;  // CUDA files attached (CudaClaim)
  std::map<std::string, Entry> entries_;  // ProbeSpec::key() -> probe
  std::map<std::string, uint32_t> grouped_ids_;  // attach_groups(): ProbeSpec::key() -> id
  std::array<std::atomic<std::shared_ptr<const ProbeMeta>>, MCP_MAX_PROBES> meta_{};
};

// The cgroup v2 id a selector names (its cgroup path, or the cgroup whose
// directory name contains the container id); 0 for an empty selector or one naming pods
// (ControlLoop::set_selector follows those).
uint64_t selector_cgroup_id(const config::Selector& selector);

}  // namespace mcp::runtime
