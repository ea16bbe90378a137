// The readers of agent.yaml's sections, one file each (probes, outputs, limits,
// compliance), called by parse_config() (parse_config.cpp); internal to mcp_config.
// Each reads its node through yaml::MapReader and records problems in `ctx`.
#pragma once
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/yaml_reader.h"
#include "k8s/pod_ref.h"

namespace mcp::config {

// probes_section.cpp

// A probe's or the CUDA block's `sampling:`.
void read_sampling(yaml::Ctx& ctx, const YAML::Node& n, Sampling& out);
// The `pod:` / `namespace:` key of a tenant or selector, alone among `others`.
std::optional<k8s::PodRef> read_pod_ref(yaml::Ctx& ctx, const YAML::Node& n, yaml::MapReader& m, const std::string& what,
                                        std::initializer_list<const char*> others);
// `tags:`, name: value in file order.
void read_tags(yaml::Ctx& ctx, const YAML::Node& n, std::vector<std::pair<std::string, std::string>>& out);
// One `probes:` entry (a uprobe); appended to `out` when it has no problem.
void read_uprobe(yaml::Ctx& ctx, const YAML::Node& n, std::vector<ProbeSpec>& out);
// One `syscalls:` entry, a name or a mapping; appended to `out` when it has no problem.
void read_syscall(yaml::Ctx& ctx, const YAML::Node& n, std::vector<ProbeSpec>& out);
// One `services:` entry (a per-service sampling strategy).
void read_service(yaml::Ctx& ctx, const YAML::Node& n, std::vector<ServiceStrategy>& out);

// outputs_section.cpp

void read_broker(yaml::Ctx& ctx, const YAML::Node& n, BrokerConfig& out);
// `exporter:`, its filters and `otlp:` (relative paths against base_dir).
void read_exporter(yaml::Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, Config& cfg);

// limits_section.cpp

// `cuda:`; when enabled, appends one probe per library to cfg.probes.
void read_cuda(yaml::Ctx& ctx, const YAML::Node& n, Config& cfg);
void read_quotas(yaml::Ctx& ctx, const YAML::Node& n, QuotaConfig& out);
void read_kubernetes(yaml::Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, KubernetesConfig& out);

// compliance_section.cpp

// `compliance:`, inline `rules:` or a `file:` (relative to base_dir), compiled.
void read_compliance(yaml::Ctx& ctx, const YAML::Node& n, const std::filesystem::path& base_dir, ComplianceConfig& out);

}  // namespace mcp::config
