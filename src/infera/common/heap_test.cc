#include "infera/common/heap.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace infera {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Touches `bytes` of fresh memory, so they count in the RSS, and keeps them until destroyed.
struct Touched {
  explicit Touched(size_t bytes) : data(new char[bytes]) { std::memset(data.get(), 1, bytes); }
  std::unique_ptr<char[]> data;
};

TEST(HeapTest, ResidentBytesSeesMemoryBeingTouched) {
  const std::optional<uint64_t> before = resident_bytes();
  ASSERT_TRUE(before.has_value());
  EXPECT_GT(*before, 1 * kMiB);
  Touched block(64 * kMiB);
  const std::optional<uint64_t> after = resident_bytes();
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(*after, *before + 60 * kMiB);
}

TEST(HeapTest, ResidentBytesByPid) {
  const std::optional<uint64_t> self = resident_bytes();
  const std::optional<uint64_t> by_pid = resident_bytes(::getpid());
  ASSERT_TRUE(self.has_value() && by_pid.has_value());
  EXPECT_NEAR(static_cast<double>(*by_pid), static_cast<double>(*self), 8.0 * kMiB);
  EXPECT_FALSE(resident_bytes(999999999).has_value());  // above any pid_max: no such process
}

TEST(HeapTest, TrimmerWaitsForGrowthAndTheEndOfABurstThenTrimsOnce) {
  HeapTrimmer trimmer(16 * kMiB);
  EXPECT_FALSE(trimmer.maybe_trim(0).has_value());  // the first check only takes the baseline
  EXPECT_FALSE(trimmer.maybe_trim(0).has_value());  // no growth: nothing to do
  const uint64_t baseline = resident_bytes().value();
  Touched block(48 * kMiB);
  EXPECT_FALSE(trimmer.maybe_trim(100).has_value());  // grown, but the burst is on
  EXPECT_FALSE(trimmer.maybe_trim(13).has_value());   // more than an eighth of the peak
  const std::optional<HeapTrimmer::Trim> trim = trimmer.maybe_trim(12);
  ASSERT_TRUE(trim.has_value());
  EXPECT_GE(trim->rss_before, baseline + 40 * kMiB);
  EXPECT_GT(trim->rss_after, 0u);
  EXPECT_GE(trim->took.count(), 0);
  // The memory is still in use, so the trim could not return it; the trimmer does not retry
  // until the RSS grows past what this trim left.
  EXPECT_FALSE(trimmer.maybe_trim(0).has_value());
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// glibc's behaviour, which the gateway relies on: freed small chunks in the middle of the heap
// stay resident until released. (Sanitizer builds replace malloc, so this runs in dev/release.)
TEST(HeapTest, ReleaseReturnsFreedChunksToTheKernel) {
  constexpr size_t kChunks = 16384;  // 64 MiB
  constexpr size_t kChunk = 4096;  // well below glibc's mmap threshold: from the heap
  std::vector<void*> chunks(kChunks);
  for (void*& c : chunks) {
    c = std::malloc(kChunk);
    ASSERT_NE(c, nullptr);
    std::memset(c, 1, kChunk);
  }
  // Keep every 64th chunk: the freed runs between them sit in the middle of the heap, where
  // free() cannot hand them back (it only trims the heap's top).
  for (size_t i = 0; i < kChunks; ++i) {
    if (i % 64 != 63) std::free(chunks[i]);
  }
  const uint64_t before = resident_bytes().value();
  EXPECT_TRUE(release_free_heap());
  const uint64_t after = resident_bytes().value();
  for (size_t i = 63; i < kChunks; i += 64) std::free(chunks[i]);
  EXPECT_LE(after + 48 * kMiB, before) << "before " << before << " after " << after;
}
#endif

}  // namespace
}  // namespace infera
