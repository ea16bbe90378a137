// Attaching probes: uprobes (one per file, or a group on one uprobe_multi link), USDT
// probes (the agent's own uprobe_multi link and specs, or libbpf's), syscall tracepoints and
// CUDA API probes; each picks the programs the kernel has (KernelFeatures, decided at open()).
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/event.h"
#include "loader/bpf_session.h"
#include "loader/perf_attach.h"
#include "loader/uprobe_multi_link.h"
#include "loader/usdt_notes.h"
#include "loader/usdt_spec.h"
#include "loader/usdt_spec_ids.h"
#include "mcp_abi.h"
#include "mcp_bpf.skel.h"

namespace mcp::loader {
namespace {

void ensure_tracefs() {
  struct stat st;
  if (stat("/sys/kernel/tracing/events", &st) == 0) return;
  if (mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr) != 0 &&
      stat("/sys/kernel/debug/tracing/events", &st) != 0)
    throw runtime_error("tracefs is not mounted at /sys/kernel/tracing and mounting it failed: " +
                        std::string(std::strerror(errno)));
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

}  // namespace

BpfSession::SharedLink::~SharedLink() {
  fd.reset();
  if (after_close) after_close();
}

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
  const int map = bpf_map__fd(skel()->maps.__bpf_usdt_specs);
  for (size_t i = 0; i < specs.size(); i++)
    if (map_io_->update(map, &spec_ids[i], &specs[i], BPF_ANY) != 0) {
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
  UniqueFd fd = attach_uprobe_multi(skel()->progs.mcp_usdt_multi, kBpfTraceUprobeMulti, target.binary, offsets,
                                    cookies, pid, semaphores ? ref_ctrs : std::vector<uint64_t>{});
  if (!fd) {
    const int err = errno;
    give_back();
    throw runtime_error("cannot attach USDT probe " + target.probe_name() + " (" + std::to_string(sites.size()) +
                        " sites, one uprobe_multi link): " + errno_text(err));
  }
  return Link(std::make_shared<const SharedLink>(std::move(fd), std::move(give_back)));
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
    links.emplace_back(link);
    return links;
  }
  if (progs.session) {
    UniqueFd fd = attach_uprobe_multi(progs.session, progs.multi ? kBpfTraceUprobeMulti : kBpfTraceUprobeSession,
                                      target.binary, {target.offset}, {id}, pid);
    if (!fd)
      throw runtime_error("cannot attach uprobe session to " + target.name() + ":" + target.symbol + ": " +
                          errno_text(errno));
    links.emplace_back(std::move(fd));
    return links;
  }
  for (auto [prog, retprobe] : {std::pair{progs.entry, false}, std::pair{progs.ret, true}}) {
    if (!prog) continue;
    if (!attach_cookie_) {
      try {
        links.emplace_back(attach_uprobe_copy(prog, skel()->maps.probe_cookie, id, retprobe, target.binary,
                                              target.offset, pid));
      } catch (const Error& e) {
        throw runtime_error("cannot attach uprobe to " + target.name() + ":" + target.symbol + ": " + e.what());
      }
      continue;
    }
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = id, .retprobe = retprobe);
    bpf_link* link = bpf_program__attach_uprobe_opts(prog, pid > 0 ? pid : -1, target.binary.c_str(),
                                                     target.offset, &opts);
    if (!link)
      throw runtime_error("cannot attach uprobe to " + target.name() + ":" + target.symbol + ": " + errno_text(errno));
    links.emplace_back(link);
  }
  return links;
}

BpfSession::Programs BpfSession::uprobe_programs(bool latency) const {
  Programs progs;
  if (!latency) progs.entry = skel()->progs.mcp_uprobe_entry;
  else if (uprobe_sessions_) progs.session = skel()->progs.mcp_uprobe_session;
  else progs = {skel()->progs.mcp_uprobe_latency_entry, skel()->progs.mcp_uretprobe};
  return progs;
}

BpfSession::Programs BpfSession::usdt_programs() const { return {skel()->progs.mcp_usdt}; }

uint32_t BpfSession::add_uprobe(const UprobeTarget& target, bool latency, pid_t pid, const ProbeConfig& config) {
  if (target.usdt && latency) throw usage_error("USDT probe " + target.probe_name() + ": a USDT probe has no return");
  const uint32_t id = reserve_id(config);
  Programs progs = target.usdt ? usdt_programs() : uprobe_programs(latency);
  if (!target.usdt && config.windowed && windows_enabled_ && uprobe_multi_ && !latency)
    progs = {nullptr, nullptr, skel()->progs.mcp_uprobe_multi, true};
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
  const Programs progs = latency ? Programs{nullptr, nullptr, skel()->progs.mcp_uprobe_session, false}
                                 : Programs{nullptr, nullptr, skel()->progs.mcp_uprobe_multi, true};
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
  UniqueFd fd = attach_uprobe_multi(progs.session, progs.multi ? kBpfTraceUprobeMulti : kBpfTraceUprobeSession,
                                    targets[0].binary, offsets, cookies, pid);
  if (!fd) {
    const int err = errno;
    undo();
    throw runtime_error("cannot attach " + std::to_string(targets.size()) + " uprobes to " + targets[0].name() +
                        " (one uprobe_multi link): " + errno_text(err));
  }
  const auto shared = std::make_shared<const SharedLink>(std::move(fd));
  std::unique_lock lock(mu_);
  for (size_t i = 0; i < ids.size(); i++) {
    std::vector<Link> links;
    links.emplace_back(shared);
    probes_.at(ids[i])->targets.push_back({next_target_key_++, std::move(links), targets[i]});
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
    progs = {nullptr, nullptr, skel()->progs.mcp_cuda_launch_multi, true};  // windowed: cheap to attach
  else if (at_entry) progs.entry = find_vma_ ? skel()->progs.mcp_cuda_launch : skel()->progs.mcp_cuda_launch_nofv;
  else if (uprobe_sessions_ && find_vma_) progs.session = skel()->progs.mcp_cuda_session;
  else if (find_vma_) progs = {skel()->progs.mcp_cuda_entry, skel()->progs.mcp_cuda_return};
  else progs = {skel()->progs.mcp_cuda_entry_nofv, skel()->progs.mcp_cuda_return_nofv};
  auto links = attach_uprobes(id, target, pid, progs);
  ProbeInfo info{id, target.name() + ":" + target.symbol, ProbeFamily::kCuda, !at_entry};
  info.internal = internal;
  info.symbol = target.symbol;
  register_probe(std::move(info), std::move(links), progs, pid, target);
  if (config.windowed && !internal) enable_windows(id, config.threshold);
  return id;
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
    progs = {{skel()->progs.mcp_sys_enter, "sys_enter_"}, {skel()->progs.mcp_sys_exit, "sys_exit_"}};
  else progs = {{skel()->progs.mcp_sys_exit_only, "sys_exit_"}};
  for (auto [prog, tp] : progs) {
    if (!attach_cookie_) {
      links.emplace_back(attach_tracepoint_copy(prog, skel()->maps.probe_cookie, id, "syscalls", tp + name));
      continue;
    }
    LIBBPF_OPTS(bpf_tracepoint_opts, opts, .bpf_cookie = id);
    bpf_link* link = bpf_program__attach_tracepoint_opts(prog, "syscalls", (tp + name).c_str(), &opts);
    if (!link)
      throw runtime_error("cannot attach tracepoint syscalls:" + std::string(tp) + name + ": " + errno_text(errno));
    links.emplace_back(link);
  }
  ProbeInfo info{id, "syscall:" + name, ProbeFamily::kSyscall, latency, syscall_arity(dir + "/format")};
  return register_probe(std::move(info), std::move(links), Programs{});
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
  if (it == probes_.end())  // removed meanwhile (add/remove run on one thread: never); `links` detach
    throw runtime_error("probe " + std::to_string(id) + " was removed");
  const uint64_t key = next_target_key_++;
  it->second->targets.push_back({key, std::move(links), target});
  return key;
}

}  // namespace mcp::loader
