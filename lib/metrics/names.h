// The agent's self-metrics: one MetricSpec per series the issue asks for, so the daemon,
// the docs (packaging/README.md "Metrics") and the tests share one list of names.
// Units follow Prometheus conventions (base units, counters end in _total). Register them
// with Registry::add_collector(spec, fn) / add_callback(spec, fn) so values are read from
// the agent's own counters at scrape time.
#pragma once
#include <array>
#include <span>

#include "metrics/registry.h"

namespace mcp::metrics {

// Label names used by the specs below.
inline constexpr std::string_view kLabelProbe = "probe";          // e.g. "uprobe", "syscall", "cuda"
inline constexpr std::string_view kLabelTenant = "tenant_bucket";  // 0..63, FNV-1a of the cgroup id
inline constexpr std::string_view kLabelProbeState = "probe,state";  // state: waiting, attached, failed

// Kernel-side counters (per-CPU arrays, summed at scrape time).
inline constexpr MetricSpec kEventsSeen{
    "mcp_events_seen_total", "Events that reached a probe, before any sampling decision.",
    MetricType::kCounter, kLabelProbe};
inline constexpr MetricSpec kEventsKept{
    "mcp_events_kept_total", "Events the kernel decided to keep and wrote to the ring buffer.",
    MetricType::kCounter, kLabelProbe};
inline constexpr MetricSpec kEventsLost{
    "mcp_events_lost_total", "Kept events lost because the ring buffer reservation failed.",
    MetricType::kCounter, kLabelProbe};
inline constexpr MetricSpec kQuotaDrops{
    "mcp_quota_drops_total", "Events dropped by the per-tenant token bucket quota.",
    MetricType::kCounter, kLabelTenant};
inline constexpr MetricSpec kRingbufOccupancy{
    "mcp_ringbuf_occupancy_bytes", "Bytes produced into the ring buffer and not yet consumed.",
    MetricType::kGauge, ""};
inline constexpr MetricSpec kRingbufCapacity{
    "mcp_ringbuf_capacity_bytes", "Size of the ring buffer in bytes.", MetricType::kGauge, ""};
inline constexpr MetricSpec kUprobeSessions{
    "mcp_uprobe_sessions",
    "1: latency uprobes and CUDA probes attach as uprobe sessions, so a call the entry does not keep takes no return trap; 0: separate uretprobes run on every call.",
    MetricType::kGauge, ""};
inline constexpr MetricSpec kKernelFeature{
    "mcp_kernel_feature",
    "1 when the kernel has the BPF feature (loader/kernel_features.h), 0 when the agent runs without it; since: the Linux version that brought it.",
    MetricType::kGauge, "feature,since"};
inline constexpr MetricSpec kBpfMapFailures{
    "mcp_bpf_map_failures_total",
    "BPF map reads and writes that failed where nothing could report the error (a probe's removal, the sampling-window thread, a counter read); the log names the map.",
    MetricType::kCounter, ""};

// Sampling windows (loader/sampling_windows.h): probes below rate 0.5 attached only part of the time.
inline constexpr MetricSpec kSamplingWindows{
    "mcp_sampling_windows_total", "Sampling windows opened per probe (attached for 2 ms, then detached).",
    MetricType::kCounter, kLabelProbe};
inline constexpr MetricSpec kWindowCoverage{
    "mcp_sampling_window_coverage_ratio",
    "Share of time a windowed probe was attached since its windows started (its nominal share is its sampling probability, at least 0.01).",
    MetricType::kGauge, kLabelProbe};

inline constexpr MetricSpec kEstimateMode{
    "mcp_probe_estimate_mode",
    "1 for how each probe below rate 0.5 is counted: calls (every call traps, the kernel draws), windows (time windows estimate), none (no estimate at this cost: the summary says why).",
    MetricType::kGauge, "probe,mode"};

// Probe lifecycle (daemon): a probe whose file is absent waits for it instead of stopping
// the agent, and follows its file when it is replaced by a new one (a new inode).
inline constexpr MetricSpec kProbeState{
    "mcp_probe_state",
    "1 for the state each configured probe is in: waiting (its file is absent), attached, failed (see the log).",
    MetricType::kGauge, kLabelProbeState};
inline constexpr MetricSpec kProbeReattach{
    "mcp_probe_reattach_total",
    "Times a probe attached to a new file at its path (the file was replaced, e.g. by a package upgrade).",
    MetricType::kCounter, kLabelProbe};

// Control loop.
inline constexpr MetricSpec kProbeRate{
    "mcp_probe_rate_events_per_second",
    "Current windowed rate of events seen per probe (the control loop's input).",
    MetricType::kGauge, kLabelProbe};
inline constexpr MetricSpec kSamplingProbability{
    "mcp_sampling_probability",
    "Current sampling probability per probe (0..1) the control loop wrote to the kernel.",
    MetricType::kGauge, kLabelProbe};

// Forwarding.
inline constexpr MetricSpec kQueueDepth{
    "mcp_forward_queue_depth", "Events in the forwarder's open batch, not yet written to the spool.",
    MetricType::kGauge, ""};
inline constexpr MetricSpec kSpoolBytes{
    "mcp_spool_bytes", "Bytes of events spooled on disk, waiting for the broker.",
    MetricType::kGauge, ""};
inline constexpr MetricSpec kForwardErrors{
    "mcp_forward_errors_total", "Failed sends or stream breaks towards the broker.",
    MetricType::kCounter, ""};
inline constexpr MetricSpec kForwardDropped{
    "mcp_forward_dropped_events_total",
    "Events dropped before reaching the broker because the forwarder queue or spool was full.",
    MetricType::kCounter, ""};
inline constexpr MetricSpec kForwardUnreadable{
    "mcp_forward_unreadable_batches_total",
    "Batches lost in delivery: spooled ones that could not be read back, or that the broker refused as malformed; their events are lost.",
    MetricType::kCounter, ""};

// Configuration.
inline constexpr MetricSpec kReloads{
    "mcp_config_reloads_total", "Configuration reloads applied successfully (SIGHUP or file change).",
    MetricType::kCounter, ""};
inline constexpr MetricSpec kReloadFailures{
    "mcp_config_reload_failures_total",
    "Configuration reloads rejected; the previous configuration stayed in force.",
    MetricType::kCounter, ""};

// Compliance audit trail (audit/audit_log.h).
inline constexpr MetricSpec kAuditRecords{
    "mcp_audit_records_total", "Audit records written for events a compliance rule exempted, redacted or tagged with clauses.",
    MetricType::kCounter, ""};
inline constexpr MetricSpec kAuditFailures{
    "mcp_audit_failures_total",
    "Audit records that could not be written (a full disk).",
    MetricType::kCounter, ""};
inline constexpr MetricSpec kAuditDroppedEvents{
    "mcp_audit_dropped_events_total",
    "Events not exported because their audit record could not be written (fail closed).",
    MetricType::kCounter, ""};

// Clock calibration.
inline constexpr MetricSpec kClockDrift{
    "mcp_clock_drift_ppm", "Estimated drift of the kernel monotonic clock against wall time, in ppm.",
    MetricType::kGauge, ""};
inline constexpr MetricSpec kClockResidual{
    "mcp_clock_residual_seconds",
    "Residual (RMS) of the ktime to wall-clock fit after drift correction, in seconds.",
    MetricType::kGauge, ""};

inline constexpr std::array kAgentMetrics{
    kEventsSeen,  kEventsKept,  kEventsLost,          kQuotaDrops,     kRingbufOccupancy,
    kRingbufCapacity, kProbeRate, kSamplingProbability, kQueueDepth,  kSpoolBytes,
    kForwardErrors, kForwardDropped, kForwardUnreadable, kReloads,   kReloadFailures, kAuditRecords, kAuditFailures, kAuditDroppedEvents, kClockDrift,     kClockResidual,
    kProbeState,  kProbeReattach, kUprobeSessions, kKernelFeature, kSamplingWindows, kWindowCoverage,
    kEstimateMode, kBpfMapFailures};

// A Markdown table of `specs` (name, type, labels, help) for the docs; the broker's table is
// generated from broker::kBrokerMetrics the same way.
std::string metrics_markdown_table(std::span<const MetricSpec> specs = kAgentMetrics);

}  // namespace mcp::metrics
