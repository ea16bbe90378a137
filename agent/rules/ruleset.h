// Compliance rules: a compiled, immutable set of `rule "name" when COND then ACTIONS end`
// blocks evaluated in order against decoded events.
//
// Language (see packaging/config/agent.yaml for a worked example):
//   rule "name"
//   when  <condition>
//   then  <target> = <value>   (one or more)
//   end
//   condition := operand (== != < <= > >=) operand | operand [not] in [lit, ...]
//              | operand matches "regex" | operand (true when it is bool true)
//              | ! cond | cond && cond | cond || cond | ( cond )
//   operand   := "string" | number | true | false | dotted.identifier
// Identifiers: service, probe, kind, comm, pid, tid, cpu, ret, duration_ns, cgroup_id,
// container_id, pod_uid, args[N] (N 0..5), cuda.kernel, cuda.api; tags.X (tag X);
// attributes.X (attribute X); any other name looks up the attribute with that exact
// dotted name, then the tag with that name. A name the event lacks is "missing".
// Comparison semantics: the literal decides how a field's text is read ("42" compares as
// a number against 42, "true" as a bool against true). When operands cannot be compared
// (missing, or a string that is not a number against a number) `==`, ordering, `in` and
// `matches` are false and `!=` is true (`!=` is always the negation of `==`, so a rule like
// `consent.granted != true` fires when consent is absent: fail closed).
// && and || short-circuit left to right. `matches` searches (ECMAScript syntax, unanchored)
// within the first kMaxMatchSubject bytes of the value.
// Actions: sample.exempt = bool (captured payload must not leave the node, only counts),
// sample.drop / drop = bool, sample.rate = number in (0,1] (the lowest fired rate wins),
// redact / redact.fields = ["args[1]", "comm", "tags.user", ...], audit.trace = ["id", ...].
//
// Evaluation walks a flat node array built once by compile(); it does not allocate except
// for `matches` (std::regex) and for growing Decision::fired the first time.
#pragma once
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "common/event.h"
#include "rules/error.h"

namespace mcp::rules {

// A field an action or condition names, resolved at compile time.
struct FieldRef {
  enum class Kind : uint8_t {
    kService, kProbe, kKind, kComm, kPid, kTid, kCpu, kRet, kDuration, kCgroupId,
    kContainerId, kPodUid, kArg, kArgs /* all args */, kCudaKernel, kCudaApi, kTag, kAttribute,
    kAttributeOrTag,
  };
  Kind kind = Kind::kAttributeOrTag;
  uint8_t index = 0;      // kArg
  std::string name;       // kTag / kAttribute / kAttributeOrTag
  std::string spelling;   // as written in the source
  bool operator==(const FieldRef&) const = default;
};

// Parses a field name as written in a condition or a redact list.
// Throws RulesError at `pos` for a bad index (args[9]).
FieldRef parse_field(std::string_view spelling, SourcePos pos);

struct Actions {
  std::optional<bool> exempt;
  std::optional<bool> drop;
  std::optional<double> rate;
  std::vector<FieldRef> redact;
  std::vector<std::string> audit;
  bool operator==(const Actions&) const = default;
};

struct Rule {
  std::string name;
  SourcePos pos;               // of the `rule` keyword
  std::string condition_text;  // the condition as written, for audit records
  Actions actions;
};

// Outcome of evaluating a RuleSet on one event. Reuse one per thread: clear() keeps the
// capacity of `fired`, so steady-state evaluation does not allocate.
struct Decision {
  std::vector<uint32_t> fired;  // indexes of the rules that matched, in rule order
  bool exempt = false;
  bool drop = false;
  std::optional<double> rate;   // lowest sample.rate among fired rules
  void clear() {
    fired.clear();
    exempt = drop = false;
    rate.reset();
  }
  bool any() const { return !fired.empty(); }
};

class RuleSet {
 public:
  RuleSet() = default;
  // Lexes, parses and checks `source`; throws RulesError with the position of the first
  // problem. An empty source (or only comments) is a valid empty set.
  static RuleSet compile(std::string_view source);

  size_t size() const { return rules_.size(); }
  bool empty() const { return rules_.empty(); }
  const Rule& rule(size_t i) const { return rules_[i]; }
  const std::vector<Rule>& rules() const { return rules_; }

  bool matches(size_t rule_index, const Event& event) const;
  void evaluate(const Event& event, Decision& out) const;
  Decision evaluate(const Event& event) const {
    Decision d;
    evaluate(event, d);
    return d;
  }

  // Internal representation, public so the compiler in ruleset.cpp can build it.
  enum class Op : uint8_t { kOr, kAnd, kNot, kCmp, kIn, kNotIn, kMatches, kTruthy, kConst };
  // kOr / kAnd are n-ary (children_[left, right)) so a long chain does not deepen recursion;
  // parenthesis and '!' nesting is capped at compile time.
  enum class Cmp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
  struct Literal {
    enum class Type : uint8_t { kString, kNumber, kBool } type = Type::kBool;
    double number = 0;
    bool boolean = false;
    uint32_t str = 0;  // index into strings_
  };
  struct Operand {
    bool is_field = false;
    uint32_t index = 0;  // into fields_ or literals_
  };
  struct Node {
    Op op = Op::kConst;
    Cmp cmp = Cmp::kEq;
    uint32_t left = 0, right = 0;     // kOr/kAnd: children_[left, right); kNot: node `left`
    Operand a, b;                     // kCmp: a op b; kIn/kMatches/kTruthy: a
    uint32_t list_begin = 0, list_end = 0;  // kIn: literals_[begin, end)
    uint32_t regex = 0;               // kMatches: regexes_
    bool constant = false;            // kConst
  };

 private:
  friend class Compiler;
  bool eval(uint32_t node, const Event& event) const;

  std::vector<Rule> rules_;
  std::vector<uint32_t> roots_;  // condition root node per rule
  std::vector<Node> nodes_;
  std::vector<uint32_t> children_;
  std::vector<Literal> literals_;
  std::vector<FieldRef> fields_;
  std::vector<std::string> strings_;
  std::vector<std::regex> regexes_;
};

// Applies the fired rules' actions to `event` in place, so sensitive data is gone before any
// sink sees it: redacted args are zeroed, redacted strings become "[redacted]"; when a rule
// exempts the event its captured payload (args, attributes, CUDA user stack) is cleared
// and attribute ("mcp.exempt", "true") added; every
// audit.trace id is appended as attribute ("audit.trace", id) and every fired rule as
// ("audit.rule", name). Returns the decision so the caller can honour drop / rate / exempt.
void apply(const RuleSet& rules, Event& event, Decision& scratch);
Decision apply(const RuleSet& rules, Event& event);

inline constexpr std::string_view kRedacted = "[redacted]";
inline constexpr size_t kMaxMatchSubject = 1024;

// One JSON line (no trailing newline) describing the fired rules for an append-only audit
// log: {"ts_ns":..,"probe":..,"pid":..,"service":..,"rules":[{"rule":..,"when":..,"audit":[..]}]}.
std::string audit_record(const RuleSet& rules, const Decision& decision, const Event& event);

}  // namespace mcp::rules
