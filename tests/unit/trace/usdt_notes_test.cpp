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
#include "loader/usdt_spec.h"

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

// A uprobe goes at the site's offset in the file: there the compiler left the probe's nop.
TEST(UsdtNotes, EachSiteIsPlacedAtItsNopInTheFile) {
  const auto probes = read_usdt_probes(self_exe());
  std::ifstream in(self_exe(), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* name : {"hit", "bare"}) {
    const auto* p = find(probes, "mcp_test", name);
    ASSERT_NE(p, nullptr) << name;
    ASSERT_GT(p->file_offset, 0u) << name;
    ASSERT_LT(p->file_offset, bytes.size()) << name;
    EXPECT_EQ(static_cast<unsigned char>(bytes[p->file_offset]), 0x90) << name << " at " << p->file_offset;
    EXPECT_EQ(p->semaphore_offset, 0u) << name;
  }
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

// What the BPF side reads (usdt.bpf.h's bpf_usdt_arg): x86-64 pt_regs offsets, sizes as bit
// shifts, the sign, constants and register-relative offsets.
TEST(UsdtArgSpecs, EachFormIsTheSpecLibbpfWouldWrite) {
  const UsdtSpec s = parse_usdt_spec("-4@%edi 8@-16(%rbp) 4@$7 2@(%rax) 1@%sil -8@$-9 8@%r12", 42);
  EXPECT_EQ(s.usdt_cookie, 42u);
  ASSERT_EQ(s.arg_cnt, 7);
  auto is = [](const UsdtArgSpec& a, uint32_t type, int16_t reg, uint64_t val, bool sign, int8_t shift) {
    return a.arg_type == type && a.reg_off == reg && a.val_off == val && a.arg_signed == sign &&
           a.arg_bitshift == shift;
  };
  EXPECT_TRUE(is(s.args[0], 1, 112, 0, true, 32));                          // edi: rdi
  EXPECT_TRUE(is(s.args[1], 2, 32, static_cast<uint64_t>(-16), false, 0));  // -16(%rbp)
  EXPECT_TRUE(is(s.args[2], 0, 0, 7, false, 32));                           // $7
  EXPECT_TRUE(is(s.args[3], 2, 80, 0, false, 48));                          // (%rax)
  EXPECT_TRUE(is(s.args[4], 1, 104, 0, false, 56));                         // sil: rsi
  EXPECT_TRUE(is(s.args[5], 0, 0, static_cast<uint64_t>(-9), true, 0));     // $-9
  EXPECT_TRUE(is(s.args[6], 1, 24, 0, false, 0));                           // r12
  EXPECT_EQ(parse_usdt_spec("", 1).arg_cnt, 0);
}

TEST(UsdtArgSpecs, WhatCannotBeReadIsRefusedWithTheArgument) {
  for (const char* bad : {"3@%rax", "8@%xmm0", "8@sym(%rip)", "8%rax", "x@%rax", "8@", "8@$", "8@$1x", "8@(%rax",
                          "8@4(rax)", "16@%rax", "8@99999999999999999999(%rax)",
                          "1@$0 1@$0 1@$0 1@$0 1@$0 1@$0 1@$0 1@$0 1@$0 1@$0 1@$0 1@$0 1@$0"}) {
    try {
      parse_usdt_spec(bad, 0);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kRuntime) << bad;
      EXPECT_NE(std::string(e.what()).find("USDT"), std::string::npos) << e.what();
    }
  }
}

// The specs come from the traced file: random text either parses or throws mcp::Error.
TEST(UsdtArgSpecs, RandomTextNeverEscapesAsAnythingButAnError) {
  std::mt19937_64 rng(7);
  const std::string alphabet = "0123456789-@$%()rabcdxsilpe ";
  for (int i = 0; i < 20000; i++) {
    std::string text(rng() % 40, ' ');
    for (auto& c : text) c = alphabet[rng() % alphabet.size()];
    try {
      const UsdtSpec s = parse_usdt_spec(text, 0);
      EXPECT_LE(s.arg_cnt, kUsdtMaxArgs);
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace mcp::loader
