// Evaluation of compiled rules against an Event, and the in-place application of their
// actions. Values are views into the event or the rule set: nothing here allocates except
// std::regex matching and the first growth of Decision::fired.
#include <algorithm>
#include <charconv>
#include <cstring>

#include <nlohmann/json.hpp>

#include "rules/ruleset.h"

namespace mcp::rules {

namespace {

struct Value {
  enum class Type : uint8_t { kMissing, kString, kNumber, kBool } type = Type::kMissing;
  double number = 0;
  bool boolean = false;
  std::string_view str;
};

Value num(double d) { return Value{Value::Type::kNumber, d, false, {}}; }
Value str(std::string_view s) { return Value{Value::Type::kString, 0, false, s}; }

const std::string* find_pair(const std::vector<std::pair<std::string, std::string>>& kv, const std::string& key) {
  for (const auto& [k, v] : kv)
    if (k == key) return &v;
  return nullptr;
}

Value field_value(const FieldRef& f, const Event& e) {
  using K = FieldRef::Kind;
  switch (f.kind) {
    case K::kService: return e.service.empty() ? Value{} : str(e.service);
    case K::kProbe: return str(e.probe);
    case K::kKind: return str(to_string(e.kind));
    case K::kComm: return str(e.comm_view());
    case K::kPid: return num(e.pid);
    case K::kTid: return num(e.tid);
    case K::kCpu: return num(e.cpu);
    case K::kRet: return e.has_ret ? num(static_cast<double>(e.ret)) : Value{};
    case K::kDuration: return e.has_duration ? num(static_cast<double>(e.duration_ns)) : Value{};
    case K::kCgroupId: return num(static_cast<double>(e.cgroup_id));
    case K::kContainerId: return e.container_id.empty() ? Value{} : str(e.container_id);
    case K::kPodUid: return e.pod_uid.empty() ? Value{} : str(e.pod_uid);
    case K::kArg: return f.index < e.nargs ? num(static_cast<double>(e.args[f.index])) : Value{};
    case K::kArgs: return Value{};
    case K::kCudaKernel: return e.kind == EventKind::kCuda && !e.cuda.kernel.empty() ? str(e.cuda.kernel) : Value{};
    case K::kCudaApi: return e.kind == EventKind::kCuda && !e.cuda.api.empty() ? str(e.cuda.api) : Value{};
    case K::kTag: {
      const std::string* v = find_pair(e.tags, f.name);
      return v ? str(*v) : Value{};
    }
    case K::kAttribute: {
      const std::string* v = find_pair(e.attributes, f.name);
      return v ? str(*v) : Value{};
    }
    case K::kAttributeOrTag: {
      const std::string* v = find_pair(e.attributes, f.name);
      if (!v) v = find_pair(e.tags, f.name);
      return v ? str(*v) : Value{};
    }
  }
  return Value{};
}

// Brings a and b to one type; false when they cannot be compared.
bool unify(Value& a, Value& b) {
  using T = Value::Type;
  if (a.type == T::kMissing || b.type == T::kMissing) return false;
  if (a.type == b.type) return true;
  auto to_number = [](Value& v) {
    const char* first = v.str.data();
    const char* last = first + v.str.size();
    double d = 0;
    auto [p, ec] = std::from_chars(first, last, d);
    if (v.str.empty() || ec != std::errc() || p != last) return false;
    v = num(d);
    return true;
  };
  auto to_bool = [](Value& v) {
    if (v.str == "true") v = Value{Value::Type::kBool, 0, true, {}};
    else if (v.str == "false") v = Value{Value::Type::kBool, 0, false, {}};
    else return false;
    return true;
  };
  if (a.type == T::kString && b.type == T::kNumber) return to_number(a);
  if (a.type == T::kNumber && b.type == T::kString) return to_number(b);
  if (a.type == T::kString && b.type == T::kBool) return to_bool(a);
  if (a.type == T::kBool && b.type == T::kString) return to_bool(b);
  return false;
}

bool equal(Value a, Value b) {
  if (!unify(a, b)) return false;
  switch (a.type) {
    case Value::Type::kString: return a.str == b.str;
    case Value::Type::kNumber: return a.number == b.number;
    case Value::Type::kBool: return a.boolean == b.boolean;
    default: return false;
  }
}

bool compare(Value a, Value b, RuleSet::Cmp cmp) {
  using C = RuleSet::Cmp;
  if (cmp == C::kEq) return equal(a, b);
  if (cmp == C::kNe) return !equal(a, b);
  if (!unify(a, b) || a.type == Value::Type::kBool) return false;
  int order;
  if (a.type == Value::Type::kString) {
    const int c = a.str.compare(b.str);
    order = c < 0 ? -1 : c > 0 ? 1 : 0;
  } else {
    if (!(a.number == a.number) || !(b.number == b.number)) return false;  // NaN orders with nothing
    order = a.number < b.number ? -1 : a.number > b.number ? 1 : 0;
  }
  switch (cmp) {
    case C::kLt: return order < 0;
    case C::kLe: return order <= 0;
    case C::kGt: return order > 0;
    case C::kGe: return order >= 0;
    default: return false;
  }
}

}  // namespace

bool RuleSet::eval(uint32_t index, const Event& e) const {
  const Node& n = nodes_[index];
  auto operand = [&](const Operand& o) -> Value {
    if (o.is_field) return field_value(fields_[o.index], e);
    const Literal& l = literals_[o.index];
    switch (l.type) {
      case Literal::Type::kString: return str(strings_[l.str]);
      case Literal::Type::kNumber: return num(l.number);
      case Literal::Type::kBool: return Value{Value::Type::kBool, 0, l.boolean, {}};
    }
    return Value{};
  };
  auto literal = [&](uint32_t i) { return operand(Operand{false, i}); };
  switch (n.op) {
    case Op::kOr:
      for (uint32_t i = n.left; i < n.right; ++i)
        if (eval(children_[i], e)) return true;
      return false;
    case Op::kAnd:
      for (uint32_t i = n.left; i < n.right; ++i)
        if (!eval(children_[i], e)) return false;
      return true;
    case Op::kNot: return !eval(n.left, e);
    case Op::kCmp: return compare(operand(n.a), operand(n.b), n.cmp);
    case Op::kIn:
    case Op::kNotIn: {
      const Value v = operand(n.a);
      bool found = false;
      for (uint32_t i = n.list_begin; i < n.list_end && !found; ++i) found = equal(v, literal(i));
      return n.op == Op::kIn ? found : !found;
    }
    case Op::kMatches: {
      const Value v = operand(n.a);
      if (v.type != Value::Type::kString) return false;
      // libstdc++'s regex executor recurses per input character; event strings come from
      // traced programs, so bound the subject to keep the agent's stack safe.
      const std::string_view subject = v.str.substr(0, kMaxMatchSubject);
      return std::regex_search(subject.begin(), subject.end(), regexes_[n.regex]);
    }
    case Op::kTruthy: return equal(operand(n.a), Value{Value::Type::kBool, 0, true, {}});
    case Op::kConst: return n.constant;
  }
  return false;
}

bool RuleSet::matches(size_t rule_index, const Event& event) const { return eval(roots_[rule_index], event); }

void RuleSet::evaluate(const Event& event, Decision& out) const {
  out.clear();
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (!eval(roots_[i], event)) continue;
    out.fired.push_back(static_cast<uint32_t>(i));
    const Actions& a = rules_[i].actions;
    if (a.exempt.value_or(false)) out.exempt = true;
    if (a.drop.value_or(false)) out.drop = true;
    if (a.rate && (!out.rate || *a.rate < *out.rate)) out.rate = a.rate;
  }
}

namespace {

void redact_pairs(std::vector<std::pair<std::string, std::string>>& kv, const std::string& key) {
  for (auto& [k, v] : kv)
    if (k == key) v = kRedacted;
}

void redact(const FieldRef& f, Event& e) {
  using K = FieldRef::Kind;
  switch (f.kind) {
    case K::kArg: e.args[f.index] = 0; break;
    case K::kArgs: e.args.fill(0); break;
    case K::kRet: e.ret = 0; break;
    case K::kComm:
      e.comm.fill('\0');
      std::memcpy(e.comm.data(), kRedacted.data(), std::min(kRedacted.size(), e.comm.size() - 1));
      break;
    case K::kService: if (!e.service.empty()) e.service = kRedacted; break;
    case K::kContainerId: if (!e.container_id.empty()) e.container_id = kRedacted; break;
    case K::kPodUid: if (!e.pod_uid.empty()) e.pod_uid = kRedacted; break;
    case K::kCudaKernel: if (!e.cuda.kernel.empty()) e.cuda.kernel = kRedacted; break;
    case K::kTag: redact_pairs(e.tags, f.name); break;
    case K::kAttribute: redact_pairs(e.attributes, f.name); break;
    case K::kAttributeOrTag:
      redact_pairs(e.attributes, f.name);
      redact_pairs(e.tags, f.name);
      break;
    default: break;  // not redactable; compile() rejects these
  }
}

}  // namespace

void apply(const RuleSet& rules, Event& event, Decision& d) {
  rules.evaluate(event, d);
  if (!d.any()) return;
  for (uint32_t i : d.fired)
    for (const auto& f : rules.rule(i).actions.redact) redact(f, event);
  if (d.exempt) {
    event.args.fill(0);
    event.attributes.clear();
    event.cuda.user_stack.clear();
    event.stack.clear();
    event.attributes.emplace_back("mcp.exempt", "true");
  }
  for (uint32_t i : d.fired) {
    const Rule& r = rules.rule(i);
    event.attributes.emplace_back("audit.rule", r.name);
    for (const auto& id : r.actions.audit) event.attributes.emplace_back("audit.trace", id);
  }
}

Decision apply(const RuleSet& rules, Event& event) {
  Decision d;
  apply(rules, event, d);
  return d;
}

std::string audit_record(const RuleSet& rules, const Decision& decision, const Event& event) {
  nlohmann::json j;
  j["ts_ns"] = event.ts_ns;
  j["probe"] = std::string(event.probe);
  j["pid"] = event.pid;
  j["service"] = event.service;
  j["rules"] = nlohmann::json::array();
  for (uint32_t i : decision.fired) {
    const Rule& r = rules.rule(i);
    j["rules"].push_back({{"rule", r.name}, {"when", r.condition_text}, {"audit", r.actions.audit}});
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace mcp::rules
