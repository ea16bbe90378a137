// The audit trail on real files: which decisions are recorded (and that removed values never
// are), the keyed chain across rotation and restarts, a torn last line, the key and the seal
// at start, retention, a full disk, and `verify` naming the first changed or removed record.
// audit_tamper_test.cpp rewrites trails at random as an attacker without the key would.
#include "audit/audit_log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "rules/ruleset.h"
#include "../../support/files.h"

namespace mcp::audit {
namespace {

namespace fs = std::filesystem;

const rules::RuleSet& rule_set() {
  static const rules::RuleSet rs = rules::RuleSet::compile(R"(
rule "pii" when service == "ehr" then redact.fields = ["args[1]", "comm"] audit.trace = ["GDPR-9", "MLPS-8.1.4"] end
rule "consent" when tags.consent != true then sample.exempt = true end
rule "noisy" when pid == 7 then sample.rate = 0.5 end
)");
  return rs;
}

Event event(uint32_t pid, const std::string& service, const std::string& consent) {
  Event e;
  e.pid = pid;
  e.service = service;
  e.probe = "/bin/app:handle";
  e.tags = {{"consent", consent}};
  e.args[1] = 0x5ec12e7;
  e.nargs = 2;
  std::memcpy(e.comm.data(), "patient-db", 10);
  return e;
}

// What the runtime's export filter does: apply the rules (redacting), then record.
void decide(AuditLog& log, Event e) {
  rules::Decision d;
  rules::apply(rule_set(), e, d);
  if (d.any()) log.record(rule_set(), d, e);
}

std::vector<fs::path> files_in(const fs::path& dir) { return trail_files(dir); }

// `audit verify --key DIR.key DIR`.
VerifyResult verify(const fs::path& dir, const std::vector<fs::path>& files) {
  return verify_trail(files, seal_file(dir), read_key(default_key_file(dir)));
}
VerifyResult verify(const fs::path& dir) { return verify(dir, files_in(dir)); }

// A trail of five audited events in one file, its writer closed (sealed); the file.
fs::path five_records(const fs::path& trail) {
  {
    AuditLog log({trail, 1 << 20, std::chrono::hours(1), "n"});
    for (uint32_t i = 0; i < 5; i++) decide(log, event(100 + i, "ehr", "true"));
  }
  return files_in(trail).front();
}

std::vector<nlohmann::json> records_in(const fs::path& dir) {
  std::vector<nlohmann::json> out;
  for (const auto& f : files_in(dir)) {
    std::ifstream in(f);
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

TEST(AuditLog, RecordsExemptRedactAndClauseDecisionsNamingFieldsNotValues) {
  test::TempDir dir("mcp-audit");
  AuditLog log({dir.path() / "trail", 1 << 20, std::chrono::hours(1), "node-a"});
  decide(log, event(7, "shop", "true"));  // only a rate: not an audit decision
  decide(log, event(8, "ehr", "true"));   // redacted, with clauses
  decide(log, event(9, "shop", "false"));  // exempt
  EXPECT_EQ(log.records(), 2u);
  const auto recs = records_in(dir.path() / "trail");
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0]["seq"], 1);
  EXPECT_EQ(recs[0]["node"], "node-a");
  EXPECT_EQ(recs[0]["pid"], 8);
  EXPECT_EQ(recs[0]["rules"][0]["rule"], "pii");
  EXPECT_EQ(recs[0]["rules"][0]["clauses"], (nlohmann::json{"GDPR-9", "MLPS-8.1.4"}));
  EXPECT_EQ(recs[0]["redacted"], (nlohmann::json{"args[1]", "comm"}));
  EXPECT_EQ(recs[0]["exempt"], false);
  EXPECT_EQ(recs[1]["rules"][0]["rule"], "consent");
  EXPECT_EQ(recs[1]["exempt"], true);
  EXPECT_EQ(recs[1]["prev"], recs[0]["mac"]);
  // The process as the sinks see it: its redacted comm, not the value removed.
  EXPECT_EQ(recs[0]["comm"], "[redacted]");
  EXPECT_EQ(recs[1]["comm"], "patient-db");
  const std::string text = test::slurp(log.current_file());
  EXPECT_EQ(text.find(std::to_string(0x5ec12e7)), std::string::npos) << "a removed value reached the trail";
  const auto v = verify(dir.path() / "trail");
  EXPECT_TRUE(v.ok) << v.where << ": " << v.reason;
  EXPECT_EQ(v.records, 2u);
  EXPECT_EQ(v.unsealed, 2u) << "sealed at start, every 100 records, at rotation and at exit: not yet";
}

TEST(AuditLog, OneChainAcrossRotationAndRestartsAndATornLastLineIsCutOff) {
  test::TempDir dir("mcp-audit");
  const fs::path trail = dir.path() / "trail";
  {
    AuditLog log({trail, 4096, std::chrono::hours(1), "n"});
    for (uint32_t i = 0; i < 60; i++) decide(log, event(100 + i, "ehr", "true"));
  }
  EXPECT_GT(files_in(trail).size(), 2u) << "4 KiB files should have rotated";
  {
    std::ofstream(files_in(trail).back(), std::ios::app) << "{\"seq\":61,\"ts_ns\":";  // a crash mid-write
    AuditLog log({trail, 4096, std::chrono::hours(1), "n"});
    decide(log, event(500, "ehr", "true"));
  }
  const auto v = verify(trail);
  EXPECT_TRUE(v.ok) << v.where << ": " << v.reason;
  EXPECT_EQ(v.records, 61u);
  EXPECT_EQ(v.first_seq, 1u);
  EXPECT_EQ(v.unsealed, 0u) << "a clean exit seals";
  EXPECT_EQ(records_in(trail).back()["pid"], 500);
}

TEST(AuditVerify, NamesTheChangedRecordAndARemovedOne) {
  test::TempDir dir("mcp-audit");
  const fs::path trail = dir.path() / "trail";
  const fs::path file = five_records(trail);
  const std::string good = test::slurp(file);
  std::vector<std::string> lines;
  std::istringstream in(good);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 5u);

  // One byte of record 3 changed: record 3 is named.
  std::string changed = good;
  const size_t at = good.find("\"pid\":102");
  ASSERT_NE(at, std::string::npos);
  changed[at + 8] = '9';
  test::write_file(file, changed);
  auto v = verify(trail, {file});
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.where, file.string() + ":3");
  EXPECT_EQ(v.records, 2u);

  // Record 3 removed: the one after the gap is named.
  test::write_file(file, lines[0] + "\n" + lines[1] + "\n" + lines[3] + "\n" + lines[4] + "\n");
  v = verify(trail, {file});
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.where, file.string() + ":3");

  test::write_file(file, good);
  EXPECT_TRUE(verify(trail, {file}).ok);
}

TEST(AuditLog, TheKeyIsCreatedPrivateOutsideTheDirAndAForeignOrMissingOneIsRefused) {
  test::TempDir dir("mcp-audit");
  const fs::path trail = dir.path() / "trail", key = dir.path() / "trail.key";
  EXPECT_EQ(default_key_file(trail / ""), key);
  {
    AuditLog log({trail, 1 << 20, std::chrono::hours(1), "n"});
    decide(log, event(8, "ehr", "true"));
  }
  struct stat st {};
  ASSERT_EQ(::stat(key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(test::slurp(key).size(), 65u) << "64 hex digits and a newline";
  const std::string good_key = test::slurp(key);

  // Another key: the writer will not chain onto records it cannot vouch for; verify names the seal.
  const fs::path other = dir.write("other.key", std::string(64, 'a') + "\n");
  ::chmod(other.c_str(), 0600);
  EXPECT_THROW(AuditLog({trail, 1 << 20, std::chrono::hours(1), "n", other}), Error);
  auto v = verify_trail(files_in(trail), seal_file(trail), read_key(other));
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.where, seal_file(trail).string());
  // A key others can read, or a link to one, could be swapped or copied: refused.
  ::chmod(key.c_str(), 0640);
  EXPECT_THROW(AuditLog({trail, 1 << 20, std::chrono::hours(1), "n"}), Error);
  ::chmod(key.c_str(), 0600);
  const fs::path link = dir.path() / "link.key";
  fs::create_symlink(key, link);
  EXPECT_THROW(AuditLog({trail, 1 << 20, std::chrono::hours(1), "n", link}), Error);
  // A missing key is not replaced by a new one for an existing trail.
  fs::remove(key);
  EXPECT_THROW(AuditLog({trail, 1 << 20, std::chrono::hours(1), "n"}), Error);
  EXPECT_FALSE(fs::exists(key));
  test::write_file(key, good_key);
  ::chmod(key.c_str(), 0600);
  EXPECT_NO_THROW(AuditLog({trail, 1 << 20, std::chrono::hours(1), "n"}));
}

// A restart would otherwise seal over what was cut while the agent was down.
TEST(AuditLog, ARestartRefusesATrailShorterThanItsSeal) {
  test::TempDir dir("mcp-audit");
  const fs::path trail = dir.path() / "trail";
  const fs::path file = five_records(trail);
  std::string text = test::slurp(file);
  text.resize(text.rfind('\n', text.size() - 2) + 1);  // the last record, cut at a line boundary
  test::write_file(file, text);
  EXPECT_THROW(AuditLog({trail, 1 << 20, std::chrono::hours(1), "n"}), Error);
  fs::remove(seal_file(trail));
  EXPECT_THROW(AuditLog({trail, 1 << 20, std::chrono::hours(1), "n"}), Error) << "nor one without its seal";
}

// Retention inside the writer: the seal moves its head to the first file kept, so what was
// pruned is not a gap, and a file removed by anyone else still is.
TEST(AuditLog, MaxFilesRemovesTheOldestAndTheSealNamesTheNewHead) {
  test::TempDir dir("mcp-audit");
  const fs::path trail = dir.path() / "trail";
  {
    AuditLog log({trail, 4096, std::chrono::hours(1), "n", {}, 3});
    for (uint32_t i = 0; i < 80; i++) decide(log, event(100 + i, "ehr", "true"));
  }
  const auto files = files_in(trail);
  ASSERT_EQ(files.size(), 3u);
  auto v = verify(trail);
  EXPECT_TRUE(v.ok) << v.where << ": " << v.reason;
  EXPECT_GT(v.first_seq, 1u);
  EXPECT_EQ(v.first_seq + v.records - 1, 80u);
  fs::remove(files.front());
  v = verify(trail);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.where, files[1].string());
}

// A trail with no records is fine only when its seal says so; nothing else is "0 records".
TEST(AuditVerify, AnEmptyTrailPassesOnlyAsSealedAndDevNullNever) {
  test::TempDir dir("mcp-audit");
  const fs::path trail = dir.path() / "trail";
  { AuditLog log({trail, 1 << 20, std::chrono::hours(1), "n"}); }
  auto v = verify(trail);
  EXPECT_TRUE(v.ok) << v.where << ": " << v.reason;
  EXPECT_EQ(v.records, 0u);
  const Key key = read_key(default_key_file(trail));
  v = verify_trail({"/dev/null"}, seal_file("/dev"), key);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.where, "/dev/audit.seal");
  v = verify_trail({"/dev/null"}, seal_file(trail), key);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.where, "/dev/null");
  v = verify_trail({}, seal_file(trail), key);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.where, (trail / "audit-000000000001.jsonl").string());
}

// Issue 51, finding 4, at the writer: on a full disk record() says no (the caller withholds
// the event), the failure is logged at once and then rate-limited, health says why, nothing
// half-written stays, and once there is room the chain goes on whole and health recovers.
TEST(AuditLog, AFullDiskRefusesRecordsLogsOnceIsUnhealthyAndRecovers) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  test::TempDir dir("mcp-audit");
  const fs::path mnt = dir.path() / "small";
  fs::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) GTEST_SKIP() << "cannot mount tmpfs: " << strerror(errno);
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("audit-test", sink));
  const auto log_text = [&] {
    std::string out;
    for (const auto& line : sink->last_formatted()) out += line;
    return out;
  };
  {
    // Sealed every 4 records: the records fitting in the file's last page still go, the seal
    // (a new file) already cannot, and must be retried once there is room.
    AuditLog log({mnt / "trail", 1 << 20, std::chrono::hours(1), "n", {}, 0, 4});
    decide(log, event(99, "ehr", "true"));
    ASSERT_TRUE(log.health_problem().empty()) << log.health_problem();
    {
      std::ofstream fill(mnt / "filler", std::ios::binary);
      const std::string block(4096, 'x');
      while (fill.write(block.data(), block.size()) && fill.flush()) {
      }
    }
    size_t refused = 0;
    for (uint32_t i = 0; i < 200; i++) {
      Event e = event(100 + i, "ehr", "true");
      rules::Decision d;
      rules::apply(rule_set(), e, d);
      refused += !log.record(rule_set(), d, e);
    }
    EXPECT_GT(refused, 0u);
    EXPECT_EQ(log.failures(), refused);
    EXPECT_EQ(log.dropped_events(), refused);
    EXPECT_EQ(log.records() + refused, 201u);
    EXPECT_NE(log.health_problem().find("No space left on device"), std::string::npos) << log.health_problem();
    const std::string said = log_text();
    EXPECT_NE(said.find("No space left on device"), std::string::npos) << said;
    EXPECT_NE(said.find("cannot write the seal"), std::string::npos) << said;
    EXPECT_EQ(sink->last_formatted().size(), 2u) << "a line for the seal and one for the records, not one per record:\n" << said;

    fs::remove(mnt / "filler");
    decide(log, event(500, "ehr", "true"));
    EXPECT_TRUE(log.health_problem().empty()) << log.health_problem();
    EXPECT_NE(log_text().find("writing again"), std::string::npos) << log_text();
  }
  spdlog::set_default_logger(previous);
  const auto v = verify(mnt / "trail");
  EXPECT_TRUE(v.ok) << v.where << ": " << v.reason;
  EXPECT_EQ(v.unsealed, 0u);
  EXPECT_EQ(v.records, records_in(mnt / "trail").size());
  EXPECT_EQ(records_in(mnt / "trail").back()["pid"], 500);
  umount2(mnt.c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace mcp::audit
