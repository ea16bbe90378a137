// Issue 51, finding 3: an attacker who can write the trail's files but lacks the key. A real
// trail (the real writer, 300 records over several rotated files) is rewritten at random, with
// a seeded RNG, in every way the review found passing the old unkeyed hash chain: an edit with
// the chain recomputed after it, records deleted and the rest renumbered and rehashed, the tail
// cut at a line boundary, the newest file deleted, head lines of the first file removed, the
// trail emptied or replaced by /dev/null; and, fuzz-style, one byte flipped anywhere. Each
// rewrite must fail verify at the exact file (and line, where a record is to blame); the
// untouched trail must pass.
#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "audit/audit_log.h"
#include "rules/ruleset.h"
#include "../../support/files.h"

namespace mcp::audit {
namespace {

namespace fs = std::filesystem;

constexpr size_t kRecords = 300;
constexpr int kRewrites = 400;
constexpr uint32_t kSeed = 51;

// The trail as the attacker edits it: each file's name and lines.
struct TrailFile {
  std::string name;
  std::vector<std::string> lines;
};
using Trail = std::vector<TrailFile>;

Trail load(const fs::path& dir) {
  Trail t;
  for (const auto& f : trail_files(dir)) {
    TrailFile tf{f.filename().string(), {}};
    std::istringstream in(test::slurp(f));
    for (std::string line; std::getline(in, line);) tf.lines.push_back(line);
    t.push_back(std::move(tf));
  }
  return t;
}

void store(const fs::path& dir, const Trail& t) {
  for (const auto& f : trail_files(dir)) fs::remove(f);
  for (const auto& f : t) {
    std::string text;
    for (const auto& l : f.lines) text += l + "\n";
    test::write_file(dir / f.name, text);
  }
}

std::string name_for(uint64_t seq) {
  char name[40];
  std::snprintf(name, sizeof(name), "audit-%012llu.jsonl", static_cast<unsigned long long>(seq));
  return name;
}

// The old, unkeyed link: SHA-256 of the line without its last field. Anyone can compute it.
std::string sha256_hex(const std::string& s) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  std::string out;
  for (unsigned char b : d) {
    static constexpr char kHex[] = "0123456789abcdef";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

// Rewrites record `line` with `edit` applied, its prev set and its link recomputed the old way;
// returns the new link.
std::string relink(std::string& line, const std::string& prev, const std::function<void(nlohmann::ordered_json&)>& edit) {
  auto j = nlohmann::ordered_json::parse(line);
  j.erase("mac");
  edit(j);
  j["prev"] = prev;
  const std::string body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string mac = sha256_hex(body);
  line = body.substr(0, body.size() - 1) + ",\"mac\":\"" + mac + "\"}";
  return mac;
}

std::string mac_of(const std::string& line) { return nlohmann::json::parse(line)["mac"].get<std::string>(); }

// A record's place in the trail: file index and line index.
struct Pos {
  size_t file = 0, line = 0;
};
std::vector<Pos> positions(const Trail& t) {
  std::vector<Pos> out;
  for (size_t f = 0; f < t.size(); f++)
    for (size_t l = 0; l < t[f].lines.size(); l++) out.push_back({f, l});
  return out;
}

class AuditTamper : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("mcp-audit-tamper");
    const auto rules = rules::RuleSet::compile(
        "rule \"pii\" when service == \"ehr\" then redact.fields = [\"args[1]\"] audit.trace = [\"GDPR-9\"] end\n");
    AuditLog log({trail(), 16 << 10, std::chrono::hours(1), "node-a"});
    for (uint32_t i = 0; i < kRecords; i++) {
      Event e;
      e.pid = 1000 + i;
      e.service = "ehr";
      e.probe = "/bin/app:handle";
      e.args[1] = i;
      e.nargs = 2;
      rules::Decision d;
      rules::apply(rules, e, d);
      ASSERT_TRUE(log.record(rules, d, e));
    }
  }
  static void TearDownTestSuite() { delete dir_; }
  static fs::path trail() { return dir_->path() / "trail"; }
  static Key key() { return read_key(default_key_file(trail())); }

  static test::TempDir* dir_;
};
test::TempDir* AuditTamper::dir_ = nullptr;

TEST_F(AuditTamper, TheUntouchedTrailPassesAndEveryRandomRewriteFailsAtTheFileAndLineToBlame) {
  const Key key = AuditTamper::key();
  const Trail pristine = load(trail());
  ASSERT_GE(pristine.size(), 4u) << "the writer should have rotated several times";
  ASSERT_FALSE(pristine.back().lines.empty());
  auto v = verify_trail(trail_files(trail()), seal_file(trail()), key);
  ASSERT_TRUE(v.ok) << v.where << ": " << v.reason;
  ASSERT_EQ(v.records, kRecords);
  ASSERT_EQ(v.unsealed, 0u);

  const test::TempDir work_root("mcp-audit-work");
  const fs::path work = work_root.path() / "trail";
  fs::create_directories(work);
  fs::copy_file(seal_file(trail()), seal_file(work));
  std::mt19937 rng(kSeed);
  const auto pick = [&](size_t lo, size_t hi) { return std::uniform_int_distribution<size_t>(lo, hi)(rng); };
  const auto at = [&](const Trail& t, Pos p) { return (work / t[p.file].name).string() + ":" + std::to_string(p.line + 1); };
  const auto file = [&](const std::string& name) { return (work / name).string(); };
  std::map<std::string, int> tried;

  for (int round = 0; round < kRewrites; round++) {
    Trail t = pristine;
    store(work, t);
    v = verify_trail(trail_files(work), seal_file(work), key);
    ASSERT_TRUE(v.ok) << "the untouched copy, round " << round << ": " << v.where << ": " << v.reason;

    const auto pos = positions(t);
    std::vector<fs::path> files;  // empty: the directory's
    std::string kind, want;
    switch (pick(0, 8)) {
      case 0: {  // one record edited, it and every later one relinked the old way
        kind = "edit and rehash";
        const size_t g = pick(0, pos.size() - 1);
        std::string prev = nlohmann::json::parse(t[pos[g].file].lines[pos[g].line])["prev"].get<std::string>();
        for (size_t i = g; i < pos.size(); i++)
          prev = relink(t[pos[i].file].lines[pos[i].line], prev, [&](auto& j) {
            if (i == g) j["comm"] = "innocent";
          });
        want = at(t, pos[g]);
        break;
      }
      case 1: {  // k records deleted, the rest renumbered, relinked and their files renamed
        kind = "delete, renumber, rehash";
        const size_t s = pick(0, pos.size() - 1), k = std::min(pick(1, 10), pos.size() - s);
        const std::string newest = t.back().name;
        std::string prev = s == 0 ? std::string(64, '0') : mac_of(t[pos[s - 1].file].lines[pos[s - 1].line]);
        Trail out;
        size_t g = 0;
        std::optional<std::pair<size_t, size_t>> first_changed;  // (out file, line)
        for (const auto& f : t) {
          TrailFile nf;
          for (const auto& line : f.lines) {
            const size_t i = g++;
            if (i >= s && i < s + k) continue;
            std::string l = line;
            if (i >= s + k) {
              prev = relink(l, prev, [&](auto& j) { j["seq"] = j["seq"].template get<uint64_t>() - k; });
              if (!first_changed) first_changed = {out.size(), nf.lines.size()};
            }
            nf.lines.push_back(l);
          }
          if (nf.lines.empty()) continue;
          nf.name = name_for(nlohmann::json::parse(nf.lines.front())["seq"].get<uint64_t>());
          out.push_back(std::move(nf));
        }
        t = out;
        if (first_changed) want = (work / t[first_changed->first].name).string() + ":" + std::to_string(first_changed->second + 1);
        else if (t.back().name != newest) want = file(newest);  // the newest file went with the tail
        else want = file(newest) + ":" + std::to_string(t.back().lines.size() + 1);
        break;
      }
      case 2: {  // the tail cut at a line boundary
        kind = "truncate";
        auto& last = t.back();
        last.lines.resize(pick(0, last.lines.size() - 1));
        want = file(last.name) + ":" + std::to_string(last.lines.size() + 1);
        break;
      }
      case 3:  // the newest file deleted
        kind = "delete newest";
        want = file(t.back().name);
        t.pop_back();
        break;
      case 4: {  // head lines of the first file removed
        kind = "remove head";
        auto& first = t.front().lines;
        const size_t h = pick(1, first.size());
        first.erase(first.begin(), first.begin() + static_cast<long>(h));
        want = h < pristine.front().lines.size() ? file(t.front().name) + ":1" : file(t[1].name);
        break;
      }
      case 5:  // every file emptied
        kind = "empty files";
        for (auto& f : t) f.lines.clear();
        want = file(t[1].name);  // the first file's name is right; the second comes out of turn
        break;
      case 6:  // every file deleted
        kind = "no files";
        want = file(t.back().name);
        t.clear();
        break;
      case 7:  // /dev/null handed to verify
        kind = "/dev/null";
        files = {"/dev/null"};
        want = "/dev/null";
        break;
      default: {  // fuzz: one byte of one file flipped
        kind = "flip a byte";
        const size_t f = pick(0, t.size() - 1);
        std::string text;
        for (const auto& l : t[f].lines) text += l + "\n";
        const size_t off = pick(0, text.size() - 1);
        text[off] = static_cast<char>(text[off] ^ static_cast<char>(pick(1, 255)));
        const size_t line = static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<long>(off), '\n')) + 1;
        store(work, t);
        test::write_file(work / t[f].name, text);
        want = file(t[f].name) + ":" + std::to_string(line);
        break;
      }
    }
    if (kind != "flip a byte") store(work, t);
    if (files.empty()) files = trail_files(work);
    tried[kind]++;
    v = verify_trail(files, seal_file(work), key);
    EXPECT_FALSE(v.ok) << "round " << round << " (" << kind << ") passed verify";
    EXPECT_EQ(v.where, want) << "round " << round << " (" << kind << "): " << v.reason;
    EXPECT_FALSE(v.reason.empty());
  }
  EXPECT_EQ(tried.size(), 9u) << "every kind of rewrite was tried";
  v = verify_trail(trail_files(trail()), seal_file(trail()), key);
  EXPECT_TRUE(v.ok) << v.where << ": " << v.reason;
}

}  // namespace
}  // namespace mcp::audit
