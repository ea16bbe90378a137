// bench_grpc_floor: what gRPC alone costs a server per agent batch on this machine, with none of
// the broker's work, so that the broker's fan-out figures can be read against a floor (issue 30:
// at 0.2 µs per delivery, 20k events/s in 40-event batches leaves 40, 160 and 400 µs of broker
// CPU per batch with 5, 20 and 50 subscribers, for everything).
//
// A child process (this binary, --serve) runs one of two servers. Each takes "/mcp.v1.Sampling/
// Publish" streams, reads every message without parsing it and writes one small ack per message,
// as the broker does:
//   callback  the broker's design: Publish as a raw callback reactor, the other Sampling RPCs
//             synchronous (gRPC 1.51: half the cores, at least two, as callback threads, plus the
//             synchronous pollers)
//   async     the completion-queue API: one generic service, one thread calling Next(), no other
//             poller
// The parent opens one Publish stream, writes --rate batches/s of --bytes for --seconds, reads
// the acks, and reports the child's CPU (utime + stime) and context switches per batch, counted
// from the first batch to the last ack. Also the CPU of one thread wake-up here (two threads
// ping-ponging over eventfds), the unit a server's hand-offs cost.
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include "broker_client.h"
#include "forward/channel.h"
#include "mcp/v1/sampling.grpc.pb.h"
#include "process.h"
#include "proc_usage.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string ack_bytes(uint64_t sequence) {
  mcp::v1::BrokerMessage reply;
  reply.mutable_ack()->set_sequence(sequence);
  reply.set_broker_hlc(sequence << 16);
  return reply.SerializeAsString();
}

// ---- the callback server -----------------------------------------------------------------------

class CallbackStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  CallbackStream() { StartRead(&in_); }

  void OnReadDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) {
      reading_ = false;
      next_locked();
      return;
    }
    ++acks_due_;
    next_locked();
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    writing_ = false;
    if (!ok) broken_ = true;
    next_locked();
  }

  void OnDone() override { delete this; }

 private:
  void next_locked() {
    if (writing_ || finished_) return;
    if (acks_due_ > 0 && !broken_) {
      --acks_due_;
      out_ = mcp::test::byte_buffer(ack_bytes(++acked_));
      writing_ = true;
      StartWrite(&out_);
      return;
    }
    if (!reading_ || broken_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }

  std::mutex mu_;
  grpc::ByteBuffer in_, out_;
  uint64_t acks_due_ = 0, acked_ = 0;
  bool reading_ = true, writing_ = false, broken_ = false, finished_ = false;
};

class CallbackService final : public mcp::v1::Sampling::WithRawCallbackMethod_Publish<mcp::v1::Sampling::Service> {
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Publish(grpc::CallbackServerContext*) override {
    return new CallbackStream;
  }
};

// ---- the async server: one thread, one completion queue ---------------------------------------

class AsyncServer {
 public:
  explicit AsyncServer(grpc::ServerBuilder& builder) {
    builder.RegisterAsyncGenericService(&service_);
    cq_ = builder.AddCompletionQueue();
  }

  // Runs on the calling thread until the queue shuts down.
  void run() {
    request_call();
    void* tag = nullptr;
    bool ok = false;
    while (cq_->Next(&tag, &ok)) {
      auto* t = static_cast<Tag*>(tag);
      t->call->on(t->kind, ok, *this);
    }
  }

  grpc::ServerCompletionQueue* cq() { return cq_.get(); }

 private:
  enum Kind { kNew, kRead, kWrite, kFinish };
  struct Call;
  struct Tag {
    Call* call;
    Kind kind;
  };
  // One stream's state machine: at most one read and one write outstanding; touched only by the
  // thread in run().
  struct Call {
    grpc::GenericServerContext ctx;
    grpc::GenericServerAsyncReaderWriter stream{&ctx};
    grpc::ByteBuffer in, out;
    Tag new_tag{this, kNew}, read_tag{this, kRead}, write_tag{this, kWrite}, finish_tag{this, kFinish};
    uint64_t acks_due = 0, acked = 0;
    bool reading = true, writing = false, finishing = false;

    void on(Kind kind, bool ok, AsyncServer& server) {
      switch (kind) {
        case kNew:
          server.request_call();  // the next stream
          if (!ok) return delete this;
          stream.Read(&in, &read_tag);
          return;
        case kRead:
          if (ok) {
            ++acks_due;
            stream.Read(&in, &read_tag);
          } else {
            reading = false;
          }
          break;
        case kWrite:
          writing = false;
          if (!ok) {  // the client is gone: no more acks, finish
            reading = false;
            acks_due = 0;
          }
          break;
        case kFinish:
          return delete this;
      }
      if (writing || finishing) return;
      if (acks_due > 0) {
        --acks_due;
        out = mcp::test::byte_buffer(ack_bytes(++acked));
        writing = true;
        stream.Write(out, &write_tag);
      } else if (!reading) {
        finishing = true;
        stream.Finish(grpc::Status::OK, &finish_tag);
      }
    }
  };

  void request_call() {
    auto* call = new Call;
    service_.RequestCall(&call->ctx, &call->stream, cq_.get(), cq_.get(), &call->new_tag);
  }

  grpc::AsyncGenericService service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
};

// The child: serves until killed; says its port on stderr.
int serve(const std::string& kind) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  CallbackService callback;
  std::unique_ptr<AsyncServer> async;
  if (kind == "callback")
    builder.RegisterService(&callback);
  else
    async = std::make_unique<AsyncServer>(builder);
  const auto server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "cannot listen\n");
    return 1;
  }
  std::fprintf(stderr, "listening on port %d\n", port);
  std::fflush(stderr);
  if (async) async->run();
  server->Wait();
  return 0;
}

// ---- the parent ------------------------------------------------------------------------------

struct Result {
  double cpu_us_per_batch = 0, switches_per_batch = 0;
  uint64_t acked = 0, sent = 0;
};

Result drive(const std::string& kind, double rate, double seconds, size_t bytes) {
  const auto dir = std::filesystem::temp_directory_path() / ("mcp-bench-grpc-floor-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  mcp::test::Process server({std::filesystem::read_symlink("/proc/self/exe").string(), "--serve", kind}, dir, kind);
  std::smatch m;
  if (!server.wait_for_err(std::regex("listening on port (\\d+)"), std::chrono::seconds(10), &m)) {
    std::fprintf(stderr, "%s server did not start: %s\n", kind.c_str(), server.err().c_str());
    std::exit(1);
  }
  const auto channel = mcp::make_channel("127.0.0.1:" + m[1].str(), {}, false);
  grpc::ClientContext ctx;
  const auto stream = mcp::test::raw_publish_stream(channel.get(), &ctx);
  std::atomic<uint64_t> acked{0};
  std::thread acks([&] {
    mcp::v1::BrokerMessage reply;
    while (stream->Read(&reply)) acked.store(reply.ack().sequence(), std::memory_order_release);
  });
  const grpc::ByteBuffer batch = mcp::test::byte_buffer(std::string(bytes, 'x'));
  stream->Write(batch);  // warm the stream up before counting
  const auto acked_through = [&](uint64_t n) { return [&acked, n] { return acked.load(std::memory_order_acquire) >= n; }; };
  if (!mcp::test::wait_until(acked_through(1), std::chrono::seconds(10))) {
    std::fprintf(stderr, "%s server never acked the first message: %s\n", kind.c_str(), server.err().c_str());
    std::exit(1);
  }

  const auto n = static_cast<uint64_t>(rate * seconds);
  const double cpu0 = mcp::test::cpu_seconds(server.pid());
  const uint64_t sw0 = mcp::test::context_switches(server.pid());
  const auto start = Clock::now();
  uint64_t sent = 0;
  for (; sent < n; ++sent) {
    std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(sent) * 1e9 / rate)));
    if (!stream->Write(batch)) break;
  }
  mcp::test::wait_until(acked_through(sent + 1), std::chrono::seconds(10));  // acked/sent shows a shortfall
  Result r;
  r.sent = sent;
  r.acked = acked.load() - 1;
  r.cpu_us_per_batch = (mcp::test::cpu_seconds(server.pid()) - cpu0) * 1e6 / static_cast<double>(sent);
  r.switches_per_batch = static_cast<double>(mcp::test::context_switches(server.pid()) - sw0) / static_cast<double>(sent);
  stream->WritesDone();
  acks.join();
  stream->Finish();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return r;
}

// CPU of one thread wake-up: two threads handing a token back and forth over eventfds.
double wakeup_cpu_us(int round_trips) {
  const int there = eventfd(0, 0), back = eventfd(0, 0);
  std::thread peer([&] {
    uint64_t v = 0;
    for (int i = 0; i < round_trips; ++i) {
      if (read(there, &v, sizeof v) != sizeof v) break;
      if (write(back, &v, sizeof v) != sizeof v) break;
    }
  });
  const double cpu0 = mcp::test::cpu_seconds(getpid());
  uint64_t v = 1;
  for (int i = 0; i < round_trips; ++i) {
    if (write(there, &v, sizeof v) != sizeof v) break;
    if (read(back, &v, sizeof v) != sizeof v) break;
  }
  peer.join();
  const double us = (mcp::test::cpu_seconds(getpid()) - cpu0) * 1e6 / (2.0 * round_trips);
  close(there);
  close(back);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gRPC's own CPU per Publish message: the broker's callback design vs a one-thread async server"};
  std::string serve_kind;
  double rate = 500, seconds = 5;
  size_t bytes = 1800;
  int rounds = 2;
  app.add_option("--serve", serve_kind, "run a server (the child)")->check(CLI::IsMember({"callback", "async"}));
  app.add_option("--rate", rate, "batches/s (500: 20k events/s in batches of 40)")->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "seconds per run")->check(CLI::PositiveNumber);
  app.add_option("--bytes", bytes, "bytes per batch (1800: a 40-event compact batch)")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "runs of each server, alternating")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (!serve_kind.empty()) return serve(serve_kind);

  std::printf("%u CPUs; 1 Publish stream, %.0f batches/s of %zu bytes for %.1f s, one ack each; "
              "server CPU = utime + stime of its process\n",
              std::thread::hardware_concurrency(), rate, bytes, seconds);
  std::printf("%-9s %6s %14s %15s %12s\n", "server", "round", "CPU us/batch", "switches/batch", "acked/sent");
  std::fflush(stdout);  // before a child is forked, or it writes the buffer again
  for (int round = 1; round <= rounds; ++round)
    for (const char* kind : {"callback", "async"}) {
      const Result r = drive(kind, rate, seconds, bytes);
      std::printf("%-9s %6d %14.1f %15.2f %7llu/%llu\n", kind, round, r.cpu_us_per_batch, r.switches_per_batch,
                  static_cast<unsigned long long>(r.acked), static_cast<unsigned long long>(r.sent));
      std::fflush(stdout);
    }
  std::printf("one thread wake-up (eventfd ping-pong): %.1f us of CPU\n", wakeup_cpu_us(20000));
  std::printf("fan-out target 0.2 us/delivery at 20k events/s in 40-event batches leaves 40 / 160 / 400 us "
              "of broker CPU per batch with 5 / 20 / 50 subscribers, for all of its work\n");
  return 0;
}
