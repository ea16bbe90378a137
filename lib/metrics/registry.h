// Metrics registry on prometheus-cpp: one prometheus::Registry holds the families updated in
// place, a list of scrape-time collectors holds the values kept elsewhere, and render() hands
// both to prometheus::TextSerializer (text exposition format 0.0.4: the library's, not ours).
// Contract:
//  - Metrics are registered once by name (a duplicate, a malformed name or label name, a help
//    text with a newline or backslash throws mcp::Error usage); a family declares its label names at registration, so with() checks the
//    arity. Registered metrics live as long as the registry: references returned by counter(),
//    gauge() and Family::with() stay valid and are cheap to update from any thread
//    (prometheus::Counter/Gauge: one atomic op, no lock).
//  - Collectors are callbacks run at scrape time, for values the process already keeps
//    elsewhere (per-CPU BPF counters, queue sizes, the broker's totals): nothing is copied
//    between scrapes. A collector runs on the HTTP thread without any registry lock held; it
//    must be thread-safe with respect to the data it reads and must not register metrics.
//  - render() is safe to call concurrently with updates and registrations. Families come out
//    in registration order, series in a family sorted by label values, label names in
//    alphabetical order (prometheus-cpp keeps labels in a map).
#pragma once
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace mcp::metrics {

enum class MetricType { kCounter, kGauge };

// prometheus-cpp's own: Increment()/Value(); a Counter ignores negative increments.
using Counter = prometheus::Counter;
using Gauge = prometheus::Gauge;

// One metric name with the label names fixed at registration; each distinct tuple of label
// values is a child (prometheus::Family::Add).
template <typename T>
class Family {
 public:
  Family(prometheus::Family<T>& family, std::vector<std::string> label_names)
      : family_(family), label_names_(std::move(label_names)) {}
  // Returns the child for these label values, creating it on first use. Throws
  // mcp::Error (usage) when the number of values differs from the label names.
  T& with(const std::vector<std::string>& label_values);
  const std::vector<std::string>& label_names() const { return label_names_; }

 private:
  prometheus::Family<T>& family_;
  std::vector<std::string> label_names_;
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

  // The same, named by a spec (metrics/names.h, broker/broker_metrics.h): the spec's labels
  // are the family's; counter()/gauge() require an unlabelled spec.
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

  // Text exposition format 0.0.4 (prometheus::TextSerializer). A collector that throws or
  // reports the wrong number of label values is skipped (its HELP/TYPE stay, with no
  // samples) so one broken source cannot take the whole endpoint down.
  std::string render() const;

 private:
  struct CollectorEntry;
  void claim(const std::string& name, const std::string& help,
             const std::vector<std::string>& label_names);  // under mu_

  mutable std::mutex mu_;
  prometheus::Registry registry_{prometheus::Registry::InsertBehavior::Throw};
  std::map<std::string, size_t> order_;  // name -> registration index
  std::vector<std::shared_ptr<const CollectorEntry>> collectors_;
  std::vector<std::unique_ptr<CounterFamily>> counter_families_;
  std::vector<std::unique_ptr<GaugeFamily>> gauge_families_;
};

// The label names in a spec ("probe,state" -> {"probe", "state"}).
std::vector<std::string> spec_labels(const MetricSpec& spec);

inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace mcp::metrics
