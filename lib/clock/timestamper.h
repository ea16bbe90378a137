// Timestamper: the one object the pipeline calls per event. Owns a DriftCalibrator (and the
// thread that samples it) and the node's Hlc.
//
// Contract:
// - stamp(event) reads event.ktime_ns and sets event.ts_ns = calibrated wall time and
//   event.hlc = packed HLC of that wall time. Lock-free; safe from any number of threads.
//   Successive stamps on this node have strictly increasing hlc even if ts_ns moves back (a
//   step, a refit, events out of kernel order).
// - The constructor takes one calibration sample synchronously, so stamps are meaningful from
//   the first event; start() runs the sampling thread (interval chosen by the calibrator),
//   stop() and the destructor end it promptly.
// - merge_remote() folds a timestamp from elsewhere (broker) into the HLC at the current wall
//   time; see Hlc::merge for the bound on remote clocks.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "clock/clock_source.h"
#include "clock/drift_calibrator.h"
#include "clock/hlc.h"
#include "common/event.h"

namespace mcp::clock {

struct TimestamperOptions {
  CalibratorOptions calibrator;
  HlcOptions hlc;
};

struct TimestamperStats {
  CalibratorStats calibrator;  // drift_ppm, residual_ns, quality, steps, ...
  HlcStats hlc;
  uint64_t hlc_last = 0;
};

class Timestamper {
 public:
  explicit Timestamper(std::shared_ptr<ClockSource> source = system_clock_source(),
                       TimestamperOptions options = {});
  ~Timestamper();
  Timestamper(const Timestamper&) = delete;
  Timestamper& operator=(const Timestamper&) = delete;

  void start();
  void stop();
  bool running() const;

  void stamp(Event& event) noexcept {
    const uint64_t wall = calibrator_.to_wall_ns(event.ktime_ns);
    event.ts_ns = wall;
    event.hlc = hlc_.now(wall);
  }
  uint64_t to_wall_ns(uint64_t ktime_ns) const noexcept { return calibrator_.to_wall_ns(ktime_ns); }
  HlcMergeResult merge_remote(uint64_t remote_hlc);

  TimestamperStats stats() const;
  DriftCalibrator& calibrator() { return calibrator_; }
  Hlc& hlc() { return hlc_; }

 private:
  void run();

  std::shared_ptr<ClockSource> source_;
  DriftCalibrator calibrator_;
  Hlc hlc_;
  mutable std::mutex thread_mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace mcp::clock
