// Bad input: templates that raise, use undefined values, loop or recurse without end, explode in
// size, or do not parse. Each must end in a clear Status, never a crash or a hang.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <string>

#include "infera/jinja/template.h"

namespace infera::jinja {
namespace {

Status render_status(
    std::string_view source, const Limits& limits = {},
    std::string_view context = R"({"messages": [{"role": "user", "content": "hi"}]})") {
  auto t = Template::parse(source);
  if (!t.ok()) return t.status();
  auto r = t->render(boost::json::parse(context).as_object(), limits);
  return r.ok() ? ok_status() : r.status();
}

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(TemplateErrorsTest, RaiseExceptionMessageIsCarriedVerbatim) {
  const Status s =
      render_status("a{{ raise_exception('Conversation roles must alternate user/assistant') }}b");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Conversation roles must alternate user/assistant");
}

TEST(TemplateErrorsTest, RaiseExceptionFromAMacroInsideALoop) {
  const Status s = render_status(
      "{% macro check(m) %}{% if m.role != 'assistant' %}{{ raise_exception('bad role: ' ~ m.role) "
      "}}{% endif %}"
      "{% endmacro %}{% for m in messages %}{{ check(m) }}{% endfor %}");
  EXPECT_EQ(s.message(), "bad role: user");
}

TEST(TemplateErrorsTest, AttributeOfUndefinedIsAnErrorWithItsLine) {
  const Status s = render_status("line one\n{% set x = 1 %}\n{{ foo.bar }}");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "template error at line 3: 'foo' is undefined");
}

TEST(TemplateErrorsTest, UndefinedUsedAsAValueIsAnError) {
  EXPECT_TRUE(contains(render_status("{{ missing + 1 }}").message(), "'missing' is undefined"));
  EXPECT_TRUE(contains(render_status("{{ missing < 1 }}").message(), "'missing' is undefined"));
  EXPECT_TRUE(contains(render_status("{{ missing() }}").message(), "'missing' is undefined"));
  EXPECT_TRUE(contains(render_status("{{ messages[0].nope.deeper }}").message(),
                       "'dict object' has no attribute 'nope'"));
  EXPECT_TRUE(contains(render_status("{{ missing|tojson }}").message(), "not JSON serializable"));
}

TEST(TemplateErrorsTest, TypeErrorsAreErrors) {
  EXPECT_TRUE(contains(render_status("{{ 'a' + 1 }}").message(),
                       "can only concatenate str (not \"int\") to str"));
  EXPECT_TRUE(contains(render_status("{{ messages[0].content + messages }}").message(),
                       "can only concatenate str"));
  EXPECT_TRUE(contains(render_status("{% for x in none %}{% endfor %}").message(),
                       "'NoneType' object is not iterable"));
  EXPECT_TRUE(
      contains(render_status("{{ 1 // 0 }}").message(), "integer division or modulo by zero"));
  EXPECT_TRUE(
      contains(render_status("{{ messages|length > 'a' }}").message(), "'>' not supported"));
}

TEST(TemplateErrorsTest, TheSandboxRefusesMutation) {
  EXPECT_TRUE(contains(render_status("{{ messages.append(1) }}").message(),
                       "access to attribute 'append' of 'list' object is unsafe."));
  EXPECT_TRUE(contains(render_status("{{ messages[0].update({}) }}").message(), "is unsafe"));
  EXPECT_TRUE(contains(render_status("{% set x = 1 %}{% set x.y = 2 %}").message(),
                       "cannot assign attribute on non-namespace object"));
}

TEST(TemplateErrorsTest, HugeRangeIsRefusedLikeTheSandbox) {
  EXPECT_TRUE(contains(render_status("{{ range(100001)|length }}").message(),
                       "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."));
}

TEST(TemplateErrorsTest, EndlessLoopStopsAtTheStepLimit) {
  Limits limits;
  limits.max_steps = 200'000;
  const Status s = render_status(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}"
      "{% endfor %}{% endfor %}{% endfor %}",
      limits);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "template render stopped: more than 200000 steps");
}

TEST(TemplateErrorsTest, DefaultLimitsStopAnEndlessLoop) {
  const Status s = render_status(
      "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
}

TEST(TemplateErrorsTest, OutputLimit) {
  Limits limits;
  limits.max_output_bytes = 1 << 20;
  const Status s = render_status("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", limits);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(s.message(), "output larger than 1048576 bytes"));
}

TEST(TemplateErrorsTest, MemoryLimitStopsExponentialStrings) {
  Limits limits;
  limits.max_memory_bytes = 16 << 20;
  const Status s = render_status(
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% "
      "endfor %}{{ ns.s|length }}",
      limits);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(s.message(), "memory limit"));
}

TEST(TemplateErrorsTest, CapturedBlocksCountAgainstTheOutputLimit) {
  Limits limits;
  limits.max_output_bytes = 4096;
  const Status s = render_status(
      "{% set x %}{% for i in range(1000) %}0123456789{% endfor %}{% endset %}", limits);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
}

TEST(TemplateErrorsTest, EndlessMacroRecursionStops) {
  const Status s = render_status("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(s.message(), "macro calls nested deeper than 64"));
}

TEST(TemplateErrorsTest, RecursionThroughDeepExpressionsStopsBeforeTheStackDoes) {
  // Each macro level nests 18 binary operators, so the interpreter's recursion bound is hit
  // before the macro-depth limit: a clean error, not a stack overflow (also under ASan).
  std::string body = "f(n + 1)";
  for (int i = 0; i < 18; ++i) body = "1 + (" + body + ")";
  const Status s = render_status("{% macro f(n) %}{{ " + body + " }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(s.message(), "nesting deeper than")) << s.message();
}

TEST(TemplateErrorsTest, SyntaxErrorsCarryLineAndColumn) {
  Status s = render_status("ok\n{% if x %}\n{{ 1 + }}\n{% endif %}");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "template syntax error at line 3, column 8: unexpected 'end of print statement'");
  s = render_status("{% for x in xs %}\nno end");
  EXPECT_TRUE(contains(s.message(), "line 2")) << s.message();
  EXPECT_TRUE(
      contains(s.message(), "Jinja was looking for the following tags: 'endfor' or 'else'"));
  s = render_status("{% frobnicate %}");
  EXPECT_EQ(s.message(),
            "template syntax error at line 1, column 4: Encountered unknown tag 'frobnicate'.");
  s = render_status("{% break %}");
  EXPECT_TRUE(contains(s.message(), "'break' outside loop"));
  s = render_status("{% include 'other.jinja' %}");
  EXPECT_TRUE(contains(s.message(), "'include' is not supported"));
}

TEST(TemplateErrorsTest, DeepNestingIsRefusedAtParseTime) {
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  const Status s = render_status(deep);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "nested too deeply"));
  std::string blocks;
  for (int i = 0; i < 500; ++i) blocks += "{% if true %}";
  EXPECT_TRUE(contains(render_status(blocks).message(), "nested too deeply"));
}

TEST(TemplateErrorsTest, DeeplyNestedValuesAreRefused) {
  const Status s = render_status(
      "{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor "
      "%}{{ ns.x }}");
  EXPECT_TRUE(contains(s.message(), "value nested too deeply"));

  boost::json::value deep = boost::json::array{};
  for (int i = 0; i < 1000; ++i) deep = boost::json::array{deep};
  auto t = Template::parse("{{ x }}");
  ASSERT_TRUE(t.ok());
  auto r = t->render(boost::json::object{{"x", deep}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "nested too deeply"));
}

TEST(TemplateErrorsTest, SelfReferencingNamespacePrintsWithoutHanging) {
  auto t = Template::parse("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  ASSERT_TRUE(t.ok());
  auto r = t->render({});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(contains(*r, "...")) << *r;
}

TEST(TemplateErrorsTest, UnknownFiltersAndTestsFailWhenEvaluated) {
  EXPECT_TRUE(contains(render_status("{{ 'x'|nope }}").message(), "No filter named 'nope'."));
  EXPECT_TRUE(contains(render_status("{{ 'x' is nope }}").message(), "No test named 'nope'."));
  EXPECT_TRUE(render_status("{% if false %}{{ 'x'|nope }}{% endif %}").ok());
}

TEST(TemplateErrorsTest, InvalidUtf8PassesThroughWithoutCrashing) {
  auto t = Template::parse("a\xff\xfe{{ 'b\xc3' }}{{ 'x\xe2\x82'|upper }}{{ '\xf0'|length }}");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto r = t->render({});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r,
            "a\xff\xfe"
            "b\xc3X\xe2\x82"
            "1");
}

}  // namespace
}  // namespace infera::jinja
