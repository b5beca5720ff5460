// Lexer: token stream and jinja2's whitespace rules under trim_blocks + lstrip_blocks.
// Expected strings were checked against python3-jinja2 in transformers' environment.
#include "infera/jinja/lexer.h"

#include <gtest/gtest.h>

#include <boost/json/object.hpp>

#include "infera/jinja/template.h"

namespace infera::jinja {
namespace {

std::vector<Token> lex(std::string_view source, Program* program) {
  program->source = normalize_source(source);
  auto tokens = tokenize(program);
  EXPECT_TRUE(tokens.ok()) << tokens.status().to_string();
  return tokens.ok() ? *tokens : std::vector<Token>{};
}

std::string render_with_no_context(std::string_view source) {
  auto t = Template::parse(source);
  if (!t.ok()) return "PARSE ERROR: " + t.status().message();
  auto r = t->render(boost::json::object{});
  return r.ok() ? *r : "RENDER ERROR: " + r.status().message();
}

TEST(LexerTest, SplitsTextAndTagsWithPositions) {
  Program p;
  const auto tokens = lex("Hi {{ name }}!\n{% if x %}", &p);
  ASSERT_EQ(tokens.size(), 10u);
  EXPECT_EQ(tokens[0].type, Tok::kText);
  EXPECT_EQ(tokens[0].text, "Hi ");
  EXPECT_EQ(tokens[1].type, Tok::kVariableBegin);
  EXPECT_EQ(tokens[2].type, Tok::kName);
  EXPECT_EQ(tokens[2].text, "name");
  EXPECT_EQ(tokens[2].column, 7u);
  EXPECT_EQ(tokens[3].type, Tok::kVariableEnd);
  EXPECT_EQ(tokens[4].text, "!\n");
  EXPECT_EQ(tokens[5].type, Tok::kBlockBegin);
  EXPECT_EQ(tokens[5].line, 2u);
  EXPECT_EQ(tokens[6].text, "if");
  EXPECT_EQ(tokens[9].type, Tok::kEof);
}

TEST(LexerTest, NumbersFollowPythonLiterals) {
  Program p;
  const auto t = lex("{{ 42 1_000 0x1F 0o17 0b101 2.5 1e3 1.5E-2 x.0.1 }}", &p);
  EXPECT_EQ(t[1].integer, 42);
  EXPECT_EQ(t[2].integer, 1000);
  EXPECT_EQ(t[3].integer, 31);
  EXPECT_EQ(t[4].integer, 15);
  EXPECT_EQ(t[5].integer, 5);
  EXPECT_EQ(t[6].type, Tok::kFloat);
  EXPECT_DOUBLE_EQ(t[6].real, 2.5);
  EXPECT_DOUBLE_EQ(t[7].real, 1000.0);
  EXPECT_DOUBLE_EQ(t[8].real, 0.015);
  // After a dot, digits are subscripts, never a float: x . 0 . 1
  EXPECT_EQ(t[10].type, Tok::kDot);
  EXPECT_EQ(t[11].type, Tok::kInteger);
  EXPECT_EQ(t[12].type, Tok::kDot);
  EXPECT_EQ(t[13].type, Tok::kInteger);
}

TEST(LexerTest, StringEscapesDecodeLikePython) {
  Program p;
  const auto t = lex(R"({{ 'a\tb\n\x41\u00e9\101\q\'' "d\"q" }})", &p);
  EXPECT_EQ(t[1].text,
            "a\tb\nA\xC3\xA9"
            "A\\q'");
  EXPECT_EQ(t[2].text, "d\"q");
}

TEST(LexerTest, OperatorsInsideBracketsDoNotEndTheTag) {
  EXPECT_EQ(render_with_no_context("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
}

TEST(LexerTest, TrimBlocksRemovesTheNewlineAfterABlockTag) {
  EXPECT_EQ(render_with_no_context("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
}

TEST(LexerTest, LstripBlocksRemovesIndentationBeforeABlockTag) {
  EXPECT_EQ(render_with_no_context("a\n    {% if true %}b{% endif %}"), "a\nb");
  // Not for {{ }}, and not when the line has other text before the tag.
  EXPECT_EQ(render_with_no_context("a\n    {{ 'b' }}"), "a\n    b");
  EXPECT_EQ(render_with_no_context("x  {% if true %}y{% endif %}"), "x  y");
}

TEST(LexerTest, MinusStripsAllWhitespaceOnThatSide) {
  EXPECT_EQ(render_with_no_context("a  \n {{- 'b' -}} \n\t c"), "abc");
  EXPECT_EQ(render_with_no_context("a\n\n{%- if true -%}\n\n b{% endif %}"), "ab");
}

TEST(LexerTest, PlusDisablesLstripAndTrim) {
  EXPECT_EQ(render_with_no_context("x\n  {%+ if true %}y{% endif %}"), "x\n  y");
  EXPECT_EQ(render_with_no_context("{% if true +%}\nz{% endif %}"), "\nz");
}

TEST(LexerTest, CommentsAreDroppedAndFollowTheBlockRules) {
  EXPECT_EQ(render_with_no_context("a\n  {# note #}\nb"), "a\nb");
  EXPECT_EQ(render_with_no_context("x  {#- c -#}  y"), "xy");
  EXPECT_EQ(render_with_no_context("{# {{ not a tag }} #}ok"), "ok");
}

TEST(LexerTest, RawBlocksPassTemplateSyntaxThrough) {
  EXPECT_EQ(render_with_no_context("{% raw %}{{ x }} {% if %}{% endraw %}"), "{{ x }} {% if %}");
  EXPECT_EQ(render_with_no_context("a  {% raw %}\n b\n  {% endraw %}\nd"), "a  \n b\nd");
}

TEST(LexerTest, NewlinesAreNormalisedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(render_with_no_context("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(render_with_no_context("a\n\n"), "a\n");
}

TEST(LexerTest, ErrorsCarryLineAndColumn) {
  Program p;
  p.source = normalize_source("line one\n{{ a ! b }}");
  const auto t = tokenize(&p);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "template syntax error at line 2, column 6: unexpected char '!'");
}

TEST(LexerTest, UnbalancedBracketsAreReported) {
  Program p;
  p.source = normalize_source("{{ foo( }}");
  const auto t = tokenize(&p);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("unexpected '}', expected ')'"), std::string::npos);
}

TEST(LexerTest, UnterminatedCommentAndStringAreErrors) {
  Program a;
  a.source = "{# never closed";
  EXPECT_NE(tokenize(&a).status().message().find("Missing end of comment tag"), std::string::npos);
  Program b;
  b.source = "{{ 'open }}";
  EXPECT_NE(tokenize(&b).status().message().find("unterminated string literal"), std::string::npos);
}

}  // namespace
}  // namespace infera::jinja
