// The .deb as Debian judges it (issue 32): lintian reports no error and no warning; the man
// pages cover every command and flag the binaries' --help lists (they are generated from
// it); docs/cli.md names every flag too, so the reference cannot fall behind the program;
// bash completion offers the commands and flags; the copyright file is machine-readable and
// the changelog compressed as policy asks. The package is built by CPack from this build
// tree (once, then cached: test_util.h's cached_deb) and unpacked with dpkg-deb.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "../../unit/packaging/test_util.h"

namespace mcp::packaging_test {
namespace {

namespace fs = std::filesystem;

const fs::path kBinDir = MCP_BIN_DIR;
const fs::path kBuildDir = kBinDir.parent_path();

// One shell word.
std::string quote(const fs::path& p) {
  std::string q = "'";
  for (char c : p.string()) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// "--flag" spellings and subcommands in a CLI11 --help text.
struct Help {
  std::vector<std::string> subcommands;
  std::vector<std::string> long_flags;
};

Help parse_help(const std::string& text) {
  Help h;
  std::istringstream in(text);
  std::string section;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != ' ' && line.back() == ':') {
      section = line;
      continue;
    }
    if (line.rfind("  ", 0) != 0 || line.size() < 3) continue;
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (section == "Subcommands:" && first[0] != '-') h.subcommands.push_back(first);
    if (first[0] != '-') continue;
    std::istringstream spellings(first);
    for (std::string f; std::getline(spellings, f, ',');)
      if (f.rfind("--", 0) == 0 && f != "--help") h.long_flags.push_back(f);
  }
  return h;
}

class DebLint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (std::string tool : {"cpack", "dpkg-deb"})
      if (!have_tool(tool)) pkg_.skip_reason = tool + " not installed (scripts/setup installs it)";
    for (std::string bin : {"mcp-agent", "mcp-broker"})
      if (!fs::exists(kBinDir / bin)) pkg_.skip_reason = bin + " is not built in " + kBinDir.string();
    if (!pkg_.skip_reason.empty()) return;
    pkg_.dir = new TempDir("mcp-deb-lint");
    pkg_.deb = cached_deb(kBuildDir, &pkg_.cpack_output);
    pkg_.unpack();
  }
  static void TearDownTestSuite() { pkg_.close(); }
  void SetUp() override { pkg_.require(); }
  static fs::path root() { return pkg_.root(); }
  // `mcp-agent ARGS --help` of the packaged binary.
  static std::string help(const std::string& program, const std::string& args = "") {
    return run_shell(quote(root() / "usr/bin" / program) + " " + args + " --help").out;
  }
  // Every (subcommand, --flag) pair of a program, subcommands of subcommands included.
  static std::vector<std::pair<std::string, std::string>> flags(const std::string& program) {
    std::vector<std::pair<std::string, std::string>> out;
    std::vector<std::string> todo{""};
    while (!todo.empty()) {
      const std::string cmd = todo.back();
      todo.pop_back();
      const Help h = parse_help(help(program, cmd));
      for (const auto& f : h.long_flags) out.emplace_back(cmd, f);
      for (const auto& s : h.subcommands) todo.push_back(cmd.empty() ? s : cmd + " " + s);
    }
    return out;
  }
  static std::string man_page(const std::string& program) {
    return run_shell("gzip -dc " + quote(root() / "usr/share/man/man8" / (program + ".8.gz"))).out;
  }

  static inline UnpackedDeb pkg_;
};

TEST_F(DebLint, LintianReportsNoErrorAndNoWarning) {
  if (!have_tool("lintian")) GTEST_SKIP() << "lintian not installed (scripts/setup installs it): package not linted";
  // --info: the informational tags go into the failure message, for context.
  const auto r = run_shell("lintian --info --display-info " + quote(pkg_.deb));
  std::vector<std::string> bad;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("E: ", 0) == 0 || line.rfind("W: ", 0) == 0) bad.push_back(line);
  EXPECT_TRUE(bad.empty()) << bad.size() << " errors and warnings; lintian says:\n" << r.out;
  // lintian exits non-zero on an error, and on its own failures (a package it cannot read).
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST_F(DebLint, ManPagesCoverEveryCommandAndFlagOfHelp) {
  for (const std::string program : {"mcp-agent", "mcp-broker"}) {
    const std::string page = man_page(program);
    ASSERT_FALSE(page.empty()) << "no /usr/share/man/man8/" << program << ".8.gz";
    EXPECT_NE(page.find(".TH " + std::string(program == "mcp-agent" ? "MCP-AGENT" : "MCP-BROKER") + " \"8\""),
              std::string::npos)
        << page.substr(0, 400);
    for (const char* section : {".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH OPTIONS", ".SH \"EXIT STATUS\"",
                                ".SH FILES", ".SH EXAMPLES", ".SH \"SEE ALSO\""})
      EXPECT_NE(page.find(section), std::string::npos) << program << "(8) lacks " << section;
    // roff spells a flag's dashes \-.
    auto roff = [](std::string s) { return std::regex_replace(s, std::regex("-"), "\\-"); };
    for (const auto& sub : parse_help(help(program)).subcommands)
      EXPECT_NE(page.find(".SS \"" + program + " " + sub + ":\""), std::string::npos)
          << program << "(8) has no section for " << sub;
    const auto all = flags(program);
    EXPECT_GT(all.size(), program == "mcp-agent" ? 40u : 10u) << "--help parsed badly: " << help(program);
    for (const auto& [cmd, flag] : all)
      EXPECT_NE(page.find(roff(flag)), std::string::npos) << program << "(8) lacks " << cmd << " " << flag;
  }
}

TEST_F(DebLint, CliReferenceNamesEveryFlagOfHelp) {
  const std::string doc = slurp(source_dir() / "docs/cli.md");
  ASSERT_FALSE(doc.empty()) << "docs/cli.md missing";
  for (const std::string program : {"mcp-agent", "mcp-broker"})
    for (const auto& [cmd, flag] : flags(program))
      EXPECT_TRUE(std::regex_search(doc, std::regex("(^|[^-\\w])" + flag + "($|[^-\\w])")))
          << "docs/cli.md does not document " << program << " " << cmd << " " << flag;
}

TEST_F(DebLint, BashCompletionOffersCommandsFlagsAndChoices) {
  if (!have_tool("bash")) GTEST_SKIP() << "bash not installed";
  for (const char* name : {"mcp-agent", "mcp-broker"})
    ASSERT_TRUE(fs::exists(root() / "usr/share/bash-completion/completions" / name)) << name;
  // COMPREPLY for the words typed, with the packaged binaries first on PATH.
  auto complete = [&](const std::string& program, const std::string& words) {
    const std::string script = "source " + quote(root() / "usr/share/bash-completion/completions" / program) +
                               "; COMP_WORDS=(" + words + "); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _mcp_sampling;"
                               " printf '%s\\n' \"${COMPREPLY[@]}\"";
    return run_shell("PATH=" + quote(root() / "usr/bin") + ":$PATH bash -c " + quote(script)).out;
  };
  auto lines = [](const std::string& s) {
    std::set<std::string> out;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);) out.insert(l);
    return out;
  };
  std::set<std::string> subs;
  for (const auto& s : parse_help(help("mcp-agent")).subcommands) subs.insert(s);
  EXPECT_EQ(lines(complete("mcp-agent", "mcp-agent ''")), subs);
  EXPECT_EQ(lines(complete("mcp-agent", "mcp-agent tr")), std::set<std::string>{"trace"});
  EXPECT_TRUE(lines(complete("mcp-agent", "mcp-agent trace --lat")).count("--latency"));
  EXPECT_EQ(lines(complete("mcp-agent", "mcp-agent policy ''")), (std::set<std::string>{"apply", "list"}));
  EXPECT_TRUE(lines(complete("mcp-agent", "mcp-agent subscribe --br")).count("--broker"));
  EXPECT_TRUE(lines(complete("mcp-broker", "mcp-broker --lis")).count("--listen"));
}

TEST_F(DebLint, CopyrightIsMachineReadableAndChangelogIsGzippedWithoutTimestamp) {
  const fs::path doc = root() / "usr/share/doc/mcp-sampling";
  const std::string copyright = slurp(doc / "copyright");
  EXPECT_EQ(copyright.rfind("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n", 0), 0u);
  EXPECT_NE(copyright.find("License: Apache-2.0"), std::string::npos);
  EXPECT_NE(copyright.find("Files: bpf/*"), std::string::npos);
  EXPECT_NE(slurp(source_dir() / "LICENSE").find("Apache License\n                           Version 2.0"),
            std::string::npos)
      << "LICENSE is not the Apache License 2.0";
  const std::string gz = slurp(doc / "changelog.gz");
  ASSERT_GT(gz.size(), 10u);
  EXPECT_EQ(gz.substr(4, 4), std::string(4, '\0')) << "gzip header carries a time stamp (use gzip -9n)";
  EXPECT_EQ(gz[3] & 0x08, 0) << "gzip header carries a file name (use gzip -9n)";
  const auto changelog = run_shell("gzip -dc " + quote(doc / "changelog.gz")).out;
  std::string version = run_shell("dpkg-deb -f " + quote(pkg_.deb) + " Version").out;
  version.erase(version.find_last_not_of('\n') + 1);
  EXPECT_EQ(changelog.rfind("mcp-sampling (" + version + ") ", 0), 0u) << "the newest entry is not " << version
                                                                       << ":\n" << changelog;
}

}  // namespace
}  // namespace mcp::packaging_test
