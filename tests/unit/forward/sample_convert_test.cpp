// Event -> protobuf Sample: the one place events become protobuf strings. Whatever bytes a
// traced process chose, the serialized batch must parse back (proto3 checks UTF-8 on parse).
#include "forward/sample_convert.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/utf8.h"
#include "forward/event_block.h"

namespace mcp {
namespace {

TEST(SampleConvert, InvalidUtf8FromTheTracedProcessStillParsesBack) {
  Event e;
  const std::string comm = "\xff\xfe";
  std::copy(comm.begin(), comm.end(), e.comm.begin());
  const std::string probe = "/opt/\xe9t\xe9/app:fn";  // a Latin-1 file name
  e.probe = probe;
  e.kind = EventKind::kCuda;
  e.cuda.kernel = "k\xc0\xaf";
  e.container_id = "c\x80";
  e.service = "svc";
  e.tags = {{"t\xff", "v\xfe"}};
  e.attributes = {{"a", "\xed\xa0\x80"}};

  mcp::v1::Batch batch;
  to_sample(e, batch.add_samples());
  to_sample(Event{}, batch.add_samples());  // a neighbour must survive too
  mcp::v1::Batch back;
  ASSERT_TRUE(back.ParseFromString(batch.SerializeAsString())) << "one bad comm must not poison the batch";
  ASSERT_EQ(back.samples_size(), 2);
  const auto& s = back.samples(0);
  EXPECT_EQ(s.comm(), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(s.probe(), "/opt/\xef\xbf\xbdt\xef\xbf\xbd/app:fn");
  EXPECT_EQ(s.cuda().kernel(), "k\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_TRUE(is_valid_utf8(s.container_id()));
  EXPECT_EQ(s.tags().at("t\xef\xbf\xbd"), "v\xef\xbf\xbd");
  EXPECT_TRUE(is_valid_utf8(s.attributes().at("a")));
}

TEST(SampleConvert, ValidStringsAreUnchanged) {
  Event e;
  const std::string comm = "caf\xc3\xa9";
  std::copy(comm.begin(), comm.end(), e.comm.begin());
  e.probe = "syscall:getppid";
  mcp::v1::Sample s;
  to_sample(e, &s);
  EXPECT_EQ(s.comm(), comm);
  EXPECT_EQ(s.probe(), "syscall:getppid");
}

// The v1 wire (Sample) carries the pod's names and labels, and the subscriber gets them back.
TEST(SampleConvert, PodNamesAndLabelsRoundTrip) {
  Event e;
  e.pod_uid = "5f2d8a4e-6c1b-4b0f-9a3e-1d2c3b4a5e6f";
  e.pod = "web-1";
  e.pod_namespace = "shop";
  e.container = "app";
  e.pod_labels = {{"app", "web"}, {"tier", "front"}};
  mcp::v1::Sample s;
  to_sample(e, &s);
  EXPECT_EQ(s.pod_name(), "web-1");
  EXPECT_EQ(s.pod_namespace(), "shop");
  EXPECT_EQ(s.container_name(), "app");
  EXPECT_EQ(s.pod_labels().at("tier"), "front");
  Event back;
  from_sample(s, back);
  EXPECT_EQ(back.pod, "web-1");
  EXPECT_EQ(back.pod_namespace, "shop");
  EXPECT_EQ(back.container, "app");
  auto labels = back.pod_labels;
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels, e.pod_labels);
}

}  // namespace
}  // namespace mcp
