#include "reload/watcher.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "config_dir.h"
#include "reload/reloader.h"

namespace mcp::reload {
namespace {

using namespace mcp::reload::testing;

// The daemon's wiring: watcher -> reloader -> store.
struct Daemon {
  ConfigStore store;
  Reloader reloader;
  ConfigWatcher watcher;
  explicit Daemon(const fs::path& config)
      : reloader(config, store), watcher(config, [this](Trigger t) { reloader.on_trigger(t); }) {
    reloader.load_initial();
  }
  std::string node() const { return store.current()->node_name; }
};

TEST(ConfigWatcher, KubeletSymlinkSwapReloads) {
  TempDir dir;
  ConfigMapDir cm(dir.path());
  cm.update(config_text("first"));
  ASSERT_TRUE(fs::is_symlink(cm.config_path()));
  Daemon d(cm.config_path());
  EXPECT_EQ(d.node(), "first");
  const ConfigSnapshot old = d.store.current();

  cm.update(config_text("second", 0.125));
  ASSERT_TRUE(wait_until([&] { return d.node() == "second"; }));
  EXPECT_EQ(d.store.current()->probes[0].sampling.rate, 0.125);
  EXPECT_EQ(old->node_name, "first");  // holders of the old snapshot are unaffected

  cm.update(config_text("third"));
  ASSERT_TRUE(wait_until([&] { return d.node() == "third"; }));
  EXPECT_EQ(d.reloader.stats().failures, 0u);
}

TEST(ConfigWatcher, InvalidSwapIsRejectedAndCountedAndTheOldConfigStays) {
  TempDir dir;
  ConfigMapDir cm(dir.path());
  cm.update(config_text("good"));
  Daemon d(cm.config_path());
  cm.update("node_name: bad\nservices:\n  - {service: a, strategy: weighted, target_qps: 1, weights: {v1: 60, v2: 30}}\n");
  ASSERT_TRUE(wait_until([&] { return d.reloader.stats().failures >= 1; }));
  EXPECT_EQ(d.node(), "good");
  EXPECT_NE(d.reloader.stats().last_error.find("weights sum to 90"), std::string::npos);
  // The next good swap goes through.
  cm.update(config_text("better"));
  ASSERT_TRUE(wait_until([&] { return d.node() == "better"; }));
  EXPECT_EQ(d.reloader.stats().last_error, "");
}

TEST(ConfigWatcher, PlainEditReloads) {
  TempDir dir;
  const auto path = dir.path() / "agent.yaml";
  write_file(path, config_text("before"));
  Daemon d(path);
  write_file(path, config_text("after"));
  ASSERT_TRUE(wait_until([&] { return d.node() == "after"; }));
}

TEST(ConfigWatcher, RenameOverReloads) {
  TempDir dir;
  const auto path = dir.path() / "agent.yaml";
  write_file(path, config_text("before"));
  Daemon d(path);
  write_file(dir.path() / ".agent.yaml.tmp", config_text("after"));
  fs::rename(dir.path() / ".agent.yaml.tmp", path);
  ASSERT_TRUE(wait_until([&] { return d.node() == "after"; }));
}

TEST(ConfigWatcher, BurstOfWritesEndsOnTheLastContent) {
  TempDir dir;
  const auto path = dir.path() / "agent.yaml";
  write_file(path, config_text("n0"));
  Daemon d(path);
  for (int i = 1; i <= 50; ++i) write_file(path, config_text("n" + std::to_string(i)));
  ASSERT_TRUE(wait_until([&] { return d.node() == "n50"; }));
}

TEST(ConfigWatcher, SighupForcesAReload) {
  TempDir dir;
  const auto path = dir.path() / "agent.yaml";
  write_file(path, config_text("x"));
  std::mutex mu;
  std::vector<Trigger> triggers;
  ConfigWatcher w(path, [&](Trigger t) {
    std::lock_guard l(mu);
    triggers.push_back(t);
  });
  install_sighup_trigger(w);
  raise(SIGHUP);
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard l(mu);
    return !triggers.empty();
  }));
  remove_sighup_trigger();
  std::lock_guard l(mu);
  EXPECT_EQ(triggers[0], Trigger::kForced);
}

TEST(ConfigWatcher, IgnoresKubeletBookkeepingAndEditorFiles) {
  EXPECT_TRUE(ConfigWatcher::relevant("agent.yaml"));
  EXPECT_TRUE(ConfigWatcher::relevant("..data"));
  EXPECT_TRUE(ConfigWatcher::relevant("rules.mcp"));
  EXPECT_TRUE(ConfigWatcher::relevant(".agent.yaml.tmp"));  // may be renamed over the file next
  EXPECT_FALSE(ConfigWatcher::relevant("..data_tmp"));
  EXPECT_FALSE(ConfigWatcher::relevant("..2026_12_02_10_00_00.123456789"));
  EXPECT_FALSE(ConfigWatcher::relevant("agent.yaml~"));
  EXPECT_FALSE(ConfigWatcher::relevant(".agent.yaml.swp"));
}

TEST(ConfigWatcher, MissingDirectoryIsARuntimeError) {
  EXPECT_THROW(ConfigWatcher("/nonexistent-dir/agent.yaml", [](Trigger) {}), mcp::Error);
}

}  // namespace
}  // namespace mcp::reload
