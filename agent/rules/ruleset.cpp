// Recursive-descent compiler from rules source to RuleSet's flat node arrays.
#include <charconv>
#include <utility>

#include "rules/lexer.h"
#include "rules/ruleset.h"

namespace mcp::rules {

namespace {
constexpr int kMaxDepth = 64;
constexpr size_t kMaxRegexLength = 512;

struct Builtin {
  std::string_view name;
  FieldRef::Kind kind;
};
constexpr Builtin kBuiltins[] = {
    {"service", FieldRef::Kind::kService},   {"probe", FieldRef::Kind::kProbe},
    {"kind", FieldRef::Kind::kKind},         {"comm", FieldRef::Kind::kComm},
    {"pid", FieldRef::Kind::kPid},           {"tid", FieldRef::Kind::kTid},
    {"cpu", FieldRef::Kind::kCpu},           {"ret", FieldRef::Kind::kRet},
    {"duration_ns", FieldRef::Kind::kDuration}, {"cgroup_id", FieldRef::Kind::kCgroupId},
    {"container_id", FieldRef::Kind::kContainerId}, {"pod_uid", FieldRef::Kind::kPodUid},
    {"args", FieldRef::Kind::kArgs},
    {"cuda.kernel", FieldRef::Kind::kCudaKernel}, {"cuda.api", FieldRef::Kind::kCudaApi},
};

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kIdent: return "identifier '" + t.text + "'";
    case TokenKind::kString: return "string \"" + t.text + "\"";
    case TokenKind::kNumber: return "number " + t.text;
    default: return std::string(to_string(t.kind));
  }
}
}  // namespace

FieldRef parse_field(std::string_view spelling, SourcePos pos) {
  FieldRef f;
  f.spelling = std::string(spelling);
  for (const auto& b : kBuiltins) {
    if (b.name == spelling) {
      f.kind = b.kind;
      return f;
    }
  }
  if (spelling.starts_with("args[")) {
    const auto close = spelling.find(']');
    unsigned idx = 99;
    auto [p, ec] = std::from_chars(spelling.data() + 5, spelling.data() + close, idx);
    if (close != spelling.size() - 1 || ec != std::errc() || p != spelling.data() + close || idx > 5)
      throw RulesError(pos, "bad argument reference '" + f.spelling + "' (use args[0] .. args[5])");
    f.kind = FieldRef::Kind::kArg;
    f.index = static_cast<uint8_t>(idx);
    return f;
  }
  if (spelling.find('[') != std::string_view::npos)
    throw RulesError(pos, "only args[N] may be indexed, not '" + f.spelling + "'");
  if (spelling.starts_with("tags.")) {
    f.kind = FieldRef::Kind::kTag;
    f.name = std::string(spelling.substr(5));
  } else if (spelling.starts_with("attributes.")) {
    f.kind = FieldRef::Kind::kAttribute;
    f.name = std::string(spelling.substr(11));
  } else {
    f.kind = FieldRef::Kind::kAttributeOrTag;
    f.name = f.spelling;
  }
  return f;
}

class Compiler {
 public:
  Compiler(std::string_view src, RuleSet& out) : src_(src), toks_(lex(src)), out_(out) {}

  void run() {
    while (peek().kind != TokenKind::kEnd) parse_rule();
  }

 private:
  using Op = RuleSet::Op;
  using Node = RuleSet::Node;
  using Operand = RuleSet::Operand;
  using Literal = RuleSet::Literal;

  const Token& peek(size_t ahead = 0) const {
    const size_t i = std::min(pos_ + ahead, toks_.size() - 1);
    return toks_[i];
  }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool accept(TokenKind k) {
    if (peek().kind != k) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const Token& at, const std::string& why) { throw RulesError(at.pos, why); }
  const Token& expect(TokenKind k, std::string_view context) {
    if (peek().kind != k)
      fail(peek(), "expected " + std::string(to_string(k)) + " " + std::string(context) + ", found " +
                       describe(peek()));
    return next();
  }

  void parse_rule() {
    const Token& kw = peek();
    if (kw.kind != TokenKind::kKwRule) fail(kw, "expected 'rule', found " + describe(kw));
    next();
    const Token& name = expect(TokenKind::kString, "(the rule name) after 'rule'");
    if (name.text.empty()) fail(name, "rule name must not be empty");
    for (const auto& r : out_.rules_)
      if (r.name == name.text) fail(name, "duplicate rule name \"" + name.text + "\"");
    Rule rule;
    rule.name = name.text;
    rule.pos = kw.pos;
    expect(TokenKind::kKwWhen, "after the rule name");
    if (peek().kind == TokenKind::kKwThen || peek().kind == TokenKind::kEnd)
      fail(peek(), "expected a condition after 'when', found " + describe(peek()));
    const size_t cond_begin = peek().offset;
    const uint32_t root = parse_or(0);
    const Token& last = toks_[pos_ - 1];
    rule.condition_text = std::string(src_.substr(cond_begin, last.offset + last.length - cond_begin));
    expect(TokenKind::kKwThen, "after the condition");
    std::vector<std::string> assigned;
    while (peek().kind != TokenKind::kKwEnd) {
      if (peek().kind == TokenKind::kEnd) fail(peek(), "expected 'end' to close rule \"" + rule.name + "\"");
      parse_action(rule.actions, assigned);
    }
    if (assigned.empty()) fail(peek(), "rule \"" + rule.name + "\" has no actions");
    next();  // end
    out_.rules_.push_back(std::move(rule));
    out_.roots_.push_back(root);
  }

  uint32_t add_node(Node n) {
    out_.nodes_.push_back(n);
    return static_cast<uint32_t>(out_.nodes_.size() - 1);
  }

  uint32_t parse_nary(int depth, Op op, TokenKind sep) {
    std::vector<uint32_t> kids;
    kids.push_back(op == Op::kOr ? parse_nary(depth, Op::kAnd, TokenKind::kAnd) : parse_unary(depth));
    while (accept(sep))
      kids.push_back(op == Op::kOr ? parse_nary(depth, Op::kAnd, TokenKind::kAnd) : parse_unary(depth));
    if (kids.size() == 1) return kids[0];
    Node n;
    n.op = op;
    n.left = static_cast<uint32_t>(out_.children_.size());
    out_.children_.insert(out_.children_.end(), kids.begin(), kids.end());
    n.right = static_cast<uint32_t>(out_.children_.size());
    return add_node(n);
  }
  uint32_t parse_or(int depth) { return parse_nary(depth, Op::kOr, TokenKind::kOr); }

  uint32_t parse_unary(int depth) {
    if (depth > kMaxDepth) fail(peek(), "condition nested too deeply");
    if (accept(TokenKind::kBang)) {
      Node n;
      n.op = Op::kNot;
      n.left = parse_unary(depth + 1);
      return add_node(n);
    }
    if (peek().kind == TokenKind::kLParen) {
      const Token& open = next();
      const uint32_t inner = parse_or(depth + 1);
      if (peek().kind != TokenKind::kRParen)
        fail(peek(), "expected ')' to close '(' at " + std::to_string(open.pos.line) + ":" +
                         std::to_string(open.pos.column) + ", found " + describe(peek()));
      next();
      return inner;
    }
    return parse_comparison();
  }

  bool at_operand() const {
    switch (peek().kind) {
      case TokenKind::kIdent: case TokenKind::kString: case TokenKind::kNumber:
      case TokenKind::kKwTrue: case TokenKind::kKwFalse: return true;
      default: return false;
    }
  }

  uint32_t add_string(const std::string& s) {
    out_.strings_.push_back(s);
    return static_cast<uint32_t>(out_.strings_.size() - 1);
  }

  Literal literal_from(const Token& t) {
    Literal l;
    switch (t.kind) {
      case TokenKind::kString: l.type = Literal::Type::kString; l.str = add_string(t.text); break;
      case TokenKind::kNumber: l.type = Literal::Type::kNumber; l.number = t.number; break;
      case TokenKind::kKwTrue: l.type = Literal::Type::kBool; l.boolean = true; break;
      case TokenKind::kKwFalse: l.type = Literal::Type::kBool; l.boolean = false; break;
      default: fail(t, "expected a literal (string, number, true or false), found " + describe(t));
    }
    return l;
  }

  uint32_t add_literal(const Literal& l) {
    out_.literals_.push_back(l);
    return static_cast<uint32_t>(out_.literals_.size() - 1);
  }

  Operand parse_operand() {
    const Token& t = peek();
    if (!at_operand()) fail(t, "expected a field or a literal, found " + describe(t));
    next();
    Operand o;
    if (t.kind == TokenKind::kIdent) {
      FieldRef f = parse_field(t.text, t.pos);
      if (f.kind == FieldRef::Kind::kArgs) fail(t, "'args' is a list; compare one argument, e.g. args[0]");
      o.is_field = true;
      out_.fields_.push_back(std::move(f));
      o.index = static_cast<uint32_t>(out_.fields_.size() - 1);
    } else {
      o.index = add_literal(literal_from(t));
    }
    return o;
  }

  bool is_bool_literal(const Operand& o) const {
    return !o.is_field && out_.literals_[o.index].type == Literal::Type::kBool;
  }

  void parse_list(Node& n) {
    expect(TokenKind::kLBracket, "to open the list after 'in'");
    std::vector<Literal> items;
    if (peek().kind != TokenKind::kRBracket) {
      do {
        items.push_back(literal_from(peek()));
        next();
      } while (accept(TokenKind::kComma));
    }
    expect(TokenKind::kRBracket, "to close the list");
    n.list_begin = static_cast<uint32_t>(out_.literals_.size());
    for (const auto& l : items) add_literal(l);
    n.list_end = static_cast<uint32_t>(out_.literals_.size());
  }

  uint32_t parse_comparison() {
    const Token& first = peek();
    Node n;
    n.a = parse_operand();
    const Token& op = peek();
    switch (op.kind) {
      case TokenKind::kEq: case TokenKind::kNe: case TokenKind::kLt:
      case TokenKind::kLe: case TokenKind::kGt: case TokenKind::kGe: {
        next();
        n.op = Op::kCmp;
        n.cmp = op.kind == TokenKind::kEq   ? RuleSet::Cmp::kEq
                : op.kind == TokenKind::kNe ? RuleSet::Cmp::kNe
                : op.kind == TokenKind::kLt ? RuleSet::Cmp::kLt
                : op.kind == TokenKind::kLe ? RuleSet::Cmp::kLe
                : op.kind == TokenKind::kGt ? RuleSet::Cmp::kGt
                                            : RuleSet::Cmp::kGe;
        n.b = parse_operand();
        const bool ordering = n.cmp != RuleSet::Cmp::kEq && n.cmp != RuleSet::Cmp::kNe;
        if (ordering && (is_bool_literal(n.a) || is_bool_literal(n.b)))
          fail(op, "booleans can only be compared with == or !=");
        return add_node(n);
      }
      case TokenKind::kKwIn:
        next();
        n.op = Op::kIn;
        parse_list(n);
        return add_node(n);
      case TokenKind::kKwNot:
        next();
        if (peek().kind != TokenKind::kKwIn) fail(peek(), "expected 'in' after 'not', found " + describe(peek()));
        next();
        n.op = Op::kNotIn;
        parse_list(n);
        return add_node(n);
      case TokenKind::kKwMatches: {
        next();
        const Token& re = peek();
        if (re.kind != TokenKind::kString) fail(re, "expected a regex string after 'matches', found " + describe(re));
        next();
        if (re.text.size() > kMaxRegexLength) fail(re, "regex longer than 512 characters");
        try {
          out_.regexes_.emplace_back(re.text, std::regex::ECMAScript | std::regex::optimize);
        } catch (const std::regex_error& e) {
          fail(re, std::string("bad regex: ") + e.what());
        }
        n.op = Op::kMatches;
        n.regex = static_cast<uint32_t>(out_.regexes_.size() - 1);
        return add_node(n);
      }
      default:
        break;
    }
    // A bare operand is a condition only when it can be a bool.
    if (n.a.is_field) {
      n.op = Op::kTruthy;
      return add_node(n);
    }
    const Literal& l = out_.literals_[n.a.index];
    if (l.type != Literal::Type::kBool)
      fail(first, "expected a comparison after " + describe(first) + ", found " + describe(op));
    n.op = Op::kConst;
    n.constant = l.boolean;
    return add_node(n);
  }

  static bool is_redactable(FieldRef::Kind k) {
    switch (k) {
      case FieldRef::Kind::kArg: case FieldRef::Kind::kArgs: case FieldRef::Kind::kRet:
      case FieldRef::Kind::kComm: case FieldRef::Kind::kService: case FieldRef::Kind::kContainerId:
      case FieldRef::Kind::kPodUid: case FieldRef::Kind::kCudaKernel: case FieldRef::Kind::kTag: case FieldRef::Kind::kAttribute:
      case FieldRef::Kind::kAttributeOrTag:
        return true;
      default:
        return false;
    }
  }

  // value := literal | '[' literal (',' literal)* ']'; returns the tokens of the items.
  std::vector<Token> parse_value(bool& is_list) {
    std::vector<Token> items;
    is_list = accept(TokenKind::kLBracket);
    auto literal = [&]() {
      const Token& t = peek();
      if (t.kind != TokenKind::kString && t.kind != TokenKind::kNumber && t.kind != TokenKind::kKwTrue &&
          t.kind != TokenKind::kKwFalse)
        fail(t, "expected a literal (string, number, true or false), found " + describe(t));
      items.push_back(next());
    };
    if (!is_list) {
      literal();
      return items;
    }
    if (peek().kind != TokenKind::kRBracket) {
      do literal();
      while (accept(TokenKind::kComma));
    }
    expect(TokenKind::kRBracket, "to close the list");
    return items;
  }

  void parse_action(Actions& a, std::vector<std::string>& assigned) {
    const Token& target = peek();
    if (target.kind != TokenKind::kIdent)
      fail(target, "expected an action (e.g. sample.exempt = true) or 'end', found " + describe(target));
    next();
    std::string name = target.text;
    if (name == "drop") name = "sample.drop";
    if (name == "redact") name = "redact.fields";
    const bool known = name == "sample.exempt" || name == "sample.drop" || name == "sample.rate" ||
                       name == "redact.fields" || name == "audit.trace";
    if (!known)
      fail(target, "unknown action '" + target.text +
                       "' (expected sample.exempt, sample.drop, drop, sample.rate, redact, redact.fields or audit.trace)");
    for (const auto& s : assigned)
      if (s == name) fail(target, "'" + target.text + "' assigned twice in one rule");
    assigned.push_back(name);
    expect(TokenKind::kAssign, "after the action target");
    const Token& value_tok = peek();
    bool is_list = false;
    auto items = parse_value(is_list);

    auto single_bool = [&]() -> bool {
      if (is_list || (items[0].kind != TokenKind::kKwTrue && items[0].kind != TokenKind::kKwFalse))
        fail(value_tok, "'" + target.text + "' takes true or false");
      return items[0].kind == TokenKind::kKwTrue;
    };
    auto strings = [&]() {
      std::vector<std::pair<std::string, SourcePos>> out;
      for (const auto& t : items) {
        if (t.kind != TokenKind::kString) fail(t, "'" + target.text + "' takes strings, found " + describe(t));
        if (t.text.empty()) fail(t, "empty string in '" + target.text + "'");
        out.emplace_back(t.text, t.pos);
      }
      if (out.empty()) fail(value_tok, "'" + target.text + "' needs at least one entry");
      return out;
    };
    if (name == "sample.exempt") {
      a.exempt = single_bool();
    } else if (name == "sample.drop") {
      a.drop = single_bool();
    } else if (name == "sample.rate") {
      if (is_list || items[0].kind != TokenKind::kNumber || !(items[0].number > 0) || items[0].number > 1)
        fail(value_tok, "'sample.rate' takes a number in (0, 1]");
      a.rate = items[0].number;
    } else if (name == "redact.fields") {
      for (auto& [s, pos] : strings()) {
        FieldRef f = parse_field(s, pos);
        if (!is_redactable(f.kind)) throw RulesError(pos, "cannot redact '" + s + "'");
        a.redact.push_back(std::move(f));
      }
    } else {  // audit.trace
      for (auto& [s, pos] : strings()) a.audit.push_back(s);
    }
  }

  std::string_view src_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  RuleSet& out_;
};

RuleSet RuleSet::compile(std::string_view source) {
  RuleSet rs;
  Compiler(source, rs).run();
  return rs;
}

}  // namespace mcp::rules
