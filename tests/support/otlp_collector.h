// OtlpCollector: an OTLP/gRPC receiver for tests, built from the official protos (the same
// generated services the exporter calls), on 127.0.0.1 port 0. It records every request and
// the metadata it came with, and can be told to answer with an error a number of times first
// (`fail_next`), to hold calls until released (`hold`), or to use TLS.
#pragma once
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "opentelemetry/proto/collector/logs/v1/logs_service.grpc.pb.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.grpc.pb.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"

namespace mcp::test {

namespace otlp_collector = opentelemetry::proto::collector;

class OtlpCollector {
 public:
  struct Tls {
    std::string cert_pem;
    std::string key_pem;
  };

  explicit OtlpCollector(const Tls* tls = nullptr) : traces_(this), logs_(this), metrics_(this) {
    grpc::ServerBuilder builder;
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
    if (tls != nullptr) {
      grpc::SslServerCredentialsOptions ssl;
      ssl.pem_key_cert_pairs.push_back({tls->key_pem, tls->cert_pem});
      creds = grpc::SslServerCredentials(ssl);
    }
    builder.AddListeningPort("127.0.0.1:0", creds, &port_);
    builder.RegisterService(&traces_);
    builder.RegisterService(&logs_);
    builder.RegisterService(&metrics_);
    server_ = builder.BuildAndStart();
  }
  ~OtlpCollector() {
    release();
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // The next `n` calls (any service) answer `code` before anything is recorded.
  void fail_next(int n, grpc::StatusCode code) {
    std::lock_guard lock(mu_);
    fail_left_ = n;
    fail_code_ = code;
  }
  // Calls wait (unrecorded) until release() or their deadline.
  void hold() {
    std::lock_guard lock(mu_);
    holding_ = true;
  }
  void release() {
    std::lock_guard lock(mu_);
    holding_ = false;
    cv_.notify_all();
  }

  struct Received {
    std::vector<otlp_collector::trace::v1::ExportTraceServiceRequest> traces;
    std::vector<otlp_collector::logs::v1::ExportLogsServiceRequest> logs;
    std::vector<otlp_collector::metrics::v1::ExportMetricsServiceRequest> metrics;
    std::vector<std::multimap<std::string, std::string>> metadata;  // per recorded call
    int refused = 0;                                                 // calls answered with an error
    int held = 0;                                                    // calls that waited in hold()
  };
  Received received() const {
    std::lock_guard lock(mu_);
    return received_;
  }
  size_t spans() const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& r : received_.traces)
      for (const auto& rs : r.resource_spans())
        for (const auto& ss : rs.scope_spans()) n += static_cast<size_t>(ss.spans_size());
    return n;
  }
  size_t log_records() const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& r : received_.logs)
      for (const auto& rl : r.resource_logs())
        for (const auto& sl : rl.scope_logs()) n += static_cast<size_t>(sl.log_records_size());
    return n;
  }

 private:
  // Common entry of every call: refuse, hold, or record (`store` adds the request).
  template <typename Store>
  grpc::Status admit(grpc::ServerContext* ctx, Store store) {
    std::unique_lock lock(mu_);
    if (fail_left_ > 0) {
      --fail_left_;
      ++received_.refused;
      return grpc::Status(fail_code_, "test collector refuses");
    }
    if (holding_) {
      ++received_.held;
      cv_.wait_until(lock, ctx->deadline(), [&] { return !holding_ || ctx->IsCancelled(); });
      if (holding_) return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "held");
    }
    std::multimap<std::string, std::string> md;
    for (const auto& [k, v] : ctx->client_metadata())
      md.emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
    received_.metadata.push_back(std::move(md));
    store(received_);
    return grpc::Status::OK;
  }

  struct TraceService final : otlp_collector::trace::v1::TraceService::Service {
    explicit TraceService(OtlpCollector* c) : c(c) {}
    grpc::Status Export(grpc::ServerContext* ctx, const otlp_collector::trace::v1::ExportTraceServiceRequest* req,
                        otlp_collector::trace::v1::ExportTraceServiceResponse*) override {
      return c->admit(ctx, [&](Received& r) { r.traces.push_back(*req); });
    }
    OtlpCollector* c;
  };
  struct LogsService final : otlp_collector::logs::v1::LogsService::Service {
    explicit LogsService(OtlpCollector* c) : c(c) {}
    grpc::Status Export(grpc::ServerContext* ctx, const otlp_collector::logs::v1::ExportLogsServiceRequest* req,
                        otlp_collector::logs::v1::ExportLogsServiceResponse*) override {
      return c->admit(ctx, [&](Received& r) { r.logs.push_back(*req); });
    }
    OtlpCollector* c;
  };
  struct MetricsService final : otlp_collector::metrics::v1::MetricsService::Service {
    explicit MetricsService(OtlpCollector* c) : c(c) {}
    grpc::Status Export(grpc::ServerContext* ctx,
                        const otlp_collector::metrics::v1::ExportMetricsServiceRequest* req,
                        otlp_collector::metrics::v1::ExportMetricsServiceResponse*) override {
      return c->admit(ctx, [&](Received& r) { r.metrics.push_back(*req); });
    }
    OtlpCollector* c;
  };

  TraceService traces_;
  LogsService logs_;
  MetricsService metrics_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Received received_;
  int fail_left_ = 0;
  grpc::StatusCode fail_code_ = grpc::StatusCode::UNAVAILABLE;
  bool holding_ = false;
};

}  // namespace mcp::test
