// A NATS client (core NATS: publish, subscribe, request/reply), ours: no C or C++ client is
// packaged in Debian 12 (docs/decisions/0009-own-nats-client.md). One Client is one connection
// of the process to the bus (docs/contracts.md section 11), shared by everything that speaks
// NATS in it.
//
// Threading: the client runs its own thread with its own io_context (the connection, its reads,
// writes, pings and reconnects); every public call is safe from any thread and never blocks on
// the network, except connect() and flush(), which wait with a deadline and must not be called
// from a handler. Handlers run on the client's thread, one at a time, in the order the server
// delivered the messages; a handler must not block (hand work to your own thread or executor;
// a consumer that cannot keep up drops and counts, it never stalls the connection).
//
// Outbound bytes go to one buffer that the client's writer drains; publish() only appends, so
// the request path never waits for the socket. The buffer is bounded (max_pending_bytes): when
// the server is away or slower than the publishers, publish() fails with kResourceExhausted and
// the message is counted as dropped, never queued without bound. While disconnected, publishes
// are buffered up to that bound and sent after the reconnect.
//
// Reconnects: a connection that fails (read or write error, the server's -ERR before a close,
// two pings unanswered) is dropped, and the client reconnects with backoff (reconnect_min
// doubling to reconnect_max, with jitter) over the configured servers and those the server
// advertised, then re-subscribes every live subscription before anything else is sent. The
// state callback tells users about each drop and each reconnect (a KV-event consumer asks for
// a replay then, since messages published in between are lost: core NATS is at-most-once).
//
// Request/reply: make_inbox() names a reply subject under this connection's inbox prefix
// (`_INBOX.<random>.<n>`), all served by one wildcard subscription; add_inbox() routes messages
// on it to a handler. A request to a subject nobody subscribes gets a 503 "no responders" status
// message on the inbox at once (Message::status).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "infera/common/status.h"
#include "infera/nats/url.h"

namespace infera::nats {

struct ClientOptions {
  std::vector<ServerUrl> servers;  // at least one
  std::string name = "infera";     // CONNECT's name (shown by the server's monitoring)
  std::chrono::milliseconds connect_timeout{2'000};  // TCP + TLS + INFO/CONNECT/PONG
  std::chrono::milliseconds ping_interval{5'000};
  int max_pings_out = 2;  // unanswered pings that make the connection stale
  std::chrono::milliseconds reconnect_min{50};
  std::chrono::milliseconds reconnect_max{2'000};
  size_t max_pending_bytes = size_t{32} << 20;  // outbound buffer (publishes not yet written)
  std::string tls_ca_file;  // CA for tls:// servers or servers that require TLS; empty: system
  bool tls_verify = true;
};

// One delivered message; the views live until the handler returns.
struct Message {
  std::string_view subject;
  std::string_view reply;
  std::string_view headers;  // the raw header block, empty when none
  std::string_view payload;
  int status = 0;  // the header block's status: 503 no responders, 408 request timeout
};
using Handler = std::function<void(const Message&)>;

struct ClientStats {
  uint64_t connects = 0;       // successful connections (the first and every reconnect)
  uint64_t disconnects = 0;
  uint64_t msgs_in = 0, bytes_in = 0;
  uint64_t msgs_out = 0, bytes_out = 0;
  uint64_t dropped = 0;        // publishes refused: the outbound buffer was full
  uint64_t server_errors = 0;  // -ERR lines
  uint64_t protocol_errors = 0;  // malformed frames from the server (the connection is dropped)
};

class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();  // close()
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Starts the client's thread and waits (at most connect_timeout per server, tried in turn)
  // for the first connection; an error names the servers tried and why. After a failure the
  // client is closed. Once only. Reconnects after that happen in the background.
  Status connect();
  // Closes the connection and joins the thread; handlers are not called after it returns.
  // Pending outbound bytes are written first when the connection is up (bounded by 200 ms).
  void close();

  // Appends a message for `subject` (with `reply` and a header block when given). kInvalidArgument
  // for a bad subject or a message above the server's max_payload, kResourceExhausted when the
  // outbound buffer is full (counted), kFailedPrecondition after close().
  Status publish(std::string_view subject, std::string_view payload, std::string_view reply = {},
                 std::string_view headers = {});
  // Subscribes (`queue`: a queue group, or empty); the subscription survives reconnects. The
  // result is its id for unsubscribe().
  Result<uint64_t> subscribe(std::string subject, Handler handler, std::string queue = {});
  // Stops the subscription; a handler of it running now has returned when this does (unless
  // called from a handler).
  void unsubscribe(uint64_t sid);

  // A fresh reply subject under this connection's inbox; route its messages with add_inbox().
  std::string make_inbox();
  void add_inbox(const std::string& inbox, Handler handler);
  void remove_inbox(const std::string& inbox);

  // Waits until the server has processed everything published before the call (a PING/PONG
  // round trip). kUnavailable when not connected, kDeadlineExceeded after `timeout`.
  Status flush(std::chrono::milliseconds timeout = std::chrono::milliseconds(2'000));

  // Called on the client's thread after each connection is up (true: subscriptions are
  // re-sent already) and after each drop (false). Set before connect().
  void set_state_callback(std::function<void(bool connected)> callback);

  bool connected() const;
  // The server's max_payload (1 MiB until the first INFO).
  size_t max_payload() const;
  ClientStats stats() const;
  // The server connected to now (display form), or "".
  std::string server() const;
  // The client's thread's executor: work that reacts to messages can run there, next to the
  // handlers, without a hop to another thread. Like a handler, it must never block.
  boost::asio::any_io_executor executor() const;
  // CPU time of the client's thread (reads, parsing, handlers, writes).
  std::chrono::nanoseconds thread_cpu_time() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace infera::nats
