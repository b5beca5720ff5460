// The exchange spine driven without sockets: a scripted upstream, a recording downstream and an
// owner that hands out workers in order and writes down every event the spine reports. Each
// retry and cancellation rule the fault table (docs/reliability.md) relies on has a test here.
#include "infera/proxy/exchange.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>
#include <deque>
#include <map>

#include "infera/http/net.h"
#include "infera/http/sse.h"

namespace infera::proxy {
namespace {

using discovery::PdProtocol;
using routing::Stage;
using namespace std::chrono_literals;

// What a scripted worker does with one call.
enum class Act {
  kAnswer,        // 200 with the script's body (relayed: head, body, end)
  kRefuse,        // connection refused: nothing arrives
  k503,           // a 503 header (relay: retryable; fetch: the whole 503 answer)
  k400,           // a 400 answer (the request itself is refused)
  kBreak,         // relay: the first piece, then the worker dies
  kHang,          // never answers; ends only when the call is cancelled
  kSseError,      // fetch: a 200 stream whose last event is an OpenAI error
  kClientLeaves,  // relay: the client is gone by the time the answer would be written
  kCancelled      // fetch: the call was cancelled (the request went away)
};

struct Call {
  uint16_t port = 0;
  bool relayed = false;  // relay (true) or fetch
  std::string body;
  std::string request_id;
  bool cancelled = false;  // a kHang call that was stopped
  Nanos deadline = Nanos::max();  // fetch: the deadline the call was given
};

// Workers by port; each call takes the port's next act (the last one repeats).
class ScriptedUpstream final : public Upstream {
 public:
  ScriptedUpstream(ManualClock& clock) : clock_(clock) {}
  void script(uint16_t port, std::vector<Act> acts, std::string body = "the answer") {
    scripts_[port] = {std::deque<Act>(acts.begin(), acts.end()), std::move(body)};
  }
  // Each call moves the clock by `by` (a slow worker), before it answers.
  void call_takes(Nanos by) { call_time_ = by; }

  net::awaitable<ForwardOutcome> relay(const http::Endpoint& to, http::Request request,
                                       Downstream& out, ForwardOptions options) override {
    const size_t i = record(to, request, true);
    clock_.advance(call_time_);
    const Act act = next(to.port);
    ForwardOutcome o;
    switch (act) {
      case Act::kRefuse:
        o.error = unavailable("connection refused");
        co_return o;
      case Act::k503:
        o.upstream_status = 503;
        o.error = unavailable("worker answered HTTP 503");
        co_return o;
      case Act::kHang:
        co_return co_await hang(i);
      default:
        break;
    }
    if (options.abandoned && *options.abandoned) {
      o.error = cancelled("given up");
      co_return o;
    }
    o.upstream_status = act == Act::k400 ? 400 : 200;
    if (act == Act::kClientLeaves) {
      o.result = ForwardResult::kClientGone;
      o.error = cancelled("client gone");
      co_return o;
    }
    o.first_byte = clock_.now();
    if (options.on_first_byte) options.on_first_byte();
    http::Headers headers;
    (void)co_await out.write_head(o.upstream_status, std::move(headers));
    const std::string& body = scripts_[to.port].body;
    if (act == Act::kBreak) {
      (void)co_await out.write(body.substr(0, body.size() / 2), false);
      o.result = ForwardResult::kBrokenStream;
      o.error = unavailable("connection reset");
      (void)co_await out.finish();
      co_return o;
    }
    (void)co_await out.write(body, true);
    o.body_bytes = body.size();
    o.result = ForwardResult::kCompleted;
    co_return o;
  }

  net::awaitable<http::ClientResult<http::Response>> fetch(const http::Endpoint& to,
                                                           http::Request request,
                                                           Nanos deadline) override {
    const size_t i = record(to, request, false);
    calls[i].deadline = deadline;
    clock_.advance(call_time_);
    switch (next(to.port)) {
      case Act::kRefuse:
        co_return http::ClientError{unavailable("connection refused"), true};
      case Act::kCancelled:
        co_return http::ClientError{cancelled("the call was cancelled"), true};
      case Act::k503:
        co_return http::Response::json(503, R"({"error":"busy"})");
      case Act::k400:
        co_return http::Response::json(400, R"({"error":{"message":"bad prompt"}})");
      case Act::kHang: {
        const ForwardOutcome o = co_await hang(i);
        co_return http::ClientError{o.error, true};
      }
      case Act::kSseError: {
        http::Response r;
        r.headers.push_back({"Content-Type", "text/event-stream"});
        r.body = "data: {\"error\":{\"message\":\"kv transfer failed\"}}\n\n";
        co_return r;
      }
      default:
        break;
    }
    co_return http::Response::json(200, scripts_[to.port].body);
  }

  std::vector<Call> calls;

 private:
  size_t record(const http::Endpoint& to, const http::Request& request, bool relayed) {
    calls.push_back({to.port, relayed, request.body, std::string(request.header("X-Request-Id"))});
    return calls.size() - 1;
  }
  Act next(uint16_t port) {
    auto& s = scripts_[port];
    EXPECT_FALSE(s.acts.empty()) << "no script for port " << port;
    if (s.acts.empty()) return Act::kRefuse;
    const Act a = s.acts.front();
    if (s.acts.size() > 1) s.acts.pop_front();
    return a;
  }
  // Waits until cancelled (the pair's other call stopped it, or the request went away).
  net::awaitable<ForwardOutcome> hang(size_t call) {
    net::steady_timer t(co_await net::this_coro::executor);
    t.expires_after(1h);
    auto [ec] = co_await t.async_wait(use_nothrow);
    EXPECT_TRUE(ec) << "a hung call was never stopped";
    calls[call].cancelled = true;
    ForwardOutcome o;
    o.result = ForwardResult::kClientGone;
    o.error = cancelled("the call was cancelled");
    co_return o;
  }

  struct Script {
    std::deque<Act> acts;
    std::string body;
  };
  ManualClock& clock_;
  std::map<uint16_t, Script> scripts_;
  Nanos call_time_{0};
};

class RecordingDownstream final : public Downstream {
 public:
  net::awaitable<Status> write_head(int status, http::Headers) override {
    status_ = status;
    started_ = true;
    co_return ok_status();
  }
  net::awaitable<Status> write(std::string_view bytes, bool last) override {
    body += bytes;
    finished = finished || last;
    co_return ok_status();
  }
  net::awaitable<Status> finish() override {
    finished = true;
    co_return ok_status();
  }
  bool started() const override { return started_; }
  bool client_gone() const override { return false; }

  int status_ = 0;
  bool started_ = false;
  bool finished = false;
  std::string body;
};

struct FakeWorker {
  discovery::WorkerInfo info;
  http::Endpoint endpoint;
  kv::WorkerId slot = 0;
};

// Hands out the untried workers of a stage in order and logs every event as a line.
class LoggingOwner final : public Owner {
 public:
  // Workers on ports 1, 2, ...: "a1" (aggregated), "p1" (prefill), "d1" (decode).
  void add(std::string name, Stage stage, std::string protocol = "vllm") {
    FakeWorker w;
    w.slot = static_cast<kv::WorkerId>(workers_.size());
    w.info.id = "10.0.0." + std::to_string(w.slot + 1) + ":" + std::to_string(8000 + w.slot);
    w.info.pd_protocol = protocol;
    w.info.bootstrap_port = 9000 + w.slot;
    w.endpoint = {"10.0.0." + std::to_string(w.slot + 1), static_cast<uint16_t>(w.slot + 1)};
    workers_.push_back({std::move(name), stage, std::move(w)});
  }
  uint16_t port(const std::string& name) const {
    for (const auto& e : workers_) {
      if (e.name == name) return e.worker.endpoint.port;
    }
    ADD_FAILURE() << name;
    return 0;
  }
  // The next pick of `stage` finds no worker and answers `status` (a shed on attempt 0).
  void shed_next(Stage stage, int status) { shed_[stage] = status; }

  net::awaitable<Picked> pick(Stage stage, uint32_t attempt, std::vector<kv::WorkerId> tried,
                              std::optional<PdProtocol> protocol) override {
    Picked p;
    if (auto s = shed_.find(stage); s != shed_.end()) {
      log("pick " + stage_of(stage) + " -> shed");
      p.answer = http::Response::json(s->second, "{}");
      shed_.erase(s);
      co_return p;
    }
    for (const Entry& e : workers_) {
      const bool skip = std::find(tried.begin(), tried.end(), e.worker.slot) != tried.end();
      if (e.stage != stage || skip) continue;
      if (protocol && discovery::pd_protocol(e.worker.info) != *protocol) continue;
      log("pick " + stage_of(stage) + " " + std::to_string(attempt) + " -> " + e.name);
      p.worker = Worker{e.worker.slot, &e.worker.info, &e.worker.endpoint};
      p.hold = std::make_unique<LoggedHold>(this, e.name);
      co_return p;
    }
    log("pick " + stage_of(stage) + " " + std::to_string(attempt) + " -> none");
    if (attempt == 0) p.answer = http::Response::json(503, "{}");
    co_return p;
  }
  void call_ended(Stage stage, const Worker& w, Health health, int status) override {
    static constexpr const char* kHealth[] = {"success", "failure", "unjudged"};
    log("call_ended " + stage_of(stage) + " " + name(w) + " " + kHealth[static_cast<int>(health)] +
        " " + std::to_string(status));
  }
  void retrying(Stage stage, const Worker& w, const Status& error) override {
    log("retrying " + stage_of(stage) + " " + name(w) + ": " + error.message());
  }
  void ended(const Worker& w, int status, const ForwardOutcome* relayed) override {
    log("ended " + name(w) + " " + std::to_string(status) +
        (relayed ? " relayed " + std::string(forward_result_name(relayed->result)) : ""));
  }
  http::Response failed(const Status& error) override {
    log("failed: " + error.message());
    return http::Response::json(error.code() == StatusCode::kDeadlineExceeded ? 504 : 502,
                                error.message());
  }
  uint64_t bootstrap_room() override { return 4242; }

  void log(std::string line) { events.push_back(std::move(line)); }
  std::vector<std::string> events;

 private:
  class LoggedHold final : public Hold {
   public:
    LoggedHold(LoggingOwner* o, std::string name) : o_(o), name_(std::move(name)) {}
    ~LoggedHold() override { o_->log("release " + name_); }
    void prefill_done() override { o_->log("prefill_done " + name_); }
    void call_ended() override { o_->log("slot_free " + name_); }

   private:
    LoggingOwner* o_;
    std::string name_;
  };
  struct Entry {
    std::string name;
    Stage stage;
    FakeWorker worker;
  };
  static std::string stage_of(Stage s) { return std::string(routing::stage_name(s)); }
  std::string name(const Worker& w) const {
    for (const Entry& e : workers_) {
      if (e.worker.slot == w.slot) return e.name;
    }
    return "?";
  }
  std::deque<Entry> workers_;  // stable addresses: Worker points into them
  std::map<Stage, int> shed_;
};

class ExchangeTest : public ::testing::Test {
 protected:
  ExchangeTest() : upstream(clock) {
    request.method = http::Method::kPost;
    request.target = "/v1/completions";
    request.body = R"({"model":"m","prompt":"hello","max_tokens":20,"stream":true})";
    request.headers = {{"Content-Type", "application/json"}, {"X-Request-Id", "from-client"}};
    spec.retries = 2;
    spec.clock = &clock;
    spec.deadline = Nanos(10s);
    spec.request_id = "req-1";
  }

  http::Response run() {
    net::io_context io;
    auto done = net::co_spawn(io, exchange(request, out, upstream, owner, spec), net::use_future);
    io.run();
    return done.get();
  }
  const std::vector<std::string>& events() const { return owner.events; }

  ManualClock clock;
  ScriptedUpstream upstream;
  RecordingDownstream out;
  LoggingOwner owner;
  http::Request request;
  ExchangeSpec spec;
};

using Events = std::vector<std::string>;

// ---- aggregated ----

TEST_F(ExchangeTest, AnAnswerIsRelayedAndSettledOnce) {
  owner.add("a1", Stage::kAggregated);
  upstream.script(owner.port("a1"), {Act::kAnswer}, "data: x\n\n");
  const http::Response r = run();
  EXPECT_EQ(r.status, 200);  // a default Response: the answer went through `out`
  EXPECT_TRUE(r.body.empty());
  EXPECT_EQ(out.status_, 200);
  EXPECT_EQ(out.body, "data: x\n\n");
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(events(),
            (Events{"pick aggregated 0 -> a1", "prefill_done a1", "slot_free a1", "release a1",
                    "call_ended aggregated a1 success 200", "ended a1 200 relayed completed"}));
  ASSERT_EQ(upstream.calls.size(), 1u);
  EXPECT_EQ(upstream.calls[0].body, request.body);  // the client's own body
  EXPECT_EQ(upstream.calls[0].request_id, "req-1");
}

TEST_F(ExchangeTest, AWorkerThatFailsBeforeTheFirstByteIsReportedAndTheNextTried) {
  owner.add("a1", Stage::kAggregated);
  owner.add("a2", Stage::kAggregated);
  upstream.script(owner.port("a1"), {Act::kRefuse});
  upstream.script(owner.port("a2"), {Act::kAnswer});
  run();
  EXPECT_EQ(
      events(),
      (Events{"pick aggregated 0 -> a1", "slot_free a1", "release a1",
              "call_ended aggregated a1 failure 502", "retrying aggregated a1: connection refused",
              "pick aggregated 1 -> a2", "prefill_done a2", "slot_free a2", "release a2",
              "call_ended aggregated a2 success 200", "ended a2 200 relayed completed"}));
  EXPECT_EQ(out.body, "the answer");
}

TEST_F(ExchangeTest, A5xxHeaderIsRetriedAndCountedAs502) {
  owner.add("a1", Stage::kAggregated);
  owner.add("a2", Stage::kAggregated);
  upstream.script(owner.port("a1"), {Act::k503});
  upstream.script(owner.port("a2"), {Act::kAnswer});
  run();
  EXPECT_EQ(events()[3], "call_ended aggregated a1 failure 502");
  EXPECT_EQ(events()[4], "retrying aggregated a1: worker answered HTTP 503");
  EXPECT_EQ(out.status_, 200);
}

TEST_F(ExchangeTest, AttemptsAreBoundedByRetriesAndTheLastErrorIsTheAnswer) {
  spec.retries = 1;
  for (const char* n : {"a1", "a2", "a3"}) {
    owner.add(n, Stage::kAggregated);
    upstream.script(owner.port(n), {Act::k503});
  }
  const http::Response r = run();
  EXPECT_EQ(upstream.calls.size(), 2u);  // 1 + retries
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(events().back(), "failed: worker answered HTTP 503");
  EXPECT_FALSE(out.started());
}

TEST_F(ExchangeTest, NoWorkerLeftEndsWithTheLastFailure) {
  owner.add("a1", Stage::kAggregated);
  upstream.script(owner.port("a1"), {Act::kRefuse});
  const http::Response r = run();
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(events(), (Events{"pick aggregated 0 -> a1", "slot_free a1", "release a1",
                              "call_ended aggregated a1 failure 502",
                              "retrying aggregated a1: connection refused",
                              "pick aggregated 1 -> none", "failed: connection refused"}));
}

TEST_F(ExchangeTest, NothingIsRetriedAfterTheFirstByte) {
  owner.add("a1", Stage::kAggregated);
  owner.add("a2", Stage::kAggregated);
  upstream.script(owner.port("a1"), {Act::kBreak});
  upstream.script(owner.port("a2"), {Act::kAnswer});
  run();
  EXPECT_EQ(upstream.calls.size(), 1u);
  EXPECT_EQ(events().back(), "ended a1 502 relayed broken_stream");
  EXPECT_EQ(events()[events().size() - 2], "call_ended aggregated a1 failure 502");
}

TEST_F(ExchangeTest, AClientThatLeftIsNotRetriedAndTheWorkerNotJudged) {
  owner.add("a1", Stage::kAggregated);
  owner.add("a2", Stage::kAggregated);
  upstream.script(owner.port("a1"), {Act::kClientLeaves});
  run();
  EXPECT_EQ(upstream.calls.size(), 1u);
  EXPECT_EQ(events(),
            (Events{"pick aggregated 0 -> a1", "slot_free a1", "release a1",
                    "call_ended aggregated a1 unjudged 499", "ended a1 499 relayed client_gone"}));
}

TEST_F(ExchangeTest, AWorkersOwn4xxIsRelayedAsItsAnswer) {
  owner.add("a1", Stage::kAggregated);
  owner.add("a2", Stage::kAggregated);
  upstream.script(owner.port("a1"), {Act::k400});
  run();
  EXPECT_EQ(out.status_, 400);
  EXPECT_EQ(upstream.calls.size(), 1u);
  EXPECT_EQ(events().back(), "ended a1 400 relayed completed");
}

TEST_F(ExchangeTest, NoAttemptStartsOnceTheDeadlineHasPassed) {
  spec.deadline = Nanos(3s);
  owner.add("a1", Stage::kAggregated);
  owner.add("a2", Stage::kAggregated);
  upstream.script(owner.port("a1"), {Act::kRefuse});
  upstream.script(owner.port("a2"), {Act::kAnswer});
  upstream.call_takes(4s);  // the first call outlives the request's deadline
  const http::Response r = run();
  EXPECT_EQ(upstream.calls.size(), 1u);
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(events().back(), "failed: the request deadline passed while retrying");
}

TEST_F(ExchangeTest, AShedFirstPickIsTheAnswerAndNothingIsCalled) {
  owner.add("a1", Stage::kAggregated);
  owner.shed_next(Stage::kAggregated, 429);
  const http::Response r = run();
  EXPECT_EQ(r.status, 429);
  EXPECT_TRUE(upstream.calls.empty());
  EXPECT_EQ(events(), (Events{"pick aggregated -> shed"}));
}

// ---- vLLM two-call ----

constexpr const char* kPrefillAnswer =
    R"({"choices":[{"text":"x"}],"kv_transfer_params":{"remote_engine_id":"e1","remote_block_ids":[4,5]}})";

TEST_F(ExchangeTest, VllmPrefillsThenRelaysTheDecodeWithTheTransferParams) {
  spec.split = true;
  owner.add("p1", Stage::kPrefill);
  owner.add("d1", Stage::kDecode);
  upstream.script(owner.port("p1"), {Act::kAnswer}, kPrefillAnswer);
  upstream.script(owner.port("d1"), {Act::kAnswer}, "data: tokens\n\n");
  run();
  ASSERT_EQ(upstream.calls.size(), 2u);
  const auto prefill = boost::json::parse(upstream.calls[0].body).as_object();
  EXPECT_FALSE(upstream.calls[0].relayed);
  EXPECT_EQ(prefill.at("max_tokens").as_int64(), 1);
  EXPECT_TRUE(prefill.at("kv_transfer_params").at("do_remote_decode").as_bool());
  const auto decode = boost::json::parse(upstream.calls[1].body).as_object();
  EXPECT_TRUE(upstream.calls[1].relayed);
  EXPECT_EQ(decode.at("kv_transfer_params").at("remote_engine_id").as_string(), "e1");
  EXPECT_EQ(decode.at("max_tokens").as_int64(), 20);  // the client's
  EXPECT_EQ(out.body, "data: tokens\n\n");
  // The prefill worker's load is held until the request ends, after the decode call.
  EXPECT_EQ(events(),
            (Events{"pick prefill 0 -> p1", "slot_free p1", "call_ended prefill p1 success 200",
                    "prefill_done p1", "pick decode 0 -> d1", "prefill_done d1", "slot_free d1",
                    "release d1", "call_ended decode d1 success 200",
                    "ended d1 200 relayed completed", "release p1"}));
}

// The whole-answer prefill call is bounded by the request's deadline like every relayed call
// (a silent prefill worker cannot hold a request past it).
TEST_F(ExchangeTest, VllmThePrefillCallGetsTheRequestsDeadline) {
  spec.split = true;
  spec.deadline = Nanos(7s);
  owner.add("p1", Stage::kPrefill);
  owner.add("d1", Stage::kDecode);
  upstream.script(owner.port("p1"), {Act::kAnswer}, kPrefillAnswer);
  upstream.script(owner.port("d1"), {Act::kAnswer}, "data: tokens\n\n");
  run();
  ASSERT_EQ(upstream.calls.size(), 2u);
  EXPECT_FALSE(upstream.calls[0].relayed);
  EXPECT_EQ(upstream.calls[0].deadline, Nanos(7s));
}

TEST_F(ExchangeTest, VllmAFailedPrefillWorkerIsReplacedByOneThatSpeaksVllm) {
  spec.split = true;
  owner.add("p1", Stage::kPrefill);
  owner.add("p2", Stage::kPrefill, "sglang");  // never paired with a vLLM request
  owner.add("p3", Stage::kPrefill);
  owner.add("d1", Stage::kDecode);
  upstream.script(owner.port("p1"), {Act::k503});
  upstream.script(owner.port("p3"), {Act::kAnswer}, kPrefillAnswer);
  upstream.script(owner.port("d1"), {Act::kAnswer});
  run();
  const Events want_prefix{"pick prefill 0 -> p1",
                           "slot_free p1",
                           "call_ended prefill p1 failure 503",
                           "retrying prefill p1: prefill worker answered HTTP 503",
                           "release p1",
                           "pick prefill 1 -> p3"};
  EXPECT_EQ(Events(events().begin(), events().begin() + 6), want_prefix);
  EXPECT_EQ(out.body, "the answer");
}

TEST_F(ExchangeTest, VllmAPrefill4xxIsPassedThroughAndNoDecodeIsCalled) {
  spec.split = true;
  owner.add("p1", Stage::kPrefill);
  owner.add("d1", Stage::kDecode);
  upstream.script(owner.port("p1"), {Act::k400});
  const http::Response r = run();
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, R"({"error":{"message":"bad prompt"}})");
  EXPECT_EQ(r.header("X-Request-Id"), "req-1");
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  EXPECT_EQ(upstream.calls.size(), 1u);
  EXPECT_EQ(events().back(), "release p1");
  EXPECT_EQ(events()[events().size() - 2], "ended p1 400");
}

TEST_F(ExchangeTest, VllmWithoutTransferParamsTheDecodeGetsTheClientsBody) {
  spec.split = true;
  owner.add("p1", Stage::kPrefill);
  owner.add("d1", Stage::kDecode);
  upstream.script(owner.port("p1"), {Act::kAnswer}, R"({"choices":[]})");
  upstream.script(owner.port("d1"), {Act::kAnswer});
  run();
  ASSERT_EQ(upstream.calls.size(), 2u);
  EXPECT_EQ(upstream.calls[1].body, request.body);
}

TEST_F(ExchangeTest, VllmAPrefillCallCancelledEndsTheRequestWithoutRetry) {
  // The client left while the prefill call waited: the server cancelled the handler, and the
  // call came back kCancelled. Nothing is retried and the worker is not judged.
  spec.split = true;
  owner.add("p1", Stage::kPrefill);
  owner.add("p2", Stage::kPrefill);
  owner.add("d1", Stage::kDecode);
  upstream.script(owner.port("p1"), {Act::kCancelled});
  run();
  EXPECT_EQ(upstream.calls.size(), 1u);
  EXPECT_EQ(events(), (Events{"pick prefill 0 -> p1", "slot_free p1",
                              "call_ended prefill p1 unjudged 499", "ended p1 499", "release p1"}));
}

TEST_F(ExchangeTest, VllmAFailedDecodeIsRetriedOnAnotherDecodeWorker) {
  spec.split = true;
  owner.add("p1", Stage::kPrefill);
  owner.add("d1", Stage::kDecode);
  owner.add("d2", Stage::kDecode);
  upstream.script(owner.port("p1"), {Act::kAnswer}, kPrefillAnswer);
  upstream.script(owner.port("d1"), {Act::kRefuse});
  upstream.script(owner.port("d2"), {Act::kAnswer});
  run();
  ASSERT_EQ(upstream.calls.size(), 3u);  // one prefill call: its KV blocks are reused
  EXPECT_EQ(upstream.calls[2].port, owner.port("d2"));
  EXPECT_NE(std::find(events().begin(), events().end(), "call_ended decode d1 failure 502"),
            events().end());
  EXPECT_EQ(out.body, "the answer");
}

// ---- SGLang paired ----

class SglangExchangeTest : public ExchangeTest {
 protected:
  SglangExchangeTest() { spec.split = true; }
  void pair(std::vector<std::string> prefill, std::vector<std::string> decode) {
    for (auto& p : prefill) owner.add(p, Stage::kPrefill, "sglang");
    for (auto& d : decode) owner.add(d, Stage::kDecode, "sglang");
  }
};

TEST_F(SglangExchangeTest, BothWorkersGetOneBodyWithTheBootstrapServerAndRoom) {
  pair({"p1"}, {"d1"});
  upstream.script(owner.port("p1"), {Act::kAnswer}, R"({"choices":[]})");
  upstream.script(owner.port("d1"), {Act::kAnswer}, "data: t\n\n");
  run();
  ASSERT_EQ(upstream.calls.size(), 2u);
  EXPECT_EQ(upstream.calls[0].body, upstream.calls[1].body);
  const auto body = boost::json::parse(upstream.calls[0].body).as_object();
  EXPECT_EQ(body.at("bootstrap_host").as_string(), "10.0.0.1");
  EXPECT_EQ(body.at("bootstrap_port").as_int64(), 9000);
  EXPECT_EQ(body.at("bootstrap_room").as_int64(), 4242);
  EXPECT_EQ(out.body, "data: t\n\n");
  // The decode worker's first byte ends the prefill phase on both.
  EXPECT_EQ(events(),
            (Events{"pick prefill 0 -> p1", "pick decode 0 -> d1", "prefill_done d1",
                    "prefill_done p1", "slot_free p1", "slot_free d1", "release p1", "release d1",
                    "call_ended prefill p1 success 200", "call_ended decode d1 success 200",
                    "ended d1 200 relayed completed"}));
}

TEST_F(SglangExchangeTest, ThePrefillCallGetsTheRequestsDeadline) {
  spec.deadline = Nanos(7s);
  pair({"p1"}, {"d1"});
  upstream.script(owner.port("p1"), {Act::kAnswer}, R"({"choices":[]})");
  upstream.script(owner.port("d1"), {Act::kAnswer}, "data: t\n\n");
  run();
  ASSERT_EQ(upstream.calls.size(), 2u);
  size_t fetched = 0;
  for (const Call& call : upstream.calls) {
    if (call.relayed) continue;
    ++fetched;
    EXPECT_EQ(call.deadline, Nanos(7s));
  }
  EXPECT_EQ(fetched, 1u);
  EXPECT_EQ(out.body, "data: t\n\n");
}

TEST_F(SglangExchangeTest, APrefillFailureBeforeTheFirstByteStopsTheDecodeAndRetriesThePair) {
  pair({"p1", "p2"}, {"d1"});
  upstream.script(owner.port("p1"), {Act::kRefuse});
  upstream.script(owner.port("p2"), {Act::kAnswer}, R"({"choices":[]})");
  upstream.script(owner.port("d1"), {Act::kHang, Act::kAnswer});
  run();
  ASSERT_EQ(upstream.calls.size(), 4u);
  EXPECT_TRUE(upstream.calls[0].cancelled);  // d1's first call, waiting for KV that never came
  EXPECT_EQ(events()[6], "call_ended prefill p1 failure 502");
  EXPECT_EQ(events()[7], "retrying prefill p1: connection refused");
  EXPECT_EQ(events()[8], "pick prefill 1 -> p2");
  EXPECT_EQ(events()[9], "pick decode 1 -> d1");  // the decode worker did nothing wrong
  EXPECT_EQ(out.body, "the answer");
  EXPECT_EQ(events().back(), "ended d1 200 relayed completed");
}

TEST_F(SglangExchangeTest, ADecodeFailureStopsThePrefillAndRetriesWithAnotherDecode) {
  pair({"p1"}, {"d1", "d2"});
  upstream.script(owner.port("p1"), {Act::kHang, Act::kAnswer}, R"({"choices":[]})");
  upstream.script(owner.port("d1"), {Act::kRefuse});
  upstream.script(owner.port("d2"), {Act::kAnswer});
  run();
  ASSERT_EQ(upstream.calls.size(), 4u);
  EXPECT_TRUE(upstream.calls[1].cancelled);  // p1's first call: no one would join its room
  EXPECT_EQ(events()[6], "call_ended decode d1 failure 502");
  EXPECT_EQ(events()[8], "pick prefill 1 -> p1");
  EXPECT_EQ(events()[9], "pick decode 1 -> d2");
  EXPECT_EQ(out.body, "the answer");
}

TEST_F(SglangExchangeTest, APrefillFailureAfterTheClientHasBytesOnlyCounts) {
  pair({"p1", "p2"}, {"d1"});
  upstream.script(owner.port("p1"), {Act::kSseError});
  upstream.script(owner.port("d1"), {Act::kAnswer});
  run();
  EXPECT_EQ(upstream.calls.size(), 2u);  // no second pair: a retry would start a second answer
  EXPECT_EQ(out.body, "the answer");
  EXPECT_EQ(Events(events().end() - 3, events().end()),
            (Events{"call_ended prefill p1 failure 200", "call_ended decode d1 success 200",
                    "ended d1 200 relayed completed"}));
}

TEST_F(SglangExchangeTest, APrefill4xxIsTheClientsAnswer) {
  pair({"p1"}, {"d1"});
  upstream.script(owner.port("p1"), {Act::k400});
  upstream.script(owner.port("d1"), {Act::kHang});
  const http::Response r = run();
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(upstream.calls[0].cancelled);  // the decode call was stopped
  EXPECT_FALSE(out.started());
  EXPECT_EQ(Events(events().end() - 2, events().end()),
            (Events{"call_ended prefill p1 success 400", "ended p1 400"}));
}

TEST_F(SglangExchangeTest, AnSseErrorFromThePrefillIsAFailure) {
  pair({"p1", "p2"}, {"d1"});
  upstream.script(owner.port("p1"), {Act::kSseError});
  upstream.script(owner.port("p2"), {Act::kAnswer}, R"({"choices":[]})");
  upstream.script(owner.port("d1"), {Act::kHang, Act::kAnswer});
  run();
  EXPECT_NE(std::find(events().begin(), events().end(), "call_ended prefill p1 failure 200"),
            events().end());
  EXPECT_EQ(out.body, "the answer");
}

TEST_F(SglangExchangeTest, NoDecodeWorkerOnTheFirstAttemptIsTheOwnersAnswer) {
  pair({"p1"}, {});
  const http::Response r = run();
  EXPECT_EQ(r.status, 503);
  EXPECT_TRUE(upstream.calls.empty());
  EXPECT_EQ(events(), (Events{"pick prefill 0 -> p1", "pick decode 0 -> none", "release p1"}));
}

TEST_F(SglangExchangeTest, AClientThatLeavesStopsThePrefillCall) {
  pair({"p1"}, {"d1"});
  upstream.script(owner.port("p1"), {Act::kHang});
  upstream.script(owner.port("d1"), {Act::kClientLeaves});
  run();
  EXPECT_EQ(upstream.calls.size(), 2u);
  EXPECT_TRUE(upstream.calls[1].cancelled);
  EXPECT_EQ(Events(events().end() - 3, events().end()),
            (Events{"call_ended prefill p1 unjudged 499", "call_ended decode d1 unjudged 499",
                    "ended d1 499 relayed client_gone"}));
}

}  // namespace
}  // namespace infera::proxy
