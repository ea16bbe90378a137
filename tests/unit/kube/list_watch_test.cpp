// ListWatch against the fake API server (tests/support/fake_apiserver.h) over real TLS on
// 127.0.0.1: list then watch from the list's version, the node's field selector and the
// bearer token, 410 Gone (status and ERROR event) -> relist, a dropped connection -> watch
// again from the last version, a bookmark advancing that version, failures logged once per
// change of state and the token file read again when it changes.
#include "kube/list_watch.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "../../support/fake_apiserver.h"
#include "../../support/wait_until.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using mcp::test::FakeApiServer;
using mcp::test::wait_until;
using nlohmann::json;

class ListWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FakeApiServer::available()) GTEST_SKIP() << "no openssl CLI to make the fake API server's certificate";
    dir_ = fs::temp_directory_path() / ("mcp-kube-lw-" + std::to_string(getpid()));
    server_ = std::make_unique<FakeApiServer>(dir_);
  }
  void TearDown() override {
    watch_.reset();
    server_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void start() {
    mcp::kube::ListWatchOptions o;
    o.path = "/api/v1/pods";
    o.field_selector = "spec.nodeName=node-a";
    o.what = "pod watch";
    o.backoff_initial = 10ms;
    o.backoff_max = 100ms;
    o.log = [this](bool warning, const std::string& line) {
      std::lock_guard lk(mu_);
      log_.push_back((warning ? "W " : "I ") + line);
    };
    mcp::kube::ListWatchHandlers h;
    h.on_list = [this](const std::vector<json>& items) {
      std::lock_guard lk(mu_);
      view_.clear();
      for (const auto& p : items) view_[p["metadata"]["uid"]] = p["metadata"]["name"];
    };
    h.on_event = [this](std::string_view type, const json& p) {
      std::lock_guard lk(mu_);
      types_.emplace_back(type);
      if (type == "DELETED") view_.erase(p["metadata"]["uid"].get<std::string>());
      else view_[p["metadata"]["uid"]] = p["metadata"]["name"];
    };
    watch_ = std::make_unique<mcp::kube::ListWatch>(
        mcp::kube::ApiConfig{server_->url(), server_->token_file(), server_->ca_file()}, o, h);
    watch_->start();
  }
  std::map<std::string, std::string> view() {
    std::lock_guard lk(mu_);
    return view_;
  }
  std::vector<std::string> log() {
    std::lock_guard lk(mu_);
    return log_;
  }
  std::vector<FakeApiServer::Request> watches() {
    std::vector<FakeApiServer::Request> out;
    for (const auto& r : server_->requests())
      if (r.watch()) out.push_back(r);
    return out;
  }
  static json pod(const std::string& name, const std::string& node = "node-a") {
    return FakeApiServer::make_pod("default", name, "uid-" + name, node);
  }
  // The client has its watch open, the n-th watch request so far.
  bool watching(size_t n) {
    return wait_until([&] { return server_->open_watches() == 1 && watches().size() == n; });
  }

  fs::path dir_;
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<mcp::kube::ListWatch> watch_;
  std::mutex mu_;
  std::map<std::string, std::string> view_;  // uid -> name
  std::vector<std::string> types_;
  std::vector<std::string> log_;
};

TEST_F(ListWatchTest, ListsThenWatchesFromTheListsVersionWithTheNodesSelectorAndToken) {
  server_->put_pod(pod("a"));
  server_->put_pod(pod("elsewhere", "node-b"));
  const uint64_t listed_at = server_->resource_version();
  start();
  ASSERT_TRUE(watch_->wait_synced(10s));
  EXPECT_EQ(view(), (std::map<std::string, std::string>{{"uid-a", "a"}}));
  ASSERT_TRUE(watching(1));
  const auto reqs = server_->requests();
  ASSERT_GE(reqs.size(), 2u);
  EXPECT_FALSE(reqs[0].watch());
  EXPECT_EQ(reqs[0].param("fieldSelector"), "spec.nodeName=node-a");
  EXPECT_EQ(reqs[0].authorization, "Bearer test-token-1");
  EXPECT_TRUE(reqs[1].watch());
  EXPECT_EQ(reqs[1].param("resourceVersion"), std::to_string(listed_at));
  EXPECT_EQ(reqs[1].param("allowWatchBookmarks"), "true");
  EXPECT_EQ(reqs[1].param("fieldSelector"), "spec.nodeName=node-a");

  server_->put_pod(pod("b"));
  auto renamed = pod("a");
  renamed["metadata"]["labels"]["app"] = "web";
  server_->put_pod(renamed);
  server_->put_pod(pod("other", "node-b"));  // not this node's: never seen
  server_->delete_pod("uid-b");
  ASSERT_TRUE(wait_until([&] { return watch_->stats().events == 3; }));
  EXPECT_EQ(view(), (std::map<std::string, std::string>{{"uid-a", "a"}}));
  EXPECT_EQ(types_, (std::vector<std::string>{"ADDED", "MODIFIED", "DELETED"}));
  EXPECT_EQ(watch_->stats().lists, 1u);
  EXPECT_TRUE(log().empty()) << log()[0];
}

// The client's version is compacted away while it is disconnected: the watch it asks for
// is answered 410 and it lists again, then watches from the new list's version.
void relists_on_gone(ListWatchTest* t, FakeApiServer& server, mcp::kube::ListWatch& watch) {
  (void)t;
  server.put_pod(FakeApiServer::make_pod("default", "late", "uid-late", "node-b"));  // invisible: the client's version stays old
  server.compact();
  const uint64_t now = server.resource_version();
  server.drop_watches();
  ASSERT_TRUE(wait_until([&] { return watch.stats().lists == 2; })) << "no relist after 410";
  EXPECT_EQ(watch.stats().gone, 1u);
  EXPECT_EQ(watch.stats().resource_version, std::to_string(now));
}

TEST_F(ListWatchTest, RelistsWhenTheWatchIsAnswered410Gone) {
  server_->put_pod(pod("a"));
  start();
  ASSERT_TRUE(watching(1));
  relists_on_gone(this, *server_, *watch_);
  ASSERT_TRUE(watching(3)) << "the watch after the relist";
  EXPECT_EQ(watches().back().param("resourceVersion"), std::to_string(server_->resource_version()));
  server_->put_pod(pod("b"));
  EXPECT_TRUE(wait_until([&] { return view().count("uid-b") == 1; }));
}

TEST_F(ListWatchTest, RelistsOnAnErrorEventWithCode410) {
  server_->set_gone_as(FakeApiServer::GoneAs::kErrorEvent);
  server_->put_pod(pod("a"));
  start();
  ASSERT_TRUE(watching(1));
  relists_on_gone(this, *server_, *watch_);
  ASSERT_TRUE(watching(3));
  server_->put_pod(pod("b"));
  EXPECT_TRUE(wait_until([&] { return view().count("uid-b") == 1; }));
}

TEST_F(ListWatchTest, ResumesFromTheLastVersionAfterADroppedConnection) {
  start();
  ASSERT_TRUE(watching(1));
  const uint64_t b = server_->put_pod(pod("b"));
  ASSERT_TRUE(wait_until([&] { return view().count("uid-b") == 1; }));
  server_->drop_watches();
  ASSERT_TRUE(watching(2));
  EXPECT_EQ(watches()[1].param("resourceVersion"), std::to_string(b));
  server_->put_pod(pod("c"));
  ASSERT_TRUE(wait_until([&] { return view().count("uid-c") == 1; }));
  EXPECT_EQ(watch_->stats().lists, 1u) << "a drop is not a reason to list again";
  const auto lines = log();
  ASSERT_EQ(lines.size(), 2u);  // the drop, then the recovery at the next event
  EXPECT_EQ(lines[0].rfind("W pod watch: watch dropped: ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1], "I pod watch: watching again");
}

// Changes to other nodes' pods move the server's version without an event on this watch; a
// bookmark tells the client, so after a compaction and a drop it resumes without a relist.
TEST_F(ListWatchTest, BookmarkAdvancesTheVersion) {
  start();
  ASSERT_TRUE(watching(1));
  for (int i = 0; i < 3; i++) server_->put_pod(pod("far-" + std::to_string(i), "node-b"));
  const uint64_t now = server_->resource_version();
  server_->bookmark();
  ASSERT_TRUE(wait_until([&] { return watch_->stats().bookmarks == 1; }));
  EXPECT_EQ(watch_->stats().resource_version, std::to_string(now));
  server_->compact();
  server_->drop_watches();
  ASSERT_TRUE(watching(2));
  EXPECT_EQ(watches()[1].param("resourceVersion"), std::to_string(now));
  EXPECT_EQ(watch_->stats().lists, 1u);
  EXPECT_EQ(watch_->stats().gone, 0u);
}

// A refused list is retried with backoff and logged once; the token file is read again
// when it changes, and the recovery is logged once.
TEST_F(ListWatchTest, FailureIsLoggedOncePerStateChangeAndANewTokenIsPickedUp) {
  server_->accept_token("rotated-token");
  start();
  ASSERT_TRUE(wait_until([&] { return watch_->stats().failures >= 3; }));
  EXPECT_EQ(log(), (std::vector<std::string>{"W pod watch: list failed: HTTP 401: Unauthorized"}));
  server_->write_token("rotated-token");
  ASSERT_TRUE(watch_->wait_synced(10s));
  EXPECT_EQ(server_->requests().back().authorization, "Bearer rotated-token");
  const auto lines = log();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "I pod watch: listed 0 object(s), watching again");
}

TEST_F(ListWatchTest, AServerWithAnotherCertificateIsRefused) {
  const fs::path other = dir_ / "other";
  fs::create_directories(other);
  ASSERT_EQ(mcp::test::run_command({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", (other / "k").string(), "-out",
                                    (other / "ca.crt").string(), "-days", "2", "-subj", "/CN=127.0.0.1"})
                .exit_code,
            0);
  mcp::kube::ListWatchOptions o;
  o.path = "/api/v1/pods";
  o.backoff_initial = 10ms;
  o.log = [this](bool, const std::string& line) {
    std::lock_guard lk(mu_);
    log_.push_back(line);
  };
  mcp::kube::ListWatch w({server_->url(), server_->token_file(), (other / "ca.crt").string()}, o,
                         {[](const std::vector<json>&) {}, [](std::string_view, const json&) {}});
  w.start();
  ASSERT_TRUE(wait_until([&] { return w.stats().failures >= 2; }));
  EXPECT_FALSE(w.wait_synced(0ms));
  ASSERT_EQ(log().size(), 1u);
  EXPECT_NE(log()[0].find("certificate"), std::string::npos) << log()[0];
  EXPECT_TRUE(server_->requests().empty()) << "no request may cross an unverified connection";
}

}  // namespace
