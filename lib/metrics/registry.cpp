#include "metrics/registry.h"

#include <prometheus/check_names.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <algorithm>

#include "common/error.h"

namespace mcp::metrics {

template <typename T>
T& Family<T>::with(const std::vector<std::string>& label_values) {
  if (label_values.size() != label_names_.size()) {
    throw usage_error("metric family expects " + std::to_string(label_names_.size()) +
                      " label values, got " + std::to_string(label_values.size()));
  }
  prometheus::Labels labels;
  for (size_t i = 0; i < label_names_.size(); ++i) labels.emplace(label_names_[i], label_values[i]);
  return family_.Add(labels);
}

template class Family<Counter>;
template class Family<Gauge>;

struct Registry::CollectorEntry {
  std::string name;
  std::string help;
  MetricType type;
  std::vector<std::string> label_names;
  Collector collect;
};

Registry::Registry() = default;
Registry::~Registry() = default;

void Registry::claim(const std::string& name, const std::string& help,
                     const std::vector<std::string>& label_names) {
  if (!prometheus::CheckMetricName(name)) throw usage_error("invalid metric name '" + name + "'");
  // prometheus-cpp 1.0.1's TextSerializer writes HELP as is: a newline would split the line and
  // a backslash would start an escape, so neither may appear (our help texts are constants).
  if (help.find_first_of("\\\n") != std::string::npos)
    throw usage_error("metric " + name + ": help text may not contain a newline or a backslash");
  for (const auto& l : label_names) {
    if (!prometheus::CheckLabelName(l)) throw usage_error("metric " + name + ": invalid label name '" + l + "'");
  }
  if (!order_.emplace(name, order_.size()).second) throw usage_error("metric " + name + " registered twice");
}

Counter& Registry::counter(std::string name, std::string help) {
  return counter_family(std::move(name), std::move(help), {}).with({});
}

Gauge& Registry::gauge(std::string name, std::string help) {
  return gauge_family(std::move(name), std::move(help), {}).with({});
}

CounterFamily& Registry::counter_family(std::string name, std::string help,
                                        std::vector<std::string> label_names) {
  std::lock_guard lock(mu_);
  claim(name, help, label_names);
  auto& family = prometheus::BuildCounter().Name(name).Help(help).Register(registry_);
  counter_families_.push_back(std::make_unique<CounterFamily>(family, std::move(label_names)));
  return *counter_families_.back();
}

GaugeFamily& Registry::gauge_family(std::string name, std::string help,
                                    std::vector<std::string> label_names) {
  std::lock_guard lock(mu_);
  claim(name, help, label_names);
  auto& family = prometheus::BuildGauge().Name(name).Help(help).Register(registry_);
  gauge_families_.push_back(std::make_unique<GaugeFamily>(family, std::move(label_names)));
  return *gauge_families_.back();
}

std::vector<std::string> spec_labels(const MetricSpec& spec) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= spec.label.size() && !spec.label.empty();) {
    const size_t comma = std::min(spec.label.find(',', start), spec.label.size());
    out.emplace_back(spec.label.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

namespace {
void expect_type(const MetricSpec& spec, MetricType type, bool labelled) {
  if (spec.type != type) throw usage_error("metric " + std::string(spec.name) + " has another type");
  if (labelled != !spec.label.empty()) {
    throw usage_error("metric " + std::string(spec.name) +
                      (labelled ? " has no label; use counter()/gauge()" : " is labelled; use a family"));
  }
}
}  // namespace

Counter& Registry::counter(const MetricSpec& spec) {
  expect_type(spec, MetricType::kCounter, false);
  return counter(std::string(spec.name), std::string(spec.help));
}
Gauge& Registry::gauge(const MetricSpec& spec) {
  expect_type(spec, MetricType::kGauge, false);
  return gauge(std::string(spec.name), std::string(spec.help));
}
CounterFamily& Registry::counter_family(const MetricSpec& spec) {
  expect_type(spec, MetricType::kCounter, true);
  return counter_family(std::string(spec.name), std::string(spec.help), spec_labels(spec));
}
GaugeFamily& Registry::gauge_family(const MetricSpec& spec) {
  expect_type(spec, MetricType::kGauge, true);
  return gauge_family(std::string(spec.name), std::string(spec.help), spec_labels(spec));
}

void Registry::add_collector(std::string name, std::string help, MetricType type,
                             std::vector<std::string> label_names, Collector collect) {
  if (!collect) throw usage_error("metric " + name + ": empty collector");
  std::lock_guard lock(mu_);
  claim(name, help, label_names);
  collectors_.push_back(std::make_shared<const CollectorEntry>(
      CollectorEntry{std::move(name), std::move(help), type, std::move(label_names), std::move(collect)}));
}

void Registry::add_collector(const MetricSpec& spec, Collector collect) {
  add_collector(std::string(spec.name), std::string(spec.help), spec.type, spec_labels(spec), std::move(collect));
}

void Registry::add_callback(const MetricSpec& spec, std::function<double()> read) {
  if (!spec.label.empty()) {
    throw usage_error("metric " + std::string(spec.name) + " is labelled; use add_collector");
  }
  if (!read) throw usage_error("metric " + std::string(spec.name) + ": empty callback");
  add_collector(spec, [read = std::move(read)] { return std::vector<Sample>{{{}, read()}}; });
}

namespace {
// A collector's samples as the family prometheus-cpp would have built; empty when the
// collector throws or reports the wrong arity.
prometheus::MetricFamily collect_family(const std::string& name, const std::string& help, MetricType type,
                                        const std::vector<std::string>& label_names, const Collector& collect) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type == MetricType::kCounter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
  try {
    for (auto& s : collect()) {
      if (s.label_values.size() != label_names.size()) {
        family.metric.clear();
        break;
      }
      prometheus::ClientMetric m;
      for (size_t i = 0; i < label_names.size(); ++i) m.label.push_back({label_names[i], s.label_values[i]});
      std::sort(m.label.begin(), m.label.end());
      if (type == MetricType::kCounter) m.counter.value = s.value;
      else m.gauge.value = s.value;
      family.metric.push_back(std::move(m));
    }
  } catch (const std::exception&) {
    family.metric.clear();
  }
  return family;
}
}  // namespace

std::string Registry::render() const {
  std::vector<std::shared_ptr<const CollectorEntry>> collectors;
  std::map<std::string, size_t> order;
  {
    // Copy the list so collectors run without the registry lock (they may be slow).
    std::lock_guard lock(mu_);
    collectors = collectors_;
    order = order_;
  }
  std::vector<prometheus::MetricFamily> families = registry_.Collect();
  for (const auto& c : collectors) families.push_back(collect_family(c->name, c->help, c->type, c->label_names, c->collect));
  // Families registered after the copy above are left for the next scrape.
  std::erase_if(families, [&](const prometheus::MetricFamily& f) { return !order.count(f.name); });
  std::sort(families.begin(), families.end(), [&](const auto& a, const auto& b) {
    return order.at(a.name) < order.at(b.name);
  });
  for (auto& f : families) {
    std::sort(f.metric.begin(), f.metric.end(), [](const auto& a, const auto& b) { return a.label < b.label; });
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace mcp::metrics
