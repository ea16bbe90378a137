// Target resolution against real files: the test binary itself, /bin/true, the
// real libc found through the linker cache and through this process's maps.
#include <gtest/gtest.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>

#include "common/error.h"
#include "loader/elf_symbols.h"
#include "loader/proc_maps.h"
#include "loader/target_resolver.h"

extern "C" __attribute__((noinline, used)) int mcp_test_symbol(int x) {
  asm volatile("" ::: "memory");  // keep a real body the compiler cannot fold away
  return x * 3 + 1;
}

namespace mcp_test_ns {
__attribute__((noinline, used)) int mangled_target(int a, double b) {
  asm volatile("" ::: "memory");
  return a + static_cast<int>(b);
}
}  // namespace mcp_test_ns

namespace mcp::loader {
namespace {

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  EXPECT_GT(n, 0);
  return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

// File offset of a code address of this process, computed from /proc/self/maps
// independently of ElfSymbols: what the kernel's uprobe offset must equal.
struct RuntimeLocation {
  std::string path;
  uint64_t file_offset = 0;
};
RuntimeLocation locate(const void* addr) {
  const auto a = reinterpret_cast<uint64_t>(addr);
  for (const auto& m : read_proc_maps(getpid()))
    if (a >= m.start && a < m.end) {
      EXPECT_TRUE(m.executable) << m.path;
      return {m.path, a - m.start + m.offset};
    }
  ADD_FAILURE() << "address not in any file mapping";
  return {};
}

// ---------------------------------------------------------------- ElfSymbols

TEST(ElfSymbols, FindsTestFunctionAtItsRuntimeFileOffset) {
  const auto syms = ElfSymbols::load(self_exe());
  const auto offset = syms.file_offset_of("mcp_test_symbol");
  ASSERT_TRUE(offset.has_value());
  const auto where = locate(reinterpret_cast<const void*>(&mcp_test_symbol));
  EXPECT_EQ(where.path, self_exe());
  EXPECT_EQ(*offset, where.file_offset);
  EXPECT_EQ(mcp_test_symbol(2), 7);
}

TEST(ElfSymbols, FileOffsetAndSymbolAtRoundTrip) {
  const auto syms = ElfSymbols::load(self_exe());
  EXPECT_TRUE(syms.is_pie());  // CMAKE_POSITION_INDEPENDENT_CODE
  EXPECT_GT(syms.size(), 10u);
  const auto offset = syms.file_offset_of("mcp_test_symbol");
  ASSERT_TRUE(offset);
  const auto vaddr = syms.file_offset_to_vaddr(*offset);
  ASSERT_TRUE(vaddr);
  const ElfSymbol* at_entry = syms.symbol_at(*vaddr);
  ASSERT_NE(at_entry, nullptr);
  EXPECT_EQ(at_entry->name, "mcp_test_symbol");
  EXPECT_GT(at_entry->size, 0u);
  // An address inside the body maps back to the same function.
  const ElfSymbol* inside = syms.symbol_at(*vaddr + at_entry->size - 1);
  ASSERT_NE(inside, nullptr);
  EXPECT_EQ(inside->name, "mcp_test_symbol");
}

TEST(ElfSymbols, ResolvesMangledFunctionByDemangledName) {
  const auto syms = ElfSymbols::load(self_exe());
  const auto by_mangled = syms.file_offset_of("_ZN11mcp_test_ns14mangled_targetEid");
  const auto by_demangled = syms.file_offset_of("mcp_test_ns::mangled_target(int, double)");
  ASSERT_TRUE(by_mangled);
  ASSERT_TRUE(by_demangled);
  EXPECT_EQ(*by_mangled, *by_demangled);
  EXPECT_EQ(*by_demangled, locate(reinterpret_cast<const void*>(&mcp_test_ns::mangled_target)).file_offset);
  const ElfSymbol* s = syms.symbol_at(*syms.file_offset_to_vaddr(*by_demangled));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(demangle(s->name), "mcp_test_ns::mangled_target(int, double)");
  EXPECT_EQ(mcp_test_ns::mangled_target(1, 2.0), 3);
}

TEST(ElfSymbols, AbsentSymbolIsNullopt) {
  const auto syms = ElfSymbols::load(self_exe());
  EXPECT_FALSE(syms.file_offset_of("mcp_no_such_symbol_anywhere"));
  EXPECT_FALSE(syms.file_offset_of("mcp_test_ns::no_such(int)"));
  EXPECT_EQ(syms.symbol_at(0), nullptr);
}

TEST(ElfSymbols, NonElfAndMissingFilesThrowRuntimeErrorNamingThePath) {
  for (const std::string path : {"/proc/self/maps", "/nonexistent/mcp-elf"}) {
    try {
      ElfSymbols::load(path);
      ADD_FAILURE() << "loaded " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kRuntime);
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

TEST(Demangle, DemanglesCppAndPassesCNamesThrough) {
  EXPECT_EQ(demangle("_Z6vecAddPfi"), "vecAdd(float*, int)");
  EXPECT_EQ(demangle("malloc"), "malloc");
  EXPECT_EQ(demangle("_Znotvalid!!"), "_Znotvalid!!");
}

// ---------------------------------------------------------------- ProcMaps

TEST(ParseProcMaps, KeepsFileMappingsWithPermsAndOffsets) {
  const std::string text =
      "55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 1234   /usr/bin/true\n"
      "55d0c0a02000-55d0c0a06000 r-xp 00002000 08:01 1234   /usr/bin/true\n"
      "7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 \n"
      "7f1e2d028000-7f1e2d17d000 r-xp 00028000 08:01 5678   /usr/lib/x86_64-linux-gnu/libc.so.6\n"
      "7f1e2d200000-7f1e2d201000 r-xp 00001000 08:01 99 /tmp/my lib.so (deleted)\n"
      "7ffd6a5e0000-7ffd6a601000 rw-p 00000000 00:00 0      [stack]\n"
      "garbage line\n"
      "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]\n";
  const auto maps = parse_proc_maps(text);
  ASSERT_EQ(maps.size(), 4u);
  EXPECT_EQ(maps[0].start, 0x55d0c0a00000u);
  EXPECT_EQ(maps[0].end, 0x55d0c0a02000u);
  EXPECT_EQ(maps[0].offset, 0u);
  EXPECT_FALSE(maps[0].executable);
  EXPECT_EQ(maps[0].path, "/usr/bin/true");
  EXPECT_TRUE(maps[1].executable);
  EXPECT_EQ(maps[1].offset, 0x2000u);
  EXPECT_EQ(maps[2].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
  EXPECT_EQ(maps[2].offset, 0x28000u);
  // Paths may hold spaces; the kernel's " (deleted)" suffix is not part of the name.
  EXPECT_EQ(maps[3].path, "/tmp/my lib.so");
  EXPECT_TRUE(maps[3].executable);
}

TEST(ParseProcMaps, KeepsDeviceAndInodeOfTheMappedFile) {
  const auto maps = parse_proc_maps("55d0c0a00000-55d0c0a02000 r-xp 00000000 fe:01 10952945   /tmp/app\n");
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps[0].dev, makedev(0xfe, 0x01));
  EXPECT_EQ(maps[0].inode, 10952945u);
}

TEST(MappingWarning, NoneForAFileTheProcessMaps) {
  EXPECT_EQ(mapping_warning(getpid(), self_exe(), self_exe()), "");
}

TEST(MappingWarning, NamesTheFileAProcessDoesNotMap) {
  const std::string w = mapping_warning(getpid(), "/bin/sh", "/bin/sh");
  EXPECT_NE(w.find("pid " + std::to_string(getpid()) + " maps no file with the device and inode of /bin/sh"),
            std::string::npos)
      << w;
}

TEST(PathInRoot, OwnRootIsTheRealPath) {
  EXPECT_EQ(path_in_root_of(getpid(), self_exe()), self_exe());
  EXPECT_EQ(path_in_root_of(getpid(), "/nonexistent/file"), "");
}

TEST(ParseProcMaps, EmptyTextGivesNoMappings) { EXPECT_TRUE(parse_proc_maps("").empty()); }

TEST(ReadProcMaps, SelfMapsContainTheTestBinaryAndLibc) {
  const auto maps = read_proc_maps(getpid());
  bool exe = false, libc = false;
  for (const auto& m : maps) {
    exe |= m.path == self_exe() && m.executable;
    libc |= m.path.find("libc.so.6") != std::string::npos && m.executable;
  }
  EXPECT_TRUE(exe);
  EXPECT_TRUE(libc);
}

TEST(ReadProcMaps, GoneProcessGivesEmpty) {
  EXPECT_TRUE(read_proc_maps(99999999).empty());
}

// ---------------------------------------------------------------- split / names

TEST(SplitUprobeSpec, SplitsAtLastSingleColon) {
  EXPECT_EQ(split_uprobe_spec("/bin/true:main"), std::make_pair(std::string("/bin/true"), std::string("main")));
  EXPECT_EQ(split_uprobe_spec("libc:malloc"), std::make_pair(std::string("libc"), std::string("malloc")));
}

TEST(SplitUprobeSpec, KeepsCppScopeInTheSymbol) {
  EXPECT_EQ(split_uprobe_spec("/bin/x:ns::fn"), std::make_pair(std::string("/bin/x"), std::string("ns::fn")));
  EXPECT_EQ(split_uprobe_spec("libfoo:a::b::c"), std::make_pair(std::string("libfoo"), std::string("a::b::c")));
  EXPECT_EQ(split_uprobe_spec("/opt/app:ns::Cls::method(int, char const*)"),
            std::make_pair(std::string("/opt/app"), std::string("ns::Cls::method(int, char const*)")));
}

TEST(SplitUprobeSpec, MalformedSpecsAreUsageErrors) {
  for (const char* bad : {"", "nocolon", ":sym", "bin:", "ns::fn", "/bin/x::"}) {
    try {
      split_uprobe_spec(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << bad;
    }
  }
}

TEST(LibraryNameMatches, MatchesSonamesAndVersionedFiles) {
  EXPECT_TRUE(library_name_matches("libc.so.6", "libc"));
  EXPECT_TRUE(library_name_matches("libc-2.36.so", "libc"));
  EXPECT_TRUE(library_name_matches("libc.so", "libc"));
  EXPECT_TRUE(library_name_matches("libc.so.6", "libc.so.6"));
  EXPECT_TRUE(library_name_matches("libc.so.6", "libc.so"));
  EXPECT_TRUE(library_name_matches("libcudart.so.12", "libcudart"));
  EXPECT_TRUE(library_name_matches("libpthread-2.36.so", "libpthread"));
}

TEST(LibraryNameMatches, RejectsOtherLibrariesSharingAPrefix) {
  EXPECT_FALSE(library_name_matches("libcrypto.so.3", "libc"));
  EXPECT_FALSE(library_name_matches("libc_malloc_debug.so.0", "libc"));
  EXPECT_FALSE(library_name_matches("libcap.so.2", "libc"));
  EXPECT_FALSE(library_name_matches("libm.so.6", "libc"));
  EXPECT_FALSE(library_name_matches("libmvec.so.1", "libm"));
  EXPECT_FALSE(library_name_matches("libc-dev", "libc"));
  EXPECT_FALSE(library_name_matches("libc.so.6", "libc.so.7"));
  EXPECT_FALSE(library_name_matches("lib", "libc"));
}

TEST(ParseLdconfig, ReadsSonameAndPathSkippingTheHeader) {
  const std::string text =
      "1234 libs found in cache `/etc/ld.so.cache'\n"
      "\tlibcrypto.so.3 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcrypto.so.3\n"
      "\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n"
      "\tld-linux-x86-64.so.2 (libc6,x86-64) => /lib64/ld-linux-x86-64.so.2\n"
      "Cache generated by: ldconfig (GNU libc) stable release version 2.36\n";
  const auto entries = parse_ldconfig(text);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0], std::make_pair(std::string("libcrypto.so.3"), std::string("/lib/x86_64-linux-gnu/libcrypto.so.3")));
  EXPECT_EQ(entries[1], std::make_pair(std::string("libc.so.6"), std::string("/lib/x86_64-linux-gnu/libc.so.6")));
  EXPECT_EQ(entries[2], std::make_pair(std::string("ld-linux-x86-64.so.2"), std::string("/lib64/ld-linux-x86-64.so.2")));
  EXPECT_TRUE(parse_ldconfig("").empty());
}

// ---------------------------------------------------------------- resolve

TEST(ResolveBinary, AbsolutePathResolvesToTheRealFile) {
  const std::string p = resolve_binary("/bin/true", 0);
  EXPECT_EQ(p, real_path("/bin/true"));
  EXPECT_EQ(p.front(), '/');
}

TEST(ResolveBinary, ProgramNameIsLookedUpInPath) {
  EXPECT_EQ(resolve_binary("true", 0), real_path("/bin/true"));
}

TEST(ResolveBinary, LibcThroughTheLinkerCache) {
  const std::string p = resolve_binary("libc", 0);
  EXPECT_NE(p.find("libc.so.6"), std::string::npos) << p;
  EXPECT_EQ(p, real_path(p));  // canonical, so probes on the same file compare equal
  EXPECT_EQ(p, resolve_binary("libc.so.6", 0));
}

TEST(ResolveBinary, LibcThroughThisProcessMaps) {
  std::string mapped;
  for (const auto& m : read_proc_maps(getpid()))
    if (m.path.find("/libc.so.6") != std::string::npos) mapped = m.path;
  ASSERT_FALSE(mapped.empty());
  EXPECT_EQ(resolve_binary("libc", getpid()), mapped);
}

TEST(ResolveBinary, MissingBinaryIsRuntimeErrorNamingIt) {
  for (const std::string b : {"/nonexistent/bin/mcp-prog", "libmcp_no_such_lib", "mcp-no-such-program"}) {
    try {
      resolve_binary(b, 0);
      ADD_FAILURE() << "resolved " << b;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kRuntime);
      EXPECT_NE(std::string(e.what()).find(b), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(resolve_binary("/tmp", 0), Error);  // a directory is not a binary
}

// Issue 51: libc's strlen is an IFUNC resolver (a probe on it sees one call per process, not
// one per strlen): the resolver says so, so `trace` can warn; malloc is a plain function.
TEST(ResolveUprobe, IfuncResolversAreMarked) {
  const auto strlen_target = resolve_uprobe("libc:strlen", 0);
  const auto syms = ElfSymbols::load(strlen_target.binary);
  if (!syms.is_ifunc("strlen")) GTEST_SKIP() << "this libc's strlen is not an IFUNC";
  EXPECT_TRUE(strlen_target.ifunc);
  EXPECT_FALSE(resolve_uprobe("libc:malloc", 0).ifunc);
}

// Issue 51: a wildcard matching aliases of one function (strtoll and strtoq) probes the address
// once: one call is one event, and the summed estimates are not multiplied.
TEST(ResolveUprobe, AWildcardProbesEachAddressOnce) {
  const auto targets = resolve_uprobe_pattern("libc", "strto*", 0);
  std::set<uint64_t> offsets;
  for (const auto& t : targets) EXPECT_TRUE(offsets.insert(t.offset).second) << t.symbol << " probed twice";
  // Not vacuous: this libc has aliases among those names.
  const auto syms = ElfSymbols::load(targets.front().binary);
  EXPECT_GT(syms.functions_matching("strto*").size(), targets.size());
}

TEST(ResolveUprobe, LibcMallocIsInsideAnExecutableSegment) {
  const auto t = resolve_uprobe("libc:malloc", 0);
  EXPECT_NE(t.binary.find("libc.so.6"), std::string::npos);
  EXPECT_EQ(t.symbol, "malloc");
  EXPECT_GT(t.offset, 0u);
  const auto syms = ElfSymbols::load(t.binary);
  EXPECT_TRUE(syms.file_offset_to_vaddr(t.offset).has_value());
  // Independent check: the executable mapping of libc in this process covers it, and
  // malloc's runtime address lands at exactly that offset.
  const auto where = locate(reinterpret_cast<const void*>(&malloc));
  EXPECT_EQ(real_path(where.path), t.binary);
  EXPECT_EQ(where.file_offset, t.offset);
}

TEST(ResolveUprobe, TestBinaryFunctionThroughAFullSpec) {
  const auto t = resolve_uprobe(self_exe() + ":mcp_test_symbol", 0);
  EXPECT_EQ(t.binary, real_path(self_exe()));
  EXPECT_EQ(t.offset, locate(reinterpret_cast<const void*>(&mcp_test_symbol)).file_offset);
}

TEST(ResolveUprobe, CppSpecWithScopeResolves) {
  const auto t = resolve_uprobe(self_exe() + ":mcp_test_ns::mangled_target(int, double)", 0);
  EXPECT_EQ(t.symbol, "mcp_test_ns::mangled_target(int, double)");
  EXPECT_EQ(t.offset, locate(reinterpret_cast<const void*>(&mcp_test_ns::mangled_target)).file_offset);
}

TEST(ResolveUprobe, MissingSymbolNamesSymbolAndBinary) {
  try {
    resolve_uprobe("/bin/true:mcp_no_such_fn", 0);
    ADD_FAILURE() << "resolved";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mcp_no_such_fn"), std::string::npos) << msg;
    EXPECT_NE(msg.find(real_path("/bin/true")), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace mcp::loader
