#include "infera/gateway/response_affinity.h"

#include <gtest/gtest.h>

namespace infera::gateway {
namespace {

TEST(ResponseAffinityTest, RemembersWhoAnsweredUntilAgedOrPushedOut) {
  ResponseAffinity a(/*capacity=*/2, /*ttl=*/from_seconds(10));
  a.remember("resp_1", "10.0.0.1:8000", from_seconds(0));
  a.remember("resp_2", "10.0.0.2:8000", from_seconds(1));
  EXPECT_EQ(a.worker_of("resp_1", from_seconds(5)), "10.0.0.1:8000");
  EXPECT_EQ(a.worker_of("resp_2", from_seconds(5)), "10.0.0.2:8000");
  EXPECT_EQ(a.worker_of("resp_1", from_seconds(11)), "");  // older than the ttl
  EXPECT_EQ(a.worker_of("resp_9", from_seconds(1)), "");
  a.remember("resp_3", "10.0.0.3:8000", from_seconds(2));  // the oldest goes
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(a.worker_of("resp_1", from_seconds(3)), "");
  EXPECT_EQ(a.worker_of("resp_3", from_seconds(3)), "10.0.0.3:8000");
  a.remember("resp_3", "10.0.0.4:8000", from_seconds(4));  // the same id again: updated
  EXPECT_EQ(a.worker_of("resp_3", from_seconds(4)), "10.0.0.4:8000");
  EXPECT_EQ(a.size(), 2u);
  a.remember("", "w", from_seconds(4));
  a.remember(std::string(300, 'x'), "w", from_seconds(4));
  EXPECT_EQ(a.size(), 2u);
}

}  // namespace
}  // namespace infera::gateway
