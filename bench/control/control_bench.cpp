// Cost of one control tick: RateController::tick over N probes with fresh counters each tick,
// the threshold callback a no-op sink. Baseline: the same loop over the counters without the
// controller (what reading and summing would cost anyway), printed as a ratio.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "control/rate_controller.h"

namespace {

using mcp::control::ProbeSample;
using mcp::control::RateController;
using mcp::control::RateControllerConfig;

std::vector<ProbeSample> make_samples(int probes) {
  std::vector<ProbeSample> samples(static_cast<std::size_t>(probes));
  for (int i = 0; i < probes; ++i) samples[static_cast<std::size_t>(i)].probe_id = static_cast<uint32_t>(i);
  return samples;
}

void advance(std::vector<ProbeSample>& samples, uint64_t tick) {
  for (ProbeSample& s : samples) {
    s.counters.seen += 5000 + (tick * 7 + s.probe_id) % 200;
    s.counters.kept += 200 + (tick + s.probe_id) % 20;
  }
}

void BM_BaselineCounterLoop(benchmark::State& state) {
  auto samples = make_samples(static_cast<int>(state.range(0)));
  uint64_t tick = 0;
  for (auto _ : state) {
    advance(samples, ++tick);
    benchmark::DoNotOptimize(samples.data());
  }
  state.counters["ns_per_probe"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(state.range(0)),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_ControllerTick(benchmark::State& state) {
  const int probes = static_cast<int>(state.range(0));
  RateControllerConfig config;
  config.target_qps = 2000;
  uint64_t changes = 0;
  RateController controller(config, [&](uint32_t, uint64_t) { ++changes; });
  auto samples = make_samples(probes);
  uint64_t now = 0, tick = 0;
  for (int i = 0; i < 50; ++i) {  // warm: windows full, controller settled
    advance(samples, ++tick);
    controller.tick(now += 100'000'000, samples);
  }
  for (auto _ : state) {
    advance(samples, ++tick);
    controller.tick(now += 100'000'000, samples);
  }
  benchmark::DoNotOptimize(changes);
  state.counters["ns_per_probe"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * probes,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_BaselineCounterLoop)->Arg(1)->Arg(256);
BENCHMARK(BM_ControllerTick)->Arg(1)->Arg(256);

}  // namespace

// Console output plus one line per probe count: controller tick CPU time over the baseline's.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  RatioReporter() : ConsoleReporter(OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      cpu_ns_[run.benchmark_name()] = run.GetAdjustedCPUTime();
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    for (const char* arg : {"1", "256"}) {
      const auto base = cpu_ns_.find(std::string("BM_BaselineCounterLoop/") + arg);
      const auto tick = cpu_ns_.find(std::string("BM_ControllerTick/") + arg);
      if (base == cpu_ns_.end() || tick == cpu_ns_.end()) continue;
      std::printf("probes=%s tick_cpu_ns=%.0f baseline_cpu_ns=%.0f ratio=%.1fx per_s_at_10Hz=%.3f%%_of_a_core\n",
                  arg, tick->second, base->second, tick->second / base->second,
                  tick->second * 10 / 1e9 * 100);
    }
  }

 private:
  std::map<std::string, double> cpu_ns_;
};

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
