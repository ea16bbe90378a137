// Lexer for the compliance rules language. Turns source text into tokens with
// 1-based line and column (columns count bytes). Comments run from `#` or `//` to
// the end of the line. A malformed token (unterminated string, stray character)
// throws RulesError at its position; the lexer never reads past the input.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rules/error.h"

namespace mcp::rules {

enum class TokenKind : uint8_t {
  kEnd,        // end of input
  kIdent,      // dotted path, e.g. consent.granted, tags.version, args[1]
  kString,     // "..." with escapes decoded into `text`
  kNumber,     // integer or decimal, optional leading '-'
  kKwRule, kKwWhen, kKwThen, kKwEnd, kKwTrue, kKwFalse, kKwIn, kKwMatches, kKwNot,
  kEq, kNe, kLt, kLe, kGt, kGe,  // == != < <= > >=
  kAnd, kOr, kBang,              // && || !
  kAssign,                       // =
  kLParen, kRParen, kLBracket, kRBracket, kComma,
};

std::string_view to_string(TokenKind kind);

struct Token {
  TokenKind kind = TokenKind::kEnd;
  SourcePos pos;
  std::string text;     // identifier path, decoded string, or number spelling
  double number = 0;    // kNumber only
  size_t offset = 0;    // byte offset of the token in the source
  size_t length = 0;    // byte length of the token in the source
};

std::vector<Token> lex(std::string_view source);

}  // namespace mcp::rules
