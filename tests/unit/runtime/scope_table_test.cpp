// ScopeTable against FakeKernelMaps: one table for tenants and every kind of probe scope,
// written as differences only.
#include "runtime/scope_table.h"

#include <gtest/gtest.h>

#include "fake_kernel_maps.h"

namespace mcp::runtime {
namespace {

using test::FakeKernelMaps;

// Pods are resolved by name through the callback, as the control loop resolves them through
// the pod watch.
struct FakePods {
  std::map<std::string, std::vector<uint64_t>> cgroups;  // PodRef::text() -> pod cgroups
  std::vector<std::string> asked;
  ScopeTable::Resolve resolve() {
    return [this](const k8s::PodRef& ref, const std::string& what) {
      asked.push_back(what);
      auto it = cgroups.find(ref.text());
      return it == cgroups.end() ? std::vector<uint64_t>{} : it->second;
    };
  }
};

control::ResolvedTenant cgroup_tenant(uint64_t cgroup) {
  control::ResolvedTenant t;
  t.cgroup_path = "/cg" + std::to_string(cgroup);
  t.cgroup_id = t.tenant_id = cgroup;
  return t;
}

control::ResolvedTenant pod_tenant(const k8s::PodRef& ref) {
  control::ResolvedTenant t;
  t.cgroup_path = ref.text();
  t.pods = ref;
  t.tenant_id = control::pod_ref_tenant_id(ref);
  return t;
}

// A container probe's cgroups change a few at a time; only those few reach the kernel.
TEST(ScopeTable, WritesOnlyWhatChanged) {
  FakeKernelMaps maps;
  FakePods pods;
  ScopeTable table(maps);
  table.set_probe(7, std::set<uint64_t>{101, 102, 103});
  table.write(7, pods.resolve());
  EXPECT_EQ(maps.scope_of(7), (std::vector<uint64_t>{101, 102, 103}));
  EXPECT_EQ(maps.scope_writes, 3u);
  table.set_probe(7, std::set<uint64_t>{102, 103, 104});
  table.write(7, pods.resolve());
  EXPECT_EQ(maps.scope_of(7), (std::vector<uint64_t>{102, 103, 104}));
  EXPECT_EQ(maps.scope_writes, 5u) << "one added, one removed";
  table.write(pods.resolve());
  EXPECT_EQ(maps.scope_writes, 5u) << "nothing changed";
  EXPECT_EQ(table.written(7), (std::map<uint64_t, uint64_t>{{102, 1}, {103, 1}, {104, 1}}));
}

// Tenants (probe id 0, valued with their tenant id), a cgroup selector, a pod selector and a
// container probe's containers share the one map, each under its own probe id, even where
// they name the same cgroup; forgetting a probe takes only its entries.
TEST(ScopeTable, TenantsSelectorsAndContainerProbesShareTheMapUnderTheirOwnKeys) {
  FakeKernelMaps maps;
  FakePods pods;
  const k8s::PodRef web{"shop", "web"};
  pods.cgroups[web.text()] = {500};
  ScopeTable table(maps);
  table.set_tenants({cgroup_tenant(10), pod_tenant(web)});
  table.set_probe(3, std::set<uint64_t>{10});       // selector: cgroup path
  table.set_probe(4, web);                          // selector: pod
  table.set_probe(5, std::set<uint64_t>{501, 502});  // container probe: its containers (in the pod)
  EXPECT_TRUE(table.names_pods());
  table.write(pods.resolve());
  EXPECT_EQ(maps.tenants(), (std::vector<std::pair<uint64_t, uint64_t>>{{10, 10}, {500, control::pod_ref_tenant_id(web)}}));
  EXPECT_EQ(maps.scope_of(3), std::vector<uint64_t>{10});
  EXPECT_EQ(maps.scope_of(4), std::vector<uint64_t>{500});
  EXPECT_EQ(maps.scope_of(5), (std::vector<uint64_t>{501, 502}));
  EXPECT_EQ(maps.scope.at({4, 500}), 1u);
  table.forget(4);
  EXPECT_TRUE(maps.scope_of(4).empty());
  EXPECT_EQ(maps.tenants().size(), 2u) << "the pod's tenant entry is the tenants', not the probe's";
  EXPECT_EQ(maps.scope_of(5), (std::vector<uint64_t>{501, 502}));
  // A pod that moves: every write follows it, for the tenant as for a selector.
  table.set_probe(4, web);
  pods.cgroups[web.text()] = {600};
  table.write(pods.resolve());
  EXPECT_EQ(maps.tenants(), (std::vector<std::pair<uint64_t, uint64_t>>{{10, 10}, {600, control::pod_ref_tenant_id(web)}}));
  EXPECT_EQ(maps.scope_of(4), std::vector<uint64_t>{600});
}

// Where two tenants claim one cgroup, a pod beats a cgroup path, which beats a namespace.
TEST(ScopeTable, APodTenantBeatsACgroupPathWhichBeatsANamespace) {
  FakeKernelMaps maps;
  FakePods pods;
  const k8s::PodRef ns{"shop", ""}, web{"shop", "web"};
  pods.cgroups[ns.text()] = {20, 21, 22};
  pods.cgroups[web.text()] = {21};
  ScopeTable table(maps);
  table.set_tenants({pod_tenant(web), cgroup_tenant(22), pod_tenant(ns)});
  table.write(0, pods.resolve());
  EXPECT_EQ(maps.tenants(), (std::vector<std::pair<uint64_t, uint64_t>>{
                                {20, control::pod_ref_tenant_id(ns)}, {21, control::pod_ref_tenant_id(web)}, {22, 22}}));
}

// A full map: what fits is written, the caller hears why the rest is not, and a later
// write that frees room (here: another probe's entries gone) completes it.
TEST(ScopeTable, AFullMapKeepsWhatFitsAndTheNextWriteCompletesIt) {
  FakeKernelMaps maps;
  FakePods pods;
  maps.scope_capacity = 3;
  ScopeTable table(maps);
  table.set_probe(1, std::set<uint64_t>{1, 2});
  table.write(pods.resolve());
  table.set_probe(2, std::set<uint64_t>{7, 8});
  EXPECT_THROW(table.write(2, pods.resolve()), Error);
  EXPECT_EQ(maps.scope_of(2), std::vector<uint64_t>{7});
  EXPECT_EQ(table.written(2), (std::map<uint64_t, uint64_t>{{7, 1}})) << "the table knows what the kernel holds";
  table.forget(1);
  table.write(pods.resolve());
  EXPECT_EQ(maps.scope_of(2), (std::vector<uint64_t>{7, 8}));
  // Replacing within a full map: the removals make room for the additions.
  table.set_probe(2, std::set<uint64_t>{9, 10});
  maps.scope_capacity = 2;
  table.write(2, pods.resolve());
  EXPECT_EQ(maps.scope_of(2), (std::vector<uint64_t>{9, 10}));
}

}  // namespace
}  // namespace mcp::runtime
