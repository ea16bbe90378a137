// JSON / table formatting checked by parsing the output, and StreamSink writing
// through real file descriptors (a file, a pipe, a pipe whose reader is gone).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/event.h"
#include "output/formatter.h"
#include "output/stream_sink.h"

namespace mcp::output {
namespace {

using nlohmann::json;

Event make_event(EventKind kind) {
  Event e;
  e.ts_ns = 1700000000123456789ull;
  e.ktime_ns = 987654321ull;
  e.kind = kind;
  e.probe = "/usr/bin/workload:target";
  e.pid = 100;
  e.tid = 101;
  e.cpu = 2;
  e.cgroup_id = 0xfeedull;
  std::copy_n("workload", 9, e.comm.begin());
  e.nargs = 6;
  e.args = {1, 2, 3, 42, 0, UINT64_MAX};
  return e;
}

std::string format_with(const std::string& name, const Event& e) {
  std::string out;
  make_formatter(name)->format(e, out);
  return out;
}

json format_json(const Event& e) {
  const std::string line = format_with("json", e);
  EXPECT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one object per line";
  return json::parse(line);  // throws (test error) when not valid JSON
}

TEST(JsonFormatter, UretprobeHasEveryIssueField) {
  auto e = make_event(EventKind::kUretprobe);
  e.has_ret = true;
  e.ret = -14;
  e.has_duration = true;
  e.duration_ns = 2500;
  e.threshold = probability_to_threshold(0.1);
  const json j = format_json(e);
  EXPECT_EQ(j.at("ts_ns").get<uint64_t>(), 1700000000123456789ull);
  EXPECT_EQ(j.at("ktime_ns").get<uint64_t>(), 987654321ull);
  EXPECT_EQ(j.at("kind"), "uretprobe");
  EXPECT_EQ(j.at("probe"), "/usr/bin/workload:target");
  EXPECT_EQ(j.at("pid"), 100);
  EXPECT_EQ(j.at("tid"), 101);
  EXPECT_EQ(j.at("comm"), "workload");
  EXPECT_EQ(j.at("cgroup_id"), 0xfeed);
  EXPECT_EQ(j.at("cpu"), 2);
  ASSERT_TRUE(j.at("args").is_array());
  EXPECT_EQ(j.at("args").get<std::vector<uint64_t>>(), (std::vector<uint64_t>{1, 2, 3, 42, 0, UINT64_MAX}));
  EXPECT_EQ(j.at("ret").get<int64_t>(), -14);
  EXPECT_EQ(j.at("duration_ns").get<uint64_t>(), 2500u);
  EXPECT_NEAR(j.at("weight").get<double>(), 10.0, 1e-9);
}

TEST(JsonFormatter, DurationAndRetOnlyWhereKnown) {
  const json j = format_json(make_event(EventKind::kUprobe));
  EXPECT_EQ(j.at("kind"), "uprobe");
  EXPECT_FALSE(j.contains("duration_ns"));
  EXPECT_FALSE(j.contains("ret"));
  EXPECT_EQ(j.at("weight").get<double>(), 1.0);
  EXPECT_FALSE(j.contains("hlc"));  // not stamped yet
}

TEST(JsonFormatter, SyscallArgsFollowArity) {
  auto e = make_event(EventKind::kSyscall);
  e.probe = "syscall:getppid";
  e.nargs = 0;
  e.has_ret = true;
  e.ret = 1;
  e.has_duration = true;
  e.duration_ns = 300;
  json j = format_json(e);
  EXPECT_EQ(j.at("kind"), "syscall");
  EXPECT_EQ(j.at("probe"), "syscall:getppid");
  EXPECT_TRUE(j.at("args").is_array());
  EXPECT_TRUE(j.at("args").empty());
  e.nargs = 2;
  j = format_json(e);
  EXPECT_EQ(j.at("args").get<std::vector<uint64_t>>(), (std::vector<uint64_t>{1, 2}));
}

TEST(JsonFormatter, EscapesQuotesBackslashesAndControlCharsInCommAndProbe) {
  auto e = make_event(EventKind::kUprobe);
  const std::string comm = "a\"b\\c\n\t\x01\x1f";
  e.comm.fill(0);
  std::copy(comm.begin(), comm.end(), e.comm.begin());
  const std::string probe = "/tmp/we\"ird\\dir/bin\r:fn\x7f";
  e.probe = probe;
  const json j = format_json(e);
  EXPECT_EQ(j.at("comm"), comm);
  EXPECT_EQ(j.at("probe"), probe);
}

TEST(JsonFormatter, CommCutMidUtf8CharacterStaysValidJson) {
  // The kernel truncates comm at 15 bytes, which can split a multi-byte character;
  // prctl(PR_SET_NAME) also accepts arbitrary bytes. The line must still be JSON.
  auto e = make_event(EventKind::kUprobe);
  const std::string comm = "\xd0\xb0\xd0\xb0\xd0\xb0\xd0\xb0\xd0\xb0\xd0\xb0\xd0\xb0\xd0";  // 7.5 x 'а'
  e.comm.fill(0);
  std::copy(comm.begin(), comm.end(), e.comm.begin());
  const std::string line = format_with("json", e);
  const json j = json::parse(line);  // throws (fails the test) on invalid UTF-8
  EXPECT_TRUE(j.at("comm").is_string());
  EXPECT_EQ(j.at("comm").get<std::string>().rfind("\xef\xbf\xbd"), j.at("comm").get<std::string>().size() - 3)
      << "the cut character becomes U+FFFD";
}

TEST(JsonFormatter, CommWithBytesNoDecoderAcceptsBecomesReplacementCharacters) {
  // A process picks its own comm with prctl(PR_SET_NAME): lone bytes, a lead byte above F4,
  // overlong forms, UTF-16 surrogates and code points above U+10FFFF are all invalid UTF-8.
  for (const std::string comm : {"\xff\xfe", "\xff\x80\x80", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                 "\xc0\xaf"}) {
    auto e = make_event(EventKind::kUprobe);
    e.comm.fill(0);
    std::copy(comm.begin(), comm.end(), e.comm.begin());
    const std::string line = format_with("json", e);
    json j;
    ASSERT_NO_THROW(j = json::parse(line)) << "invalid JSON for comm bytes of length " << comm.size();
    const std::string got = j.at("comm");
    EXPECT_EQ(got, [&] {
      std::string r;
      for (size_t i = 0; i < comm.size(); i++) r += "\xef\xbf\xbd";
      return r;
    }()) << "each invalid byte is one U+FFFD";
  }
}

TEST(JsonFormatter, ValidUtf8PassesThrough) {
  auto e = make_event(EventKind::kUprobe);
  const std::string comm = "caf\xc3\xa9";
  e.comm.fill(0);
  std::copy(comm.begin(), comm.end(), e.comm.begin());
  EXPECT_EQ(format_json(e).at("comm"), comm);
}
TEST(JsonFormatter, PodIdentityPrintsOnlyWhereKnown) {
  auto e = make_event(EventKind::kUprobe);
  json j = format_json(e);
  EXPECT_FALSE(j.contains("container_id"));
  EXPECT_FALSE(j.contains("pod_uid"));
  e.container_id = std::string(64, 'a');
  e.pod_uid = "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f";
  j = format_json(e);
  EXPECT_EQ(j.at("container_id"), std::string(64, 'a'));
  EXPECT_EQ(j.at("pod_uid"), "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f");
  EXPECT_FALSE(j.contains("pod"));
  EXPECT_FALSE(j.contains("namespace"));
  EXPECT_FALSE(j.contains("container"));
  EXPECT_FALSE(j.contains("pod_labels"));
  e.pod = "web-1";
  e.pod_namespace = "shop";
  e.container = "app";
  e.pod_labels = {{"app", "web"}, {"tier", "front"}};
  j = format_json(e);
  EXPECT_EQ(j.at("pod"), "web-1");
  EXPECT_EQ(j.at("namespace"), "shop");
  EXPECT_EQ(j.at("container"), "app");
  EXPECT_EQ(j.at("pod_labels"), (json{{"app", "web"}, {"tier", "front"}}));
}

// trace_id: the W3C id as 32 lowercase hex digits (leading zeros kept), only when known.
TEST(JsonFormatter, TraceIdPrintsAs32LowercaseHexOnlyWhenKnown) {
  auto e = make_event(EventKind::kUretprobe);
  e.consistent = true;
  e.threshold = uint64_t{1} << 62;  // p = 0.25: T = 3 * 2^54
  json j = format_json(e);
  EXPECT_FALSE(j.contains("trace_id"));
  EXPECT_EQ(j.at("th"), "c");
  e.trace_id_hi = 0x4BF92F3577B34DA6ull;
  e.trace_id_lo = 0x00000000000000ABull;
  j = format_json(e);
  EXPECT_EQ(j.at("trace_id"), "4bf92f3577b34da600000000000000ab");
  e.trace_id_hi = 0;  // an N:u64 id: the argument is the low half
  e.trace_id_lo = 42;
  EXPECT_EQ(format_json(e).at("trace_id"), "0000000000000000000000000000002a");
}

// The compact wire sorts tag sets by key, so trace prints them in key order too: the same
// event gives the same bytes from `trace` and from `subscribe`.
TEST(JsonFormatter, TagsAndAttributesPrintInKeyOrder) {
  auto e = make_event(EventKind::kUprobe);
  e.tags = {{"zone", "a"}, {"env", "prod"}, {"app", "x"}};
  e.attributes = {{"b", "2"}, {"a", "1"}};
  std::string out;
  make_formatter("json")->format(e, out);
  EXPECT_NE(out.find(R"("tags":{"app":"x","env":"prod","zone":"a"})"), std::string::npos) << out;
  EXPECT_NE(out.find(R"("attributes":{"a":"1","b":"2"})"), std::string::npos) << out;
}

TEST(AppendJsonString, EscapesControlCharactersAsUnicode) {
  std::string out;
  append_json_string(out, std::string_view("\x01x\x1f", 3));
  EXPECT_EQ(out, "\"\\u0001x\\u001f\"");
  out.clear();
  append_json_string(out, std::string_view("a\0b", 3));
  EXPECT_EQ(json::parse(out).get<std::string>(), std::string("a\0b", 3));
}

TEST(AppendJsonString, AppendsWithoutClearing) {
  std::string out = "x=";
  append_json_string(out, "y");
  EXPECT_EQ(out, "x=\"y\"");
}

TEST(MakeFormatter, UnknownFormatIsUsageError) {
  try {
    make_formatter("xml");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("xml"), std::string::npos);
  }
}

class TableFormatterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tz = getenv("TZ");
    had_tz_ = tz != nullptr;
    if (tz) old_tz_ = tz;
    setenv("TZ", "UTC", 1);
    tzset();
  }
  void TearDown() override {
    if (had_tz_) setenv("TZ", old_tz_.c_str(), 1);
    else unsetenv("TZ");
    tzset();
  }
  bool had_tz_ = false;
  std::string old_tz_;
};

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST_F(TableFormatterTest, HeaderNamesEveryColumn) {
  std::string h;
  make_formatter("table")->header(h);
  EXPECT_EQ(words(h), (std::vector<std::string>{"TIME", "KIND", "PID", "TID", "COMM", "PROBE", "RET", "LAT(us)",
                                                 "ARGS"}));
  EXPECT_EQ(h.back(), '\n');
}

TEST_F(TableFormatterTest, RowShowsTimeFieldsLatencyAndHexArgs) {
  auto e = make_event(EventKind::kUretprobe);
  e.ts_ns = 3661ull * 1000000000 + 500000000;  // 01:01:01.5 UTC
  e.has_ret = true;
  e.ret = -1;
  e.has_duration = true;
  e.duration_ns = 1500;
  e.nargs = 2;
  const std::string row = format_with("table", e);
  EXPECT_EQ(row.back(), '\n');
  EXPECT_EQ(words(row), (std::vector<std::string>{"01:01:01.500000", "uretprobe", "100", "101", "workload",
                                                   "/usr/bin/workload:target", "-1", "1.500", "0x1", "0x2"}));
  // Columns line up with the header.
  std::string h;
  make_formatter("table")->header(h);
  EXPECT_EQ(row.find("uretprobe"), h.find("KIND"));
  EXPECT_EQ(row.find("workload"), h.find("COMM"));
}

TEST_F(TableFormatterTest, UnknownRetAndLatencyShowDashes) {
  auto e = make_event(EventKind::kUprobe);
  e.nargs = 1;
  e.args[0] = 255;
  const auto w = words(format_with("table", e));
  ASSERT_EQ(w.size(), 9u);
  EXPECT_EQ(w[6], "-");
  EXPECT_EQ(w[7], "-");
  EXPECT_EQ(w[8], "0xff");
}

// Issue 36: a uprobe whose argument count nobody declared shows no registers in the table
// (JSON still carries all six); a declared count shows that many.
TEST_F(TableFormatterTest, UndeclaredUprobeArgumentsAreLeftOut) {
  auto e = make_event(EventKind::kUprobe);
  e.nargs = 6;
  e.args_declared = false;
  EXPECT_EQ(words(format_with("table", e)).size(), 8u) << format_with("table", e);
  EXPECT_EQ(format_json(e)["args"].size(), 6u);
  e.args_declared = true;
  e.nargs = 2;
  const auto w = words(format_with("table", e));
  ASSERT_EQ(w.size(), 10u);
  EXPECT_EQ(w[8], "0x1");
  EXPECT_EQ(w[9], "0x2");
}

// Issue 36: probes of one binary shorten alike (the directories go, "…/binary:symbol"), not
// to whatever 40 characters happen to end them.
TEST_F(TableFormatterTest, LongProbesShortenAlikeToTheBinaryAndSymbol) {
  const std::string dir = "/work/main/build/tests/deeply/nested/";
  auto e = make_event(EventKind::kUprobe);
  std::vector<std::string> shown;
  for (const std::string probe : {dir + "mcp-workload:mcp_work", dir + "mcp-workload:mcp_sleep"}) {
    e.probe = probe;
    const auto w = words(format_with("table", e));
    ASSERT_GE(w.size(), 6u);
    shown.push_back(w[5]);
  }
  EXPECT_EQ(shown, (std::vector<std::string>{"\u2026/mcp-workload:mcp_work", "\u2026/mcp-workload:mcp_sleep"}));
  // The row still lines up: the name takes 40 columns (not bytes), so RET's column ends where
  // the header's does.
  const auto cols = [](const std::string& t) {
    return std::count_if(t.begin(), t.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
  };
  std::string h;
  make_formatter("table")->header(h);
  const std::string probe = dir + "mcp-workload:mcp_work";  // Event::probe is a view: keep its string alive
  e.probe = probe;
  const std::string row = format_with("table", e);
  const size_t ret = row.find(" - ", row.find("mcp_work")) + 1;
  EXPECT_EQ(cols(row.substr(0, ret + 1)), cols(h.substr(0, h.find("RET") + 3))) << row << h;
}

// Issue 36: a USDT event's string arguments print as strings, escaped (the traced program
// chose the bytes, terminal escapes included); the others stay hex.
TEST_F(TableFormatterTest, UsdtStringArgumentsPrintQuotedAndEscaped) {
  auto e = make_event(EventKind::kUsdt);
  e.nargs = 3;
  e.attributes = {{"arg1", "/tmp/x.py\x1b[31m"}};
  const std::string row = format_with("table", e);
  EXPECT_NE(row.find("0x1 \"/tmp/x.py\\x1b[31m\" 0x3\n"), std::string::npos) << row;
  EXPECT_EQ(row.find('\x1b'), std::string::npos) << row;
}

TEST(ShortProbeName, UsdtProbesKeepTheirKindAndShortenThePathAlike) {
  const std::string probe = "usdt:/usr/lib/very/long/path/to/some/bin/python3.11:python:line";
  EXPECT_EQ(short_probe_name(probe, 40), "usdt:\u2026/python3.11:python:line");
  EXPECT_EQ(short_probe_name("usdt:/bin/x:p:n", 40), "usdt:/bin/x:p:n");
}

TEST(JsonFormatter, StackFramesAreObjectsAfterTheAttributes) {
  auto e = make_event(EventKind::kUprobe);
  e.stack = {{0x401000, "main", 16, "/usr/bin/x"}, {0, "[unknown]", 0x20, "build-id:ab\"c"}};
  const json j = format_json(e);
  ASSERT_TRUE(j.contains("stack")) << j;
  EXPECT_EQ(j["stack"], json::parse(R"([{"addr":4198400,"sym":"main","offset":16,"module":"/usr/bin/x"},
                                        {"addr":0,"sym":"[unknown]","offset":32,"module":"build-id:ab\"c"}])"));
  EXPECT_FALSE(format_json(make_event(EventKind::kUprobe)).contains("stack"));
}

TEST(ShortProbeName, FitsAreKeptTheSymbolEndGoesLastAndCharactersStayWhole) {
  EXPECT_EQ(short_probe_name("syscall:getppid", 40), "syscall:getppid");
  EXPECT_EQ(short_probe_name("/bin/ls:main", 12), "/bin/ls:main");
  EXPECT_EQ(short_probe_name("/usr/lib/libc.so.6:malloc", 20), "\u2026/libc.so.6:malloc");
  EXPECT_EQ(short_probe_name("/usr/lib/libc.so.6:a_very_long_function_name", 20), "\u2026/libc.so.6:a_very_\u2026");
  EXPECT_EQ(short_probe_name("/opt/caf\u00e9/b\u00e9:f", 6), "\u2026/b\u00e9:f");
  EXPECT_EQ(short_probe_name("/x/y:ns::Class::method()", 12), "\u2026/y:ns::Cla\u2026");
}

// ---------------------------------------------------------------- StreamSink

struct TempFile {
  std::string path;
  int fd = -1;
  TempFile() {
    char tmpl[] = "/tmp/mcp-stream-sink-XXXXXX";
    fd = mkstemp(tmpl);
    path = tmpl;
  }
  ~TempFile() {
    if (fd >= 0) close(fd);
    unlink(path.c_str());
  }
  std::string contents() const {
    std::string out;
    int r = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    char buf[65536];
    for (ssize_t n; (n = read(r, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
    close(r);
    return out;
  }
  off_t size() const {
    struct stat st {};
    fstat(fd, &st);
    return st.st_size;
  }
};

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(StreamSink, WritesJsonLinesToAFileOnFlush) {
  TempFile f;
  ASSERT_GE(f.fd, 0);
  StreamSink sink(make_formatter("json"), f.fd);
  for (uint32_t i = 0; i < 3; i++) {
    auto e = make_event(EventKind::kUprobe);
    e.pid = 1000 + i;
    sink.consume(e);
  }
  EXPECT_EQ(f.size(), 0) << "small volumes stay buffered until flush";
  sink.flush();
  const auto ls = lines(f.contents());
  ASSERT_EQ(ls.size(), 3u);
  for (uint32_t i = 0; i < 3; i++) EXPECT_EQ(json::parse(ls[i]).at("pid"), 1000 + i);
  sink.flush();  // nothing new: nothing repeated
  EXPECT_EQ(lines(f.contents()).size(), 3u);
}

TEST(StreamSink, TableHeaderWrittenOnceBeforeFirstRow) {
  TempFile f;
  StreamSink sink(make_formatter("table"), f.fd);
  sink.flush();
  EXPECT_EQ(f.size(), 0) << "no header without events";
  sink.consume(make_event(EventKind::kUprobe));
  sink.flush();
  sink.consume(make_event(EventKind::kSyscall));
  sink.flush();
  const auto ls = lines(f.contents());
  ASSERT_EQ(ls.size(), 3u);
  EXPECT_EQ(words(ls[0]).front(), "TIME");
  EXPECT_EQ(words(ls[1])[1], "uprobe");
  EXPECT_EQ(words(ls[2])[1], "syscall");
}

TEST(StreamSink, LargeVolumeIsWrittenWithoutWaitingForFlush) {
  TempFile f;
  StreamSink sink(make_formatter("json"), f.fd);
  const size_t line_size = format_with("json", make_event(EventKind::kUprobe)).size();
  const size_t n = (512 * 1024) / line_size;
  for (size_t i = 0; i < n; i++) sink.consume(make_event(EventKind::kUprobe));
  const off_t before_flush = f.size();
  EXPECT_GT(before_flush, 0);
  EXPECT_EQ(before_flush % static_cast<off_t>(line_size), 0) << "only whole lines are written";
  sink.flush();
  EXPECT_EQ(static_cast<size_t>(f.size()), n * line_size);
}

TEST(StreamSink, WritesThroughAPipe) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  {
    StreamSink sink(make_formatter("json"), p[1]);
    sink.consume(make_event(EventKind::kSyscall));
    sink.flush();
  }
  close(p[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = read(p[0], buf, sizeof(buf))) > 0;) got.append(buf, static_cast<size_t>(n));
  close(p[0]);
  EXPECT_EQ(json::parse(got).at("kind"), "syscall");
}

TEST(StreamSink, SurvivesAPipeWhoseReaderIsGone) {
  // As `mcp-agent trace | head` does: SIGPIPE ignored, writes fail with EPIPE.
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(sigaction(SIGPIPE, &ignore, &old), 0);
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  close(p[0]);
  {
    StreamSink sink(make_formatter("json"), p[1]);
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < 5000; i++) sink.consume(make_event(EventKind::kUprobe));  // crosses the auto-flush size
      sink.flush();
    }
  }
  // The descriptor really is broken: the sink saw EPIPE, not a short success.
  errno = 0;
  EXPECT_EQ(write(p[1], "x", 1), -1);
  EXPECT_EQ(errno, EPIPE);
  close(p[1]);
  sigaction(SIGPIPE, &old, nullptr);
}

}  // namespace
}  // namespace mcp::output
