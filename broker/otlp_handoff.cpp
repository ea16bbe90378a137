#include "broker/otlp_handoff.h"

#include <spdlog/spdlog.h>

#include "broker/ingest/event_block.h"

namespace mcp::broker {

OtlpHandoff::OtlpHandoff(const otlp::ExporterOptions& options) : endpoint_(options.endpoint) {
  if (!options.endpoint.empty()) exporter_ = std::make_unique<otlp::Exporter>(options);
}

void OtlpHandoff::offer(const PreparedBatch& batch, const otlp::Origin& origin) {
  if (!exporter_) return;
  std::shared_ptr<const mcp::v1::EventBlock> block = batch.block;
  if (!block && batch.packet->samples_size() > 0) {
    auto converted = std::make_shared<mcp::v1::EventBlock>();
    samples_to_block(batch.packet->samples(), converted.get());
    block = std::move(converted);
  }
  exporter_->offer(std::move(block), origin);
}

void OtlpHandoff::shutdown(std::chrono::milliseconds grace) {
  if (!exporter_) return;
  exporter_->shutdown(grace);
  const auto s = exporter_->stats();
  spdlog::info("OTLP export to {}: {} events exported, {} failed, {} dropped, {} retries", endpoint_, s.exported,
               s.failed, s.dropped, s.retries);
}

std::optional<otlp::ExporterStats> OtlpHandoff::stats() const {
  if (!exporter_) return std::nullopt;
  return exporter_->stats();
}

}  // namespace mcp::broker
