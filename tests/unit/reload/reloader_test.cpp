#include "reload/reloader.h"

#include <gtest/gtest.h>

#include "config/parse_config.h"
#include "config_dir.h"

namespace mcp::reload {
namespace {

using namespace mcp::reload::testing;

TEST(Reloader, InitialLoadPublishesAndAppliesEverythingAsAdded) {
  TempDir dir;
  write_file(dir.path() / "agent.yaml", config_text("one"));
  ConfigStore store;
  size_t added = 0;
  bool had_before = true;
  Reloader r(dir.path() / "agent.yaml", store, [&](const ConfigSnapshot& b, const ConfigSnapshot&, const ConfigDiff& d) {
    had_before = b != nullptr;
    added = d.added.size();
  });
  r.load_initial();
  EXPECT_EQ(store.current()->node_name, "one");
  EXPECT_FALSE(had_before);
  EXPECT_EQ(added, 1u);
  EXPECT_EQ(r.stats().successes, 1u);
}

TEST(Reloader, InitialLoadOfABadFileThrowsWithPosition) {
  TempDir dir;
  write_file(dir.path() / "agent.yaml", "node_nam: x\n");
  ConfigStore store;
  Reloader r(dir.path() / "agent.yaml", store);
  try {
    r.load_initial();
    FAIL();
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("agent.yaml:1:1: unknown key 'node_nam'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.current(), nullptr);
}

TEST(Reloader, InvalidFileIsRejectedCountedAndThePreviousConfigStays) {
  TempDir dir;
  const auto path = dir.path() / "agent.yaml";
  write_file(path, config_text("good"));
  ConfigStore store;
  int applied = 0;
  Reloader r(path, store, [&](auto&, auto&, auto&) { ++applied; });
  const ConfigSnapshot good = r.load_initial();

  write_file(path, "node_name: bad\nsyscalls:\n  - name: openat\n    sampling: {rate: 7}\n");
  EXPECT_EQ(r.reload(), ReloadOutcome::kRejected);
  EXPECT_EQ(store.current(), good);
  EXPECT_EQ(applied, 1);
  ReloadStats s = r.stats();
  EXPECT_EQ(s.failures, 1u);
  EXPECT_EQ(s.last_error, path.string() + ":4:22: sampling.rate must be in [1e-6, 1]");

  // The same bad content seen again (a second inotify event) is not counted twice...
  EXPECT_EQ(r.reload(), ReloadOutcome::kRejected);
  EXPECT_EQ(r.stats().failures, 1u);
  // ...but a forced reload (SIGHUP) reports it again.
  EXPECT_EQ(r.reload(true), ReloadOutcome::kRejected);
  EXPECT_EQ(r.stats().failures, 2u);

  // Fixing the file applies it and clears the error.
  write_file(path, config_text("fixed"));
  EXPECT_EQ(r.reload(), ReloadOutcome::kApplied);
  EXPECT_EQ(store.current()->node_name, "fixed");
  s = r.stats();
  EXPECT_EQ(s.successes, 2u);
  EXPECT_EQ(s.last_error, "");
}

TEST(Reloader, FileMadeWritableByOthersIsRejectedAndThePreviousConfigStays) {
  TempDir dir;
  const auto path = dir.path() / "agent.yaml";
  write_file(path, config_text("good"));
  ConfigStore store;
  Reloader r(path, store);
  const ConfigSnapshot good = r.load_initial();
  write_file(path, config_text("planted"));
  std::filesystem::permissions(path, std::filesystem::perms::others_write, std::filesystem::perm_options::add);
  EXPECT_EQ(r.reload(), ReloadOutcome::kRejected);
  EXPECT_EQ(store.current(), good);
  EXPECT_EQ(r.stats().failures, 1u);
  EXPECT_NE(r.stats().last_error.find("is writable by group or others"), std::string::npos) << r.stats().last_error;
  // The same text made safe again is a new edit, applied on its event (no SIGHUP needed).
  std::filesystem::permissions(path, std::filesystem::perms::others_write, std::filesystem::perm_options::remove);
  EXPECT_EQ(r.reload(), ReloadOutcome::kApplied);
  EXPECT_EQ(store.current()->node_name, "planted");
}

TEST(Reloader, DeletedFileIsAFailureNotACrash) {
  TempDir dir;
  const auto path = dir.path() / "agent.yaml";
  write_file(path, config_text("good"));
  ConfigStore store;
  Reloader r(path, store);
  r.load_initial();
  std::filesystem::remove(path);
  EXPECT_EQ(r.reload(), ReloadOutcome::kRejected);
  EXPECT_EQ(store.current()->node_name, "good");
  EXPECT_NE(r.stats().last_error.find("cannot read"), std::string::npos);
}

TEST(Reloader, SameConfigurationIsNotRepublished) {
  TempDir dir;
  const auto path = dir.path() / "agent.yaml";
  write_file(path, config_text("same"));
  ConfigStore store;
  Reloader r(path, store);
  r.load_initial();
  // Different text, same meaning (a comment added).
  write_file(path, "# comment\n" + config_text("same"));
  EXPECT_EQ(r.reload(), ReloadOutcome::kUnchanged);
  EXPECT_EQ(store.version(), 1u);
  EXPECT_EQ(r.stats().unchanged, 1u);
}

TEST(Reloader, ApplierGetsTheDiffBeforeReadersSeeTheNewConfig) {
  TempDir dir;
  const auto path = dir.path() / "agent.yaml";
  write_file(path, config_text("a", 0.5));
  ConfigStore store;
  std::string seen_in_store;
  size_t sampling_changes = 0;
  Reloader r(path, store, [&](const ConfigSnapshot&, const ConfigSnapshot&, const ConfigDiff& d) {
    seen_in_store = store.current() ? store.current()->node_name : "";
    sampling_changes = d.sampling_changed.size();
  });
  r.load_initial();
  write_file(path, config_text("a", 0.25));
  EXPECT_EQ(r.reload(), ReloadOutcome::kApplied);
  EXPECT_EQ(seen_in_store, "a");
  EXPECT_EQ(sampling_changes, 1u);
  EXPECT_EQ(store.current()->probes[0].sampling.rate, 0.25);
}

TEST(Reloader, ApplierFailureKeepsThePreviousConfig) {
  TempDir dir;
  const auto path = dir.path() / "agent.yaml";
  write_file(path, config_text("a"));
  ConfigStore store;
  bool fail = false;
  Reloader r(path, store, [&](auto&, auto&, auto&) {
    if (fail) throw std::runtime_error("attach failed");
  });
  r.load_initial();
  fail = true;
  write_file(path, config_text("b"));
  EXPECT_EQ(r.reload(), ReloadOutcome::kRejected);
  EXPECT_EQ(store.current()->node_name, "a");
  EXPECT_NE(r.stats().last_error.find("attach failed"), std::string::npos);
  EXPECT_EQ(r.stats().failures, 1u);
  // Issue 29: a second event for the same edit (one `mv` gave two) neither retries nor counts;
  // SIGHUP does both.
  EXPECT_EQ(r.reload(), ReloadOutcome::kRejected);
  EXPECT_EQ(r.stats().failures, 1u);
  EXPECT_EQ(r.reload(true), ReloadOutcome::kRejected);
  EXPECT_EQ(r.stats().failures, 2u);
  fail = false;
  EXPECT_EQ(r.reload(true), ReloadOutcome::kApplied);
  EXPECT_EQ(store.current()->node_name, "b");
}

}  // namespace
}  // namespace mcp::reload
