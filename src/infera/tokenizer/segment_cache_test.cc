#include "infera/tokenizer/segment_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace infera::tokenizer {
namespace {

using Ids = std::vector<TokenId>;

Ids get(SegmentCache& c, std::string_view text, uint32_t flags = 0) {
  Ids out;
  return c.lookup(text, flags, out) ? out : Ids{9999};
}

TEST(SegmentCacheUnitTest, StoresAndAppendsIds) {
  SegmentCache c(1 << 20, 1000);
  Ids out{7};
  EXPECT_FALSE(c.lookup("hello", 0, out));
  c.insert("hello", 0, Ids{1, 2, 3});
  EXPECT_TRUE(c.lookup("hello", 0, out));
  EXPECT_EQ(out, (Ids{7, 1, 2, 3}));
  EXPECT_EQ(c.stats().hits, 1u);
  EXPECT_EQ(c.stats().misses, 1u);
  EXPECT_EQ(c.stats().entries, 1u);
}

TEST(SegmentCacheUnitTest, FlagsKeepEqualTextsApart) {
  SegmentCache c(1 << 20, 1000);
  c.insert("x y", 0, Ids{1});
  c.insert("x y", 1, Ids{2});
  EXPECT_EQ(get(c, "x y", 0), Ids{1});
  EXPECT_EQ(get(c, "x y", 1), Ids{2});
}

TEST(SegmentCacheUnitTest, EvictsTheLeastRecentlyUsedEntry) {
  SegmentCache c(1 << 20, /*max_entries=*/3, /*shards=*/1);
  c.insert("a", 0, Ids{1});
  c.insert("b", 0, Ids{2});
  c.insert("c", 0, Ids{3});
  EXPECT_EQ(get(c, "a"), Ids{1});  // "a" is now the most recently used; "b" the least
  c.insert("d", 0, Ids{4});
  EXPECT_EQ(get(c, "b"), Ids{9999});
  EXPECT_EQ(get(c, "a"), Ids{1});
  EXPECT_EQ(get(c, "c"), Ids{3});
  EXPECT_EQ(get(c, "d"), Ids{4});
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.stats().entries, 3u);
}

TEST(SegmentCacheUnitTest, ByteBudgetBoundsWhatIsHeld) {
  // Each entry is charged its text, its ids and 128 bytes of bookkeeping: 200 + 4 + 128 = 332.
  SegmentCache c(/*max_bytes=*/1000, 1000, /*shards=*/1);
  const std::string pad(200, 'p');
  for (char k = 'a'; k <= 'e'; ++k) c.insert(pad + k, 0, Ids{static_cast<TokenId>(k)});
  EXPECT_EQ(c.stats().entries, 3u);  // 3 * 332 <= 1000 < 4 * 332
  EXPECT_LE(c.stats().bytes, 1000u);
  EXPECT_EQ(get(c, pad + 'a'), Ids{9999});
  EXPECT_EQ(get(c, pad + 'e'), Ids{'e'});
  // An entry larger than the budget is not cached at all, and evicts nothing.
  c.insert(std::string(2000, 'h'), 0, Ids{1});
  EXPECT_EQ(get(c, std::string(2000, 'h')), Ids{9999});
  EXPECT_EQ(c.stats().entries, 3u);
}

TEST(SegmentCacheUnitTest, ClearEmptiesEverything) {
  SegmentCache c(1 << 20, 1000);
  for (int i = 0; i < 50; ++i) c.insert("t" + std::to_string(i), 0, Ids{1});
  c.clear();
  EXPECT_EQ(c.stats().entries, 0u);
  EXPECT_EQ(c.stats().bytes, 0u);
  Ids out;
  EXPECT_FALSE(c.lookup("t1", 0, out));
}

TEST(SegmentCacheUnitTest, ConcurrentReadersAndWritersSeeConsistentEntries) {
  // Each text always maps to ids derived from it; any hit must return exactly those ids.
  SegmentCache c(64 * 1024, 200);
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const int k = (i * (t + 1)) % 500;
        const std::string text = "text-" + std::to_string(k);
        Ids out;
        if (c.lookup(text, 0, out)) {
          if (out != Ids{static_cast<TokenId>(k), static_cast<TokenId>(k + 1)}) ++bad[static_cast<size_t>(t)];
        } else {
          c.insert(text, 0, Ids{static_cast<TokenId>(k), static_cast<TokenId>(k + 1)});
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[static_cast<size_t>(t)], 0);
  EXPECT_LE(c.stats().entries, 200u);
}

}  // namespace
}  // namespace infera::tokenizer
