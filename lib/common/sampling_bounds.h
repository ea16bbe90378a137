// Sampling bounds every front end checks the same way (trace flags, agent.yaml, policies in the
// broker, the CLI and the CRD): a rate below kMinSamplingRate rounds the kernel's threshold
// toward keeping nothing and estimates toward noise; a target QPS outside the range steers
// nothing useful. NaN and infinities are never valid.
#pragma once
#include <cmath>

namespace mcp {

inline constexpr double kMinSamplingRate = 1e-6;
inline constexpr double kMinTargetQps = 0.01;
inline constexpr double kMaxTargetQps = 1e7;

inline bool valid_sampling_rate(double r) { return std::isfinite(r) && r >= kMinSamplingRate && r <= 1; }
inline bool valid_target_qps(double q) { return std::isfinite(q) && q >= kMinTargetQps && q <= kMaxTargetQps; }
// For error messages.
inline constexpr const char* kSamplingRateRange = "[1e-6, 1]";
inline constexpr const char* kTargetQpsRange = "[0.01, 1e7] events/s";

}  // namespace mcp
