#include "clock/timestamper.h"

#include <pthread.h>

namespace mcp::clock {

Timestamper::Timestamper(std::shared_ptr<ClockSource> source, TimestamperOptions options)
    : source_(std::move(source)), calibrator_(*source_, options.calibrator), hlc_(options.hlc) {
  // One try is enough unless every bracket was preempted; a few more keep the first stamps sane.
  for (int i = 0; i < 3 && !calibrator_.has_mapping(); ++i) calibrator_.tick();
}

Timestamper::~Timestamper() { stop(); }

void Timestamper::start() {
  std::lock_guard lock(thread_mutex_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
  pthread_setname_np(thread_.native_handle(), "mcp-clock");
}

void Timestamper::stop() {
  std::thread thread;
  {
    std::lock_guard lock(thread_mutex_);
    stopping_ = true;
    thread = std::move(thread_);
  }
  wake_.notify_all();
  if (thread.joinable()) thread.join();
}

bool Timestamper::running() const {
  std::lock_guard lock(thread_mutex_);
  return thread_.joinable();
}

void Timestamper::run() {
  std::unique_lock lock(thread_mutex_);
  while (!stopping_) {
    lock.unlock();
    const auto delay = calibrator_.tick();
    lock.lock();
    wake_.wait_for(lock, delay, [this] { return stopping_; });
  }
}

HlcMergeResult Timestamper::merge_remote(uint64_t remote_hlc) {
  // The same physical clock stamp() uses, so local and merged stamps share one time line.
  return hlc_.merge(remote_hlc, calibrator_.to_wall_ns(static_cast<uint64_t>(source_->monotonic_ns())));
}

TimestamperStats Timestamper::stats() const {
  return {calibrator_.stats(), hlc_.stats(), hlc_.last()};
}

}  // namespace mcp::clock
