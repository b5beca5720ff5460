#include "infera/proxy/token_meter.h"

#include <gtest/gtest.h>

#include <vector>

namespace infera::proxy {
namespace {

Nanos ms(int64_t v) { return Nanos(v * 1'000'000); }

std::string chunk(std::string_view text) {
  return "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":"
         "{\"content\":\"" + std::string(text) + "\"}}]}\n\n";
}

TEST(TokenMeterTest, CountsOutputEventsAndTheGapsBetweenThem) {
  std::vector<double> gaps;
  TokenMeter m([&](double g) { gaps.push_back(g); });
  m.start(true);
  m.feed(chunk("a"), ms(100));
  m.feed(chunk("b"), ms(120));
  m.feed(chunk("c") + chunk("d"), ms(160));  // two in one read share the 40 ms
  m.feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}\n\n", ms(161));
  m.feed("data: [DONE]\n\n", ms(162));
  EXPECT_EQ(m.output_events(), 4u);
  EXPECT_EQ(m.completion_tokens(), 4u);
  EXPECT_EQ(m.generated(), 4u);
  ASSERT_EQ(gaps.size(), 3u);
  EXPECT_NEAR(gaps[0], 0.020, 1e-9);
  EXPECT_NEAR(gaps[1], 0.020, 1e-9);
  EXPECT_NEAR(gaps[2], 0.020, 1e-9);
}

TEST(TokenMeterTest, LinesSplitAcrossPiecesAreJoined) {
  TokenMeter m;
  m.start(true);
  const std::string all = chunk("x") + chunk("y") +
                          "data: {\"choices\":[],\"usage\":{\"completion_tokens\":17}}\n\ndata: [DONE]\n\n";
  for (size_t i = 0; i < all.size(); i += 7) m.feed(std::string_view(all).substr(i, 7), ms(static_cast<int64_t>(i)));
  EXPECT_EQ(m.output_events(), 2u);
  EXPECT_EQ(m.completion_tokens(), 17u);
}

TEST(TokenMeterTest, WithoutUsageTheEventsAreTheCount) {
  TokenMeter m;
  m.start(true);
  m.feed(chunk("") + chunk("a") + ": a comment\n\nevent: x\n" + chunk("b") +
             "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
         ms(1));
  EXPECT_FALSE(m.completion_tokens().has_value());
  EXPECT_EQ(m.generated(), 2u);
}

TEST(TokenMeterTest, AWholeJsonAnswerIsCountedByItsUsage) {
  TokenMeter m;
  m.start(false);
  const std::string body =
      R"({"id":"x","choices":[{"text":"hello \"completion_tokens\": no"}],"usage":{"prompt_tokens":5,"completion_tokens": 12,"total_tokens":17}})";
  for (size_t i = 0; i < body.size(); i += 5) m.feed(std::string_view(body).substr(i, 5), ms(1));
  EXPECT_EQ(m.completion_tokens(), 12u);
  EXPECT_EQ(m.output_events(), 0u);
}

TEST(TokenMeterTest, TheAnswersIdIsItsFirstIdField) {
  const auto with_id = [] { return TokenMeter({}, true); };
  TokenMeter whole = with_id();
  whole.start(false);
  whole.feed(R"({"id":"resp_0a1b)", ms(1));
  whole.feed(R"(2c","object":"response","output":[{"id":"msg_1"}]})", ms(2));
  EXPECT_EQ(whole.answer_id(), "resp_0a1b2c");
  TokenMeter stream = with_id();
  stream.start(true);
  stream.feed("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_9\"}}\n\n", ms(1));
  EXPECT_EQ(stream.answer_id(), "resp_9");
  TokenMeter none = with_id();
  none.start(false);
  none.feed(std::string(5000, ' ') + R"({"id":"late"})", ms(1));
  EXPECT_EQ(none.answer_id(), "");
  TokenMeter huge = with_id();
  huge.start(false);
  huge.feed(R"({"id":")" + std::string(300, 'x') + R"("})", ms(1));
  EXPECT_EQ(huge.answer_id(), "");
  TokenMeter unasked;  // only /v1/responses asks: other answers are not copied
  unasked.start(false);
  unasked.feed(R"({"id":"chatcmpl-1"})", ms(1));
  EXPECT_EQ(unasked.answer_id(), "");
}

TEST(TokenMeterTest, GarbageAndHugeLinesCountNothing) {
  TokenMeter m;
  m.start(true);
  m.feed(std::string(100'000, 'x'), ms(1));
  m.feed("\n\n\x01\xff data: \n\n", ms(2));
  m.feed("data: {\"choices\":[],\"usage\":{\"completion_tokens\":99999999999999999}}\n\n", ms(3));
  EXPECT_EQ(m.output_events(), 0u);
  EXPECT_LE(m.completion_tokens().value_or(0), 999'999'999'999u);  // bounded digits
}

}  // namespace
}  // namespace infera::proxy
