// HTTP/1.1 client for upstreams (engines, etcd's JSON gateway): a keep-alive connection pool per
// host:port, deadlines on connect, write and every read, whole-response requests and streamed
// responses read chunk by chunk. Failures say whether any byte of the response had arrived:
// before it, the request can be retried on another worker; after it, the caller has seen part of
// the answer. A Client is shared by any number of coroutines on the threads of one EventLoop
// (the pool is locked) and is destroyed before that loop; a ClientStream belongs to the
// coroutine that opened it. Connections are opened on the calling coroutine's executor.
//
// The streaming read loop of a proxy:
//   auto opened = co_await client.stream(endpoint, std::move(request));
//   if (!opened.ok()) {
//     if (opened.error().before_first_byte) { /* try the next worker */ }
//     co_return error_response(opened.error().status, {.origin = ErrorOrigin::kUpstream});
//   }
//   ClientStream& up = opened.value();
//   if (!(co_await out.write_head(up.status(), up.header("Content-Type"))).ok()) co_return {};
//   for (;;) {
//     Result<std::string_view> piece = co_await up.read();  // waits <= read_timeout
//     if (!piece.ok()) {                                     // after the first byte: too late
//       std::string event = sse_error_event(piece.status(), {.origin = ErrorOrigin::kUpstream});
//       co_await out.write(event);                           // to retry; end the stream cleanly
//       break;
//     }
//     if (piece->empty()) break;                             // body complete
//     if (!(co_await out.write(*piece)).ok()) break;         // downstream gone: `up` closes
//   }
//   co_return {};
// Cancellation: close() from the owning coroutine, or Asio cancellation of a pending operation
// (the server cancels a handler whose client left); either way the upstream connection is
// closed, so the engine sees the request go away. A call made after its coroutine was cancelled
// fails at once with kCancelled.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "infera/common/status.h"
#include "infera/http/awaitable.h"
#include "infera/http/message.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace infera::http {

// Where to send a request: a host name or IP literal and a port, over TLS or not.
struct Endpoint {
  std::string host;
  uint16_t port = 0;
  // https: the connection is TLS, the server's certificate verified against
  // ClientOptions::tls_context (SNI and the host name or IP address checked, tls.h).
  bool tls = false;
  std::string key() const;  // "host:port" ("[::1]:port" for IPv6), the pool key with `tls`
};

// "http://host:port[/...]", "https://host:port[/...]" (tls), "host:port" or "[v6]:port".
Result<Endpoint> parse_endpoint(std::string_view text);

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{5'000};
  std::chrono::milliseconds write_timeout{30'000};  // sending the whole request
  // From the request sent to the response header complete (the time to first byte). A
  // non-streamed LLM response sends its header after the whole generation: keep it generous.
  std::chrono::milliseconds response_timeout{300'000};
  // Each read of the body: for a stream, the longest silence between two pieces.
  std::chrono::milliseconds read_timeout{60'000};
  size_t max_header_bytes = size_t{64} * 1024;
  size_t max_body_bytes = size_t{64} * 1024 * 1024;  // whole-response requests only
  size_t max_idle_per_endpoint = 64;
  // A pooled connection idle for longer is closed instead of reused. Below the upstream's own
  // keep-alive timeout (uvicorn, under vLLM and SGLang, closes after 5 s).
  std::chrono::milliseconds idle_timeout{4'000};
  // https endpoints: a client context (tls.h, make_tls_client_context) that verifies the
  // servers. Null: one that verifies against the system's CA store, made at the first https
  // request. The TLS handshake is part of the connect, under connect_timeout.
  std::shared_ptr<boost::asio::ssl::context> tls_context;
};

// A failed exchange (accessing value() of a failed result, or error() of a good one, is a bug).
// kUnavailable (refused, reset, closed), kDeadlineExceeded (a deadline), kDataLoss (malformed or
// truncated response), kResourceExhausted (response beyond a limit), kCancelled (closed or
// cancelled by the caller), kInvalidArgument (host cannot be resolved). A failed TLS handshake is
// kUnavailable before the first byte, its message "... TLS: certificate verify failed (REASON)"
// when the server's certificate was refused.
struct ClientError {
  Status status;
  // No byte of the response had arrived: the worker produced nothing visible, so sending the
  // request elsewhere is safe for the client.
  bool before_first_byte = true;
};

template <typename T>
class [[nodiscard]] ClientResult {
 public:
  // NOLINTNEXTLINE(google-explicit-constructor)
  ClientResult(T value) : data_(std::move(value)) {}
  // NOLINTNEXTLINE(google-explicit-constructor)
  ClientResult(ClientError error) : data_(std::move(error)) {}
  bool ok() const { return data_.index() == 0; }
  T& value() {
    INFERA_CHECK(ok());
    return std::get<0>(data_);
  }
  const T& value() const {
    INFERA_CHECK(ok());
    return std::get<0>(data_);
  }
  const ClientError& error() const {
    INFERA_CHECK(!ok());
    return std::get<1>(data_);
  }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : error().status;
  }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, ClientError> data_;
};

// A response being received. Move-only. Destroying it before the body is complete closes the
// connection (it cannot be reused); a completely read body returns the connection to the pool.
class ClientStream {
 public:
  struct State;
  explicit ClientStream(std::unique_ptr<State> state);
  ClientStream(ClientStream&&) noexcept;
  ClientStream& operator=(ClientStream&&) noexcept;
  ~ClientStream();

  int status() const;
  const Headers& headers() const;
  std::string_view header(std::string_view name) const { return find_header(headers(), name); }

  // The next piece of the body as it arrives (chunked framing removed), or an empty view once
  // the body is complete. The view is valid until the next call. Each call waits at most
  // read_timeout, and never past `deadline` (the caller's own, e.g. the whole request's).
  // Failures here come after the first byte.
  net::awaitable<Result<std::string_view>> read(
      std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  // The body has been read completely.
  bool done() const;
  // The next read() answers without waiting for the socket: body bytes already arrived (with
  // the head or the previous piece), or the body is complete. A relay uses it to send the head
  // together with what followed it.
  bool buffered() const;
  // Cancels the exchange: closes the connection, so the upstream sees the request go away.
  // Idempotent; from the owning coroutine only (not while a read() of it is pending).
  void close();

 private:
  std::unique_ptr<State> state_;
};

struct ClientStats {
  uint64_t connects = 0;       // new connections opened
  uint64_t reuses = 0;         // requests sent on a pooled connection
  uint64_t stale_retries = 0;  // a pooled connection found closed by the upstream and replaced
  uint64_t idle = 0;           // connections in the pool now
};

class Client {
 public:
  explicit Client(ClientOptions options = {});
  ~Client();  // closes pooled connections; streams still open keep theirs until they end
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends `request` and reads the whole response (at most max_body_bytes of body). A Host
  // header is added when missing. Runs on the calling coroutine's executor. Each wait (connect,
  // send, header, each read of the body) is bounded by its option and never runs past
  // `deadline`.
  net::awaitable<ClientResult<Response>> request(
      const Endpoint& to, Request request,
      std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  // Sends `request` and reads the response header; the body is read from the stream. Each wait
  // (connect, send, header) is bounded by its option and never runs past `deadline`.
  net::awaitable<ClientResult<ClientStream>> stream(
      const Endpoint& to, Request request,
      std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

  ClientStats stats() const;
  const ClientOptions& options() const;

  struct Pool;

 private:
  std::shared_ptr<Pool> pool_;
};

}  // namespace infera::http
