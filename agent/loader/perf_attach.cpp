#include "loader/perf_attach.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "common/error.h"
#include "loader/map_io.h"

namespace mcp::loader {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// The copy of `prog` with its own cookie map; its descriptor.
UniqueFd load_copy(const bpf_program* prog, const bpf_map* cookie_slot, uint64_t cookie) {
  const int slot_fd = bpf_map__fd(cookie_slot);
  UniqueFd map(bpf_map_create(BPF_MAP_TYPE_ARRAY, "mcp_cookie", sizeof(uint32_t), sizeof(uint64_t), 1, nullptr));
  if (!map) throw runtime_error("cannot create a probe's cookie map: " + errno_text(errno));
  const uint32_t zero = 0;
  if (bpf_map_update_elem(map.get(), &zero, &cookie, BPF_ANY) != 0)
    throw runtime_error("cannot write a probe's cookie: " + errno_text(errno));
  const bpf_insn* loaded = bpf_program__insns(prog);
  std::vector<bpf_insn> insns(loaded, loaded + bpf_program__insn_cnt(prog));
  size_t patched = 0;
  for (size_t i = 0; i + 1 < insns.size(); i++) {
    bpf_insn& in = insns[i];
    if (in.code != (BPF_LD | BPF_IMM | BPF_DW)) continue;
    if (in.src_reg == BPF_PSEUDO_MAP_FD && in.imm == slot_fd) {
      in.imm = map.get();
      patched++;
    }
    i++;  // the second half of the 16-byte load
  }
  if (patched == 0) throw runtime_error(std::string("program ") + bpf_program__name(prog) + " reads no probe cookie");
  std::string log(1 << 20, '\0');
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = bpf_program__expected_attach_type(prog),
              .log_level = 0, .log_size = static_cast<uint32_t>(log.size()), .log_buf = log.data());
  UniqueFd fd(bpf_prog_load(bpf_program__type(prog), bpf_program__name(prog), "Dual BSD/GPL", insns.data(),
                      insns.size(), &opts));
  if (!fd) {
    spdlog::debug("verifier log of {}'s copy:\n{}", bpf_program__name(prog), log.c_str());
    throw runtime_error(std::string("cannot load a copy of ") + bpf_program__name(prog) + ": " + errno_text(errno));
  }
  return fd;
}

// Opens the perf event, gives it the program, enables it; the event's descriptor.
UniqueFd attach_event(perf_event_attr& attr, pid_t pid, const UniqueFd& prog, const std::string& what) {
  attr.size = sizeof(attr);
  // A uprobe or tracepoint event with no pid fires on every CPU whatever cpu it names.
  UniqueFd event(static_cast<int>(syscall(__NR_perf_event_open, &attr, pid > 0 ? pid : -1, pid > 0 ? -1 : 0, -1,
                                    PERF_FLAG_FD_CLOEXEC)));
  if (!event) throw runtime_error("cannot open a perf event for " + what + ": " + errno_text(errno));
  if (ioctl(event.get(), PERF_EVENT_IOC_SET_BPF, prog.get()) != 0 || ioctl(event.get(), PERF_EVENT_IOC_ENABLE, 0) != 0)
    throw runtime_error("cannot attach a program to " + what + ": " + errno_text(errno));
  return event;
}

}  // namespace

UniqueFd attach_uprobe_copy(const bpf_program* prog, const bpf_map* cookie_slot, uint64_t cookie, bool retprobe,
                       const std::string& path, uint64_t offset, pid_t pid) {
  const std::string pmu_dir = "/sys/bus/event_source/devices/uprobe/";
  const std::string type = read_line(pmu_dir + "type");
  if (type.empty()) throw runtime_error("this kernel has no uprobe PMU (" + pmu_dir + "type)");
  perf_event_attr attr{};
  attr.type = static_cast<uint32_t>(std::stoul(type));
  if (retprobe) {
    // "config:0": the bit that makes it a return probe
    const std::string format = read_line(pmu_dir + "format/retprobe");
    const auto colon = format.find(':');
    attr.config = uint64_t{1} << (colon == std::string::npos ? 0 : std::stoul(format.substr(colon + 1)));
  }
  attr.config1 = reinterpret_cast<uint64_t>(path.c_str());
  attr.config2 = offset;
  UniqueFd copy = load_copy(prog, cookie_slot, cookie);
  return attach_event(attr, pid, copy, (retprobe ? "uretprobe " : "uprobe ") + path);
}

UniqueFd attach_tracepoint_copy(const bpf_program* prog, const bpf_map* cookie_slot, uint64_t cookie,
                           const std::string& category, const std::string& name) {
  std::string id;
  for (const char* root : {"/sys/kernel/tracing/events/", "/sys/kernel/debug/tracing/events/"})
    if (id = read_line(root + category + "/" + name + "/id"); !id.empty()) break;
  if (id.empty()) throw runtime_error("no tracepoint " + category + ":" + name);
  perf_event_attr attr{};
  attr.type = PERF_TYPE_TRACEPOINT;
  attr.config = std::stoull(id);
  UniqueFd copy = load_copy(prog, cookie_slot, cookie);
  return attach_event(attr, -1, copy, "tracepoint " + category + ":" + name);
}

}  // namespace mcp::loader
