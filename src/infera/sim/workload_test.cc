#include "infera/sim/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <set>

namespace infera::sim {
namespace {

size_t common_prefix(const Prompt& pa, const Prompt& pb) {
  const std::vector<uint32_t> a = pa.tokens();
  const std::vector<uint32_t> b = pb.tokens();
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

TEST(PromptTest, LiteralTokensThenSyntheticRuns) {
  Prompt p({5, 6, 7});
  p.append_synth(42, 10);
  p.append_synth(43, 0);  // empty runs are dropped
  p.append_synth(43, 4);
  ASSERT_EQ(p.size(), 17u);
  const std::vector<uint32_t> t = p.tokens();
  ASSERT_EQ(t.size(), 17u);
  EXPECT_EQ((std::vector<uint32_t>(t.begin(), t.begin() + 3)), (std::vector<uint32_t>{5, 6, 7}));
  std::vector<uint32_t> run;
  synth_tokens(42, 10, run);
  EXPECT_EQ((std::vector<uint32_t>(t.begin() + 3, t.begin() + 13)), run);
  synth_tokens(43, 4, run);
  EXPECT_EQ((std::vector<uint32_t>(t.begin() + 13, t.end())), run);
  EXPECT_TRUE(Prompt().empty());
  EXPECT_TRUE(Prompt().tokens().empty());
  std::vector<uint32_t> head;
  for (size_t n : {0, 2, 3, 9, 16, 17, 100}) {
    p.tokens(head, n);
    const auto end = t.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(n, 17));
    EXPECT_EQ(head, (std::vector<uint32_t>(t.begin(), end))) << n;
  }
}

TEST(PromptTest, AShortRunIsTheStartOfALongerOne) {
  std::vector<uint32_t> full, cut;
  synth_tokens(9, 512, full);
  synth_tokens(9, 88, cut);
  EXPECT_EQ((std::vector<uint32_t>(full.begin(), full.begin() + 88)), cut);
  std::vector<uint32_t> other;
  synth_tokens(10, 88, other);
  EXPECT_NE(cut, other);
}

TEST(WorkloadTest, PrefixFamiliesShareTheirSystemPrompt) {
  WorkloadOptions o;
  o.groups = 4;
  o.requests = 64;
  o.system_tokens = 100;
  o.question_tokens = 20;
  auto w = make_workload("prefix-families", o);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->requests.size(), 64u);
  std::map<uint32_t, const RequestSpec*> first;
  for (const auto& r : w->requests) {
    ASSERT_EQ(r.prompt.size(), 120u);
    auto [it, fresh] = first.emplace(r.group, &r);
    if (!fresh) {
      EXPECT_GE(common_prefix(r.prompt, it->second->prompt), 100u);
      EXPECT_LT(common_prefix(r.prompt, it->second->prompt), 120u);  // questions differ
    }
  }
  EXPECT_EQ(first.size(), 4u);
  for (size_t i = 1; i < w->requests.size(); ++i) {
    EXPECT_GE(w->requests[i].arrival_s, w->requests[i - 1].arrival_s);
  }
}

TEST(WorkloadTest, SameSeedSameWorkload) {
  WorkloadOptions o;
  o.requests = 40;
  for (const std::string& name : workload_names()) {
    auto a = make_workload(name, o);
    auto b = make_workload(name, o);
    ASSERT_TRUE(a.ok()) << name;
    ASSERT_EQ(a->requests.size(), b->requests.size());
    for (size_t i = 0; i < a->requests.size(); ++i) {
      EXPECT_EQ(a->requests[i].prompt.tokens(), b->requests[i].prompt.tokens()) << name;
      EXPECT_EQ(a->requests[i].arrival_s, b->requests[i].arrival_s) << name;
      EXPECT_EQ(a->requests[i].after, b->requests[i].after) << name;
      EXPECT_EQ(a->requests[i].think_s, b->requests[i].think_s) << name;
      EXPECT_EQ(a->requests[i].max_tokens, b->requests[i].max_tokens) << name;
    }
    o.seed = 2;
    auto c = make_workload(name, o);
    o.seed = 1;
    EXPECT_NE(c->requests[0].prompt.tokens(), a->requests[0].prompt.tokens()) << name;
  }
}

std::map<uint64_t, const RequestSpec*> by_id(const Workload& w) {
  std::map<uint64_t, const RequestSpec*> out;
  for (const auto& r : w.requests) out[r.id] = &r;
  return out;
}

// Whether `a` and `b` have equal first `n` tokens (both hold at least n).
bool share_first(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, size_t n) {
  return a.size() >= n && b.size() >= n && std::equal(a.begin(), a.begin() + n, b.begin());
}

double median(std::vector<double> v) {  // NaN (failing every comparison) when empty
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST(WorkloadTest, MultiTurnDefaultsHaveTheConversationTraceShape) {
  const auto started = std::chrono::steady_clock::now();
  auto w = make_workload("multi-turn", {});
  const double generate_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_TRUE(w.ok());
  const size_t n = w->requests.size();
  EXPECT_GE(n, 10800u);
  EXPECT_LE(n, 13200u);
  std::vector<double> prompts, outputs;
  double last_start_s = 0;
  for (const auto& r : w->requests) {
    prompts.push_back(static_cast<double>(r.prompt.size()));
    outputs.push_back(r.max_tokens);
    if (r.after.empty()) last_start_s = std::max(last_start_s, r.arrival_s);
  }
  // Session starts span the trace's hour.
  EXPECT_GT(last_start_s, 3000);
  EXPECT_LT(last_start_s, 4200);
  EXPECT_GE(median(prompts), 6000);
  EXPECT_LE(median(prompts), 8000);
  const double mean = std::accumulate(prompts.begin(), prompts.end(), 0.0) / static_cast<double>(n);
  EXPECT_GE(mean, 10000);
  EXPECT_LE(mean, 14000);
  const double longest = *std::max_element(prompts.begin(), prompts.end());
  EXPECT_GE(longest, 60000);
  EXPECT_LE(longest, 131072);
  EXPECT_GE(median(outputs), 300);
  EXPECT_LE(median(outputs), 400);
  // One shared system prompt: every request's first 512 tokens are the first request's.
  std::vector<uint32_t> first, tokens;
  w->requests[0].prompt.tokens(first, 512);
  for (const auto& r : w->requests) {
    r.prompt.tokens(tokens, 512);
    ASSERT_TRUE(share_first(tokens, first, 512)) << r.id;
  }
  // Prompts are recipes: generating does not make tokens.
  EXPECT_LT(generate_s, 2.0);
}

TEST(WorkloadTest, MultiTurnThinkTimesPaceSessionsOverMinutes) {
  auto w = make_workload("multi-turn", {});
  ASSERT_TRUE(w.ok());
  std::vector<double> thinks;
  std::map<uint32_t, std::pair<double, double>> span;  // session -> first, last arrival
  for (const auto& r : w->requests) {
    if (!r.after.empty()) thinks.push_back(r.think_s);
    auto it = span.emplace(r.group, std::pair{r.arrival_s, r.arrival_s}).first;
    it->second.first = std::min(it->second.first, r.arrival_s);
    it->second.second = std::max(it->second.second, r.arrival_s);
  }
  EXPECT_GE(median(thinks), 10);
  EXPECT_LE(median(thinks), 60);
  std::vector<double> spans;
  for (const auto& [group, s] : span) spans.push_back(s.second - s.first);
  std::sort(spans.begin(), spans.end());
  ASSERT_FALSE(spans.empty());
  EXPECT_GT(spans[spans.size() * 9 / 10], 180);  // long sessions last minutes
  const double turns = static_cast<double>(w->requests.size()) / static_cast<double>(span.size());
  EXPECT_GE(turns, 4);
  EXPECT_LE(turns, 6);
}

TEST(WorkloadTest, MultiTurnPromptsGrowAndDependOnThePreviousTurn) {
  WorkloadOptions o;
  o.requests = 300;
  auto w = make_workload("multi-turn", o);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->requests.size(), 300u);
  const auto ids = by_id(*w);
  std::map<uint32_t, uint64_t> last_of_session;  // by id order: turns are made in order
  int dependent = 0;
  for (const auto& [id, r] : ids) {
    auto last = last_of_session.find(r->group);
    if (last == last_of_session.end()) {
      EXPECT_TRUE(r->after.empty()) << id;
    } else {
      ++dependent;
      ASSERT_EQ(r->after, std::vector<uint64_t>{last->second}) << id;
      const RequestSpec& prev = *ids.at(last->second);
      EXPECT_EQ(common_prefix(r->prompt, prev.prompt), prev.prompt.size());
      // The reply (the previous turn's max_tokens) and a new message at least.
      EXPECT_GT(r->prompt.size(), prev.prompt.size() + prev.max_tokens);
      EXPECT_GT(r->think_s, 0);
      EXPECT_GE(r->arrival_s, prev.arrival_s + r->think_s - 1e-9);
    }
    last_of_session[r->group] = id;
  }
  EXPECT_GT(dependent, 150);  // most requests are later turns
  EXPECT_GT(last_of_session.size(), 20u);
}

TEST(WorkloadTest, MultiTurnRequestsAndRateScaleTheTrace) {
  WorkloadOptions o;
  o.requests = 2000;
  o.rate_rps = 20;
  auto w = make_workload("multi-turn", o);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->requests.size(), 2000u);
  double last_start_s = 0;
  for (const auto& r : w->requests) {
    if (r.after.empty()) last_start_s = std::max(last_start_s, r.arrival_s);
  }
  EXPECT_NEAR(last_start_s, 2000.0 / 20, 25);  // 2,000 requests at 20/s: 100 s of sessions
  // The trace's own rate, scaled.
  o.rate_rps.reset();
  o.rate_scale = 2;
  auto own = make_workload("multi-turn", o);
  ASSERT_TRUE(own.ok());
  last_start_s = 0;
  for (const auto& r : own->requests) {
    if (r.after.empty()) last_start_s = std::max(last_start_s, r.arrival_s);
  }
  EXPECT_NEAR(last_start_s, 2000.0 / (2 * 12000.0 / 3600), 80);
}

TEST(WorkloadTest, AgenticSessionsShareTheToolPrompt) {
  WorkloadOptions o;
  o.requests = 400;
  o.tool_tokens = 300;
  auto w = make_workload("agentic", o);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->requests.size(), 400u);
  std::vector<uint32_t> first, tokens;
  w->requests[0].prompt.tokens(first);
  std::set<uint32_t> sessions;
  for (const auto& r : w->requests) {
    r.prompt.tokens(tokens);
    EXPECT_TRUE(share_first(tokens, first, 300)) << r.id;
    sessions.insert(r.group);
  }
  EXPECT_GT(sessions.size(), 5u);
  // The default tool prompt is 4,096 tokens.
  o.tool_tokens = WorkloadOptions{}.tool_tokens;
  auto d = make_workload("agentic", o);
  ASSERT_TRUE(d.ok());
  EXPECT_GE(common_prefix(d->requests.front().prompt, d->requests.back().prompt), 4096u);
}

TEST(WorkloadTest, AgenticFanOutSiblingsDifferInASuffixAndJoinTogether) {
  WorkloadOptions o;
  o.requests = 1500;
  auto w = make_workload("agentic", o);
  ASSERT_TRUE(w.ok());
  std::map<uint64_t, std::vector<uint32_t>> made;  // id -> tokens, made once
  auto tokens_of = [&](const RequestSpec& r) -> const std::vector<uint32_t>& {
    auto [it, fresh] = made.try_emplace(r.id);
    if (fresh) r.prompt.tokens(it->second);
    return it->second;
  };
  auto shared_prefix = [&](const RequestSpec& a, const RequestSpec& b) {
    const std::vector<uint32_t>& x = tokens_of(a);
    const std::vector<uint32_t>& y = tokens_of(b);
    return static_cast<size_t>(std::mismatch(x.begin(), x.end(), y.begin(), y.end()).first -
                               x.begin());
  };
  // Siblings: requests of one session released by the same `after` at the same instant.
  std::map<std::pair<uint32_t, std::vector<uint64_t>>, std::vector<const RequestSpec*>> released;
  for (const auto& r : w->requests) {
    if (!r.after.empty()) released[{r.group, r.after}].push_back(&r);
  }
  size_t fan_outs = 0, joins = 0;
  for (const auto& [key, group] : released) {
    if (group.size() == 1) continue;
    ++fan_outs;
    // Only the workload's last fan-out may be cut short by its size.
    if (group.back()->id + 1 < w->requests.size()) {
      ASSERT_GE(group.size(), 4u);
    }
    ASSERT_LE(group.size(), 8u);
    const RequestSpec& a = *group[0];
    std::set<uint64_t> sibling_ids;
    for (const RequestSpec* b : group) {
      sibling_ids.insert(b->id);
      EXPECT_EQ(b->think_s, a.think_s);
      EXPECT_EQ(b->arrival_s, a.arrival_s);
      if (b == &a) continue;
      // The step's whole prefix is shared; only a suffix of a few dozen tokens differs.
      const size_t shared = shared_prefix(a, *b);
      EXPECT_GE(shared + 64, a.prompt.size());
      EXPECT_LE(b->prompt.size() - shared, 64u);
      EXPECT_LT(shared, b->prompt.size());
    }
    // The join: the next request of the session waits for every sibling; its prompt is the
    // siblings' shared history, then all their outputs.
    for (const auto& r : w->requests) {
      if (r.group != a.group || r.after.size() < 2) continue;
      if (std::set<uint64_t>(r.after.begin(), r.after.end()) != sibling_ids) continue;
      ++joins;
      EXPECT_EQ(r.after.size(), group.size());
      uint64_t outputs = 0;
      for (const RequestSpec* b : group) outputs += b->max_tokens;
      ASSERT_GT(r.prompt.size(), outputs);
      const size_t history = r.prompt.size() - outputs;
      for (const RequestSpec* b : group) {
        EXPECT_GE(shared_prefix(r, *b), history);
        EXPECT_GE(b->prompt.size(), history + 16);  // its own suffix
        EXPECT_LE(b->prompt.size(), history + 64);
      }
    }
    made.clear();
  }
  EXPECT_GT(fan_outs, 20u);
  EXPECT_GT(joins, fan_outs * 9 / 10);  // only a session cut by the size lacks its join
}

TEST(WorkloadTest, AgenticStepsAppendToTheHistoryAfterShortToolTimes) {
  WorkloadOptions o;
  o.requests = 600;
  auto w = make_workload("agentic", o);
  ASSERT_TRUE(w.ok());
  const auto ids = by_id(*w);
  std::vector<double> thinks;
  for (const auto& r : w->requests) {
    if (r.after.size() != 1) continue;  // the first step, or a join
    const RequestSpec& prev = *ids.at(r.after[0]);
    thinks.push_back(r.think_s);
    // After a step (or a join): its prompt, its output and the tool's result (then a fan-out's
    // suffix, for siblings).
    EXPECT_EQ(common_prefix(r.prompt, prev.prompt), prev.prompt.size()) << r.id;
    EXPECT_GT(r.prompt.size(), prev.prompt.size() + prev.max_tokens) << r.id;
  }
  EXPECT_GE(median(thinks), 0.2);
  EXPECT_LE(median(thinks), 3);
}

TEST(DependenciesTest, AJoinIsReadyOnlyAfterAllItsSiblings) {
  Workload w;
  w.requests.resize(5);
  for (uint64_t i = 0; i < 5; ++i) w.requests[i].id = 10 + i;
  w.requests[1].after = {10};
  w.requests[2].after = {10};
  w.requests[3].after = {11, 12};  // the join
  Dependencies d(w);
  EXPECT_TRUE(d.independent(0));
  EXPECT_FALSE(d.independent(1));
  EXPECT_FALSE(d.independent(3));
  EXPECT_TRUE(d.independent(4));
  std::vector<size_t> ready;
  d.finished(10, ready);
  EXPECT_EQ(ready, (std::vector<size_t>{1, 2}));
  ready.clear();
  d.finished(11, ready);
  EXPECT_TRUE(ready.empty());
  d.finished(11, ready);  // reported twice: still waiting for 12
  EXPECT_TRUE(ready.empty());
  d.finished(12, ready);
  EXPECT_EQ(ready, (std::vector<size_t>{3}));
  ready.clear();
  d.finished(13, ready);
  d.finished(14, ready);  // an independent request is never reported
  d.finished(12, ready);
  EXPECT_TRUE(ready.empty());
}

TEST(DependenciesTest, UnknownIdsAndSelfDependenciesAreIgnored) {
  Workload w;
  w.requests.resize(3);
  for (uint64_t i = 0; i < 3; ++i) w.requests[i].id = i;
  w.requests[0].after = {99};     // no such request: independent
  w.requests[1].after = {1};      // itself: independent
  w.requests[2].after = {99, 0};  // waits for 0 only
  Dependencies d(w);
  EXPECT_TRUE(d.independent(0));
  EXPECT_TRUE(d.independent(1));
  EXPECT_FALSE(d.independent(2));
  std::vector<size_t> ready;
  d.finished(99, ready);
  EXPECT_TRUE(ready.empty());
  d.finished(0, ready);
  EXPECT_EQ(ready, (std::vector<size_t>{2}));
}

TEST(DependenciesTest, EveryGeneratedRequestIsReleasedOnce) {
  for (const char* name : {"multi-turn", "agentic"}) {
    WorkloadOptions o;
    o.requests = 1000;
    auto w = make_workload(name, o);
    ASSERT_TRUE(w.ok());
    Dependencies d(*w);
    // Finish requests in a dependency-respecting order; every request is sent exactly once.
    std::vector<size_t> queue, ready;
    for (size_t i = 0; i < w->requests.size(); ++i) {
      if (d.independent(i)) queue.push_back(i);
    }
    std::vector<int> sent(w->requests.size(), 0);
    while (!queue.empty()) {
      const size_t i = queue.back();
      queue.pop_back();
      ++sent[i];
      ready.clear();
      d.finished(w->requests[i].id, ready);
      queue.insert(queue.end(), ready.begin(), ready.end());
    }
    for (size_t i = 0; i < sent.size(); ++i) ASSERT_EQ(sent[i], 1) << name << " " << i;
  }
}

TEST(WorkloadTest, RagRequestsReuseDocuments) {
  WorkloadOptions o;
  o.requests = 100;
  o.documents = 5;
  o.document_tokens = 64;
  auto w = make_workload("rag", o);
  ASSERT_TRUE(w.ok());
  std::set<uint32_t> first_docs;
  for (const auto& r : w->requests) first_docs.insert(r.group);
  EXPECT_LE(first_docs.size(), 5u);
  EXPECT_GT(first_docs.size(), 1u);
}

TEST(WorkloadTest, UnknownWorkloadIsAnError) {
  EXPECT_FALSE(make_workload("chaos", {}).ok());
}

TEST(WorkloadTest, AgenticToolPromptMustLeaveRoomForTheSession) {
  WorkloadOptions o;
  o.requests = 10;
  o.tool_tokens = 65536;
  EXPECT_TRUE(make_workload("agentic", o).ok());
  o.tool_tokens = 65537;
  EXPECT_FALSE(make_workload("agentic", o).ok());
}

class TraceTest : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& text) {
    auto p = std::filesystem::temp_directory_path() /
             ("infera_trace_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
              std::to_string(counter_++) + ".jsonl");
    std::ofstream(p) << text;
    files_.push_back(p);
    return p;
  }
  ~TraceTest() override {
    for (auto& f : files_) std::filesystem::remove(f);
  }
  std::vector<std::filesystem::path> files_;
  int counter_ = 0;
};

TEST_F(TraceTest, EqualHashIdsGiveEqualBlocks) {
  auto p = write(
      "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [7, 8, 9]}\n"
      "{\"timestamp\": 500, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [7, 4]}\n");
  TraceOptions o;
  o.rate_scale = 2.0;
  auto w = load_mooncake_trace(p, o);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_EQ(w->requests.size(), 2u);
  const auto& a = w->requests[0];
  const auto& b = w->requests[1];
  EXPECT_EQ(a.prompt.size(), 1100u);
  EXPECT_EQ(b.prompt.size(), 600u);
  EXPECT_EQ(common_prefix(a.prompt, b.prompt), 512u);  // block 7 shared, then 8 vs 4
  EXPECT_EQ(a.prompt.tokens().size(), 1100u);
  // b's block 4 is cut to 88 tokens: they are the first 88 of a full block 4.
  auto c = write("{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [4]}\n");
  auto full = load_mooncake_trace(c, o);
  ASSERT_TRUE(full.ok());
  const std::vector<uint32_t> bt = b.prompt.tokens();
  const std::vector<uint32_t> ft = full->requests[0].prompt.tokens();
  EXPECT_EQ((std::vector<uint32_t>(bt.begin() + 512, bt.end())),
            (std::vector<uint32_t>(ft.begin(), ft.begin() + 88)));
  EXPECT_EQ(a.max_tokens, 5u);
  EXPECT_DOUBLE_EQ(b.arrival_s, 0.25);
}

TEST_F(TraceTest, MalformedTraceIsAnErrorNamingTheLine) {
  auto p = write("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n"
                 "{\"timestamp\": 1}\n");
  auto w = load_mooncake_trace(p, {});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(":2:"), std::string::npos);
  auto too_long = write("{\"timestamp\": 0, \"input_length\": 9999, \"output_length\": 1, \"hash_ids\": [1]}\n");
  EXPECT_FALSE(load_mooncake_trace(too_long, {}).ok());
  EXPECT_FALSE(load_mooncake_trace("/nonexistent/trace.jsonl", {}).ok());
}

TEST(SharedTraceTest, LoadsTheRepositoryTrace) {
  const std::filesystem::path p = std::string(INFERA_SOURCE_DIR) + "/tests/testdata/synthetic_trace.jsonl";
  if (!std::filesystem::exists(p)) GTEST_SKIP() << "trace not present";
  auto w = load_mooncake_trace(p, {});
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->requests.size(), 3993u);
  EXPECT_NEAR(static_cast<double>(w->prompt_tokens()) / 3993, 15325.5, 1.0);
}

}  // namespace
}  // namespace infera::sim
