#include "infera/http/sse.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace infera::http {
namespace {

struct Ev {
  std::string event;
  std::string data;
  std::string id;
  bool operator==(const Ev&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Ev& e) {
  return os << "{event=" << e.event << " data=" << e.data << " id=" << e.id << "}";
}

// Feeds `parts` one after another, draining events after each feed.
std::vector<Ev> parse_parts(const std::vector<std::string_view>& parts,
                            SseParser::Options options = {}) {
  SseParser p(options);
  std::vector<Ev> out;
  SseEvent ev;
  for (std::string_view part : parts) {
    p.feed(part);
    while (p.next(ev))
      out.push_back({std::string(ev.event), std::string(ev.data), std::string(ev.id)});
  }
  return out;
}

std::vector<Ev> parse_all(std::string_view s) {
  return parse_parts({s});
}

// A stream that exercises the grammar: every line ending, comments, named events, ids,
// multi-line data, "data" without colon, a field with no space after the colon, an unknown
// field, an event without data (not dispatched), a leading BOM, and OpenAI's [DONE].
const std::string kStream =
    "\xEF\xBB\xBF"
    ": keep-alive comment\n"
    "data: {\"a\":1}\n\n"
    "data: first\r\ndata: second\r\n\r\n"
    "event: ping\rid: 7\rdata:no-space\r\r"
    "retry: 1000\nunknown: x\ndata\n\n"
    "event: lonely\n\n"
    "data:  two spaces\n"
    "id\n"
    "\n"
    "data: [DONE]\n\n";

const std::vector<Ev> kExpected = {
    {"", "{\"a\":1}", ""}, {"", "first\nsecond", ""}, {"ping", "no-space", "7"},
    {"", "", "7"},         {"", " two spaces", ""},   {"", "[DONE]", ""},
};

TEST(SseFramingTest, WritesOneDataLineAndBlankLine) {
  EXPECT_EQ(sse_event(R"({"x":1})"), "data: {\"x\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  std::string out = "prefix|";
  append_sse_event(out, "");
  EXPECT_EQ(out, "prefix|data: \n\n");
}

TEST(SseFramingTest, SplitsLineBreaksIntoDataLines) {
  EXPECT_EQ(sse_event("a\nb\r\nc\rd"), "data: a\ndata: b\ndata: c\ndata: d\n\n");
  EXPECT_EQ(sse_event("trailing\n"), "data: trailing\ndata: \n\n");
}

TEST(SseParserTest, ParsesTheGrammar) {
  EXPECT_EQ(parse_all(kStream), kExpected);
}

TEST(SseParserTest, EveryTwoWaySplitGivesTheSameEvents) {
  for (size_t i = 0; i <= kStream.size(); ++i) {
    const std::string_view s(kStream);
    ASSERT_EQ(parse_parts({s.substr(0, i), s.substr(i)}), kExpected) << "split at " << i;
  }
}

TEST(SseParserTest, EveryThreeWaySplitGivesTheSameEvents) {
  const std::string_view s(kStream);
  for (size_t i = 0; i <= s.size(); ++i) {
    for (size_t j = i; j <= s.size(); ++j) {
      ASSERT_EQ(parse_parts({s.substr(0, i), s.substr(i, j - i), s.substr(j)}), kExpected)
          << "splits at " << i << "," << j;
    }
  }
}

TEST(SseParserTest, ByteByByteGivesTheSameEvents) {
  std::vector<std::string_view> parts;
  for (size_t i = 0; i < kStream.size(); ++i)
    parts.push_back(std::string_view(kStream).substr(i, 1));
  EXPECT_EQ(parse_parts(parts), kExpected);
}

TEST(SseParserTest, CrAtEndOfFeedThenLfIsOneLineBreak) {
  // "\r" | "\n": one line end, not an empty line that would dispatch early.
  EXPECT_EQ(parse_parts({"data: a\r", "\ndata: b\r", "\n\r", "\n"}),
            (std::vector<Ev>{{"", "a\nb", ""}}));
}

TEST(SseParserTest, FramingRoundTripsRandomPayloads) {
  std::mt19937 rng(42);
  const std::string alphabet = "ab {}\":,\n\r\\";
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> payloads;
    std::string wire;
    const int n = 1 + static_cast<int>(rng() % 5);
    for (int k = 0; k < n; ++k) {
      std::string p;
      const size_t len = rng() % 20;
      for (size_t c = 0; c < len; ++c) p.push_back(alphabet[rng() % alphabet.size()]);
      append_sse_event(wire, p);
      // A parser sees "\r\n" and "\r" as "\n".
      std::string expect;
      for (size_t c = 0; c < p.size(); ++c) {
        if (p[c] == '\r') {
          expect.push_back('\n');
          if (c + 1 < p.size() && p[c + 1] == '\n') ++c;
        } else {
          expect.push_back(p[c]);
        }
      }
      payloads.push_back(expect);
    }
    const size_t cut = rng() % (wire.size() + 1);
    const auto events =
        parse_parts({std::string_view(wire).substr(0, cut), std::string_view(wire).substr(cut)});
    ASSERT_EQ(events.size(), payloads.size());
    for (size_t k = 0; k < events.size(); ++k) EXPECT_EQ(events[k].data, payloads[k]);
  }
}

TEST(SseParserTest, DoneIsRecognised) {
  SseParser p;
  p.feed(kSseDone);
  SseEvent ev;
  ASSERT_TRUE(p.next(ev));
  EXPECT_TRUE(ev.done());
  EXPECT_FALSE(p.next(ev));
}

TEST(SseParserTest, IdleTellsWhetherAnEventIsCut) {
  SseParser p;
  EXPECT_TRUE(p.idle());
  p.feed("data: {\"partial\"");
  SseEvent ev;
  EXPECT_FALSE(p.next(ev));
  EXPECT_FALSE(p.idle());
  p.feed("}\n");
  EXPECT_FALSE(p.next(ev));
  EXPECT_FALSE(p.idle());  // a data line without its blank line
  p.feed("\n");
  EXPECT_TRUE(p.next(ev));
  EXPECT_TRUE(p.idle());
}

TEST(SseParserTest, OversizedEventStopsTheParser) {
  SseParser p(SseParser::Options{.max_event_bytes = 64});
  p.feed("data: " + std::string(100, 'x'));  // no line end yet
  SseEvent ev;
  EXPECT_FALSE(p.next(ev));
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  p.feed("\n\ndata: ok\n\n");
  EXPECT_FALSE(p.next(ev));  // stays stopped
}

TEST(SseParserTest, ManyDataLinesBeyondTheLimitStopTheParser) {
  SseParser p(SseParser::Options{.max_event_bytes = 64});
  std::string s;
  for (int i = 0; i < 20; ++i) s += "data: 0123456789\n";
  p.feed(s);
  SseEvent ev;
  EXPECT_FALSE(p.next(ev));
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
}

TEST(SseParserTest, ResetStartsANewStream) {
  SseParser p(SseParser::Options{.max_event_bytes = 8});
  p.feed("data: 0123456789\n\n");
  SseEvent ev;
  EXPECT_FALSE(p.next(ev));
  p.reset();
  p.feed("data: ok\n\n");
  ASSERT_TRUE(p.next(ev));
  EXPECT_EQ(ev.data, "ok");
}

TEST(SseParserTest, ViewsSurviveAFeedOfMoreBytes) {
  // The caller may feed the next read before it is done with the event it holds.
  SseParser p;
  p.feed("data: one\n\ndata: tw");
  SseEvent ev;
  ASSERT_TRUE(p.next(ev));
  p.feed("o\n\n" + std::string(4096, ':') + "\n");
  EXPECT_EQ(ev.data, "one");
  ASSERT_TRUE(p.next(ev));
  EXPECT_EQ(ev.data, "two");
}

}  // namespace
}  // namespace infera::http
