#include "infera/proxy/nats_upstream.h"

#include <deque>
#include <mutex>

#include "infera/http/net.h"
#include "infera/nats/client.h"
#include "infera/nats/request_wire.h"
#include "infera/nats/subjects.h"

namespace infera::proxy {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

// Frames between the NATS thread and the call's executor. The NATS thread may hold the last
// reference after the call (and even its io_context) is gone, so the Inbox owns no I/O object:
// it points at the call's timer, and the call unhooks it before the timer dies.
struct Inbox {
  explicit Inbox(net::any_io_executor ex) : executor(ex) {}
  net::any_io_executor executor;  // used only while `wake` is set
  std::mutex mu;
  net::steady_timer* wake = nullptr;  // guarded by mu; the call's, cancelled on `executor` only
  struct Frame {
    int status = 0;
    std::string headers, payload;
  };
  std::deque<Frame> frames;  // guarded by mu
  bool waiting = false;      // guarded by mu
  bool overflow = false;     // guarded by mu
  size_t limit = 0;
};

// One call over NATS: the request published, the relay's frames read in order.
class NatsCall final : public OpenedResponse {
 public:
  NatsCall(nats::Client& bus, const NatsUpstreamOptions& options, net::any_io_executor ex)
      : bus_(bus), options_(options), wake_(ex), inbox_(std::make_shared<Inbox>(ex)) {
    inbox_->limit = options.window + 16;  // the relay's window, plus head and end
    inbox_->wake = &wake_;
  }
  ~NatsCall() override {
    close();
    std::lock_guard lock(inbox_->mu);
    inbox_->wake = nullptr;  // a frame still in flight on the NATS thread wakes no one now
  }

  // Publishes `request` and waits for the relay's head. Errors are before the first byte.
  net::awaitable<Status> open(const http::Request& request, const std::string& worker, SteadyTime deadline);

  int status() const override { return status_; }
  std::string_view header(std::string_view name) const override { return http::find_header(headers_, name); }
  net::awaitable<Result<std::string_view>> read(SteadyTime deadline) override;
  bool done() const override { return done_; }
  void close() override {
    if (closed_) return;
    closed_ = true;
    if (!done_ && !control_.empty()) (void)bus_.publish(control_, "", "", nats::control_cancel());
    if (!subject_.empty()) bus_.remove_inbox(subject_);
  }

 private:
  // The next frame, waiting at most until `until` (then kDeadlineExceeded with `silence`).
  net::awaitable<Result<Inbox::Frame>> next_frame(SteadyTime until, const char* silence);

  nats::Client& bus_;
  const NatsUpstreamOptions& options_;
  net::steady_timer wake_;  // next_frame's wait; cancelled when a frame arrives
  std::shared_ptr<Inbox> inbox_;
  std::string subject_;  // our reply inbox
  std::string control_;  // the relay's
  std::string worker_;
  int status_ = 0;
  http::Headers headers_;
  std::string piece_;
  std::string head_body_;     // body bytes that came with the head, served by the first read
  bool head_pending_ = false;  // head_body_ (or the head's Infera-Last) not yet served
  bool head_last_ = false;
  uint64_t next_seq_ = 0;
  uint64_t acked_ = 0;  // the last data frame acknowledged to the relay
  bool done_ = false;
  bool closed_ = false;
};

net::awaitable<Result<Inbox::Frame>> NatsCall::next_frame(SteadyTime until, const char* silence) {
  Inbox& in = *inbox_;
  for (;;) {
    {
      std::lock_guard lock(in.mu);
      if (in.overflow) co_return data_loss("the relay of " + worker_ + " sent beyond its window");
      if (!in.frames.empty()) {
        Inbox::Frame f = std::move(in.frames.front());
        in.frames.pop_front();
        co_return f;
      }
      in.waiting = true;
    }
    if (std::chrono::steady_clock::now() >= until) {
      co_return deadline_exceeded(std::string(silence) + " from " + worker_ + " over NATS");
    }
    wake_.expires_at(until);
    co_await wake_.async_wait(use_nothrow);
    {
      std::lock_guard lock(in.mu);
      in.waiting = false;
    }
    auto cs = co_await net::this_coro::cancellation_state;
    if (cs.cancelled() != net::cancellation_type::none) co_return cancelled("the call was cancelled");
  }
}

net::awaitable<Status> NatsCall::open(const http::Request& request, const std::string& worker,
                                      SteadyTime deadline) {
  worker_ = worker;
  // Requests are not buffered across an outage: the client gets its answer (another worker, or
  // a clean 503) now rather than after the first-byte timeout.
  if (!bus_.connected()) co_return unavailable("NATS is not connected (" + worker + ")");
  subject_ = bus_.make_inbox();
  std::shared_ptr<Inbox> in = inbox_;
  bus_.add_inbox(subject_, [in](const nats::Message& m) {
    std::lock_guard lock(in->mu);
    if (in->frames.size() >= in->limit) {
      in->overflow = true;
    } else {
      in->frames.push_back({m.status, std::string(m.headers), std::string(m.payload)});
    }
    if (in->waiting && in->wake != nullptr) {
      in->waiting = false;
      net::post(in->executor, [in] {
        std::lock_guard held(in->mu);
        if (in->wake != nullptr) in->wake->cancel();
      });
    }
  });
  auto parts = nats::encode_request(request, subject_, options_.window, bus_.max_payload());
  if (!parts.ok()) co_return parts.status();
  const std::string subject = nats::requests_subject(options_.ns, worker);
  for (size_t i = 0; i < parts->size(); ++i) {
    const nats::RequestPart& p = (*parts)[i];
    INFERA_CO_RETURN_IF_ERROR(bus_.publish(subject, p.payload, i == 0 ? subject_ : "", p.headers));
  }
  const SteadyTime until = std::min(deadline, std::chrono::steady_clock::now() + options_.first_byte_timeout);
  auto f = co_await next_frame(until, "no answer");
  if (!f.ok()) co_return f.status();
  if (f->status == 503) co_return unavailable("no relay serves " + worker + " on NATS (" + subject + ")");
  auto frame = nats::decode_reply(f->headers);
  if (!frame.ok()) co_return data_loss("relay of " + worker + ": " + frame.status().message());
  if (frame->kind == nats::ReplyKind::kError) co_return unavailable("relay of " + worker + ": " + frame->error);
  if (frame->kind != nats::ReplyKind::kHead || frame->seq != 0) {
    co_return data_loss("relay of " + worker + " did not start with its head");
  }
  status_ = frame->status;
  headers_ = std::move(frame->headers);
  control_ = std::move(frame->control);
  head_body_ = std::move(f->payload);
  head_last_ = frame->last;
  head_pending_ = !head_body_.empty() || head_last_;
  next_seq_ = 1;
  co_return ok_status();
}

net::awaitable<Result<std::string_view>> NatsCall::read(SteadyTime deadline) {
  if (done_) co_return std::string_view();
  if (head_pending_) {
    head_pending_ = false;
    piece_ = std::move(head_body_);
    done_ = head_last_;
    if (!piece_.empty() || done_) co_return std::string_view(piece_);
  }
  const SteadyTime until = std::min(deadline, std::chrono::steady_clock::now() + options_.read_timeout);
  auto f = co_await next_frame(until, "silence");
  if (!f.ok()) co_return f.status();
  if (f->status != 0) co_return unavailable("NATS status " + std::to_string(f->status) + " inside an answer");
  auto frame = nats::decode_reply(f->headers);
  if (!frame.ok()) co_return data_loss("relay of " + worker_ + ": " + frame.status().message());
  if (frame->seq != next_seq_) {
    co_return data_loss("relay of " + worker_ + ": frame " + std::to_string(frame->seq) +
                        " where " + std::to_string(next_seq_) + " was due (lost or duplicated)");
  }
  ++next_seq_;
  switch (frame->kind) {
    case nats::ReplyKind::kData:
      piece_ = std::move(f->payload);
      if (frame->last) {
        done_ = true;  // nothing follows: no credit needed
      } else if (frame->seq - acked_ >= std::max<uint64_t>(1, options_.window / 2)) {
        // Credit in batches: the relay may run `window` frames ahead, so an ack at half of it
        // keeps it sending, at one control message per window/2 frames instead of one each.
        (void)bus_.publish(control_, "", "", nats::control_ack(frame->seq));
        acked_ = frame->seq;
      }
      if (piece_.empty() && !done_) co_return co_await read(deadline);  // an empty frame is no end
      co_return std::string_view(piece_);
    case nats::ReplyKind::kEnd:
      done_ = true;
      co_return std::string_view();
    case nats::ReplyKind::kError:
      done_ = true;  // the relay ended the call itself
      co_return unavailable("relay of " + worker_ + ": " + frame->error);
    case nats::ReplyKind::kHead:
      break;
  }
  co_return data_loss("relay of " + worker_ + " sent a second head");
}

}  // namespace

net::awaitable<ForwardOutcome> NatsUpstream::relay(const http::Endpoint& to, http::Request request,
                                                   Downstream& out, ForwardOptions options) {
  const SteadyTime deadline = steady_deadline(options.deadline, clock_);
  NatsCall call(bus_, options_, co_await net::this_coro::executor);
  Status opened = co_await call.open(request, to.key(), deadline);
  if (!opened.ok()) co_return open_failed(std::move(opened), out, options, clock_);
  co_return co_await relay_response(call, out, options, clock_, deadline);
}

net::awaitable<http::ClientResult<http::Response>> NatsUpstream::fetch(const http::Endpoint& to,
                                                                       http::Request request,
                                                                       Nanos deadline) {
  const SteadyTime until = steady_deadline(deadline, clock_);
  NatsCall call(bus_, options_, co_await net::this_coro::executor);
  Status opened = co_await call.open(request, to.key(), until);
  if (!opened.ok()) co_return http::ClientError{std::move(opened), true};
  http::Response resp;
  resp.status = call.status();
  if (std::string_view t = call.header("Content-Type"); !t.empty()) resp.headers.push_back({"Content-Type", std::string(t)});
  for (;;) {
    auto piece = co_await call.read(until);
    if (!piece.ok()) co_return http::ClientError{piece.status(), false};
    if (piece->empty()) break;
    if (piece->size() > options_.max_body_bytes - resp.body.size()) {
      co_return http::ClientError{resource_exhausted("answer above " + std::to_string(options_.max_body_bytes) + " bytes"), false};
    }
    resp.body.append(*piece);
  }
  co_return resp;
}

}  // namespace infera::proxy
