// Tenant quotas: `--tenant-quota CGROUP_PATH=RATE[:BURST]` parsing (or `pod:NS/NAME=...`,
// `namespace:NS=...`), cgroup path -> cgroup id, and the 64-bucket table the kernel's per-CPU
// token buckets are loaded from.
//
// Contract:
// - Tenant id of a cgroup path = cgroup v2 id = the inode number of the cgroup's directory on
//   the cgroup2 mount (what bpf_get_current_cgroup_id() returns on 64-bit kernels >= 5.5).
//   Tenant id of a pod or namespace (k8s/pod_ref.h) = pod_ref_tenant_id(): no cgroup's id, as
//   its cgroups come and go; the control loop maps each of its pods' cgroups to it.
// - Bucket (the BPF side must compute exactly this):
//     bucket = fnv1a64(le64(cgroup_id)) % 64
//   fnv1a64 over the 8 bytes of the id in little-endian order (low byte first):
//     h = 0xcbf29ce484222325; for each byte b: h ^= b; h *= 0x100000001b3 (mod 2^64)
//   Test vectors (also in tests/unit/control/tenant_quota_test.cpp):
//     fnv1a64("foobar") = 0x85944171f73967e8 (the published FNV-1a vector)
//     cgroup id 1      -> hash 0x89cd31291d2aefa4, bucket 36
//     cgroup id 2      -> hash 0xe6bd86443df8ce07, bucket 7
//     cgroup id 0x1234 -> hash 0x07b32d0dc6fdf72b, bucket 43
// - RATE is events per second (decimal, may have a fraction, >= 0; 0 drops everything),
//   BURST a whole number of events >= 1; BURST defaults to max(1, ceil(RATE)) (one second).
// - Bad text throws mcp::Error (usage) with a one-line reason; an unresolvable path likewise.
// - Buckets nobody configured get the default quota. Two different cgroups in one bucket share
//   its token bucket; the later flag's quota wins and a warning says so. The same cgroup given
//   twice: the later wins, also with a warning. Warnings are returned, never printed.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <optional>
#include <vector>

#include "k8s/pod_ref.h"

namespace mcp::control {

inline constexpr uint32_t kTenantBuckets = 64;
inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ULL;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ULL;

uint64_t fnv1a64(std::span<const uint8_t> bytes);
uint64_t cgroup_id_hash(uint64_t cgroup_id);  // fnv1a64 of the 8 little-endian bytes
uint32_t tenant_bucket(uint64_t cgroup_id);   // cgroup_id_hash(id) % kTenantBuckets

struct Quota {
  double rate_per_s = 0.0;
  uint64_t burst = 1;
  bool operator==(const Quota&) const = default;
};

struct TenantQuotaSpec {
  std::string cgroup_path;  // as given: absolute, or relative to the cgroup2 mount; pods->text() for pods
  Quota quota;
  std::optional<k8s::PodRef> pods;  // set: the tenant is these pods, not a cgroup path
};

// fnv1a64 of ref.text() with the top bit set (cgroup ids are inode numbers, far below it).
uint64_t pod_ref_tenant_id(const k8s::PodRef& ref);

// "CGROUP_PATH=RATE[:BURST]", "pod:NS/NAME=RATE[:BURST]" or "namespace:NS=RATE[:BURST]"
TenantQuotaSpec parse_tenant_quota(std::string_view text);
// "RATE[:BURST]" (the default quota flag)
Quota parse_quota(std::string_view text);

struct ResolvedTenant {
  std::string cgroup_path;  // pods->text() for pods
  uint64_t cgroup_id = 0;   // 0 for pods (their cgroups are resolved as they come)
  uint32_t bucket = 0;
  Quota quota;
  uint32_t depth = 0;  // components below the cgroup2 mount
  uint64_t tenant_id = 0;  // what the bucket hashes: cgroup_id, or pod_ref_tenant_id(*pods)
  std::optional<k8s::PodRef> pods;
};

struct TenantQuotaTable {
  std::array<Quota, kTenantBuckets> buckets{};      // what to write into the kernel map
  std::array<bool, kTenantBuckets> configured{};    // false: default quota
  std::vector<ResolvedTenant> tenants;              // one per distinct configured cgroup or pod set
  std::vector<std::string> warnings;                // collisions and duplicates, one line each
};

TenantQuotaTable build_tenant_quota_table(std::span<const TenantQuotaSpec> specs,
                                          const Quota& default_quota,
                                          const std::filesystem::path& cgroup2_root);

}  // namespace mcp::control
