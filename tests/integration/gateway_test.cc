// The gateway in-process against fake engines: real HTTP on loopback ports, real ZMQ KV events
// from the events module's publisher, the real router. Fake engines answer OpenAI requests
// with a fixed SSE stream and can be told to fail in the ways real engines fail.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/json.hpp>
#include <fstream>
#include <future>
#include <sstream>
#include <set>
#include <map>
#include <mutex>
#include <optional>

#include "infera/common/metrics.h"
#include "infera/events/publisher.h"
#include "infera/gateway/gateway.h"
#include "tests/support/gateway_harness.h"
#include "infera/http/client.h"
#include "infera/http/net.h"
#include "infera/http/server.h"
#include "infera/http/sse.h"
#include "infera/kv/block_hash.h"
#include "tests/support/etcd_process.h"

namespace infera {
namespace {

using testing::eventually;

// kPrefill answers like a vLLM prefill instance (non-streamed JSON carrying kv_transfer_params
// naming this engine); kPrefillNoParams answers without them. kSglangPrefill and kSglangDecode
// play SGLang's pair through a RoomBoard: the prefill marks its bootstrap room prefilled and
// answers once a decode joined the room; the decode waits for the room to be prefilled, joins
// it and streams. Either waits at most 10 s, so only a router that sends both calls at once
// gets an answer.
enum class Mode { kOk, kFail500, kDieMidStream, kHang, kPrefill, kPrefillNoParams, kSglangPrefill,
                  kSglangDecode };

// SGLang's bootstrap rooms as the fake engines see them: room -> 1 prefilled, 2 joined.
struct RoomBoard {
  std::mutex mu;
  std::map<std::string, int> rooms;
  void set(const std::string& room, int state) {
    std::lock_guard lock(mu);
    rooms[room] = std::max(rooms[room], state);
  }
  int get(const std::string& room) {
    std::lock_guard lock(mu);
    auto it = rooms.find(room);
    return it == rooms.end() ? 0 : it->second;
  }
};

std::string room_of(const std::string& body) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(body, ec);
  const boost::json::value* room = ec || !v.is_object() ? nullptr : v.get_object().if_contains("bootstrap_room");
  return room ? boost::json::serialize(*room) : std::string();
}

// Waits (bounded, 10 s) until the board shows `room` in `state`: kJoined, kCancelled (the
// caller, the gateway, went away) or kTimedOut.
enum class RoomWait { kJoined, kCancelled, kTimedOut };
net::awaitable<RoomWait> wait_for_room(RoomBoard* board, std::string room, int state) {
  net::steady_timer t(co_await net::this_coro::executor);
  for (int i = 0; i < 5000; ++i) {
    if (board->get(room) >= state) co_return RoomWait::kJoined;
    t.expires_after(std::chrono::milliseconds(2));
    auto [ec] = co_await t.async_wait(use_nothrow);
    // A cancellation that lands while the timer's completion is already queued does not abort
    // that wait, and would not abort the next one either: it is only seen in the state.
    const net::cancellation_state cs = co_await net::this_coro::cancellation_state;
    if (ec || cs.cancelled() != net::cancellation_type::none) co_return RoomWait::kCancelled;
  }
  co_return RoomWait::kTimedOut;
}

// A fake engine: OpenAI completions as a fixed SSE stream, /v1/models, /metrics.
class FakeEngine {
 public:
  FakeEngine(http::EventLoop& loop, uint32_t block_size = 16) {
    http::Routes routes;
    auto completion = [this](http::Request& r,
                             http::ResponseWriter& w) -> net::awaitable<http::Response> {
      // The mode is read before the request is counted: a test that waits for the count and
      // then changes the mode must not change what this request does.
      const Mode m = mode.load();
      requests.fetch_add(1);
      last_body = r.body;
      last_request_id = std::string(r.header("X-Request-Id"));
      last_authorization = std::string(r.header("Authorization"));
      {
        std::lock_guard lock(mu);
        bodies.push_back(r.body);
        request_ids.push_back(last_request_id);
      }
      if (m == Mode::kSglangPrefill || m == Mode::kSglangDecode) {
        const std::string room = room_of(r.body);
        const bool prefill = m == Mode::kSglangPrefill;
        if (prefill) board->set(room, 1);
        const RoomWait waited = co_await wait_for_room(board, room, prefill ? 2 : 1);
        if (waited != RoomWait::kJoined) {
          (waited == RoomWait::kCancelled ? cancelled : timed_out).fetch_add(1);
          co_return http::Response::json(500, R"({"error":"bootstrap room timed out"})");
        }
        if (prefill) {
          co_return http::Response::json(200, R"({"id":"cmpl-p","object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}]})");
        }
        board->set(room, 2);
      }
      if (m == Mode::kPrefill || m == Mode::kPrefillNoParams) {
        std::string answer =
            R"({"id":"cmpl-p","object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}])";
        if (m == Mode::kPrefill) answer += R"(,"kv_transfer_params":)" + transfer_params();
        co_return http::Response::json(200, answer + "}");
      }
      if (m == Mode::kFail500) co_return http::Response::json(500, R"({"error":"boom"})");
      if (m == Mode::kHang) {
        net::steady_timer t(co_await net::this_coro::executor);
        t.expires_after(std::chrono::seconds(30));
        auto [ec] = co_await t.async_wait(use_nothrow);
        if (w.client_gone() || ec) cancelled.fetch_add(1);
        co_return http::Response{};
      }
      if (!(co_await w.write_head(200, http::kSseContentType)).ok()) co_return http::Response{};
      for (int i = 0; i < 3; ++i) {
        if (!(co_await w.write(chunk(i))).ok()) {
          cancelled.fetch_add(1);
          co_return http::Response{};
        }
        if (m == Mode::kDieMidStream) {
          died.set_value();
          net::steady_timer t(co_await net::this_coro::executor);
          t.expires_after(std::chrono::seconds(30));
          (void)co_await t.async_wait(use_nothrow);
          co_return http::Response{};
        }
      }
      co_await w.write(http::kSseDone);
      co_return http::Response{};
    };
    routes.add(http::Method::kPost, "/v1/completions", completion);
    routes.add(http::Method::kPost, "/v1/chat/completions", completion);
    // The routes the gateway passes through: each answers with its path and the body it got.
    for (const char* path : {"/v1/embeddings", "/v1/responses", "/v1/rerank", "/v1/score", "/detokenize"}) {
      routes.add(http::Method::kPost, path,
                 [this, path](http::Request& r, http::ResponseWriter&) -> net::awaitable<http::Response> {
                   const int n = requests.fetch_add(1);
                   last_authorization = std::string(r.header("Authorization"));
                   // A Responses answer names itself (and so this engine) as vLLM's do.
                   const std::string id = std::string(path) == "/v1/responses"
                                              ? R"({"id":"resp_)" + std::to_string(server->port()) + "_" +
                                                    std::to_string(n) + R"(",)"
                                              : "{";
                   co_return http::Response::json(200, id + R"("path":")" + std::string(path) +
                                                           R"(","got":)" + r.body + "}");
                 });
    }
    routes.add(http::Method::kGet, "/v1/models",
               [this](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
                 // As vLLM lists them: the base model (parent null), then each LoRA adapter.
                 std::string data = R"({"id":")" + model + R"(","object":"model","parent":null})";
                 std::lock_guard lock(mu);
                 for (const std::string& a : adapters) {
                   data += R"(,{"id":")" + a + R"(","object":"model","parent":")" + model + R"("})";
                 }
                 co_return http::Response::json(200, R"({"object":"list","data":[)" + data + "]}");
               });
    routes.add(
        http::Method::kGet, "/metrics",
        [block_size](http::Request&, http::ResponseWriter&) -> net::awaitable<http::Response> {
          co_return http::Response::text(
              200, "vllm:cache_config_info{block_size=\"" + std::to_string(block_size) +
                       "\"} 1\nvllm:num_requests_waiting 0\nvllm:num_requests_running 0\n"
                       "vllm:kv_cache_usage_perc 0\n");
        });
    server = http::Server::start(loop, {}, std::move(routes)).value();
  }

  static std::string chunk(int i) {
    return http::sse_event(R"({"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"t)" +
                           std::to_string(i) + R"("}]})");
  }
  static std::string full_stream() {
    std::string s;
    for (int i = 0; i < 3; ++i) s += chunk(i);
    s += http::kSseDone;
    return s;
  }
  // What a kPrefill engine returns: names the engine, so a test can tell whose reached decode.
  std::string transfer_params() const {
    return R"({"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[7,8,9],)"
           R"("remote_engine_id":"engine-)" + std::to_string(server->port()) +
           R"(","remote_host":"127.0.0.1","remote_port":5600,"tp_size":1})";
  }
  std::vector<std::string> all_bodies() {
    std::lock_guard lock(mu);
    return bodies;
  }
  std::vector<std::string> all_request_ids() {
    std::lock_guard lock(mu);
    return request_ids;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server->port()); }
  std::string id() const { return "127.0.0.1:" + std::to_string(server->port()); }

  std::unique_ptr<http::Server> server;
  RoomBoard* board = nullptr;  // for the kSglang* modes
  std::string model = "fake-model";  // what /v1/models lists; set before the gateway starts
  std::vector<std::string> adapters;  // LoRA adapters /v1/models lists after the model (mu)
  std::atomic<Mode> mode{Mode::kOk};
  std::atomic<int> requests{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> timed_out{0};  // kSglang* waits that ran out
  std::string last_body;
  std::string last_request_id;
  std::string last_authorization;  // "" when the request had none
  std::promise<void> died;
  std::mutex mu;  // guards bodies, request_ids and adapters
  std::vector<std::string> bodies;
  std::vector<std::string> request_ids;
};

std::vector<uint32_t> prompt_ids(uint32_t family, size_t blocks);

// A completion request's body: `ids` as the prompt, 3 tokens.
std::string completion_json(const std::vector<uint32_t>& ids, bool stream = true,
                            const std::string& model = "fake-model") {
  boost::json::array prompt;
  for (uint32_t id : ids) prompt.push_back(id);
  return boost::json::serialize(boost::json::object{
      {"model", model}, {"prompt", prompt}, {"max_tokens", 3}, {"stream", stream}});
}

class GatewayTest : public ::testing::Test {
 protected:
  // Starts a gateway over `engines`; the worker with `publisher` gets KV events.
  void start_gateway(std::vector<std::string> worker_flags, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--host", "127.0.0.1", "--port", "0", "--log-level", "warn",
                                  "--router-seed", "7"};
    for (auto& w : worker_flags) {
      args.push_back("--worker");
      args.push_back(w);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    auto g = testing::start_gateway(args);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gateway_ = std::move(*g);
    endpoint_ = http::Endpoint{"127.0.0.1", gateway_->port()};
  }

  // Starts a gateway over `a` and `b`, `b` publishing KV events through the publisher returned
  // (null on failure); its subscriber is connected, so nothing published from here on is lost.
  std::unique_ptr<events::KvEventPublisher> start_gateway_with_events(FakeEngine& a, FakeEngine& b) {
    events::KvEventPublisher::Options po;
    po.endpoint = "tcp://127.0.0.1:*";
    auto publisher = events::KvEventPublisher::start(po);
    EXPECT_TRUE(publisher.ok()) << publisher.status().to_string();
    if (!publisher.ok()) return nullptr;
    start_gateway({a.url(), b.url() + ",kv=" + (*publisher)->endpoint()});
    if (!(*publisher)->wait_for_subscriber(std::chrono::seconds(10))) {
      ADD_FAILURE() << "the gateway's subscriber did not connect";
      return nullptr;
    }
    return std::move(*publisher);
  }

  // Publishes one BlockStored of the first `blocks` blocks of `ids` on `worker` (engine hashes
  // `first_hash` on; `lora_name`: stored for that adapter) and waits until the gateway's
  // mirror of the worker holds exactly them.
  bool store_blocks(events::KvEventPublisher& publisher, const FakeEngine& worker,
                    const std::vector<uint32_t>& ids, uint64_t blocks, uint64_t first_hash,
                    std::optional<std::string> lora_name = std::nullopt) {
    events::BlockStored stored;
    for (uint64_t i = 0; i < blocks; ++i) stored.block_hashes.push_back(first_hash + i);
    stored.token_ids.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(blocks * 16));
    stored.block_size = 16;
    stored.medium = "GPU";
    stored.lora_name = std::move(lora_name);
    events::EventBatch batch;
    batch.events.push_back(stored);
    if (!publisher.publish(batch).ok()) return false;
    const std::string cache_view = "/v1/admin/cache-view/" + worker.id();
    return eventually([&] {
      return call(http::Method::kGet, cache_view).body == R"({"worker_id":")" + worker.id() +
                                                              R"(","block_count":)" +
                                                              std::to_string(blocks) + "}";
    });
  }

  // A request through the gateway, whole response.
  http::Response call(http::Method method, std::string target, std::string body = {},
                      http::Headers headers = {}) {
    return testing::call(loop_, client_, endpoint_, method, std::move(target), std::move(body),
                         std::move(headers));
  }

  // Posts a completion as a client that gives up after 300 ms without an answer; its status.
  Status post_and_give_up(std::string body) {
    http::Client short_client(http::ClientOptions{.response_timeout = std::chrono::milliseconds(300)});
    std::promise<Status> p;
    http::Request r;
    r.method = http::Method::kPost;
    r.target = "/v1/completions";
    r.body = std::move(body);
    net::co_spawn(net::make_strand(loop_.context()), [&]() -> net::awaitable<void> {
      auto resp = co_await short_client.request(endpoint_, std::move(r));
      p.set_value(resp.status());
    }, net::detached);
    return p.get_future().get();
  }

  std::vector<metrics::Sample> scrape(http::Headers headers = {}) {
    auto r = call(http::Method::kGet, "/metrics", {}, std::move(headers));
    EXPECT_EQ(r.status, 200) << r.body;
    auto s = metrics::parse_text(r.body);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? *s : std::vector<metrics::Sample>{};
  }

  void TearDown() override {
    if (gateway_) gateway_->shutdown(std::chrono::milliseconds(1000));
  }

  int call_until_tried(FakeEngine& bad, uint32_t family);

  http::EventLoop loop_{2};
  http::Client client_;
  std::unique_ptr<gateway::Gateway> gateway_;
  http::Endpoint endpoint_;
};


std::vector<uint32_t> prompt_ids(uint32_t family, size_t blocks) {
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < blocks * 16; ++i) ids.push_back(family * 10000 + static_cast<uint32_t>(i) + 1);
  return ids;
}

// A LoRA adapter's blocks are keyed with the adapter's name folded into the hash seed
// (docs/contracts.md section 4), both in the KV events that name it (`lora_name`) and in requests
// for it: a request for the adapter finds the blocks its events stored, a request for the base model
// with the same tokens does not (another adapter's KV is not its KV).
TEST_F(GatewayTest, ALoraAdaptersRequestsFindTheBlocksItsEventsStored) {
  FakeEngine a(loop_), b(loop_);
  a.adapters = b.adapters = {"sql-lora"};
  auto publisher = start_gateway_with_events(a, b);
  ASSERT_TRUE(publisher);
  ASSERT_TRUE(eventually([&] {
    return call(http::Method::kGet, "/v1/models").body.find("sql-lora") != std::string::npos;
  }));
  const auto ids = prompt_ids(9, 10);
  ASSERT_TRUE(store_blocks(*publisher, b, ids, 8, 3000, "sql-lora"));
  auto hits_on_b = [&](const std::string& model) {
    auto explain = call(http::Method::kPost, "/v1/admin/route-explain", completion_json(ids, true, model));
    EXPECT_EQ(explain.status, 200) << explain.body;
    const auto ex = boost::json::parse(explain.body);
    for (const auto& row : ex.at("stages").at(0).at("workers").as_array()) {
      if (row.at("worker_id").as_string() == b.id()) return row.at("cache_hits").to_number<int>();
    }
    return -1;
  };
  EXPECT_EQ(hits_on_b("sql-lora"), 8);
  EXPECT_EQ(hits_on_b("fake-model"), 0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(call(http::Method::kPost, "/v1/completions", completion_json(ids, true, "sql-lora")).status, 200);
  }
  EXPECT_EQ(b.requests.load(), 4);
  EXPECT_EQ(a.requests.load(), 0);
}

// An adapter loaded at run time (vLLM's /v1/load_lora_adapter) becomes routable without a
// restart: the gateway asks every worker what it serves every few seconds.
TEST_F(GatewayTest, AnAdapterLoadedAtRunTimeBecomesRoutable) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()});
  ASSERT_TRUE(eventually([&] {
    return call(http::Method::kGet, "/v1/models").body.find("fake-model") != std::string::npos;
  }));
  const std::string body = completion_json(prompt_ids(17, 2), true, "new-lora");
  EXPECT_EQ(call(http::Method::kPost, "/v1/completions", body).status, 404);
  {
    std::lock_guard lock(engine.mu);
    engine.adapters = {"new-lora"};
  }
  ASSERT_TRUE(eventually(
      [&] { return call(http::Method::kGet, "/v1/models").body.find("new-lora") != std::string::npos; },
      std::chrono::seconds(15)));  // the refresh runs every 5 s (Fleet::kModelRefreshTicks)
  EXPECT_EQ(call(http::Method::kPost, "/v1/completions", body).status, 200);
  EXPECT_EQ(engine.requests.load(), 1);
}

TEST_F(GatewayTest, RelaysTheStreamByteForByte) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()});
  auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(1, 2)));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, FakeEngine::full_stream());
  EXPECT_EQ(r.header("Content-Type"), http::kSseContentType);
  EXPECT_EQ(engine.last_body, completion_json(prompt_ids(1, 2)));  // forwarded unchanged
  EXPECT_FALSE(engine.last_request_id.empty());
}

TEST_F(GatewayTest, FollowsTheCacheLearnedFromKvEvents) {
  FakeEngine a(loop_), b(loop_);
  auto publisher = start_gateway_with_events(a, b);
  ASSERT_TRUE(publisher);
  // Worker b caches 8 blocks of the prompt.
  const auto ids = prompt_ids(3, 10);
  ASSERT_TRUE(store_blocks(*publisher, b, ids, 8, 1000));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(call(http::Method::kPost, "/v1/completions", completion_json(ids)).status, 200);
  }
  EXPECT_EQ(b.requests.load(), 5);
  EXPECT_EQ(a.requests.load(), 0);
  // The explain endpoint shows why, without routing.
  auto explain = call(http::Method::kPost, "/v1/admin/route-explain", completion_json(ids));
  ASSERT_EQ(explain.status, 200) << explain.body;
  const auto ex = boost::json::parse(explain.body);
  const auto& stage = ex.at("stages").at(0);
  EXPECT_EQ(stage.at("winner").as_string(), b.id());
  EXPECT_EQ(b.requests.load(), 5);
  bool saw_hits = false;
  for (const auto& row : stage.at("workers").as_array()) {
    if (row.at("worker_id").as_string() == b.id()) {
      saw_hits = row.at("cache_hits").to_number<int>() == 8;
    }
  }
  EXPECT_TRUE(saw_hits) << explain.body;
}

TEST_F(GatewayTest, RetriesAnotherWorkerWhenOneFailsBeforeTheFirstByte) {
  FakeEngine bad(loop_), good(loop_);
  bad.mode = Mode::kFail500;
  start_gateway({bad.url(), good.url()}, {"--router-policy", "round-robin"});
  for (int i = 0; i < 4; ++i) {
    auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(4, 1)));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, FakeEngine::full_stream());
  }
  EXPECT_GE(bad.requests.load(), 1);
  EXPECT_EQ(good.requests.load(), 4);
  const auto samples = scrape();
  EXPECT_GE(metrics::sum_of(samples, "infera_upstream_retries_total"), 1);
  auto workers = call(http::Method::kGet, "/v1/admin/workers");
  EXPECT_NE(workers.body.find("\"state\":\"backoff\""), std::string::npos) << workers.body;
}

TEST_F(GatewayTest, AllWorkersDownIsA502WithAnOpenAiError) {
  FakeEngine bad(loop_);
  bad.mode = Mode::kFail500;
  start_gateway({bad.url()});
  auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(5, 1)));
  EXPECT_EQ(r.status, 502);
  const auto body = boost::json::parse(r.body);
  EXPECT_TRUE(body.at("error").at("message").is_string());
}

TEST_F(GatewayTest, AFailureMidStreamEndsWithAnErrorEvent) {
  FakeEngine engine(loop_);
  engine.mode = Mode::kDieMidStream;
  start_gateway({engine.url()});
  std::promise<http::Response> result;
  std::thread caller([&] {
    result.set_value(call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(6, 1))));
  });
  engine.died.get_future().wait();
  engine.server->shutdown(std::chrono::milliseconds(0));  // the engine dies mid-stream
  auto r = result.get_future().get();
  caller.join();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body.rfind(FakeEngine::chunk(0), 0), 0u);  // the first chunk came through
  EXPECT_NE(r.body.find("data: {\"error\""), std::string::npos) << r.body;
  EXPECT_TRUE(r.body.ends_with(http::kSseDone)) << r.body;
}

TEST_F(GatewayTest, BadRequestsGetOpenAiErrors) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()}, {"--max-body-bytes", "4096"});
  auto expect_error = [&](const std::string& target, const std::string& body, int status) {
    auto r = call(http::Method::kPost, target, body);
    EXPECT_EQ(r.status, status) << target << " " << body << " -> " << r.body;
    if (r.status >= 400) {
      boost::system::error_code ec;
      auto v = boost::json::parse(r.body, ec);
      EXPECT_FALSE(ec) << r.body;
      if (!ec) {
        EXPECT_TRUE(v.at("error").at("message").is_string());
        EXPECT_TRUE(v.at("error").at("type").is_string());
      }
    }
  };
  expect_error("/v1/completions", "{not json", 400);
  expect_error("/v1/chat/completions", R"({"model":"fake-model"})", 400);
  expect_error("/v1/chat/completions", R"({"messages":"hello"})", 400);
  expect_error("/v1/completions", R"({"prompt":[1,-2]})", 400);
  expect_error("/v1/completions", R"({"model":"no-such-model","prompt":[1,2]})", 404);
  expect_error("/v1/completions", R"({"prompt":")" + std::string(8000, 'x') + R"("})", 413);
  EXPECT_EQ(engine.requests.load(), 0);
  // The server is unaffected.
  EXPECT_EQ(call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(7, 1))).status, 200);
}

TEST_F(GatewayTest, ModelsHealthAndMetrics) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()});
  ASSERT_TRUE(eventually([&] {
    return call(http::Method::kGet, "/v1/models").body.find("fake-model") != std::string::npos;
  }));
  EXPECT_EQ(call(http::Method::kGet, "/health").status, 200);
  call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(8, 2)));
  const auto samples = scrape();
  EXPECT_EQ(metrics::sum_of(samples, "infera_requests_total",
                            {{"route", "/v1/completions"}, {"status", "200"}, {"worker", engine.id()}}),
            1);
  EXPECT_EQ(metrics::sum_of(samples, "infera_ttft_seconds_count"), 1);
  EXPECT_EQ(metrics::sum_of(samples, "infera_routing_hash_seconds_count"), 1);
  EXPECT_EQ(metrics::sum_of(samples, "infera_worker_inflight_requests", {{"worker", engine.id()}}), 0);
  EXPECT_EQ(metrics::sum_of(samples, "infera_worker_healthy", {{"worker", engine.id()}}), 1);
}

// docs/metrics.md is the operators' reference: every metric family a running gateway exports
// (a worker with KV events, a request served) is listed there with its type, and every listed
// one is exported (but those that need a disaggregated fleet or --kv-events-bind).
TEST_F(GatewayTest, EveryExportedMetricIsDocumented) {
  FakeEngine a(loop_), b(loop_);
  auto publisher = start_gateway_with_events(a, b);
  ASSERT_TRUE(publisher);
  ASSERT_EQ(call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(9, 2))).status, 200);

  std::ifstream in(std::string(INFERA_SOURCE_DIR) + "/docs/metrics.md");
  ASSERT_TRUE(in) << "docs/metrics.md is missing";
  std::map<std::string, std::string> documented;  // name -> type, from "| `name` | type |" rows
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const size_t name_end = line.find('`', 3);
    const size_t type_start = line.find("| ", name_end);
    const size_t type_end = line.find(" |", type_start + 2);
    if (name_end == std::string::npos || type_start == std::string::npos || type_end == std::string::npos) continue;
    documented[line.substr(3, name_end - 3)] = line.substr(type_start + 2, type_end - type_start - 2);
  }
  ASSERT_GT(documented.size(), 20u);

  // The engine-reading gauges appear once each worker's /metrics has been polled.
  std::string body;
  ASSERT_TRUE(eventually([&] {
    body = call(http::Method::kGet, "/metrics").body;
    return body.find("infera_worker_engine_reading_age_seconds{") != std::string::npos;
  }));
  std::set<std::string> exported;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::istringstream fields(line.substr(7));
    std::string name, type;
    fields >> name >> type;
    exported.insert(name);
    auto it = documented.find(name);
    if (it == documented.end()) {
      ADD_FAILURE() << name << " (" << type << ") is exported but not in docs/metrics.md";
    } else {
      EXPECT_EQ(it->second, type) << name;
    }
  }
  // Series that exist only with a flag or after a kind of request this test does not make.
  const std::set<std::string> conditional{
      "infera_disagg_requests_total",      "infera_kv_events_unattributed_total",
      "infera_otlp_spans_exported_total",  "infera_otlp_spans_dropped_total",
      "infera_response_affinity_total",    "infera_generation_tokens_total",
      "infera_inter_token_latency_seconds"};
  for (const auto& [name, type] : documented) {
    if (conditional.count(name)) continue;
    EXPECT_TRUE(exported.count(name)) << name << " is in docs/metrics.md but not exported";
  }
}

TEST_F(GatewayTest, AdminEndpointsNeedTheTokenWhenOneIsSet) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()}, {"--admin-token", "s3cret"});
  EXPECT_EQ(call(http::Method::kGet, "/metrics").status, 401);
  const http::Response denied = call(http::Method::kGet, "/v1/admin/workers");
  EXPECT_EQ(denied.status, 401);
  // The one error mapper's OpenAI shape, and the scheme to use.
  EXPECT_EQ(denied.header("WWW-Authenticate"), "Bearer");
  const boost::json::value error = boost::json::parse(denied.body).at("error");
  EXPECT_EQ(error.at("type").as_string(), "authentication_error");
  EXPECT_EQ(error.at("code").as_string(), "invalid_api_key");
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/workers", {}, {{"Authorization", "Bearer wrong!"}}).status, 401);
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/workers", {}, {{"Authorization", "Bearer s3cret"}}).status, 200);
  EXPECT_EQ(call(http::Method::kGet, "/health").status, 200);  // public
}

// --api-key: the OpenAI routes answer 401 (the one error mapper's shape) without one of the
// keys, serve with any of them, and forward the client's header to the worker unless
// --strip-authorization; probes stay public, and the admin token is another secret.
TEST_F(GatewayTest, InferenceRoutesNeedAnApiKeyWhenKeysAreSet) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()}, {"--api-key", "sk-one", "--api-key", "sk-two", "--admin-token", "adm"});
  const std::string body = completion_json(prompt_ids(3, 2));
  for (const auto& [method, path] : std::vector<std::pair<http::Method, std::string>>{
           {http::Method::kPost, "/v1/completions"}, {http::Method::kPost, "/v1/chat/completions"},
           {http::Method::kGet, "/v1/models"}, {http::Method::kPost, "/tokenize"}}) {
    const http::Response denied = call(method, path, body);
    EXPECT_EQ(denied.status, 401) << path;
    EXPECT_EQ(denied.header("WWW-Authenticate"), "Bearer") << path;
    const boost::json::value error = boost::json::parse(denied.body).at("error");
    EXPECT_EQ(error.at("code").as_string(), "invalid_api_key") << path;
    EXPECT_EQ(call(method, path, body, {{"Authorization", "Bearer sk-thr"}}).status, 401) << path;
    EXPECT_EQ(call(method, path, body, {{"Authorization", "Bearer adm"}}).status, 401) << path;
  }
  EXPECT_EQ(engine.requests.load(), 0);  // nothing denied reached the worker
  EXPECT_EQ(call(http::Method::kGet, "/v1/models", {}, {{"Authorization", "Bearer sk-one"}}).status, 200);
  EXPECT_EQ(call(http::Method::kPost, "/v1/completions", body, {{"Authorization", "Bearer sk-two"}}).status, 200);
  EXPECT_EQ(engine.last_authorization, "Bearer sk-two");  // forwarded by default
  EXPECT_EQ(call(http::Method::kGet, "/health").status, 200);
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/workers", {}, {{"Authorization", "Bearer sk-one"}}).status, 401);
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/workers", {}, {{"Authorization", "Bearer adm"}}).status, 200);
}

TEST_F(GatewayTest, StripAuthorizationKeepsTheClientsKeyFromTheWorker) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()}, {"--api-key", "sk-one", "--strip-authorization"});
  ASSERT_EQ(call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(4, 2)),
                 {{"Authorization", "Bearer sk-one"}}).status, 200);
  EXPECT_EQ(engine.requests.load(), 1);
  EXPECT_EQ(engine.last_authorization, "");
}

// The OpenAI routes the router does not read the prompt of go to a worker serving the model
// (picked by load), body unchanged, with the same key check and model check as completions;
// GET /v1/models/{id} answers for one model.
TEST_F(GatewayTest, PassThroughRoutesReachAWorkerServingTheModel) {
  FakeEngine a(loop_), b(loop_);
  start_gateway({a.url(), b.url()}, {"--api-key", "sk"});
  const http::Headers key{{"Authorization", "Bearer sk"}};
  ASSERT_TRUE(eventually([&] {
    return call(http::Method::kGet, "/v1/models", {}, key).body.find("fake-model") != std::string::npos;
  }));
  for (const std::string path : {"/v1/embeddings", "/v1/responses", "/v1/rerank", "/v1/score", "/detokenize"}) {
    const std::string body = R"({"model":"fake-model","input":"a b c"})";
    EXPECT_EQ(call(http::Method::kPost, path, body).status, 401) << path;
    const http::Response ok = call(http::Method::kPost, path, body, key);
    EXPECT_EQ(ok.status, 200) << path << " " << ok.body;
    EXPECT_NE(ok.body.find(R"("path":")" + path + R"(","got":)" + body + "}"), std::string::npos)
        << path << " " << ok.body;
    const http::Response unknown = call(http::Method::kPost, path, R"({"model":"nope","input":"x"})", key);
    EXPECT_EQ(unknown.status, 404) << path;
    EXPECT_EQ(boost::json::parse(unknown.body).at("error").at("code").as_string(), "model_not_found") << path;
    EXPECT_EQ(call(http::Method::kPost, path, "[1,2]", key).status, 400) << path;
  }
  EXPECT_EQ(a.requests.load() + b.requests.load(), 5);
  for (const FakeEngine* e : {&a, &b}) {  // the client's key is forwarded (no --strip-authorization)
    if (e->requests.load() > 0) {
      EXPECT_EQ(e->last_authorization, "Bearer sk");
    }
  }
  const http::Response one = call(http::Method::kGet, "/v1/models/fake-model", {}, key);
  EXPECT_EQ(one.status, 200);
  EXPECT_EQ(boost::json::parse(one.body).at("id").as_string(), "fake-model");
  const http::Response none = call(http::Method::kGet, "/v1/models/org/other", {}, key);
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(boost::json::parse(none.body).at("error").at("code").as_string(), "model_not_found");
  EXPECT_EQ(call(http::Method::kGet, "/v1/models/fake-model").status, 401);
}

// A Responses API request continuing a stored response goes to the worker that answered it
// (vLLM keeps the conversation in that instance's memory); an unknown id is routed by load.
TEST_F(GatewayTest, AContinuedResponseGoesToTheWorkerThatAnsweredIt) {
  FakeEngine a(loop_), b(loop_);
  start_gateway({a.url(), b.url()});
  ASSERT_TRUE(eventually([&] { return call(http::Method::kGet, "/v1/models").body.find("fake-model") != std::string::npos; }));
  for (int conversation = 0; conversation < 6; ++conversation) {
    http::Response first = call(http::Method::kPost, "/v1/responses", R"({"model":"fake-model","input":"hi"})");
    ASSERT_EQ(first.status, 200) << first.body;
    std::string id(boost::json::parse(first.body).at("id").as_string());
    const std::string engine = id.substr(0, id.rfind('_'));  // resp_<port>
    for (int turn = 0; turn < 4; ++turn) {
      const http::Response next = call(http::Method::kPost, "/v1/responses",
                                       R"({"model":"fake-model","input":"more","previous_response_id":")" + id + R"("})");
      ASSERT_EQ(next.status, 200) << next.body;
      id = std::string(boost::json::parse(next.body).at("id").as_string());
      EXPECT_EQ(id.substr(0, id.rfind('_')), engine) << "turn " << turn << " left its worker";
    }
  }
  const std::string metrics = call(http::Method::kGet, "/metrics").body;
  EXPECT_NE(metrics.find(R"(infera_response_affinity_total{outcome="pinned"} 24)"), std::string::npos) << metrics;
  EXPECT_EQ(call(http::Method::kPost, "/v1/responses",
                 R"({"model":"fake-model","input":"x","previous_response_id":"resp_elsewhere"})").status, 200);
  EXPECT_NE(call(http::Method::kGet, "/metrics").body.find(R"(infera_response_affinity_total{outcome="unknown"} 1)"),
            std::string::npos);
}

TEST_F(GatewayTest, CacheViewValidatesTheWorkerId) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()});
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/cache-view/" + engine.id()).body,
            R"({"worker_id":")" + engine.id() + R"(","block_count":0})");
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/cache-view/10.9.9.9:1").status, 404);
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/cache-view/a%0aINFO").status, 400);
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/cache-view/..%2f..%2fetc").status, 400);
}

TEST_F(GatewayTest, AdminAndMetricsCanLiveOnTheirOwnTokenProtectedListener) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()},
                {"--admin-host", "127.0.0.1", "--admin-port", "0", "--admin-token", "s3cret"});
  ASSERT_NE(gateway_->admin_port(), 0);
  ASSERT_NE(gateway_->admin_port(), gateway_->port());
  const http::Headers auth = {{"Authorization", "Bearer s3cret"}};
  // The public listener serves inference and health, and no admin or metrics route.
  EXPECT_EQ(call(http::Method::kGet, "/metrics", {}, auth).status, 404);
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/workers", {}, auth).status, 404);
  EXPECT_EQ(call(http::Method::kGet, "/health").status, 200);
  EXPECT_EQ(call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(9, 1))).status, 200);
  // The admin listener wants the token, and serves no inference.
  const http::Endpoint main = endpoint_;
  endpoint_ = http::Endpoint{"127.0.0.1", gateway_->admin_port()};
  EXPECT_EQ(call(http::Method::kGet, "/metrics").status, 401);
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/workers").status, 401);
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/workers", {}, auth).status, 200);
  EXPECT_EQ(metrics::sum_of(scrape(auth), "infera_requests_total",
                            {{"route", "/v1/completions"}, {"status", "200"}}),
            1);
  EXPECT_EQ(call(http::Method::kGet, "/v1/admin/cache-view/" + engine.id(), {}, auth).body,
            R"({"worker_id":")" + engine.id() + R"(","block_count":0})");
  EXPECT_EQ(call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(9, 1)), auth).status,
            404);
  endpoint_ = main;
}

// Each request limit answers with its status and an OpenAI error naming the field, before any
// worker sees the request.
TEST_F(GatewayTest, PromptMessageAndDepthLimitsGetOpenAiErrors) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()},
                {"--max-prompt-tokens", "32", "--max-messages", "2", "--max-json-depth", "6"});
  auto expect_error = [&](const std::string& target, const std::string& body,
                          const std::string& param) {
    auto r = call(http::Method::kPost, target, body);
    EXPECT_EQ(r.status, 400) << body << " -> " << r.body;
    boost::system::error_code ec;
    auto v = boost::json::parse(r.body, ec);
    ASSERT_FALSE(ec) << r.body;
    EXPECT_EQ(v.at("error").at("type").as_string(), "invalid_request_error") << r.body;
    if (!param.empty()) {
      EXPECT_EQ(v.at("error").at("param").as_string(), param) << r.body;
    }
  };
  std::vector<uint32_t> ids(33, 5);
  expect_error("/v1/completions", completion_json(ids), "prompt");
  const std::string msg = R"({"role":"user","content":"hi"})";
  expect_error("/v1/chat/completions",
               R"({"model":"fake-model","messages":[)" + msg + "," + msg + "," + msg + "]}",
               "messages");
  expect_error("/v1/completions", R"({"model":"fake-model","prompt":[1],"x":[[[[[[[1]]]]]]]})", "");
  EXPECT_EQ(engine.requests.load(), 0);
  // Just inside every limit: served.
  ids.resize(32);
  EXPECT_EQ(call(http::Method::kPost, "/v1/completions", completion_json(ids)).status, 200);
  EXPECT_EQ(engine.requests.load(), 1);
}

// A stream that outlives --request-timeout-s ends with an OpenAI error event, and the worker's
// request is cancelled (no leaked load).
TEST_F(GatewayTest, AStreamPastTheRequestTimeoutEndsWithAnErrorEvent) {
  FakeEngine engine(loop_);
  engine.mode = Mode::kDieMidStream;  // sends one chunk, then nothing for 30 s
  start_gateway({engine.url()}, {"--request-timeout-s", "1"});
  auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(10, 1)));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body.rfind(FakeEngine::chunk(0), 0), 0u);  // the first chunk came through
  EXPECT_NE(r.body.find("data: {\"error\""), std::string::npos) << r.body;
  EXPECT_TRUE(r.body.ends_with(http::kSseDone)) << r.body;
  ASSERT_TRUE(eventually([&] {
    return metrics::sum_of(scrape(), "infera_worker_inflight_requests", {{"worker", engine.id()}}) == 0 &&
           metrics::sum_of(scrape(), "infera_worker_active_blocks", {{"worker", engine.id()}}) == 0;
  }));
}

TEST_F(GatewayTest, AWorkerWithAnotherBlockSizeIsRefused) {
  FakeEngine wrong(loop_, 32), right(loop_, 16);
  start_gateway({wrong.url(), right.url()});
  ASSERT_TRUE(eventually([&] {
    return call(http::Method::kGet, "/v1/admin/workers").body.find("\"state\":\"refused\"") !=
           std::string::npos;
  }));
  for (int i = 0; i < 4; ++i) call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(9, 1)));
  EXPECT_EQ(wrong.requests.load(), 0);
  EXPECT_EQ(right.requests.load(), 4);
}

// What the gateway learns by asking a worker (its /v1/models, its /metrics) is published in the
// fleet's view: the admin API shows it, and a LoRA adapter the worker lists is routed.
TEST_F(GatewayTest, WhatAWorkerSaysItServesIsShownAndRouted) {
  FakeEngine engine(loop_);
  engine.adapters = {"sql-lora"};
  start_gateway({engine.url()});
  // Its block size is asked after its models: once it shows, both are known.
  ASSERT_TRUE(eventually([&] {
    return call(http::Method::kGet, "/v1/admin/workers").body.find("\"block_size\":16") !=
           std::string::npos;
  }));
  const auto workers = boost::json::parse(call(http::Method::kGet, "/v1/admin/workers").body);
  const auto& w = workers.at("workers").at(0);
  EXPECT_EQ(w.at("models"), (boost::json::array{"fake-model", "sql-lora"}));
  EXPECT_EQ(w.at("state"), "healthy");
  EXPECT_EQ(w.as_object().count("refused_reason"), 0u);
  const auto ids = prompt_ids(12, 1);
  EXPECT_EQ(
      call(http::Method::kPost, "/v1/completions", completion_json(ids, true, "sql-lora")).status,
      200);
  EXPECT_EQ(
      call(http::Method::kPost, "/v1/completions", completion_json(ids, true, "no-such-model"))
          .status,
      404);
  EXPECT_EQ(engine.requests.load(), 1);
}

TEST_F(GatewayTest, AClientThatLeavesCancelsTheUpstreamRequest) {
  FakeEngine engine(loop_);
  engine.mode = Mode::kHang;
  start_gateway({engine.url()});
  EXPECT_FALSE(post_and_give_up(completion_json(prompt_ids(10, 1))).ok());  // the client gave up
  // The client gave up; the gateway must close its upstream request, and release its load.
  EXPECT_TRUE(eventually([&] { return engine.cancelled.load() == 1; }, std::chrono::seconds(10)));
  EXPECT_TRUE(eventually([&] {
    return metrics::sum_of(scrape(), "infera_worker_inflight_requests", {{"worker", engine.id()}}) == 0;
  }));
}

// Holds one request on the engine until its client gives up after `hold` (the gateway then
// cancels it upstream and frees the worker's only in-flight slot).
void hold_one_request(http::EventLoop& loop, const http::Endpoint& to, FakeEngine& engine,
                      std::chrono::milliseconds hold, std::promise<Status>& done) {
  engine.mode = Mode::kHang;
  const std::string body = completion_json(prompt_ids(11, 1), true, engine.model);
  net::co_spawn(net::make_strand(loop.context()), [&to, &done, hold, body]() -> net::awaitable<void> {
    http::Client short_client(http::ClientOptions{.response_timeout = hold});
    http::Request r;
    r.method = http::Method::kPost;
    r.target = "/v1/completions";
    r.body = body;
    auto resp = co_await short_client.request(to, std::move(r));
    done.set_value(resp.status());
  }, net::detached);
  EXPECT_TRUE(eventually([&] { return engine.requests.load() == 1; }));
}

TEST_F(GatewayTest, AtTheInFlightCapAFullQueueShedsWith429AndRetryAfter) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()}, {"--max-inflight-per-worker", "1", "--max-queue", "0"});
  std::promise<Status> held;
  hold_one_request(loop_, endpoint_, engine, std::chrono::milliseconds(3000), held);
  auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(12, 1)));
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_FALSE(r.header("Retry-After").empty());
  EXPECT_NE(r.body.find("rate_limit_error"), std::string::npos) << r.body;
  EXPECT_EQ(engine.requests.load(), 1);  // the shed request never reached the engine
  EXPECT_FALSE(held.get_future().get().ok());
}

// Under overload a request the queue cannot take is refused before it is tokenized and hashed
// (the costly part for a long chat prompt), and only when its own model's workers are full:
// another model's request with a free worker is served.
TEST_F(GatewayTest, AtAFullQueueARequestIsShedBeforeItIsTokenized) {
  FakeEngine a(loop_), b(loop_);
  a.model = "model-a";
  b.model = "model-b";
  start_gateway({a.url(), b.url()}, {"--max-inflight-per-worker", "1", "--max-queue", "0"});
  ASSERT_TRUE(eventually([&] {
    const std::string models = call(http::Method::kGet, "/v1/models").body;
    return models.find("model-a") != std::string::npos && models.find("model-b") != std::string::npos;
  }));
  std::promise<Status> held;
  hold_one_request(loop_, endpoint_, a, std::chrono::milliseconds(3000), held);
  auto tokenized = [&] { return metrics::sum_of(scrape(), "infera_routing_tokenize_seconds_count"); };
  auto hashed = [&] { return metrics::sum_of(scrape(), "infera_routing_hash_seconds_count"); };
  ASSERT_EQ(tokenized(), 1);  // the held request
  ASSERT_EQ(hashed(), 1);
  auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(15, 1), false, "model-a"));
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_FALSE(r.header("Retry-After").empty());
  EXPECT_NE(r.body.find("queue is full"), std::string::npos) << r.body;
  EXPECT_EQ(tokenized(), 1);
  EXPECT_EQ(hashed(), 1);
  b.mode = Mode::kOk;
  r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(16, 1), false, "model-b"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(tokenized(), 2);
  EXPECT_EQ(a.requests.load(), 1);
  EXPECT_EQ(b.requests.load(), 1);
  EXPECT_FALSE(held.get_future().get().ok());
}

TEST_F(GatewayTest, AtTheInFlightCapARequestWaitsInTheQueueForAFreeSlot) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()}, {"--max-inflight-per-worker", "1", "--max-queue", "1"});
  std::promise<Status> held;
  hold_one_request(loop_, endpoint_, engine, std::chrono::milliseconds(1000), held);
  engine.mode = Mode::kOk;  // for the queued request, once it gets the slot
  auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(13, 1)));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, FakeEngine::full_stream());
  EXPECT_EQ(engine.requests.load(), 2);
  EXPECT_FALSE(held.get_future().get().ok());  // the first client gave up, freeing the slot
}

TEST_F(GatewayTest, AtTheInFlightCapAQueuedRequestIsShedWhenItsQueueWaitRunsOut) {
  FakeEngine engine(loop_);
  start_gateway({engine.url()}, {"--max-inflight-per-worker", "1", "--max-queue", "8",
                                 "--max-queue-wait-s", "0.2"});
  std::promise<Status> held;
  hold_one_request(loop_, endpoint_, engine, std::chrono::milliseconds(2000), held);
  // The slot stays taken for 2 s; the queued request is refused after 0.2 s, not served late.
  auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(14, 1)));
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_FALSE(r.header("Retry-After").empty());
  EXPECT_NE(r.body.find("in-flight limit"), std::string::npos) << r.body;
  EXPECT_EQ(engine.requests.load(), 1);  // still only the held one: this request never went
  EXPECT_FALSE(held.get_future().get().ok());
}

// Two models, each on one worker at its in-flight cap of 1. Requests for model A queue first,
// then one for model B; when B's call ends, its slot goes to the B request, not to the older A
// requests, which could not use it (before: the oldest A request was woken, found nothing and
// waited again, and the B request waited until its queue wait ran out: 429 with B idle).
TEST_F(GatewayTest, AtTheInFlightCapAFreedSlotGoesToAQueuedRequestThatCanUseIt) {
  FakeEngine a(loop_), b(loop_);
  a.model = "model-a";
  b.model = "model-b";
  start_gateway({a.url(), b.url()}, {"--max-inflight-per-worker", "1", "--max-queue", "8",
                                     "--max-queue-wait-s", "3"});
  ASSERT_TRUE(eventually([&] {
    const std::string models = call(http::Method::kGet, "/v1/models").body;
    return models.find("model-a") != std::string::npos && models.find("model-b") != std::string::npos;
  }));
  auto waiting = [&] { return metrics::sum_of(scrape(), "infera_queue_waiting_requests"); };
  std::promise<Status> a_held, b_held;
  hold_one_request(loop_, endpoint_, a, std::chrono::milliseconds(3500), a_held);
  std::vector<std::future<http::Response>> queued_a;
  for (uint32_t i = 0; i < 2; ++i) {
    queued_a.push_back(std::async(std::launch::async, [&, i] {
      return call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(60 + i, 1), false, "model-a"));
    }));
    ASSERT_TRUE(eventually([&] { return waiting() == i + 1; }));
  }
  hold_one_request(loop_, endpoint_, b, std::chrono::milliseconds(300), b_held);
  b.mode = Mode::kOk;  // for the queued B request, once it gets the slot
  const auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(62, 1), false, "model-b"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(b.requests.load(), 2);
  EXPECT_FALSE(b_held.get_future().get().ok());  // B's first client gave up, freeing the slot
  for (auto& f : queued_a) EXPECT_EQ(f.get().status, 429);  // A's slot stayed taken
  EXPECT_EQ(a.requests.load(), 1);
  EXPECT_FALSE(a_held.get_future().get().ok());
}

// ---- Prefill/decode disaggregation (vLLM style, two calls) ----

boost::json::object parse_object(const std::string& text) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  return !ec && v.is_object() ? v.as_object() : boost::json::object{};
}

TEST_F(GatewayTest, DisaggregatedRequestsPrefillThenDecodeWithTheTransferParams) {
  FakeEngine prefill(loop_), decode(loop_);
  prefill.mode = Mode::kPrefill;
  start_gateway({prefill.url() + ",role=prefill", decode.url() + ",role=decode"});
  boost::json::object sent = parse_object(completion_json(prompt_ids(40, 2)));
  sent["stream_options"] = boost::json::object{{"include_usage", true}};
  sent["min_tokens"] = 2;
  const std::string body = boost::json::serialize(sent);
  auto r = call(http::Method::kPost, "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, FakeEngine::full_stream());  // the decode stream, byte for byte
  EXPECT_EQ(r.header("Content-Type"), http::kSseContentType);

  // The prefill call: one token, no stream, do_remote_decode.
  const auto prefill_bodies = prefill.all_bodies();
  ASSERT_EQ(prefill_bodies.size(), 1u);
  const boost::json::object p = parse_object(prefill_bodies[0]);
  EXPECT_EQ(p.at("max_tokens").to_number<int>(), 1);
  EXPECT_EQ(p.at("stream"), false);
  EXPECT_FALSE(p.contains("stream_options"));
  EXPECT_FALSE(p.contains("min_tokens"));
  EXPECT_EQ(p.at("prompt"), sent.at("prompt"));
  EXPECT_EQ(p.at("kv_transfer_params"),
            boost::json::parse(R"({"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,)"
                               R"("remote_block_ids":null,"remote_host":null,"remote_port":null})"));

  // The decode call: the client's body, plus the prefill's kv_transfer_params verbatim.
  const auto decode_bodies = decode.all_bodies();
  ASSERT_EQ(decode_bodies.size(), 1u);
  boost::json::object d = parse_object(decode_bodies[0]);
  EXPECT_EQ(d.at("kv_transfer_params"), boost::json::parse(prefill.transfer_params()));
  d.erase("kv_transfer_params");
  EXPECT_EQ(d, sent);
  EXPECT_EQ(decode_bodies[0].rfind(body.substr(0, body.size() - 1), 0), 0u)
      << "the client's bytes come first, unchanged: " << decode_bodies[0];
  // One request id for both calls.
  ASSERT_EQ(prefill.all_request_ids().size(), 1u);
  EXPECT_FALSE(prefill.all_request_ids()[0].empty());
  EXPECT_EQ(prefill.all_request_ids(), decode.all_request_ids());

  // A non-streamed request: the decode answer reaches the client as it is.
  auto whole = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(40, 2), false));
  EXPECT_EQ(whole.status, 200);
  EXPECT_EQ(whole.body, FakeEngine::full_stream());
  EXPECT_EQ(parse_object(decode.all_bodies().back()).at("stream"), false);

  const auto samples = scrape();
  EXPECT_EQ(metrics::sum_of(samples, "infera_disagg_requests_total",
                            {{"stage", "prefill"}, {"worker", prefill.id()}, {"status", "200"}}),
            2);
  EXPECT_EQ(metrics::sum_of(samples, "infera_disagg_requests_total",
                            {{"stage", "decode"}, {"worker", decode.id()}, {"status", "200"}}),
            2);
  EXPECT_EQ(metrics::sum_of(samples, "infera_requests_total",
                            {{"route", "/v1/completions"}, {"status", "200"}, {"worker", decode.id()}}),
            2);
  EXPECT_EQ(metrics::sum_of(samples, "infera_worker_inflight_requests"), 0);

  // Route-explain shows both stages.
  auto explain = call(http::Method::kPost, "/v1/admin/route-explain", completion_json(prompt_ids(40, 2)));
  ASSERT_EQ(explain.status, 200) << explain.body;
  const boost::json::object e = parse_object(explain.body);
  EXPECT_EQ(e.at("disaggregated"), true);
  const auto& stages = e.at("stages").as_array();
  ASSERT_EQ(stages.size(), 2u) << explain.body;
  EXPECT_EQ(stages[0].at("stage"), "prefill");
  EXPECT_EQ(stages[0].at("winner"), boost::json::value(prefill.id()));
  EXPECT_EQ(stages[1].at("stage"), "decode");
  EXPECT_EQ(stages[1].at("winner"), boost::json::value(decode.id()));
}

TEST_F(GatewayTest, DisaggregatedPrefillFailureRetriesAnotherPrefillWorker) {
  FakeEngine bad(loop_), good(loop_), decode(loop_);
  bad.mode = Mode::kFail500;
  good.mode = Mode::kPrefill;
  start_gateway({bad.url() + ",role=prefill", good.url() + ",role=prefill", decode.url() + ",role=decode"});
  // Until the failing prefill worker has been tried once (ties are broken at random).
  for (int i = 0; i < 30 && bad.requests.load() == 0; ++i) {
    auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(41, 1)));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, FakeEngine::full_stream());
  }
  ASSERT_GE(bad.requests.load(), 1);
  EXPECT_EQ(decode.requests.load(), good.requests.load());
  // Every decode call carried the working prefill worker's parameters.
  for (const std::string& b : decode.all_bodies()) {
    EXPECT_EQ(parse_object(b).at("kv_transfer_params"), boost::json::parse(good.transfer_params()));
  }
  const auto samples = scrape();
  EXPECT_GE(metrics::sum_of(samples, "infera_upstream_retries_total"), 1);
  EXPECT_GE(metrics::sum_of(samples, "infera_disagg_requests_total",
                            {{"stage", "prefill"}, {"worker", bad.id()}, {"status", "500"}}),
            1);
}

TEST_F(GatewayTest, DisaggregatedWithEveryPrefillWorkerDownIsAnOpenAiError) {
  FakeEngine bad(loop_), decode(loop_);
  bad.mode = Mode::kFail500;
  start_gateway({bad.url() + ",role=prefill", decode.url() + ",role=decode"});
  auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(42, 1)));
  EXPECT_TRUE(r.status == 502 || r.status == 503) << r.status;
  EXPECT_TRUE(parse_object(r.body).at("error").at("message").is_string()) << r.body;
  EXPECT_EQ(decode.requests.load(), 0);
}

TEST_F(GatewayTest, DisaggregatedWithoutTransferParamsDecodeComputesThePrompt) {
  FakeEngine prefill(loop_), decode(loop_);
  prefill.mode = Mode::kPrefillNoParams;
  start_gateway({prefill.url() + ",role=prefill", decode.url() + ",role=decode"});
  const std::string body = completion_json(prompt_ids(43, 2));
  auto r = call(http::Method::kPost, "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, FakeEngine::full_stream());
  EXPECT_EQ(prefill.requests.load(), 1);
  EXPECT_EQ(decode.last_body, body);  // the client's body, unchanged: no kv_transfer_params
}

TEST_F(GatewayTest, AFleetWithOnlyOnePoolIsRoutedAsAggregated) {
  FakeEngine decode(loop_);
  start_gateway({decode.url() + ",role=decode"});
  const std::string body = completion_json(prompt_ids(44, 1));
  auto r = call(http::Method::kPost, "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, FakeEngine::full_stream());
  EXPECT_EQ(decode.last_body, body);
  EXPECT_EQ(decode.requests.load(), 1);
}

TEST_F(GatewayTest, DisaggregatedClientThatLeavesReleasesBothWorkers) {
  FakeEngine prefill(loop_), decode(loop_);
  start_gateway({prefill.url() + ",role=prefill", decode.url() + ",role=decode"});
  auto give_up = [&] {
    EXPECT_FALSE(post_and_give_up(completion_json(prompt_ids(45, 2))).ok());  // the client gave up
  };
  auto idle = [&] {
    auto w = call(http::Method::kGet, "/v1/admin/workers");
    if (w.status != 200) return false;
    const boost::json::value table = boost::json::parse(w.body);
    for (const auto& row : table.at("workers").as_array()) {
      if (row.at("active_requests").to_number<int>() != 0) return false;
      if (row.at("inflight_requests").to_number<int>() != 0) return false;
    }
    return true;
  };
  // The client leaves while the prefill call is pending: it is cancelled, decode never called.
  prefill.mode = Mode::kHang;
  give_up();
  EXPECT_TRUE(eventually([&] { return prefill.cancelled.load() == 1; }, std::chrono::seconds(10)));
  EXPECT_TRUE(eventually(idle));
  EXPECT_EQ(decode.requests.load(), 0);
  // The client leaves during the decode call: both workers' load is released.
  prefill.mode = Mode::kPrefill;
  decode.mode = Mode::kHang;
  give_up();
  EXPECT_TRUE(eventually([&] { return decode.cancelled.load() == 1; }, std::chrono::seconds(10)));
  EXPECT_TRUE(eventually(idle));
  const auto samples = scrape();
  EXPECT_EQ(metrics::sum_of(samples, "infera_disagg_requests_total",
                            {{"stage", "prefill"}, {"status", "499"}}),
            1);
  EXPECT_EQ(metrics::sum_of(samples, "infera_disagg_requests_total",
                            {{"stage", "decode"}, {"status", "499"}}),
            1);
}

// ---- Prefill/decode disaggregation (SGLang style, one body to both at once) ----

// Sends requests until the failing worker `bad` was tried once (ties are broken at random);
// every one must still be answered with the good pair's stream. Returns how many were sent.
int GatewayTest::call_until_tried(FakeEngine& bad, uint32_t family) {
  int answered = 0;
  for (int i = 0; i < 30 && bad.requests.load() == 0; ++i) {
    auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(family, 1)));
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, FakeEngine::full_stream());
    ++answered;
  }
  return answered;
}

TEST_F(GatewayTest, SglangPairGetsTheSameBootstrapBodyAtOnceAndDecodeStreams) {
  RoomBoard board;
  FakeEngine prefill(loop_), decode(loop_);
  prefill.board = decode.board = &board;
  prefill.mode = Mode::kSglangPrefill;
  decode.mode = Mode::kSglangDecode;
  start_gateway({prefill.url() + ",role=prefill,engine=sglang,bootstrap_port=8998",
                 decode.url() + ",role=decode,engine=sglang"});
  const std::string body = completion_json(prompt_ids(50, 2));
  std::set<std::string> rooms;
  for (int i = 0; i < 2; ++i) {
    auto r = call(http::Method::kPost, "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, FakeEngine::full_stream());  // the decode stream, byte for byte
    EXPECT_EQ(r.header("Content-Type"), http::kSseContentType);
  }
  const auto p = prefill.all_bodies();
  const auto d = decode.all_bodies();
  ASSERT_EQ(p.size(), 2u);
  ASSERT_EQ(d.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(p[i], d[i]) << "both workers get the same body";
    EXPECT_EQ(p[i].rfind(body.substr(0, body.size() - 1), 0), 0u)
        << "the client's bytes come first, unchanged: " << p[i];
    boost::json::object o = parse_object(p[i]);
    EXPECT_EQ(o.at("bootstrap_host"), "127.0.0.1");
    EXPECT_EQ(o.at("bootstrap_port"), 8998);
    ASSERT_TRUE(o.at("bootstrap_room").is_int64() || o.at("bootstrap_room").is_uint64()) << p[i];
    const uint64_t room = o.at("bootstrap_room").to_number<uint64_t>();
    EXPECT_LE(room, uint64_t{INT64_MAX});
    rooms.insert(std::to_string(room));
    o.erase("bootstrap_host");
    o.erase("bootstrap_port");
    o.erase("bootstrap_room");
    EXPECT_EQ(o, parse_object(body));
  }
  EXPECT_EQ(rooms.size(), 2u) << "a new room per request";
  EXPECT_EQ(prefill.all_request_ids(), decode.all_request_ids());

  const auto samples = scrape();
  EXPECT_EQ(metrics::sum_of(samples, "infera_disagg_requests_total",
                            {{"stage", "prefill"}, {"worker", prefill.id()}, {"status", "200"}}),
            2);
  EXPECT_EQ(metrics::sum_of(samples, "infera_disagg_requests_total",
                            {{"stage", "decode"}, {"worker", decode.id()}, {"status", "200"}}),
            2);
  EXPECT_EQ(metrics::sum_of(samples, "infera_worker_inflight_requests"), 0);
  auto explain = call(http::Method::kPost, "/v1/admin/route-explain", body);
  ASSERT_EQ(explain.status, 200) << explain.body;
  const boost::json::object e = parse_object(explain.body);
  EXPECT_EQ(e.at("protocol"), "sglang") << explain.body;
  ASSERT_EQ(e.at("stages").as_array().size(), 2u);
  EXPECT_EQ(e.at("stages").as_array()[1].at("winner"), boost::json::value(decode.id()));
}

TEST_F(GatewayTest, SglangPrefillFailureStopsTheDecodeCallAndRetriesAnotherPair) {
  RoomBoard board;
  FakeEngine bad(loop_), good(loop_), decode(loop_);
  bad.board = good.board = decode.board = &board;
  bad.mode = Mode::kFail500;
  good.mode = Mode::kSglangPrefill;
  decode.mode = Mode::kSglangDecode;
  start_gateway({bad.url() + ",role=prefill,engine=sglang", good.url() + ",role=prefill,engine=sglang",
                 decode.url() + ",role=decode,engine=sglang"});
  const int answered = call_until_tried(bad, 51);
  ASSERT_GE(bad.requests.load(), 1);
  // The decode call of a failed pair waits for a room nobody prefilled: it was stopped (or
  // never reached the engine), not left to time out.
  EXPECT_TRUE(eventually([&] { return decode.requests.load() - decode.cancelled.load() == answered; }))
      << decode.requests.load() << " decode calls, " << decode.cancelled.load() << " stopped";
  EXPECT_EQ(decode.timed_out.load(), 0);
  const auto samples = scrape();
  EXPECT_GE(metrics::sum_of(samples, "infera_upstream_retries_total"), 1);
  EXPECT_GE(metrics::sum_of(samples, "infera_disagg_requests_total",
                            {{"stage", "prefill"}, {"worker", bad.id()}, {"status", "500"}}),
            1);
  EXPECT_EQ(metrics::sum_of(samples, "infera_worker_inflight_requests"), 0);
}

TEST_F(GatewayTest, SglangDecodeFailureStopsThePrefillCallAndRetriesAnotherPair) {
  RoomBoard board;
  FakeEngine prefill(loop_), bad(loop_), good(loop_);
  prefill.board = bad.board = good.board = &board;
  prefill.mode = Mode::kSglangPrefill;
  bad.mode = Mode::kFail500;
  good.mode = Mode::kSglangDecode;
  start_gateway({prefill.url() + ",role=prefill,engine=sglang",
                 bad.url() + ",role=decode,engine=sglang", good.url() + ",role=decode,engine=sglang"});
  const int answered = call_until_tried(bad, 52);
  ASSERT_GE(bad.requests.load(), 1);
  // The prefill call of a failed pair holds a room no decode joins: it was stopped (or never
  // reached the engine), not left to time out.
  EXPECT_TRUE(eventually([&] { return prefill.requests.load() - prefill.cancelled.load() == answered; }))
      << prefill.requests.load() << " prefill calls, " << prefill.cancelled.load() << " stopped";
  EXPECT_EQ(prefill.timed_out.load(), 0);
  const auto samples = scrape();
  EXPECT_GE(metrics::sum_of(samples, "infera_disagg_requests_total",
                            {{"stage", "decode"}, {"worker", bad.id()}, {"status", "502"}}),
            1);
}

TEST_F(GatewayTest, SglangWithEveryPrefillWorkerDownIsAnOpenAiError) {
  RoomBoard board;
  FakeEngine bad(loop_), decode(loop_);
  bad.board = decode.board = &board;
  bad.mode = Mode::kFail500;
  decode.mode = Mode::kSglangDecode;
  start_gateway({bad.url() + ",role=prefill,engine=sglang", decode.url() + ",role=decode,engine=sglang"});
  auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(53, 1)));
  EXPECT_TRUE(r.status == 502 || r.status == 503) << r.status << " " << r.body;
  EXPECT_TRUE(parse_object(r.body).at("error").at("message").is_string()) << r.body;
  EXPECT_TRUE(eventually([&] { return decode.cancelled.load() == decode.requests.load(); }));
  EXPECT_EQ(decode.timed_out.load(), 0);
}

TEST_F(GatewayTest, APairNeverMixesProtocols) {
  RoomBoard board;
  FakeEngine vllm_prefill(loop_), sglang_decode(loop_), vllm_decode(loop_);
  vllm_prefill.mode = Mode::kPrefill;
  sglang_decode.board = &board;
  sglang_decode.mode = Mode::kSglangDecode;
  start_gateway({vllm_prefill.url() + ",role=prefill", sglang_decode.url() + ",role=decode,engine=sglang",
                 vllm_decode.url() + ",role=decode,engine=vllm"});
  for (int i = 0; i < 6; ++i) {
    auto r = call(http::Method::kPost, "/v1/completions", completion_json(prompt_ids(54, 1)));
    ASSERT_EQ(r.status, 200) << r.body;
  }
  EXPECT_EQ(vllm_decode.requests.load(), 6);
  EXPECT_EQ(sglang_decode.requests.load(), 0);
}

}  // namespace
}  // namespace infera
