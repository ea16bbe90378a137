// ContainerProbe: the files and the scope of one container-aware probe (agent.yaml's
// `container:`), whose binary is a path inside containers. The probe is one id of the
// session (its counters, rate control and name "PATH:SYMBOL" whatever the containers run;
// the ProbeSet owns it), scoped in the kernel to a set of cgroups and attached to any
// number of files:
//   matching   every container process (k8s/container_processes.h) for `container: {}`;
//              for a pod or a namespace, those whose pod uid the pod directory names so.
//              Without the pod watch a pod or namespace matches nothing, and status says why.
//   scope      exactly the cgroups of this scan's matching processes (and below them),
//              written through the control loop (the one writer of the kernel's scopes): a
//              container that shares a file with a matching one, but is not itself named,
//              sees nothing.
//   files      PATH resolved through /proc/PID/root of each matching process (once per mount
//              namespace), attached once per distinct file (device, inode), each an RAII
//              loader::FileAttachment. A file is detached once no matching process has it at
//              PATH or maps it (a replaced binary stays traced while its processes run).
// update() runs on every refresh (a /proc scan a second), so a container that starts later
// is picked up within a second of its pod reaching the pod directory. Not thread-safe: the
// ProbeSet calls it under its lock.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "k8s/container_processes.h"
#include "loader/attachment.h"
#include "loader/bpf_session.h"
#include "runtime/control_loop.h"

namespace mcp::k8s {
class PodNames;
}

namespace mcp::runtime {

class ContainerProbe {
 public:
  // `id`: the session's probe (add_uprobe_without_file, configured `scoped`); `control`
  // writes its scope; `name`: the probe as logs call it.
  ContainerProbe(loader::BpfSession& session, ControlLoop& control, uint32_t id, std::string name,
                 config::ProbeSpec spec)
      : session_(session), control_(control), id_(id), name_(std::move(name)), spec_(std::move(spec)) {}

  // Follows one scan of the node's container processes. `pods`: the pod watch (null: none
  // configured). Never throws; every file attached, detached or failed is logged once.
  void update(const std::vector<k8s::ContainerProcess>& processes, const k8s::PodNames* pods);

  size_t files() const { return files_.size(); }
  // Why no file is attached (waiting), or the last file's failure; empty with files attached.
  const std::string& waiting() const { return waiting_; }
  const std::string& failure() const { return failure_; }

 private:
  using FileKey = std::pair<uint64_t, uint64_t>;  // (st_dev, st_ino)
  struct File {
    std::string shown;  // where it was found: "PATH in container ID (pod NS/NAME)"
    loader::FileAttachment attachment;
  };
  struct Found {
    std::string path;   // /proc/PID/root/... as the agent opens it
    std::string where;  // the first container seen with it
  };

  std::vector<const k8s::ContainerProcess*> matching(const std::vector<k8s::ContainerProcess>& processes,
                                                     const k8s::PodNames* pods, std::map<std::string, std::string>& pod_names);
  void set_scope(const std::set<uint64_t>& cgroups);

  loader::BpfSession& session_;
  ControlLoop& control_;
  uint32_t id_;
  std::string name_;
  config::ProbeSpec spec_;
  std::map<FileKey, File> files_;
  std::map<FileKey, std::string> failed_;  // files that cannot be a target, until they go
  std::string waiting_, failure_, scope_error_;
};

}  // namespace mcp::runtime
