#include "clock/drift_calibrator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace mcp::clock {

std::string_view to_string(ClockQuality quality) {
  switch (quality) {
    case ClockQuality::kWarmingUp: return "warming_up";
    case ClockQuality::kGood: return "good";
    case ClockQuality::kDegraded: return "degraded";
  }
  return "unknown";
}

namespace {

constexpr double kNsPerS = 1e9;

// Quadratic fit offset = a + b x + c q over a set of points, with x the centred time in seconds
// and q = x^2 - mean(x^2) (orthogonal to the constant), so a is the mean and only a 2x2 system
// in (b, c) remains. Units: offsets in ns, so b is ns/s (= ppb) and 2c is ns/s^2.
struct QuadraticFit {
  bool valid = false;
  double rate_ppm_per_s = 0.0;
  double rate_se_ppm_per_s = 0.0;
  double slope_at_newest = 0.0;   // dimensionless
  double value_at_newest = 0.0;   // ns, relative to `base`
  double residual_ns = 0.0;
};

template <typename It>
QuadraticFit fit_quadratic(It first, It last, int64_t base) {
  QuadraticFit fit;
  const auto n = static_cast<double>(std::distance(first, last));
  if (n < 6) return fit;
  const int64_t newest = std::prev(last)->mono;
  double xbar = 0, ybar = 0;
  for (auto it = first; it != last; ++it) {
    xbar += (it->mono - newest) / kNsPerS;
    ybar += static_cast<double>(it->offset - base);
  }
  xbar /= n;
  ybar /= n;
  double x2bar = 0;
  for (auto it = first; it != last; ++it) {
    const double x = (it->mono - newest) / kNsPerS - xbar;
    x2bar += x * x;
  }
  x2bar /= n;
  double sxx = 0, sxq = 0, sqq = 0, sxy = 0, sqy = 0;
  for (auto it = first; it != last; ++it) {
    const double x = (it->mono - newest) / kNsPerS - xbar;
    const double q = x * x - x2bar;
    const double y = static_cast<double>(it->offset - base) - ybar;
    sxx += x * x;
    sxq += x * q;
    sqq += q * q;
    sxy += x * y;
    sqy += q * y;
  }
  const double det = sxx * sqq - sxq * sxq;
  if (!(det > 0)) return fit;
  const double b = (sqq * sxy - sxq * sqy) / det;
  const double c = (sxx * sqy - sxq * sxy) / det;
  double rss = 0;
  for (auto it = first; it != last; ++it) {
    const double x = (it->mono - newest) / kNsPerS - xbar;
    const double q = x * x - x2bar;
    const double r = static_cast<double>(it->offset - base) - ybar - b * x - c * q;
    rss += r * r;
  }
  const double sigma2 = rss / (n - 3);
  const double xn = -xbar;
  fit.valid = true;
  fit.rate_ppm_per_s = 2 * c * 1e-3;
  fit.rate_se_ppm_per_s = 2 * std::sqrt(sigma2 * sxx / det) * 1e-3;
  fit.slope_at_newest = (b + 2 * c * xn) / kNsPerS;
  fit.value_at_newest = ybar + b * xn + c * (xn * xn - x2bar);
  fit.residual_ns = std::sqrt(sigma2);
  return fit;
}

}  // namespace

DriftCalibrator::DriftCalibrator(ClockSource& source, CalibratorOptions options)
    : source_(source), options_(options) {
  options_.window = std::max<std::size_t>(options_.window, 2);
  options_.min_points = std::clamp<std::size_t>(options_.min_points, 2, options_.window);
  options_.bracket_tries = std::max(options_.bracket_tries, 1);
}

ClockSample DriftCalibrator::sample() {
  ClockSample best;
  best.bracket_ns = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < options_.bracket_tries; ++i) {
    const int64_t before = source_.monotonic_ns();
    const int64_t real = source_.realtime_ns();
    const int64_t after = source_.monotonic_ns();
    const int64_t width = after - before;
    if (width < best.bracket_ns) best = {before + width / 2, real, width};
  }
  return best;
}

std::chrono::nanoseconds DriftCalibrator::tick() {
  add_sample(sample());
  return recommended_interval();
}

bool DriftCalibrator::add_sample(const ClockSample& s) {
  std::lock_guard lock(mutex_);
  last_bracket_ns_ = s.bracket_ns;
  if (s.bracket_ns > options_.max_bracket_ns || s.bracket_ns < 0 ||
      (!window_.empty() && s.mono_ns <= window_.back().mono)) {
    ++discarded_;
    return false;
  }
  ++samples_;
  const Point p{s.mono_ns, s.real_ns - s.mono_ns};
  if (!window_.empty()) {
    const int64_t residual = p.offset - predicted_offset_locked(p.mono);
    const double threshold =
        std::max(static_cast<double>(options_.step_floor_ns), options_.step_sigmas * residual_ns_);
    if (std::abs(static_cast<double>(residual)) > threshold) {
      // A step moves every later reading, so no old point describes the new time line: restart
      // from this sample, keeping the slope (the oscillator did not change, the offset did).
      ++steps_;
      last_step_ns_ = residual;
      window_.clear();
      degraded_ = false;
      calm_checks_ = 0;
      drift_rate_ppm_per_s_ = 0.0;
    }
  }
  window_.push_back(p);
  while (window_.size() > options_.window) window_.pop_front();
  refit_locked();
  return true;
}

void DriftCalibrator::refit_locked() {
  const int64_t newest = window_.back().mono;
  const int64_t rate_span = options_.rate_window.count();

  // Drift-rate check over the newest rate_window of points.
  auto rate_first = std::find_if(window_.begin(), window_.end(),
                                 [&](const Point& p) { return newest - p.mono <= rate_span; });
  QuadraticFit quad;
  const auto rate_points = static_cast<std::size_t>(std::distance(rate_first, window_.end()));
  if (rate_points >= std::max<std::size_t>(options_.min_points, 6) &&
      newest - rate_first->mono >= rate_span / 2) {
    quad = fit_quadratic(rate_first, window_.end(), rate_first->offset);
  }
  if (quad.valid) {
    drift_rate_ppm_per_s_ = quad.rate_ppm_per_s;
    const double rate = std::abs(quad.rate_ppm_per_s);
    if (rate > options_.max_drift_rate_ppm_per_s &&
        rate > options_.drift_rate_significance * quad.rate_se_ppm_per_s) {
      degraded_ = true;
      calm_checks_ = 0;
    } else if (degraded_ && ++calm_checks_ >= options_.stable_samples) {
      // Calm over the whole rate window means the change lies in its older part: restart the
      // long fit from the tracking window only.
      degraded_ = false;
      calm_checks_ = 0;
      const int64_t keep = options_.tracking_window.count();
      window_.erase(window_.begin(), std::find_if(window_.begin(), window_.end(), [&](const Point& p) {
                      return newest - p.mono <= keep;
                    }));
    }
  }
  if (degraded_) {
    // Points older than the rate window belong to a different drift; keep them out of the fit.
    window_.erase(window_.begin(), rate_first);
    // Follow the moving drift with the tangent of a short quadratic at the newest sample.
    const int64_t keep = options_.tracking_window.count();
    auto track_first = std::find_if(window_.begin(), window_.end(),
                                    [&](const Point& p) { return newest - p.mono <= keep; });
    const QuadraticFit track = fit_quadratic(track_first, window_.end(), track_first->offset);
    if (track.valid) {
      slope_ = track.slope_at_newest;
      residual_ns_ = track.residual_ns;
      publish_locked(newest, track_first->offset, track.value_at_newest);
      quality_ = ClockQuality::kDegraded;
      return;
    }
  }

  // Linear fit over the whole window, x centred (seconds), y relative to the oldest offset.
  const int64_t base = window_.front().offset;
  const auto n = static_cast<double>(window_.size());
  double xbar = 0, ybar = 0;
  for (const Point& p : window_) {
    xbar += (p.mono - newest) / kNsPerS;
    ybar += static_cast<double>(p.offset - base);
  }
  xbar /= n;
  ybar /= n;
  if (window_.size() < options_.min_points) {
    // Offset only: the mean of y - slope * x, with the slope held from before the step (0, i.e.
    // the clocks' nominal rate, while first warming up). A slope fitted to a few samples a
    // tenth of a second apart would turn one sample's read error (anywhere in a bracket of up to
    // max_bracket_ns) into hundreds of ppm, and the mapping would run off by that every second.
    const double b = slope_ * kNsPerS;
    const double value = ybar - b * xbar;
    double rss = 0;
    for (const Point& p : window_) {
      const double r = static_cast<double>(p.offset - base) - (value + b * ((p.mono - newest) / kNsPerS));
      rss += r * r;
    }
    residual_ns_ = window_.size() >= 2 ? std::sqrt(rss / (n - 1)) : 0.0;
    publish_locked(newest, base, value);
  } else {
    double sxx = 0, sxy = 0;
    for (const Point& p : window_) {
      const double x = (p.mono - newest) / kNsPerS - xbar;
      sxx += x * x;
      sxy += x * (static_cast<double>(p.offset - base) - ybar);
    }
    const double b = sxx > 0 ? sxy / sxx : slope_ * kNsPerS;
    double rss = 0;
    for (const Point& p : window_) {
      const double x = (p.mono - newest) / kNsPerS - xbar;
      const double r = static_cast<double>(p.offset - base) - ybar - b * x;
      rss += r * r;
    }
    slope_ = b / kNsPerS;
    residual_ns_ = window_.size() >= 3 ? std::sqrt(rss / (n - 2)) : 0.0;
    publish_locked(newest, base, ybar - b * xbar);
  }
  quality_ = window_.size() < options_.min_points ? ClockQuality::kWarmingUp
             : degraded_                           ? ClockQuality::kDegraded
                                                   : ClockQuality::kGood;
}

void DriftCalibrator::publish_locked(int64_t mono_anchor, int64_t base, double value) {
  const int64_t offset = base + std::llround(value);
  current_ = WallMapping{mono_anchor, mono_anchor + offset, slope_};
  published_.publish(current_);
  has_mapping_.store(true, std::memory_order_release);
}

int64_t DriftCalibrator::predicted_offset_locked(int64_t mono) const {
  return current_.wall_ns(mono) - mono;
}

bool DriftCalibrator::in_fast_mode_locked() const { return quality_ != ClockQuality::kGood; }

std::chrono::nanoseconds DriftCalibrator::recommended_interval() const {
  std::lock_guard lock(mutex_);
  return in_fast_mode_locked() ? options_.fast_interval : options_.interval;
}

CalibratorStats DriftCalibrator::stats() const {
  std::lock_guard lock(mutex_);
  CalibratorStats s;
  s.quality = quality_;
  s.drift_ppm = slope_ * 1e6;
  s.drift_rate_ppm_per_s = drift_rate_ppm_per_s_;
  s.residual_ns = residual_ns_;
  s.points = window_.size();
  s.samples = samples_;
  s.discarded_samples = discarded_;
  s.steps = steps_;
  s.last_step_ns = last_step_ns_;
  s.last_bracket_ns = last_bracket_ns_;
  s.recommended_interval = in_fast_mode_locked() ? options_.fast_interval : options_.interval;
  return s;
}

}  // namespace mcp::clock
