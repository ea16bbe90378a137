// The audit trail on real files: which decisions are recorded (and that removed values never
// are), the hash chain across rotation and restarts, a torn last line, a full disk, and
// `verify` naming the first changed, removed or reordered record.
#include "audit/audit_log.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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
  EXPECT_EQ(recs[1]["prev"], recs[0]["hash"]);
  // The process as the sinks see it: its redacted comm, not the value removed.
  EXPECT_EQ(recs[0]["comm"], "[redacted]");
  EXPECT_EQ(recs[1]["comm"], "patient-db");
  const std::string text = test::slurp(log.current_file());
  EXPECT_EQ(text.find(std::to_string(0x5ec12e7)), std::string::npos) << "a removed value reached the trail";
  const auto v = verify_chain(files_in(dir.path() / "trail"));
  EXPECT_TRUE(v.ok) << v.where << ": " << v.reason;
  EXPECT_EQ(v.records, 2u);
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
  const auto v = verify_chain(files_in(trail));
  EXPECT_TRUE(v.ok) << v.where << ": " << v.reason;
  EXPECT_EQ(v.records, 61u);
  EXPECT_EQ(v.first_seq, 1u);
  EXPECT_EQ(records_in(trail).back()["pid"], 500);
}

TEST(AuditVerify, NamesTheChangedRecordAndARemovedOne) {
  test::TempDir dir("mcp-audit");
  const fs::path trail = dir.path() / "trail";
  {
    AuditLog log({trail, 1 << 20, std::chrono::hours(1), "n"});
    for (uint32_t i = 0; i < 5; i++) decide(log, event(100 + i, "ehr", "true"));
  }
  const fs::path file = files_in(trail).front();
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
  auto v = verify_chain({file});
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.where, file.string() + ":3");
  EXPECT_EQ(v.records, 2u);

  // Record 3 removed: the one after the gap is named.
  test::write_file(file, lines[0] + "\n" + lines[1] + "\n" + lines[3] + "\n" + lines[4] + "\n");
  v = verify_chain({file});
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.where, file.string() + ":3");

  test::write_file(file, good);
  EXPECT_TRUE(verify_chain({file}).ok);
}

// A full disk: the record is counted as failed, nothing half-written stays, and the chain
// goes on whole once there is room.
TEST(AuditLog, AFullDiskIsCountedAndTheChainStaysWhole) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  test::TempDir dir("mcp-audit");
  const fs::path mnt = dir.path() / "small";
  fs::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=16k") != 0) GTEST_SKIP() << "cannot mount tmpfs: " << strerror(errno);
  {
    AuditLog log({mnt / "trail", 1 << 20, std::chrono::hours(1), "n"});
    for (uint32_t i = 0; i < 200; i++) decide(log, event(100 + i, "ehr", "true"));
    EXPECT_GT(log.failures(), 0u);
    EXPECT_GT(log.records(), 0u);
    EXPECT_EQ(log.records() + log.failures(), 200u);
    const auto v = verify_chain(files_in(mnt / "trail"));
    EXPECT_TRUE(v.ok) << v.where << ": " << v.reason;
    EXPECT_EQ(v.records, log.records());
  }
  umount2(mnt.c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace mcp::audit
