#include "loader/target_resolver.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/setting_names.h"
#include "loader/elf_symbols.h"
#include "loader/usdt_notes.h"
#include "loader/proc_maps.h"

namespace mcp::loader {
namespace {

std::string base_name(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? std::string(buf) : path;
}

std::string run_ldconfig() {
  for (const char* cmd : {"/sbin/ldconfig -p 2>/dev/null", "ldconfig -p 2>/dev/null"}) {
    std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd, "r"), pclose);
    if (!p) continue;
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p.get())) > 0) out.append(buf.data(), n);
    if (!out.empty()) return out;
  }
  return {};
}

std::string proc_root(pid_t pid) { return "/proc/" + std::to_string(pid) + "/root"; }

bool same_file(const std::string& a, const std::string& b) {
  struct stat x, y;
  if (stat(a.c_str(), &x) != 0 || stat(b.c_str(), &y) != 0) return true;  // cannot tell: as before
  return x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

// Whether pid sees the agent's file tree: same mount namespace (a copy of it shares the root
// inode but not the mounts) and same root directory (no chroot).
bool same_root(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  return same_file("/proc/self/ns/mnt", proc + "/ns/mnt") && same_file("/", proc + "/root");
}

// Resolves `path` component by component under `root`, following symlinks as the process would
// (absolute targets restart at its root, not the agent's). Empty when it does not exist.
std::string resolve_in_root(const std::string& root, const std::string& path) {
  std::vector<std::string> todo;  // components left, last first
  auto push_path = [&todo](const std::string& p) {
    std::vector<std::string> parts;
    std::istringstream in(p);
    std::string c;
    while (std::getline(in, c, '/'))
      if (!c.empty() && c != ".") parts.push_back(c);
    todo.insert(todo.end(), parts.rbegin(), parts.rend());
  };
  push_path(path);
  std::vector<std::string> done;
  for (int links = 0; !todo.empty();) {
    const std::string c = todo.back();
    todo.pop_back();
    if (c == "..") {
      if (!done.empty()) done.pop_back();
      continue;
    }
    std::string here = root;
    for (const auto& d : done) here += "/" + d;
    here += "/" + c;
    struct stat st;
    if (lstat(here.c_str(), &st) != 0) return {};
    if (!S_ISLNK(st.st_mode)) {
      done.push_back(c);
      continue;
    }
    if (++links > 40) return {};  // ELOOP
    char buf[PATH_MAX];
    const ssize_t n = readlink(here.c_str(), buf, sizeof buf - 1);
    if (n <= 0) return {};
    const std::string target(buf, static_cast<size_t>(n));
    if (target[0] == '/') done.clear();
    push_path(target);
  }
  std::string out = root;
  for (const auto& d : done) out += "/" + d;
  return out;
}

}  // namespace

std::string path_in_root_of(pid_t pid, const std::string& path) {
  if (pid <= 0 || same_root(pid)) return is_regular_file(path) ? real_path(path) : std::string();
  const std::string p = resolve_in_root(proc_root(pid), path);
  return !p.empty() && is_regular_file(p) ? p : std::string();
}

std::string mapping_warning(pid_t pid, const std::string& file, const std::string& shown) {
  struct stat st;
  if (pid <= 0 || stat(file.c_str(), &st) != 0) return {};
  const auto maps = read_proc_maps(pid);
  if (maps.empty()) return {};  // gone or unreadable: nothing to compare
  for (const auto& m : maps) {
    // Overlay file systems report the lower file's device in maps: then the path decides.
    if (m.inode == st.st_ino && (m.dev == st.st_dev || m.path == shown)) return {};
  }
  return "pid " + std::to_string(pid) + " maps no file with the device and inode of " + shown +
         " as the agent opens it (" + file + "): the probe may never fire in that process";
}

std::pair<std::string, std::string> split_uprobe_spec(const std::string& spec) {
  // Scan from the right for a ':' that is not part of "::".
  for (size_t i = spec.size(); i-- > 0;) {
    if (spec[i] != ':') continue;
    const bool double_colon = (i > 0 && spec[i - 1] == ':') || (i + 1 < spec.size() && spec[i + 1] == ':');
    if (double_colon) {
      if (i > 0 && spec[i - 1] == ':') --i;
      continue;
    }
    std::string binary = spec.substr(0, i), symbol = spec.substr(i + 1);
    if (binary.empty() || symbol.empty()) break;
    return {binary, symbol};
  }
  throw usage_error("bad " + setting_name(Setting::kUprobe) + " '" + spec + "' (expected BINARY:SYMBOL)");
}

bool library_name_matches(const std::string& file_name, const std::string& name) {
  if (file_name == name) return true;
  if (file_name.rfind(name, 0) != 0) return false;
  const std::string rest = file_name.substr(name.size());
  // "libc" + ".so.6" / ".so" / "-2.36.so"; "libc.so" + ".6"
  return rest.rfind(".so", 0) == 0 || (rest.size() > 1 && rest[0] == '-' && rest.find(".so") != std::string::npos) ||
         (name.find(".so") != std::string::npos && rest[0] == '.');
}

std::vector<std::pair<std::string, std::string>> parse_ldconfig(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // "\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6"
    auto arrow = line.find(" => ");
    if (arrow == std::string::npos) continue;
    auto first = line.find_first_not_of(" \t");
    auto space = line.find(' ', first);
    if (first == std::string::npos || space == std::string::npos) continue;
    out.emplace_back(line.substr(first, space - first), line.substr(arrow + 4));
  }
  return out;
}

std::string resolve_binary(const std::string& binary, pid_t pid) {
  if (auto found = find_binary(binary, pid)) return *found;
  if (binary.find('/') != std::string::npos)
    throw runtime_error("binary not found: " + binary +
                        (pid > 0 && binary[0] == '/' ? " (in the root of pid " + std::to_string(pid) + ")" : ""));
  throw runtime_error("binary not found: " + binary +
                      (pid > 0 ? " (not mapped by pid " + std::to_string(pid) + ", not in the linker cache or PATH)"
                               : " (not in the linker cache or PATH)"));
}

std::optional<FileId> file_id(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                static_cast<uint64_t>(st.st_size) * 1000000007u ^ static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000u ^
                    static_cast<uint64_t>(st.st_mtim.tv_nsec)};
}

std::vector<std::optional<UprobeTarget>> uprobe_targets_in(const std::string& file,
                                                           const std::vector<std::string>& symbols) {
  const auto elf = ElfSymbols::load(file);
  std::vector<std::optional<UprobeTarget>> out;
  for (const auto& symbol : symbols) {
    const auto offset = elf.file_offset_of(symbol);
    std::optional<UprobeTarget> t;
    if (offset) {
      t = UprobeTarget{file, symbol, *offset};
      t->ifunc = elf.is_ifunc(symbol);
    }
    out.push_back(std::move(t));
  }
  return out;
}

UprobeTarget uprobe_target_in(const std::string& file, const std::string& symbol) {
  auto t = std::move(uprobe_targets_in(file, {symbol}).front());
  if (!t) throw runtime_error("symbol " + symbol + " not found in " + file);
  return *t;
}

std::pair<std::string, std::string> split_usdt_spec(const std::string& spec) {
  const auto last = spec.rfind(':');
  const auto mid = last == std::string::npos || last == 0 ? std::string::npos : spec.rfind(':', last - 1);
  if (mid == std::string::npos || mid == 0)
    throw usage_error("USDT probe must be BINARY:PROVIDER:NAME, got '" + spec + "'");
  const std::string provider_and_name = spec.substr(mid + 1);
  split_usdt_name(provider_and_name);  // both parts non-empty
  return {spec.substr(0, mid), provider_and_name};
}

UprobeTarget usdt_target_in(const std::string& file, const std::string& provider_and_name) {
  const auto [provider, name] = split_usdt_name(provider_and_name);
  const auto probes = read_usdt_probes(file);
  if (std::none_of(probes.begin(), probes.end(),
                   [&](const UsdtProbe& p) { return p.provider == provider && p.name == name; }))
    throw runtime_error("USDT probe " + provider_and_name + " not found in " + file +
                        " (mcp-agent trace --list-usdt " + file + " lists its probes)");
  UprobeTarget t;
  t.binary = file;
  t.symbol = provider_and_name;
  t.usdt = true;
  return t;
}

UprobeTarget probe_target_in(const std::string& file, const std::string& symbol, bool usdt) {
  return usdt ? usdt_target_in(file, symbol) : uprobe_target_in(file, symbol);
}

bool is_symbol_pattern(const std::string& symbol) { return symbol.find_first_of("*?[") != std::string::npos; }

std::vector<UprobeTarget> resolve_uprobe_pattern(const std::string& binary, const std::string& pattern, pid_t pid) {
  const std::string file = resolve_binary(binary, pid);
  const auto symbols = ElfSymbols::load(file);
  std::vector<UprobeTarget> out;
  std::set<uint64_t> offsets;
  for (const auto& name : symbols.functions_matching(pattern)) {
    const auto offset = symbols.file_offset_of(name);
    if (!offset) continue;  // not in an executable segment
    // Aliases (strtoll and strtoq, one function under two names) are one address: probed
    // once, under the first name, so a call is one event and the estimates add up.
    if (!offsets.insert(*offset).second) continue;
    UprobeTarget t{file, name, *offset};
    t.ifunc = symbols.is_ifunc(name);
    if (pid > 0) t.shown = path_under_proc_root(file);
    out.push_back(std::move(t));
  }
  if (out.empty()) throw runtime_error("no function of " + file + " matches " + pattern);
  return out;
}

UprobeTarget resolve_usdt(const std::string& spec, pid_t pid) {
  const auto [binary, provider_and_name] = split_usdt_spec(spec);
  UprobeTarget t = usdt_target_in(resolve_binary(binary, pid), provider_and_name);
  if (pid > 0) t.shown = path_under_proc_root(t.binary);
  return t;
}

std::string path_under_proc_root(const std::string& path) {
  if (path.rfind("/proc/", 0) != 0) return "";
  size_t i = 6;
  while (i < path.size() && std::isdigit(static_cast<unsigned char>(path[i]))) i++;
  if (i == 6 || path.compare(i, 6, "/root/") != 0) return "";
  return path.substr(i + 5);
}

std::optional<std::string> find_binary(const std::string& binary, pid_t pid) {
  // Already a file in a process's root: resolving it again (realpath) would leave that root.
  if (!path_under_proc_root(binary).empty()) return is_regular_file(binary) ? std::optional(binary) : std::nullopt;
  if (binary.find('/') != std::string::npos) {
    // A relative path names a file in the agent's working directory, not the target's.
    const bool in_target = pid > 0 && binary[0] == '/';
    const std::string file = in_target ? path_in_root_of(pid, binary) : is_regular_file(binary) ? real_path(binary) : "";
    if (file.empty()) return std::nullopt;
    return file;
  }
  if (pid > 0) {
    for (const auto& m : read_proc_maps(pid))
      if (library_name_matches(base_name(m.path), binary)) {
        const std::string file = path_in_root_of(pid, m.path);  // maps name files in its namespace
        if (!file.empty()) return file;
      }
  }
  for (const auto& [soname, path] : parse_ldconfig(run_ldconfig()))
    if (library_name_matches(soname, binary) && is_regular_file(path)) return real_path(path);
  if (const char* env = std::getenv("PATH")) {
    std::istringstream in(env);
    std::string dir;
    while (std::getline(in, dir, ':')) {
      const std::string candidate = dir + "/" + binary;
      if (is_regular_file(candidate) && access(candidate.c_str(), X_OK) == 0) return real_path(candidate);
    }
  }
  return std::nullopt;
}

UprobeTarget resolve_uprobe(const std::string& spec, pid_t pid) {
  auto [binary, symbol] = split_uprobe_spec(spec);
  UprobeTarget t = uprobe_target_in(resolve_binary(binary, pid), symbol);
  if (pid > 0) t.shown = path_under_proc_root(t.binary);
  return t;
}

}  // namespace mcp::loader
