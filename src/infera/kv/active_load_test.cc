#include "infera/kv/active_load.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "infera/common/random.h"
#include "infera/kv/block_hash.h"

namespace infera::kv {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

class ActiveLoadTest : public ::testing::Test {
 protected:
  ActiveLoadTest() : load_(ActiveLoad::Options{minutes(5), 8}, clock_) {}
  ManualClock clock_;
  ActiveLoad load_;
};

TEST_F(ActiveLoadTest, SharedPrefixCountsOnce) {
  const std::vector<uint64_t> a{1, 2, 3, 4};
  const std::vector<uint64_t> b{1, 2, 3, 9};
  const LoadTicket ta = load_.add(0, a);
  const LoadTicket tb = load_.add(0, b);
  EXPECT_EQ(load_.active_blocks(0), 5u);
  EXPECT_EQ(load_.active_requests(0), 2u);
  EXPECT_EQ(load_.new_blocks(0, std::vector<uint64_t>{1, 2, 77}), 1u);
  load_.release(ta);
  EXPECT_EQ(load_.active_blocks(0), 4u);  // 1,2,3 still held by b
  load_.release(tb);
  EXPECT_EQ(load_.active_blocks(0), 0u);
  EXPECT_EQ(load_.active_requests(0), 0u);
}

TEST_F(ActiveLoadTest, WorkersAreIndependent) {
  load_.add(0, std::vector<uint64_t>{1, 2});
  load_.add(1, std::vector<uint64_t>{1});
  EXPECT_EQ(load_.active_blocks(0), 2u);
  EXPECT_EQ(load_.active_blocks(1), 1u);
  load_.remove_worker(0);
  EXPECT_EQ(load_.active_blocks(0), 0u);
  EXPECT_EQ(load_.active_blocks(1), 1u);
}

TEST_F(ActiveLoadTest, ReleasingTwiceIsHarmless) {
  const LoadTicket t = load_.add(0, std::vector<uint64_t>{1, 2});
  load_.add(0, std::vector<uint64_t>{2});
  load_.release(t);
  load_.release(t);
  load_.release(LoadTicket{});
  EXPECT_EQ(load_.active_blocks(0), 1u);
  EXPECT_EQ(load_.active_requests(0), 1u);
}

TEST_F(ActiveLoadTest, RequestsOlderThanMaxAgeExpire) {
  load_.add(0, std::vector<uint64_t>{1, 2});
  clock_.advance(minutes(3));
  const LoadTicket young = load_.add(0, std::vector<uint64_t>{3});
  clock_.advance(minutes(2));  // first request is exactly 5 minutes old: not older yet
  EXPECT_EQ(load_.expire(), 0u);
  clock_.advance(seconds(1));
  EXPECT_EQ(load_.expire(), 1u);
  EXPECT_EQ(load_.active_blocks(0), 1u);
  EXPECT_EQ(load_.active_requests(0), 1u);
  clock_.advance(minutes(3));
  EXPECT_EQ(load_.expire(), 1u);
  EXPECT_EQ(load_.active_blocks(0), 0u);
  load_.release(young);  // after expiry: nothing left to release, no underflow
  EXPECT_EQ(load_.active_blocks(0), 0u);
}

TEST_F(ActiveLoadTest, AddExpiresLazily) {
  load_.add(0, std::vector<uint64_t>{1});
  clock_.advance(minutes(6));
  load_.add(0, std::vector<uint64_t>{2});
  EXPECT_EQ(load_.active_blocks(0), 1u);
  EXPECT_EQ(load_.active_requests(0), 1u);
}

TEST_F(ActiveLoadTest, ARequestIsInPrefillUntilItsFirstTokenThenDecodes) {
  const LoadTicket t = load_.add(0, std::vector<uint64_t>{1, 2, 3, 4}, 3);  // 1 block cached
  WorkerLoad l = load_.load(0);
  EXPECT_EQ(l.prefill_blocks, 3u);
  EXPECT_EQ(l.prefill_requests, 1u);
  EXPECT_EQ(l.decode_blocks, 0u);
  load_.prefill_done(t);
  l = load_.load(0);
  EXPECT_EQ(l.prefill_blocks, 0u);
  EXPECT_EQ(l.prefill_requests, 0u);
  EXPECT_EQ(l.decode_blocks, 4u) << "a decoding request holds its whole prompt's KV";
  EXPECT_EQ(l.decode_requests, 1u);
  load_.prefill_done(t);  // only the first call counts
  EXPECT_EQ(load_.load(0).decode_requests, 1u);
  load_.release(t);
  l = load_.load(0);
  EXPECT_EQ(l.decode_blocks, 0u);
  EXPECT_EQ(l.decode_requests, 0u);
  EXPECT_EQ(l.active_blocks, 0u);
}

TEST_F(ActiveLoadTest, PrefillBlocksDefaultToTheWholePromptAndSumOverRequests) {
  load_.add(1, std::vector<uint64_t>{1, 2});
  const LoadTicket b = load_.add(1, std::vector<uint64_t>{1, 2, 3}, 1);
  EXPECT_EQ(load_.load(1).prefill_blocks, 3u);
  EXPECT_EQ(load_.load(1).prefill_requests, 2u);
  EXPECT_EQ(load_.load(1).active_blocks, 3u) << "distinct blocks count once";
  load_.release(b);  // released before its first token: its prefill leaves too
  EXPECT_EQ(load_.load(1).prefill_blocks, 2u);
  load_.prefill_done(b);  // after release: nothing
  EXPECT_EQ(load_.load(1).decode_requests, 0u);
}

TEST_F(ActiveLoadTest, ExpiryAndRemovalClearThePhases) {
  const LoadTicket t = load_.add(0, std::vector<uint64_t>{1, 2}, 2);
  load_.prefill_done(t);
  load_.add(0, std::vector<uint64_t>{5}, 1);
  clock_.advance(minutes(6));
  EXPECT_EQ(load_.expire(), 2u);
  EXPECT_EQ(load_.load(0).decode_blocks, 0u);
  EXPECT_EQ(load_.load(0).prefill_blocks, 0u);
  load_.add(0, std::vector<uint64_t>{5}, 1);
  load_.remove_worker(0);
  EXPECT_EQ(load_.load(0).prefill_blocks, 0u);
  EXPECT_EQ(load_.load(0).prefill_requests, 0u);
}

// Property: with real (chained) block hashes, the distinct count kept by prefix sharing equals
// the size of the union of the live requests' block sets, through random adds, releases,
// expiries and duplicates; so does new_blocks for a probe prompt.
TEST(ActiveLoadPropertyTest, DistinctBlocksEqualTheUnionOfLiveRequests) {
  ManualClock clock;
  ActiveLoad load(ActiveLoad::Options{seconds(50), 2}, clock);
  Rng rng(9);
  constexpr uint32_t kBlockSize = 4;
  // Prompts: one of 3 families' first 0-12 blocks, then 0-4 blocks of their own.
  auto prompt = [&] {
    std::vector<TokenId> tokens;
    const uint32_t family = static_cast<uint32_t>(rng.uniform(3));
    const size_t shared = rng.uniform(13), own = rng.uniform(5);
    for (size_t i = 0; i < shared * kBlockSize; ++i) tokens.push_back(family * 1000 + TokenId(i));
    const TokenId tag = static_cast<TokenId>(rng.uniform(4));  // small: identical tails recur
    for (size_t i = 0; i < own * kBlockSize; ++i) tokens.push_back(50000 + tag * 100 + TokenId(i));
    return seq_hashes(tokens, kBlockSize);
  };
  std::map<uint64_t, std::pair<std::vector<uint64_t>, Nanos>> live;  // serial -> hashes, added
  for (int step = 0; step < 5000; ++step) {
    const uint64_t roll = rng.uniform(10);
    if (roll < 5 || live.empty()) {
      std::vector<uint64_t> hashes = prompt();
      const LoadTicket t = load.add(0, hashes);
      live[t.serial] = {std::move(hashes), clock.now()};
    } else if (roll < 9) {
      auto it = std::next(live.begin(), static_cast<long>(rng.uniform(live.size())));
      EXPECT_TRUE(load.release(LoadTicket{0, it->first}));
      live.erase(it);
    } else {
      clock.advance(seconds(rng.uniform(20)));
      load.expire();
      std::erase_if(live,
                    [&](const auto& e) { return e.second.second < clock.now() - seconds(50); });
    }
    std::set<uint64_t> distinct;
    for (const auto& [serial, request] : live)
      distinct.insert(request.first.begin(), request.first.end());
    ASSERT_EQ(load.active_blocks(0), distinct.size()) << "step " << step;
    ASSERT_EQ(load.active_requests(0), live.size());
    const std::vector<uint64_t> probe = prompt();
    uint32_t fresh = 0;
    for (const uint64_t h : probe) fresh += distinct.count(h) ? 0 : 1;
    ASSERT_EQ(load.new_blocks(0, probe), fresh) << "step " << step;
  }
}

}  // namespace
}  // namespace infera::kv
