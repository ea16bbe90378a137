#include "broker/broker_metrics.h"

#include <functional>
#include <vector>

namespace mcp::broker {

namespace {
using metrics::Sample;

// One unlabelled value of the Stats reply.
void add_stat(metrics::Registry& registry, const Broker& broker, const MetricSpec& spec,
              std::function<double(const mcp::v1::StatsReply&)> read) {
  registry.add_callback(spec, [&broker, read = std::move(read)] { return read(broker.stats()); });
}

// One per-(service, probe) value of the Stats reply.
void add_probe_stat(metrics::Registry& registry, const Broker& broker, const MetricSpec& spec,
                    std::function<double(const mcp::v1::ProbeStats&)> read) {
  registry.add_collector(spec, [&broker, read = std::move(read)] {
    const auto stats = broker.stats();
    std::vector<Sample> out;
    out.reserve(static_cast<size_t>(stats.probes_size()));
    for (const auto& p : stats.probes()) out.push_back({{p.service(), p.probe()}, read(p)});
    return out;
  });
}
}  // namespace

void register_broker_metrics(metrics::Registry& registry, const Broker& broker) {
  using R = const mcp::v1::StatsReply&;
  using P = const mcp::v1::ProbeStats&;
  add_stat(registry, broker, kBatches, [](R s) { return static_cast<double>(s.batches()); });
  add_stat(registry, broker, kDuplicateBatches, [](R s) { return static_cast<double>(s.duplicate_batches()); });
  add_stat(registry, broker, kRefusedPublishes, [](R s) { return static_cast<double>(s.refused_publishes()); });
  add_stat(registry, broker, kAgentsConnected, [](R s) { return static_cast<double>(s.agents_connected()); });
  add_stat(registry, broker, kSubscribers, [](R s) { return static_cast<double>(s.subscribers()); });
  add_stat(registry, broker, kSubscriberDrops, [](R s) { return static_cast<double>(s.subscriber_dropped_packets()); });
  add_probe_stat(registry, broker, kEvents, [](P p) { return static_cast<double>(p.events()); });
  add_probe_stat(registry, broker, kAdjustedCount, [](P p) { return p.adjusted_count(); });
  add_probe_stat(registry, broker, kErrorAdjustedCount, [](P p) { return p.error_adjusted_count(); });
  add_stat(registry, broker, kProbeSeriesOverflow, [](R s) { return static_cast<double>(s.probe_series_overflow()); });
  add_probe_stat(registry, broker, kProbeSeen, [](P p) { return static_cast<double>(p.seen()); });
  add_probe_stat(registry, broker, kCorrectedCount, [](P p) { return p.corrected_count(); });
  if (!broker.otlp_stats()) return;
  const auto add_otlp = [&](const MetricSpec& spec, uint64_t otlp::ExporterStats::*field) {
    registry.add_callback(spec, [&broker, field] {
      const auto s = broker.otlp_stats();
      return s ? static_cast<double>((*s).*field) : 0.0;
    });
  };
  add_otlp(kOtlpExported, &otlp::ExporterStats::exported);
  add_otlp(kOtlpFailed, &otlp::ExporterStats::failed);
  add_otlp(kOtlpDropped, &otlp::ExporterStats::dropped);
}

}  // namespace mcp::broker
