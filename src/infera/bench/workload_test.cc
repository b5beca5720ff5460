#include "infera/bench/workload.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

namespace infera::bench {
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
    }
    o.seed = 2;
    auto c = make_workload(name, o);
    o.seed = 1;
    EXPECT_NE(c->requests[0].prompt.tokens(), a->requests[0].prompt.tokens()) << name;
  }
}

TEST(WorkloadTest, MultiTurnPromptsGrowAndDependOnThePreviousTurn) {
  WorkloadOptions o;
  o.turns = 4;
  o.requests = 8;  // 2 sessions
  auto w = make_workload("multi-turn", o);
  ASSERT_TRUE(w.ok());
  std::map<uint64_t, const RequestSpec*> by_id;
  for (const auto& r : w->requests) by_id[r.id] = &r;
  int dependent = 0;
  for (const auto& r : w->requests) {
    if (!r.after) continue;
    ++dependent;
    const RequestSpec& prev = *by_id.at(*r.after);
    EXPECT_EQ(common_prefix(r.prompt, prev.prompt), prev.prompt.size());
    EXPECT_GT(r.prompt.size(), prev.prompt.size());
  }
  EXPECT_EQ(dependent, 6);
}

TEST(WorkloadTest, AgenticSessionsShareTheToolPrompt) {
  WorkloadOptions o;
  o.requests = 12;
  o.turns = 3;
  o.system_tokens = 300;
  auto w = make_workload("agentic", o);
  ASSERT_TRUE(w.ok());
  for (const auto& r : w->requests) EXPECT_GE(common_prefix(r.prompt, w->requests[0].prompt), 300u);
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
}  // namespace infera::bench
