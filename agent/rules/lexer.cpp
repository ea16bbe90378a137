#include "rules/lexer.h"

#include <charconv>

namespace mcp::rules {

std::string_view to_string(TokenKind kind) {
  switch (kind) {
    case TokenKind::kEnd: return "end of input";
    case TokenKind::kIdent: return "identifier";
    case TokenKind::kString: return "string";
    case TokenKind::kNumber: return "number";
    case TokenKind::kKwRule: return "'rule'";
    case TokenKind::kKwWhen: return "'when'";
    case TokenKind::kKwThen: return "'then'";
    case TokenKind::kKwEnd: return "'end'";
    case TokenKind::kKwTrue: return "'true'";
    case TokenKind::kKwFalse: return "'false'";
    case TokenKind::kKwIn: return "'in'";
    case TokenKind::kKwMatches: return "'matches'";
    case TokenKind::kKwNot: return "'not'";
    case TokenKind::kEq: return "'=='";
    case TokenKind::kNe: return "'!='";
    case TokenKind::kLt: return "'<'";
    case TokenKind::kLe: return "'<='";
    case TokenKind::kGt: return "'>'";
    case TokenKind::kGe: return "'>='";
    case TokenKind::kAnd: return "'&&'";
    case TokenKind::kOr: return "'||'";
    case TokenKind::kBang: return "'!'";
    case TokenKind::kAssign: return "'='";
    case TokenKind::kLParen: return "'('";
    case TokenKind::kRParen: return "')'";
    case TokenKind::kLBracket: return "'['";
    case TokenKind::kRBracket: return "']'";
    case TokenKind::kComma: return "','";
  }
  return "token";
}

namespace {

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c) || c == '-'; }

struct Keyword {
  std::string_view text;
  TokenKind kind;
};
constexpr Keyword kKeywords[] = {
    {"rule", TokenKind::kKwRule}, {"when", TokenKind::kKwWhen},   {"then", TokenKind::kKwThen},
    {"end", TokenKind::kKwEnd},   {"true", TokenKind::kKwTrue},   {"false", TokenKind::kKwFalse},
    {"in", TokenKind::kKwIn},     {"matches", TokenKind::kKwMatches}, {"not", TokenKind::kKwNot},
};

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    for (;;) {
      skip_space_and_comments();
      Token t;
      t.pos = pos_;
      t.offset = i_;
      if (i_ >= src_.size()) {
        t.kind = TokenKind::kEnd;
        out.push_back(std::move(t));
        return out;
      }
      lex_one(t);
      t.length = i_ - t.offset;
      out.push_back(std::move(t));
    }
  }

 private:
  char peek(size_t ahead = 0) const { return i_ + ahead < src_.size() ? src_[i_ + ahead] : '\0'; }

  void advance() {
    if (src_[i_] == '\n') {
      ++pos_.line;
      pos_.column = 1;
    } else {
      ++pos_.column;
    }
    ++i_;
  }

  void skip_space_and_comments() {
    while (i_ < src_.size()) {
      const char c = src_[i_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        advance();
      } else if (c == '#' || (c == '/' && peek(1) == '/')) {
        while (i_ < src_.size() && src_[i_] != '\n') advance();
      } else {
        return;
      }
    }
  }

  [[noreturn]] void fail(SourcePos at, const std::string& why) const { throw RulesError(at, why); }

  void lex_one(Token& t) {
    const char c = src_[i_];
    if (is_ident_start(c)) return lex_ident(t);
    if (is_digit(c) || (c == '-' && is_digit(peek(1)))) return lex_number(t);
    if (c == '"') return lex_string(t);
    auto two = [&](char second, TokenKind both, TokenKind single) {
      advance();
      if (peek() == second) {
        advance();
        t.kind = both;
      } else {
        t.kind = single;
      }
    };
    switch (c) {
      case '=': return two('=', TokenKind::kEq, TokenKind::kAssign);
      case '<': return two('=', TokenKind::kLe, TokenKind::kLt);
      case '>': return two('=', TokenKind::kGe, TokenKind::kGt);
      case '!': return two('=', TokenKind::kNe, TokenKind::kBang);
      case '&':
        if (peek(1) != '&') fail(t.pos, "unexpected '&' (did you mean '&&'?)");
        advance(), advance();
        t.kind = TokenKind::kAnd;
        return;
      case '|':
        if (peek(1) != '|') fail(t.pos, "unexpected '|' (did you mean '||'?)");
        advance(), advance();
        t.kind = TokenKind::kOr;
        return;
      case '(': advance(); t.kind = TokenKind::kLParen; return;
      case ')': advance(); t.kind = TokenKind::kRParen; return;
      case '[': advance(); t.kind = TokenKind::kLBracket; return;
      case ']': advance(); t.kind = TokenKind::kRBracket; return;
      case ',': advance(); t.kind = TokenKind::kComma; return;
      default: break;
    }
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
      fail(t.pos, "unexpected byte 0x" + hex(static_cast<unsigned char>(c)));
    fail(t.pos, std::string("unexpected character '") + c + "'");
  }

  static std::string hex(unsigned v) {
    const char* d = "0123456789abcdef";
    return {d[v >> 4], d[v & 15]};
  }

  // identifier := segment ('.' segment | '[' digits ']')*
  void lex_ident(Token& t) {
    const size_t start = i_;
    bool dotted = false;
    while (i_ < src_.size() && is_ident_char(src_[i_])) advance();
    for (;;) {
      if (peek() == '.' && is_ident_start(peek(1))) {
        dotted = true;
        advance();
        while (i_ < src_.size() && is_ident_char(src_[i_])) advance();
      } else if (peek() == '[' && is_digit(peek(1))) {
        // args[1]: an index glued to the name (no space) is part of the path.
        size_t k = 1;
        while (is_digit(peek(k))) ++k;
        if (peek(k) != ']') break;
        dotted = true;
        for (size_t n = 0; n <= k; ++n) advance();
      } else {
        break;
      }
    }
    t.text = std::string(src_.substr(start, i_ - start));
    t.kind = TokenKind::kIdent;
    if (!dotted) {
      for (const auto& kw : kKeywords)
        if (kw.text == t.text) t.kind = kw.kind;
    }
  }

  void lex_number(Token& t) {
    const size_t start = i_;
    if (peek() == '-') advance();
    while (is_digit(peek())) advance();
    if (peek() == '.' && is_digit(peek(1))) {
      advance();
      while (is_digit(peek())) advance();
    }
    if ((peek() == 'e' || peek() == 'E') &&
        (is_digit(peek(1)) || ((peek(1) == '-' || peek(1) == '+') && is_digit(peek(2))))) {
      advance();
      if (peek() == '-' || peek() == '+') advance();
      while (is_digit(peek())) advance();
    }
    if (is_ident_start(peek())) fail(pos_, std::string("unexpected '") + peek() + "' after number");
    t.text = std::string(src_.substr(start, i_ - start));
    const char* first = t.text.data();
    const char* last = first + t.text.size();
    auto [ptr, ec] = std::from_chars(first, last, t.number);
    if (ec != std::errc() || ptr != last) fail(t.pos, "number out of range: " + t.text);
    t.kind = TokenKind::kNumber;
  }

  void lex_string(Token& t) {
    advance();  // opening quote
    for (;;) {
      if (i_ >= src_.size()) fail(t.pos, "unterminated string");
      const char c = src_[i_];
      if (c == '"') {
        advance();
        break;
      }
      if (c == '\n') fail(t.pos, "unterminated string (newline before closing quote)");
      if (c == '\\') {
        const SourcePos esc = pos_;
        advance();
        if (i_ >= src_.size()) fail(t.pos, "unterminated string");
        const char e = src_[i_];
        switch (e) {
          case '"': t.text += '"'; break;
          case '\\': t.text += '\\'; break;
          case 'n': t.text += '\n'; break;
          case 't': t.text += '\t'; break;
          default: fail(esc, std::string("unknown escape '\\") + e + "' (use \\\" \\\\ \\n \\t)");
        }
        advance();
        continue;
      }
      t.text += c;
      advance();
    }
    t.kind = TokenKind::kString;
  }

  std::string_view src_;
  size_t i_ = 0;
  SourcePos pos_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace mcp::rules
