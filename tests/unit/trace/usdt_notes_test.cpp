// USDT notes read from real ELF files: this test binary declares two probes with
// <sys/sdt.h>; copies of it with the note section overwritten stand for hostile files.
#include <gtest/gtest.h>
#include <sys/sdt.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "common/error.h"
#include "files.h"
#include "loader/target_resolver.h"
#include "loader/usdt_notes.h"

extern "C" __attribute__((noinline, used)) int mcp_usdt_site(long x, const char* s) {
  DTRACE_PROBE2(mcp_test, hit, x, s);
  DTRACE_PROBE(mcp_test, bare);
  return static_cast<int>(x) + s[0];
}

namespace mcp::loader {
namespace {

using test::self_exe;

const UsdtProbe* find(const std::vector<UsdtProbe>& probes, const std::string& provider, const std::string& name) {
  for (const auto& p : probes)
    if (p.provider == provider && p.name == name) return &p;
  return nullptr;
}

TEST(UsdtNotes, ReadsProviderNameArgumentsAndAddressOfEachSite) {
  ASSERT_EQ(mcp_usdt_site(1, "a"), 1 + 'a');
  const auto probes = read_usdt_probes(self_exe());
  const auto* hit = find(probes, "mcp_test", "hit");
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->nargs(), 2u) << hit->args;
  EXPECT_NE(hit->address, 0u);
  EXPECT_EQ(hit->semaphore, 0u);  // declared without _SDT_HAS_SEMAPHORES
  const auto* bare = find(probes, "mcp_test", "bare");
  ASSERT_NE(bare, nullptr);
  EXPECT_EQ(bare->nargs(), 0u);
  EXPECT_NE(bare->address, hit->address);
}

TEST(UsdtNotes, AFileWithoutNotesHasNoProbesAndANonElfFileIsARuntimeError) {
  EXPECT_TRUE(read_usdt_probes("/bin/true").empty());
  try {
    read_usdt_probes("/proc/self/maps");
    ADD_FAILURE() << "read a non-ELF file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_NE(std::string(e.what()).find("is not an ELF file"), std::string::npos) << e.what();
  }
}

// The section's bytes in a copy of this binary, overwritten at random: whatever the notes
// claim (sizes, missing NULs), the reader keeps inside the section and never throws.
TEST(UsdtNotes, CorruptNoteSectionsAreSkippedWithoutReadingPastThem) {
  const std::string exe = self_exe();
  std::ifstream in(exe, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The notes hold the provider name; corrupt the 512 bytes around its first mention.
  const size_t at = bytes.find(std::string("mcp_test\0hit", 12));
  ASSERT_NE(at, std::string::npos);
  const size_t begin = at > 256 ? at - 256 : 0, end = std::min(bytes.size(), at + 256);
  test::TempDir dir("mcp-usdt");
  const std::string copy = (dir.path() / "corrupt").string();
  std::ofstream(copy, std::ios::binary | std::ios::trunc) << bytes;
  std::mt19937_64 rng(42);
  for (int round = 0; round < 100; round++) {
    std::string region = bytes.substr(begin, end - begin);
    for (auto& c : region)
      if (rng() % 4 == 0) c = static_cast<char>(rng());
    std::fstream f(copy, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(begin));
    f.write(region.data(), static_cast<std::streamsize>(region.size()));
    f.close();
    std::vector<UsdtProbe> probes;
    EXPECT_NO_THROW(probes = read_usdt_probes(copy)) << "round " << round;
    for (const auto& p : probes) {
      EXPECT_FALSE(p.provider.empty());
      EXPECT_LT(p.provider.size() + p.name.size() + p.args.size(), 512u);
    }
  }
}

TEST(UsdtSpec, SplitsBinaryProviderAndNameAtTheLastTwoColons) {
  EXPECT_EQ(split_usdt_spec("/usr/bin/python3:python:line"),
            (std::pair<std::string, std::string>{"/usr/bin/python3", "python:line"}));
  EXPECT_EQ(split_usdt_spec("libc:libc:setjmp"), (std::pair<std::string, std::string>{"libc", "libc:setjmp"}));
  for (const char* bad : {"python:line", ":python:line", "/bin/x::line", "/bin/x:python:", "nothing"}) {
    try {
      split_usdt_spec(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << bad;
    }
  }
}

TEST(UsdtSpec, ATargetIsCheckedAgainstTheNotesAndNamedAsUsdt) {
  const auto t = usdt_target_in(self_exe(), "mcp_test:hit");
  EXPECT_TRUE(t.usdt);
  EXPECT_EQ(t.probe_name(), "usdt:" + self_exe() + ":mcp_test:hit");
  try {
    usdt_target_in(self_exe(), "mcp_test:nope");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_NE(std::string(e.what()).find("USDT probe mcp_test:nope not found in " + self_exe()), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--list-usdt"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mcp::loader
