// Runs the fuzz entry points over the seed corpus (tests/fuzz/corpus/, which also holds
// every crash the fuzzers ever found, as regression inputs) and over a bounded number of
// deterministic mutations of it, so every build exercises the fuzz targets even without
// clang/libFuzzer. Passing means: no crash, no uncaught exception, no sanitizer report.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "config/parse_config.h"
#include "fuzz_targets.h"
#include "rules/ruleset.h"

namespace mcp::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> corpus(const std::string& name, std::vector<std::string>* names = nullptr) {
  std::vector<std::string> out;
  const fs::path dir = fs::path(MCP_FUZZ_CORPUS_DIR) / name;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    out.push_back(ss.str());
    if (names) names->push_back(f.filename().string());
  }
  return out;
}

// Byte-level mutations in the spirit of libFuzzer's: flip, insert, erase, duplicate a slice,
// splice with another seed, insert an interesting token.
std::string mutate(const std::string& in, const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  static const char* kTokens[] = {"\"", "[", "]", "(", ")", "{", "}", ":", "- ", "\n", "&&", "||", "!", "==",
                                  "rule", "when", "then", "end", "in", "matches", "args[9]", "1e999", "\\",
                                  "\t", "\0", "&a", "*a", "!!binary", "---", "? ", "|", ">", "#"};
  std::string s = in;
  const int steps = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < steps; ++i) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0:
        if (!s.empty()) s[pos % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1: s.insert(pos, 1, static_cast<char>(rng() % 256)); break;
      case 2:
        if (!s.empty()) s.erase(pos % s.size(), 1 + rng() % 8);
        break;
      case 3:
        if (!s.empty()) {
          const size_t from = rng() % s.size();
          s.insert(pos, s.substr(from, 1 + rng() % 32));
        }
        break;
      case 4: {
        const std::string& other = seeds[rng() % seeds.size()];
        const size_t cut = other.empty() ? 0 : rng() % other.size();
        s = s.substr(0, pos) + other.substr(cut);
        break;
      }
      default: {
        const char* t = kTokens[rng() % (sizeof kTokens / sizeof kTokens[0])];
        s.insert(pos, std::string(t, std::max<size_t>(1, std::char_traits<char>::length(t))));
      }
    }
  }
  if (s.size() > 64 * 1024) s.resize(64 * 1024);
  return s;
}

constexpr int kMutationsPerTarget = 3000;

void run(const std::string& name, int (*target)(const uint8_t*, size_t)) {
  const auto seeds = corpus(name);
  ASSERT_FALSE(seeds.empty()) << "no seeds in corpus/" << name;
  for (const auto& s : seeds) target(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  std::mt19937_64 rng(0x6d6370);  // fixed: a failure reproduces
  for (int i = 0; i < kMutationsPerTarget; ++i) {
    const std::string input = mutate(seeds[rng() % seeds.size()], seeds, rng);
    SCOPED_TRACE("mutation " + std::to_string(i));
    target(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
}

// Seeds are only useful if the good ones get past the parser: files named bad_* are meant
// to be rejected, every other seed must be accepted.
TEST(FuzzReplay, SeedsAreValidUnlessNamedBad) {
  std::vector<std::string> names;
  auto rules_seeds = corpus("rules", &names);
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].starts_with("bad_")) EXPECT_THROW(rules::RuleSet::compile(rules_seeds[i]), rules::RulesError) << names[i];
    else if (!names[i].starts_with("crash-")) EXPECT_NO_THROW(rules::RuleSet::compile(rules_seeds[i])) << names[i];
  }
  names.clear();
  auto config_seeds = corpus("config", &names);
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].starts_with("bad_")) EXPECT_THROW(config::parse_config(config_seeds[i], names[i]), config::ConfigError) << names[i];
    else if (!names[i].starts_with("crash-")) EXPECT_NO_THROW(config::parse_config(config_seeds[i], names[i])) << names[i];
  }
}

TEST(FuzzReplay, PublishSeedsAreAcceptedUnlessNamedBad) {
  std::vector<std::string> names;
  const auto seeds = corpus("publish", &names);
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].starts_with("crash-")) continue;
    const bool valid = publish_input_valid(reinterpret_cast<const uint8_t*>(seeds[i].data()), seeds[i].size());
    EXPECT_EQ(valid, !names[i].starts_with("bad_")) << names[i];
  }
}

TEST(FuzzReplay, RulesTargetSurvivesCorpusAndMutations) { run("rules", rules_one_input); }
TEST(FuzzReplay, ConfigTargetSurvivesCorpusAndMutations) { run("config", config_one_input); }
TEST(FuzzReplay, PublishTargetSurvivesCorpusAndMutations) { run("publish", publish_one_input); }

}  // namespace
}  // namespace mcp::fuzz
