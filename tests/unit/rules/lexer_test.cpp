#include "rules/lexer.h"

#include <gtest/gtest.h>

namespace mcp::rules {
namespace {

TEST(RulesLexer, TokensCarryOneBasedLineAndColumn) {
  auto t = lex("rule \"x\"\n  when a.b == 3");
  ASSERT_EQ(t.size(), 7u);
  EXPECT_EQ(t[0].kind, TokenKind::kKwRule);
  EXPECT_EQ(t[1].kind, TokenKind::kString);
  EXPECT_EQ(t[1].text, "x");
  EXPECT_EQ(t[1].pos, (SourcePos{1, 6}));
  EXPECT_EQ(t[2].kind, TokenKind::kKwWhen);
  EXPECT_EQ(t[2].pos, (SourcePos{2, 3}));
  EXPECT_EQ(t[3].kind, TokenKind::kIdent);
  EXPECT_EQ(t[3].text, "a.b");
  EXPECT_EQ(t[4].kind, TokenKind::kEq);
  EXPECT_EQ(t[5].number, 3);
  EXPECT_EQ(t[6].kind, TokenKind::kEnd);
}

TEST(RulesLexer, DottedKeywordIsAnIdentifier) {
  auto t = lex("end field.end rule.in");
  EXPECT_EQ(t[0].kind, TokenKind::kKwEnd);
  EXPECT_EQ(t[1].kind, TokenKind::kIdent);
  EXPECT_EQ(t[2].kind, TokenKind::kIdent);
}

TEST(RulesLexer, IndexGluedToNameIsPartOfThePath) {
  auto t = lex("args[1] in [1]");
  EXPECT_EQ(t[0].text, "args[1]");
  EXPECT_EQ(t[1].kind, TokenKind::kKwIn);
  EXPECT_EQ(t[2].kind, TokenKind::kLBracket);
}

TEST(RulesLexer, DecodesEscapesAndNegativeNumbers) {
  auto t = lex(R"("a\"b\\c\n" -2.5 <= != ! &&||)");
  EXPECT_EQ(t[0].text, "a\"b\\c\n");
  EXPECT_EQ(t[1].number, -2.5);
  EXPECT_EQ(t[2].kind, TokenKind::kLe);
  EXPECT_EQ(t[3].kind, TokenKind::kNe);
  EXPECT_EQ(t[4].kind, TokenKind::kBang);
  EXPECT_EQ(t[5].kind, TokenKind::kAnd);
  EXPECT_EQ(t[6].kind, TokenKind::kOr);
}

TEST(RulesLexer, SkipsBothCommentStyles) {
  auto t = lex("# one\n// two\nrule // three\n");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].pos, (SourcePos{3, 1}));
}

void expect_error(std::string_view src, SourcePos pos, std::string_view fragment) {
  try {
    lex(src);
    FAIL() << "no error for " << src;
  } catch (const RulesError& e) {
    EXPECT_EQ(e.pos(), pos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(RulesLexer, ErrorsPointAtTheBadCharacter) {
  expect_error("a == \"open", {1, 6}, "unterminated string");
  expect_error("a\n  & b", {2, 3}, "did you mean '&&'");
  expect_error("a | b", {1, 3}, "'||'");
  expect_error("a @ b", {1, 3}, "unexpected character '@'");
  expect_error("\"x\\q\"", {1, 3}, "unknown escape");
  expect_error("12ab", {1, 3}, "after number");
  expect_error("a\x01", {1, 2}, "0x01");
}

}  // namespace
}  // namespace mcp::rules
