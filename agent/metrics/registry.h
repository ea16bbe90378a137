// A small Prometheus registry rendered in text exposition format 0.0.4.
// Contract:
//  - Metrics are registered once by name (duplicate or malformed names/labels throw
//    mcp::Error usage); registered metrics live as long as the registry, so references
//    returned by counter()/gauge()/family.with() stay valid and are cheap to update from
//    any thread (one relaxed atomic op, no lock).
//  - Collectors are callbacks run at scrape time, for values the agent already keeps
//    elsewhere (per-CPU BPF counters, queue sizes): nothing is copied between scrapes.
//    A collector runs on the HTTP thread without any registry lock held; it must be
//    thread-safe with respect to the data it reads and must not register metrics.
//  - render() is safe to call concurrently with updates and registrations.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace mcp::metrics {

enum class MetricType { kCounter, kGauge };

// Monotonic value; inc() with a negative delta is ignored (a counter never goes down).
class Counter {
 public:
  void inc(double delta = 1.0) {
    if (delta > 0) value_.fetch_add(delta, std::memory_order_relaxed);
  }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// One metric name with fixed label names; each distinct tuple of label values is a child.
template <typename T>
class Family {
 public:
  explicit Family(std::vector<std::string> label_names) : label_names_(std::move(label_names)) {}
  // Returns the child for these label values, creating it on first use. Throws
  // mcp::Error (usage) when the number of values differs from the label names.
  T& with(const std::vector<std::string>& label_values);
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Snapshot for rendering: (label values, value), ordered by label values.
  std::vector<std::pair<std::vector<std::string>, double>> snapshot() const;

 private:
  std::vector<std::string> label_names_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;

// One sample a collector reports: label values in the order of the metric's label names.
struct Sample {
  std::vector<std::string> label_values;
  double value = 0;
};
using Collector = std::function<std::vector<Sample>()>;

// Static description of a metric: its name, help text, type and label names.
struct MetricSpec {
  std::string_view name;
  std::string_view help;
  MetricType type = MetricType::kGauge;
  std::string_view label;  // label names, comma-separated ("probe,state"); empty for none
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Counter& counter(std::string name, std::string help);
  Gauge& gauge(std::string name, std::string help);
  CounterFamily& counter_family(std::string name, std::string help,
                                std::vector<std::string> label_names);
  GaugeFamily& gauge_family(std::string name, std::string help,
                            std::vector<std::string> label_names);

  // The same, named by a spec from metrics/names.h (the spec's label, if any, is the
  // family's one label; counter()/gauge() require an unlabelled spec).
  Counter& counter(const MetricSpec& spec);
  Gauge& gauge(const MetricSpec& spec);
  CounterFamily& counter_family(const MetricSpec& spec);
  GaugeFamily& gauge_family(const MetricSpec& spec);

  // Registers a metric whose samples come from `collect` at scrape time.
  void add_collector(std::string name, std::string help, MetricType type,
                     std::vector<std::string> label_names, Collector collect);
  void add_collector(const MetricSpec& spec, Collector collect);
  // Unlabelled shorthand: one value read at scrape time.
  void add_callback(const MetricSpec& spec, std::function<double()> read);

  // Text exposition format 0.0.4, metrics in registration order. A collector that
  // throws or reports the wrong number of label values is skipped (its HELP/TYPE stay,
  // with no samples) so one broken source cannot take the whole endpoint down.
  std::string render() const;

 private:
  struct Entry;
  std::shared_ptr<Entry> add_entry(std::string name, std::string help, MetricType type,
                                   std::vector<std::string> label_names);
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Entry>> entries_;
};

// Exposition helpers, exposed for tests and for anyone rendering by hand.
bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);
std::string escape_label_value(std::string_view value);  // \ " and newline
std::string escape_help(std::string_view help);          // \ and newline
std::string format_value(double v);                      // NaN, +Inf, -Inf, shortest round-trip

inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace mcp::metrics
