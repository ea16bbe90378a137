// OtlpHandoff: every newly stored batch, offered to the OTLP exporter (otlp/exporter.h) when
// export is on. offer() never blocks: the exporter queues or drops, counted. A v1 batch is
// converted to a block first, only when export is on.
#pragma once
#include <chrono>
#include <memory>
#include <optional>

#include "broker/store/backend.h"
#include "otlp/exporter.h"

namespace mcp::broker {

class OtlpHandoff {
 public:
  explicit OtlpHandoff(const otlp::ExporterOptions& options);  // no endpoint: export off
  void offer(const PreparedBatch& batch, const otlp::Origin& origin);
  // Exports what is queued within `grace`, then logs the exporter's totals.
  void shutdown(std::chrono::milliseconds grace);
  std::optional<otlp::ExporterStats> stats() const;  // nullopt: export off

 private:
  std::string endpoint_;
  std::unique_ptr<otlp::Exporter> exporter_;
};

}  // namespace mcp::broker
