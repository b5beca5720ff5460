#include "infera/replica/load_op.h"

#include <gtest/gtest.h>

#include "infera/events/msgpack.h"

namespace infera::replica {
namespace {

std::span<const uint8_t> bytes(const std::string& s) { return events::byte_span(s); }

TEST(LoadOpTest, AnAddRoundTripsWithItsBlocks) {
  const std::vector<uint64_t> hashes = {1, 0xffffffffffffffffull, 42, 1ull << 40};
  std::string out;
  encode_op(out, "r-1", 7, OpFields{OpKind::kAdd, "10.0.0.1:8000", 99, hashes, 3, 1});
  std::vector<uint64_t> blocks;
  const Result<LoadOp> op = decode_op(bytes(out), blocks);
  ASSERT_TRUE(op.ok()) << op.status().message();
  EXPECT_EQ(op->router_id, "r-1");
  EXPECT_EQ(op->seq, 7u);
  EXPECT_EQ(op->kind, OpKind::kAdd);
  EXPECT_EQ(op->worker, "10.0.0.1:8000");
  EXPECT_EQ(op->request, 99u);
  EXPECT_EQ(op->uncached, 3u);
  EXPECT_EQ(op->cached, 1u);
  EXPECT_EQ(blocks, hashes);
}

TEST(LoadOpTest, ReleasePrefillDoneAndHelloRoundTrip) {
  std::vector<uint64_t> blocks = {5};
  std::string out;
  for (const OpKind kind : {OpKind::kPrefillDone, OpKind::kRelease}) {
    encode_op(out, "r", 2, OpFields{kind, "", 11, {}, 0, 0});
    const Result<LoadOp> op = decode_op(bytes(out), blocks);
    ASSERT_TRUE(op.ok()) << op.status().message();
    EXPECT_EQ(op->kind, kind);
    EXPECT_EQ(op->request, 11u);
    EXPECT_TRUE(blocks.empty());
  }
  encode_op(out, "r", 3, OpFields{});
  const Result<LoadOp> hello = decode_op(bytes(out), blocks);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->kind, OpKind::kHello);
  EXPECT_EQ(hello->seq, 3u);
  encode_op(out, "r", 4, OpFields{OpKind::kBye, "", 0, {}, 0, 0});
  const Result<LoadOp> bye = decode_op(bytes(out), blocks);
  ASSERT_TRUE(bye.ok()) << bye.status().message();
  EXPECT_EQ(bye->kind, OpKind::kBye);
  EXPECT_EQ(bye->router_id, "r");
  EXPECT_EQ(bye->seq, 4u);
}

// A map with the given key/values, written by hand (what another peer or an attacker could send).
std::string map_of(const std::vector<std::pair<std::string, std::string>>& kv_strings,
                   uint64_t version = 1) {
  std::string out;
  events::MsgpackWriter w(out);
  w.map(static_cast<uint32_t>(kv_strings.size() + 2));
  w.str("v");
  w.uint(version);
  w.str("seq");
  w.uint(1);
  for (const auto& [k, v] : kv_strings) {
    w.str(k);
    w.str(v);
  }
  return out;
}

TEST(LoadOpTest, GarbageAnotherVersionAndUnknownOpsAreRefused) {
  std::vector<uint64_t> blocks;
  EXPECT_FALSE(decode_op(bytes(std::string("\xc1garbage")), blocks).ok());
  EXPECT_FALSE(decode_op(bytes(std::string()), blocks).ok());
  const std::string v2 = map_of({{"router_id", "r"}, {"op", "hello"}}, 2);
  const Result<LoadOp> other = decode_op(bytes(v2), blocks);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("version 2"), std::string::npos);
  const Result<LoadOp> unknown = decode_op(bytes(map_of({{"router_id", "r"}, {"op", "steal"}})), blocks);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown op"), std::string::npos);
  EXPECT_TRUE(decode_op(bytes(map_of({{"router_id", "r"}, {"op", "hello"}})), blocks).ok());
  // An add without its worker and blocks, a release without its request, no router id.
  EXPECT_FALSE(decode_op(bytes(map_of({{"router_id", "r"}, {"op", "add"}})), blocks).ok());
  EXPECT_FALSE(decode_op(bytes(map_of({{"router_id", "r"}, {"op", "release"}})), blocks).ok());
  EXPECT_FALSE(decode_op(bytes(map_of({{"op", "hello"}})), blocks).ok());
}

TEST(LoadOpTest, EveryTruncationOfAValidOpIsRefused) {
  const std::vector<uint64_t> hashes = {1, 2, 3};
  std::string out;
  encode_op(out, "router", 9, OpFields{OpKind::kAdd, "w:1", 4, hashes, 1, 0});
  std::vector<uint64_t> blocks;
  for (size_t n = 0; n < out.size(); ++n) {
    EXPECT_FALSE(decode_op(bytes(out.substr(0, n)), blocks).ok()) << n;
  }
  EXPECT_TRUE(decode_op(bytes(out), blocks).ok());
}

TEST(LoadOpTest, TooManyBlocksAreRefusedBeforeAllocation) {
  std::string out;
  events::MsgpackWriter w(out);
  w.map(6);
  w.str("v"); w.uint(1);
  w.str("router_id"); w.str("r");
  w.str("seq"); w.uint(1);
  w.str("op"); w.str("add");
  w.str("worker"); w.str("w");
  w.str("blocks"); w.array(kMaxOpBlocks + 1);
  std::vector<uint64_t> blocks;
  EXPECT_FALSE(decode_op(bytes(out), blocks).ok());
  EXPECT_LT(blocks.capacity(), size_t{kMaxOpBlocks});
}

}  // namespace
}  // namespace infera::replica
