// KernelFeatures' words (loader/kernel_features.h): the one-line messages a node's operator
// reads, and the README's support matrix, which must be the one the code describes.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "loader/kernel_features.h"

namespace mcp::loader {
namespace {

KernelFeatures linux_5_10() {
  KernelFeatures f;
  f.release = "5.10.0-32-amd64";
  f.btf = f.ringbuf = true;
  return f;
}

TEST(KernelFeatures, EachFeatureOffIsOneLineWithTheVersionItNeeds) {
  const auto lines = linux_5_10().off_lines();
  ASSERT_EQ(lines.size(), 9u);
  bool find_vma = false;
  for (const auto& l : lines) {
    EXPECT_EQ(l.find('\n'), std::string::npos) << l;
    find_vma |= l.rfind("find_vma off: needs bpf_find_vma (5.17); cuda launch cache off", 0) == 0;
  }
  EXPECT_TRUE(find_vma);
}

TEST(KernelFeatures, AKernelWithoutTheRequiredOnesIsRefusedInOneLine) {
  EXPECT_EQ(linux_5_10().unsupported(), "");
  KernelFeatures old = linux_5_10();
  old.release = "5.4.0";
  old.ringbuf = false;
  EXPECT_EQ(old.unsupported(), "this kernel (5.4.0) lacks the BPF ring buffer (5.8): mcp-agent needs Linux 5.10 or newer with BTF");
}

TEST(KernelFeatures, TheReadmeShowsTheSupportMatrixTheCodeDescribes) {
  std::ifstream in(std::string(MCP_SOURCE_DIR) + "/README.md");
  std::stringstream readme;
  readme << in.rdbuf();
  EXPECT_NE(readme.str().find(KernelFeatures::support_matrix()), std::string::npos)
      << "regenerate the README's support matrix:\n" << KernelFeatures::support_matrix();
}

}  // namespace
}  // namespace mcp::loader
