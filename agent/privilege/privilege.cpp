#include "privilege/privilege.h"

#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/error.h"

namespace mcp::privilege {

namespace {

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

struct CapFree {
  void operator()(void* p) const { cap_free(p); }
};
using CapPtr = std::unique_ptr<std::remove_pointer_t<cap_t>, CapFree>;

CapPtr current_caps() {
  CapPtr caps(cap_get_proc());
  if (!caps) throw runtime_error(errno_text("cap_get_proc"));
  return caps;
}

int max_cap() { return static_cast<int>(cap_max_bits()); }

std::vector<Capability> caps_with_flag(cap_flag_t flag) {
  auto caps = current_caps();
  std::vector<Capability> out;
  for (int c = 0; c < max_cap(); ++c) {
    cap_flag_value_t v = CAP_CLEAR;
    if (cap_get_flag(caps.get(), c, flag, &v) == 0 && v == CAP_SET) out.push_back(c);
  }
  return out;
}

bool contains(const std::vector<Capability>& v, Capability c) {
  return std::find(v.begin(), v.end(), c) != v.end();
}

size_t thread_count() {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

void set_proc(const std::vector<Capability>& effective, const std::vector<Capability>& permitted,
              const char* step) {
  CapPtr caps(cap_init());  // every flag clear, inheritable included
  if (!caps) throw runtime_error(errno_text("cap_init"));
  if (!permitted.empty() &&
      cap_set_flag(caps.get(), CAP_PERMITTED, static_cast<int>(permitted.size()),
                   permitted.data(), CAP_SET) != 0) {
    throw runtime_error(errno_text(std::string("cap_set_flag permitted (") + step + ")"));
  }
  if (!effective.empty() &&
      cap_set_flag(caps.get(), CAP_EFFECTIVE, static_cast<int>(effective.size()),
                   effective.data(), CAP_SET) != 0) {
    throw runtime_error(errno_text(std::string("cap_set_flag effective (") + step + ")"));
  }
  if (cap_set_proc(caps.get()) != 0) {
    throw runtime_error(errno_text(std::string("cap_set_proc (") + step + ")"));
  }
}

}  // namespace

KernelVersion parse_kernel_release(const std::string& release) {
  KernelVersion k;
  char dot = 0;
  if (std::sscanf(release.c_str(), "%d%c%d", &k.major, &dot, &k.minor) != 3 || dot != '.' ||
      k.major < 0 || k.minor < 0) {
    throw runtime_error("cannot parse kernel release '" + release + "'");
  }
  return k;
}

KernelVersion running_kernel() {
  utsname u{};
  if (uname(&u) != 0) throw runtime_error(errno_text("uname"));
  return parse_kernel_release(u.release);
}

std::vector<Capability> runtime_capabilities(KernelVersion k) {
  auto at_least = [&](int major, int minor) {
    return k.major > major || (k.major == major && k.minor >= minor);
  };
  // CAP_SYS_ADMIN on every kernel: the daemon attaches uprobes after the drop (reloads,
  // probes whose file appears later, replaced files), and perf_event_open(2) of the uprobe
  // PMU answers EACCES to CAP_PERFMON alone (verified on 6.18; see CAPABILITIES.md).
  std::vector<Capability> caps{CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_SYS_ADMIN};
  if (at_least(5, 8)) {
    caps.push_back(CAP_BPF);
    caps.push_back(CAP_PERFMON);
  }
  if (!at_least(5, 11)) caps.push_back(CAP_SYS_RESOURCE);
  std::sort(caps.begin(), caps.end());
  return caps;
}

DropResult drop_to(const std::vector<Capability>& keep) {
  if (size_t n = thread_count(); n != 1) {
    throw runtime_error("cannot drop privileges with " + std::to_string(n) +
                        " threads running: capabilities are per thread, so drop before "
                        "starting other threads");
  }
  DropResult result;
  const auto permitted = permitted_capabilities();
  for (Capability c : keep) {
    if (contains(result.kept, c) || contains(result.missing, c)) continue;
    if (c >= 0 && c < max_cap() && contains(permitted, c)) {
      result.kept.push_back(c);
    } else {
      result.missing.push_back(c);
    }
  }
  std::sort(result.kept.begin(), result.kept.end());

  // The bounding set caps what any later execve could grant (for uid 0 it is the whole
  // permitted set after exec); shrinking it needs CAP_SETPCAP in the effective set, so
  // raise that first and drop it last.
  if (contains(permitted, CAP_SETPCAP)) {
    auto effective = permitted;
    set_proc(effective, permitted, "raise CAP_SETPCAP");
    for (int c = 0; c < max_cap(); ++c) {
      if (contains(result.kept, c) || cap_get_bound(c) != 1) continue;
      if (cap_drop_bound(c) != 0) {
        throw runtime_error(errno_text("cap_drop_bound(" + capability_name(c) + ")"));
      }
    }
    result.bounding_set_reduced = true;
  } else {
    result.bounding_set_reduced = true;
    for (int c = 0; c < max_cap(); ++c) {
      if (!contains(result.kept, c) && cap_get_bound(c) == 1) result.bounding_set_reduced = false;
    }
  }

  // Ambient capabilities survive execve of unprivileged binaries; clear them all. EINVAL
  // means the kernel predates ambient capabilities (< 4.3), so there is nothing to clear.
  if (cap_reset_ambient() != 0 && errno != EINVAL) {
    throw runtime_error(errno_text("cap_reset_ambient"));
  }
  set_proc(result.kept, result.kept, "drop");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    throw runtime_error(errno_text("prctl(PR_SET_NO_NEW_PRIVS)"));
  }
  if (effective_capabilities() != result.kept || permitted_capabilities() != result.kept) {
    throw runtime_error("capability drop did not take effect: effective is " +
                        capability_list(effective_capabilities()));
  }
  return result;
}

std::vector<Capability> effective_capabilities() { return caps_with_flag(CAP_EFFECTIVE); }
std::vector<Capability> permitted_capabilities() { return caps_with_flag(CAP_PERMITTED); }
std::vector<Capability> inheritable_capabilities() { return caps_with_flag(CAP_INHERITABLE); }

std::vector<Capability> ambient_capabilities() {
  std::vector<Capability> out;
  for (int c = 0; c < max_cap(); ++c) {
    if (cap_get_ambient(c) == 1) out.push_back(c);
  }
  return out;
}

std::vector<Capability> bounding_capabilities() {
  std::vector<Capability> out;
  for (int c = 0; c < max_cap(); ++c) {
    if (cap_get_bound(c) == 1) out.push_back(c);
  }
  return out;
}

bool no_new_privs() { return prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1; }

std::string capability_name(Capability cap) {
  char* name = cap_to_name(cap);
  if (!name) return "cap_" + std::to_string(cap);
  std::string out(name);
  cap_free(name);
  return out;
}

std::string capability_list(const std::vector<Capability>& caps) {
  std::string out;
  for (Capability c : caps) {
    if (!out.empty()) out += ',';
    out += capability_name(c);
  }
  return out.empty() ? "(none)" : out;
}

}  // namespace mcp::privilege
