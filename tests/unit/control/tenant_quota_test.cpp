#include "control/tenant_quota.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "common/error.h"
#include "../../support/fake_cgroup.h"

namespace mcp::control {
namespace {

namespace fs = std::filesystem;

using test::FakeCgroupTree;
using test::inode_of;

TEST(TenantBucket, Fnv1a64MatchesPublishedVectors) {
  EXPECT_EQ(fnv1a64({}), 0xcbf29ce484222325ULL);
  const std::string a = "a", foobar = "foobar";
  EXPECT_EQ(fnv1a64({reinterpret_cast<const uint8_t*>(a.data()), a.size()}), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64({reinterpret_cast<const uint8_t*>(foobar.data()), foobar.size()}),
            0x85944171f73967e8ULL);
}

// The BPF side hashes the same 8 little-endian bytes: these are the vectors to check it against.
TEST(TenantBucket, CgroupIdVectorsForTheKernelSide) {
  EXPECT_EQ(cgroup_id_hash(1), 0x89cd31291d2aefa4ULL);
  EXPECT_EQ(tenant_bucket(1), 36u);
  EXPECT_EQ(cgroup_id_hash(2), 0xe6bd86443df8ce07ULL);
  EXPECT_EQ(tenant_bucket(2), 7u);
  EXPECT_EQ(cgroup_id_hash(0x1234), 0x07b32d0dc6fdf72bULL);
  EXPECT_EQ(tenant_bucket(0x1234), 43u);
  EXPECT_EQ(tenant_bucket(4026531835ULL), 45u);
}

TEST(TenantBucket, SpreadsSequentialIdsOverAllBuckets) {
  std::map<uint32_t, int> counts;
  for (uint64_t id = 1000; id < 1000 + 64 * 100; ++id) ++counts[tenant_bucket(id)];
  ASSERT_EQ(counts.size(), kTenantBuckets);
  for (const auto& [bucket, n] : counts) EXPECT_GT(n, 50) << "bucket " << bucket;
}

TEST(TenantQuotaParse, RateAndBurst) {
  const TenantQuotaSpec s = parse_tenant_quota("/sys/fs/cgroup/unified/noisy=500:2000");
  EXPECT_EQ(s.cgroup_path, "/sys/fs/cgroup/unified/noisy");
  EXPECT_EQ(s.quota, (Quota{500.0, 2000}));
}

TEST(TenantQuotaParse, BurstDefaultsToOneSecondOfRate) {
  EXPECT_EQ(parse_tenant_quota("a/b=250").quota, (Quota{250.0, 250}));
  EXPECT_EQ(parse_tenant_quota("a=0.5").quota, (Quota{0.5, 1}));
  EXPECT_EQ(parse_tenant_quota("a=0").quota, (Quota{0.0, 1}));
  EXPECT_EQ(parse_quota("1000:10").burst, 10u);
}

TEST(TenantQuotaParse, PathMayContainEqualsSign) {
  EXPECT_EQ(parse_tenant_quota("odd=name=10").cgroup_path, "odd=name");
}

TEST(TenantQuotaParse, BadValuesAreUsageErrorsWithOneLineReason) {
  for (const char* bad : {"noequals", "=100", "a=", "a=-5", "a=abc", "a=10:", "a=10:0",
                          "a=10:1.5", "a=nan", "a=inf", "a=10:x", "a=1e3"}) {
    try {
      parse_tenant_quota(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const mcp::Error& e) {
      EXPECT_EQ(e.code(), mcp::ExitCode::kUsage) << bad;
      const std::string what = e.what();
      EXPECT_NE(what.find(bad), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

TEST(TenantQuotaTable, ConfiguredBucketsGetTheirQuotaOthersTheDefault) {
  FakeCgroupTree tree;
  const uint64_t noisy = inode_of(tree.add("noisy"));
  // Two cgroups share a bucket 1 time in 64: take the first candidate in another, so the
  // test always runs (it used to skip on a collision).
  std::string quiet_name;
  uint64_t quiet = 0;
  for (int i = 0; i < 200 && (quiet == 0 || tenant_bucket(quiet) == tenant_bucket(noisy)); i++)
    quiet = inode_of(tree.add(quiet_name = "quiet-" + std::to_string(i)));
  ASSERT_NE(tenant_bucket(noisy), tenant_bucket(quiet));
  const TenantQuotaSpec specs[] = {parse_tenant_quota("noisy=100:10"),
                                   parse_tenant_quota(quiet_name + "=5000")};
  const Quota def{1000.0, 1000};
  const TenantQuotaTable t = build_tenant_quota_table(specs, def, tree.root());
  EXPECT_TRUE(t.warnings.empty());
  ASSERT_EQ(t.tenants.size(), 2u);
  EXPECT_EQ(t.tenants[0].cgroup_id, noisy);
  EXPECT_EQ(t.tenants[0].bucket, tenant_bucket(noisy));
  EXPECT_EQ(t.buckets[tenant_bucket(noisy)], (Quota{100.0, 10}));
  EXPECT_EQ(t.buckets[tenant_bucket(quiet)], (Quota{5000.0, 5000}));
  int configured = 0;
  for (uint32_t b = 0; b < kTenantBuckets; ++b) {
    if (t.configured[b]) {
      ++configured;
    } else {
      EXPECT_EQ(t.buckets[b], def) << "bucket " << b;
    }
  }
  EXPECT_EQ(configured, 2);
}

TEST(TenantQuotaTable, WarnsWhenTwoCgroupsShareABucket) {
  FakeCgroupTree tree;
  // Make cgroups until two land in one bucket (birthday bound: a handful for 64 buckets).
  std::map<uint32_t, std::string> seen;
  std::string first, second;
  for (int i = 0; i < 500 && second.empty(); ++i) {
    const std::string name = "cg" + std::to_string(i);
    const uint32_t b = tenant_bucket(inode_of(tree.add(name)));
    if (auto it = seen.find(b); it != seen.end()) {
      first = it->second;
      second = name;
    } else {
      seen.emplace(b, name);
    }
  }
  ASSERT_FALSE(second.empty());
  const TenantQuotaSpec specs[] = {parse_tenant_quota(first + "=10"),
                                   parse_tenant_quota(second + "=20")};
  const TenantQuotaTable t = build_tenant_quota_table(specs, Quota{1, 1}, tree.root());
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_NE(t.warnings[0].find(first), std::string::npos);
  EXPECT_NE(t.warnings[0].find(second), std::string::npos);
  ASSERT_EQ(t.tenants.size(), 2u);
  EXPECT_EQ(t.buckets[t.tenants[0].bucket].rate_per_s, 20.0);  // the later flag wins
  EXPECT_EQ(t.tenants[0].quota.rate_per_s, 20.0);             // and both report it
}

TEST(TenantQuotaTable, SameCgroupTwiceLaterWinsWithWarning) {
  FakeCgroupTree tree;
  const fs::path dir = tree.add("a");
  const TenantQuotaSpec specs[] = {parse_tenant_quota("a=10"),
                                   parse_tenant_quota(dir.string() + "=30:3")};
  const TenantQuotaTable t = build_tenant_quota_table(specs, Quota{1, 1}, tree.root());
  ASSERT_EQ(t.tenants.size(), 1u);
  EXPECT_EQ(t.warnings.size(), 1u);
  EXPECT_EQ(t.tenants[0].quota, (Quota{30.0, 3}));
}

TEST(TenantQuotaTable, UnknownCgroupFailsTheWholeTable) {
  FakeCgroupTree tree;
  tree.add("a");
  const TenantQuotaSpec specs[] = {parse_tenant_quota("a=10"), parse_tenant_quota("b=10")};
  EXPECT_THROW(build_tenant_quota_table(specs, Quota{1, 1}, tree.root()), mcp::Error);
}

// Depth is counted below the mount however the path is spelled.
TEST(TenantQuotaTable, DepthIsCountedBelowTheMountWhateverThePathSpelling) {
  FakeCgroupTree tree;
  tree.add("kubepods.slice");
  tree.add("kubepods.slice/kubepods-burstable.slice");
  const fs::path pod = tree.add("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podx.slice");
  const TenantQuotaSpec specs[] = {parse_tenant_quota("/kubepods.slice=10"),
                                   parse_tenant_quota(pod.string() + "/=30"),
                                   parse_tenant_quota("kubepods.slice/./kubepods-burstable.slice=20")};
  const TenantQuotaTable t = build_tenant_quota_table(specs, Quota{1, 1}, tree.root());
  ASSERT_EQ(t.tenants.size(), 3u);
  EXPECT_EQ(t.tenants[0].depth, 1u);
  EXPECT_EQ(t.tenants[1].depth, 3u);
  EXPECT_EQ(t.tenants[2].depth, 2u);
  EXPECT_EQ(t.tenants[1].tenant_id, inode_of(pod));
}

// `pod:NS/NAME` and `namespace:NS` tenants: no cgroup to resolve at startup; their tenant id
// is no cgroup's, and the same pods given twice is one tenant.
TEST(TenantQuotaTable, PodAndNamespaceTenantsNeedNoCgroupAndGetTheirOwnIds) {
  FakeCgroupTree tree;
  const TenantQuotaSpec specs[] = {parse_tenant_quota("namespace:team-a=10:20"), parse_tenant_quota("pod:team-a/web-1=5"),
                                   parse_tenant_quota("namespace:team-a=7")};
  ASSERT_TRUE(specs[0].pods);
  EXPECT_EQ(*specs[0].pods, (k8s::PodRef{"team-a", ""}));
  EXPECT_EQ(*specs[1].pods, (k8s::PodRef{"team-a", "web-1"}));
  EXPECT_EQ(specs[1].quota, (Quota{5, 5}));
  const TenantQuotaTable t = build_tenant_quota_table(specs, Quota{1, 1}, tree.root());
  ASSERT_EQ(t.tenants.size(), 2u);
  EXPECT_EQ(t.tenants[0].cgroup_path, "namespace:team-a");
  EXPECT_EQ(t.tenants[0].quota, (Quota{7, 7}));
  EXPECT_EQ(t.tenants[0].tenant_id, pod_ref_tenant_id(k8s::PodRef{"team-a", ""}));
  EXPECT_NE(t.tenants[0].tenant_id, t.tenants[1].tenant_id);
  EXPECT_EQ(t.tenants[0].tenant_id >> 63, 1u);
  EXPECT_EQ(t.tenants[0].bucket, tenant_bucket(t.tenants[0].tenant_id));
  EXPECT_EQ(t.warnings.size(), 1u);
  EXPECT_THROW(parse_tenant_quota("pod:web-1=5"), mcp::Error);
  EXPECT_THROW(parse_tenant_quota("namespace:Team=5"), mcp::Error);
}

}  // namespace
}  // namespace mcp::control
