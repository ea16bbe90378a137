#include "metrics/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <variant>

#include "common/error.h"

namespace mcp::metrics {

bool valid_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool valid_label_name(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;  // __ is reserved by Prometheus
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}

template <typename T>
T& Family<T>::with(const std::vector<std::string>& label_values) {
  if (label_values.size() != label_names_.size()) {
    throw usage_error("metric family expects " + std::to_string(label_names_.size()) +
                      " label values, got " + std::to_string(label_values.size()));
  }
  std::lock_guard lock(mu_);
  auto& child = children_[label_values];
  if (!child) child = std::make_unique<T>();
  return *child;
}

template <typename T>
std::vector<std::pair<std::vector<std::string>, double>> Family<T>::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::vector<std::string>, double>> out;
  out.reserve(children_.size());
  for (const auto& [labels, child] : children_) out.emplace_back(labels, child->value());
  return out;
}

template class Family<Counter>;
template class Family<Gauge>;

struct Registry::Entry {
  std::string name;
  std::string help;
  MetricType type;
  std::vector<std::string> label_names;
  // Exactly one source: a directly updated family (unlabelled metrics are a family with
  // no labels and one child) or a scrape-time collector.
  std::variant<std::unique_ptr<CounterFamily>, std::unique_ptr<GaugeFamily>, Collector> source;
};

Registry::Registry() = default;
Registry::~Registry() = default;

std::shared_ptr<Registry::Entry> Registry::add_entry(std::string name, std::string help,
                                                     MetricType type,
                                                     std::vector<std::string> label_names) {
  if (!valid_metric_name(name)) throw usage_error("invalid metric name '" + name + "'");
  for (const auto& l : label_names) {
    if (!valid_label_name(l)) throw usage_error("metric " + name + ": invalid label name '" + l + "'");
  }
  auto e = std::make_shared<Entry>();
  e->name = std::move(name);
  e->help = std::move(help);
  e->type = type;
  e->label_names = std::move(label_names);
  return e;
}

namespace {
template <typename E>
void insert_unique(std::vector<std::shared_ptr<E>>& entries, std::shared_ptr<E> e) {
  for (const auto& other : entries) {
    if (other->name == e->name) throw usage_error("metric " + e->name + " registered twice");
  }
  entries.push_back(std::move(e));
}
}  // namespace

Counter& Registry::counter(std::string name, std::string help) {
  return counter_family(std::move(name), std::move(help), {}).with({});
}

Gauge& Registry::gauge(std::string name, std::string help) {
  return gauge_family(std::move(name), std::move(help), {}).with({});
}

CounterFamily& Registry::counter_family(std::string name, std::string help,
                                        std::vector<std::string> label_names) {
  auto e = add_entry(std::move(name), std::move(help), MetricType::kCounter, label_names);
  auto fam = std::make_unique<CounterFamily>(std::move(label_names));
  auto* raw = fam.get();
  e->source = std::move(fam);
  std::lock_guard lock(mu_);
  insert_unique(entries_, std::move(e));
  return *raw;
}

GaugeFamily& Registry::gauge_family(std::string name, std::string help,
                                    std::vector<std::string> label_names) {
  auto e = add_entry(std::move(name), std::move(help), MetricType::kGauge, label_names);
  auto fam = std::make_unique<GaugeFamily>(std::move(label_names));
  auto* raw = fam.get();
  e->source = std::move(fam);
  std::lock_guard lock(mu_);
  insert_unique(entries_, std::move(e));
  return *raw;
}

namespace {
std::vector<std::string> spec_labels(const MetricSpec& spec) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= spec.label.size() && !spec.label.empty();) {
    const size_t comma = std::min(spec.label.find(',', start), spec.label.size());
    out.emplace_back(spec.label.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}
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
  auto e = add_entry(std::move(name), std::move(help), type, std::move(label_names));
  e->source = std::move(collect);
  std::lock_guard lock(mu_);
  insert_unique(entries_, std::move(e));
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
void render_sample(std::string& out, const std::string& name,
                   const std::vector<std::string>& label_names,
                   const std::vector<std::string>& label_values, double value) {
  out += name;
  if (!label_names.empty()) {
    out += '{';
    for (size_t i = 0; i < label_names.size(); ++i) {
      if (i) out += ',';
      out += label_names[i];
      out += "=\"";
      out += escape_label_value(label_values[i]);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += format_value(value);
  out += '\n';
}
}  // namespace

std::string Registry::render() const {
  std::vector<std::shared_ptr<Entry>> entries;
  {
    // Copy the list so collectors run without the registry lock (they may be slow).
    std::lock_guard lock(mu_);
    entries = entries_;
  }
  std::string out;
  out.reserve(entries.size() * 128);
  for (const auto& e : entries) {
    out += "# HELP " + e->name + " " + escape_help(e->help) + "\n";
    out += "# TYPE " + e->name + (e->type == MetricType::kCounter ? " counter\n" : " gauge\n");
    std::vector<std::pair<std::vector<std::string>, double>> samples;
    if (auto* c = std::get_if<std::unique_ptr<CounterFamily>>(&e->source)) {
      samples = (*c)->snapshot();
    } else if (auto* g = std::get_if<std::unique_ptr<GaugeFamily>>(&e->source)) {
      samples = (*g)->snapshot();
    } else {
      try {
        for (auto& s : std::get<Collector>(e->source)()) {
          if (s.label_values.size() != e->label_names.size()) {
            samples.clear();
            break;
          }
          samples.emplace_back(std::move(s.label_values), s.value);
        }
      } catch (const std::exception&) {
        samples.clear();
      }
    }
    for (const auto& [labels, value] : samples) render_sample(out, e->name, e->label_names, labels, value);
  }
  return out;
}

}  // namespace mcp::metrics
