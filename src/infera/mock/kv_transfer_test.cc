#include "infera/mock/kv_transfer.h"

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <mutex>
#include <vector>

#include "infera/http/event_loop.h"
#include "infera/http/net.h"

namespace infera::mock {

using engine::RequestId;

namespace {

using std::chrono::milliseconds;

class KvTransfersTest : public ::testing::Test {
 protected:
  void make(milliseconds timeout) {
    KvTransfers::Options o;
    o.timeout = timeout;
    transfers_ = std::make_unique<KvTransfers>(loop_.context(), o, [this](RequestId id) {
      std::lock_guard lock(mu_);
      released_.push_back(id);
    });
  }
  std::future<Status> offer(std::string key, RequestId id, uint32_t blocks, bool wait) {
    return net::co_spawn(loop_.context(), transfers_->offer(std::move(key), id, blocks, wait),
                         net::use_future);
  }
  // Result is not default-constructible: the future carries (status, blocks).
  std::future<std::pair<Status, uint32_t>> take(std::string key, bool wait) {
    return net::co_spawn(loop_.context(), take_op(transfers_.get(), std::move(key), wait),
                         net::use_future);
  }
  static net::awaitable<std::pair<Status, uint32_t>> take_op(KvTransfers* t, std::string key,
                                                              bool wait) {
    Result<uint32_t> r = co_await t->take(std::move(key), wait);
    if (!r.ok()) co_return std::make_pair(r.status(), uint32_t{0});
    co_return std::make_pair(ok_status(), *r);
  }
  std::vector<RequestId> released() {
    std::lock_guard lock(mu_);
    return released_;
  }

  http::EventLoop loop_{1};
  std::unique_ptr<KvTransfers> transfers_;
  std::mutex mu_;
  std::vector<RequestId> released_;
};

TEST_F(KvTransfersTest, AnOfferIsTakenOnceAndTheTakeFreesItsBlocks) {
  make(milliseconds(60'000));
  ASSERT_TRUE(offer("cmpl-1", 7, 4, false).get().ok());
  EXPECT_EQ(transfers_->pending(), 1u);
  EXPECT_TRUE(released().empty()) << "held until taken";
  auto taken = take("cmpl-1", false).get();
  ASSERT_TRUE(taken.first.ok()) << taken.first.to_string();
  EXPECT_EQ(taken.second, 4u);
  EXPECT_EQ(released(), std::vector<RequestId>{7});
  EXPECT_EQ(transfers_->pending(), 0u);
  EXPECT_EQ(take("cmpl-1", false).get().first.code(), StatusCode::kNotFound);
}

TEST_F(KvTransfersTest, APullThatComesFirstWaitsForItsOfferAndTheOfferForItsPull) {
  make(milliseconds(60'000));
  auto taken = take("room:42", true);
  auto offered = offer("room:42", 9, 3, true);
  ASSERT_TRUE(offered.get().ok());
  auto t = taken.get();
  ASSERT_TRUE(t.first.ok()) << t.first.to_string();
  EXPECT_EQ(t.second, 3u);
  EXPECT_EQ(released(), std::vector<RequestId>{9});
}

TEST_F(KvTransfersTest, AWaitingOfferReturnsOnceItIsTaken) {
  make(milliseconds(60'000));
  auto offered = offer("room:5", 11, 2, true);
  EXPECT_EQ(take("room:5", true).get().second, 2u);  // whichever reaches the table first
  EXPECT_TRUE(offered.get().ok());
  EXPECT_EQ(released(), std::vector<RequestId>{11});
}

TEST_F(KvTransfersTest, NobodyTakingWithinTheTimeoutReleasesTheBlocks) {
  make(milliseconds(100));
  ASSERT_TRUE(offer("cmpl-2", 21, 1, false).get().ok());
  // Expires after the first (timers of one strand fire in order), so both are released.
  EXPECT_EQ(offer("room:8", 22, 1, true).get().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(released(), (std::vector<RequestId>{21, 22}));
  EXPECT_EQ(transfers_->pending(), 0u);
  EXPECT_EQ(take("cmpl-2", false).get().first.code(), StatusCode::kNotFound);
  EXPECT_EQ(take("room:9", true).get().first.code(), StatusCode::kDeadlineExceeded);
}

TEST_F(KvTransfersTest, ASecondOfferOfAKeyIsRefusedAndReleased) {
  make(milliseconds(60'000));
  ASSERT_TRUE(offer("k", 1, 1, false).get().ok());
  EXPECT_EQ(offer("k", 2, 1, false).get().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(released(), std::vector<RequestId>{2});
}

}  // namespace
}  // namespace infera::mock
