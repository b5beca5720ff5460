// The NATS client protocol (https://docs.nats.io/reference/reference-protocols/nats-protocol),
// as bytes: an incremental parser of what a server sends (INFO, MSG, HMSG, PING, PONG, +OK,
// -ERR) and writers of what a client sends (CONNECT, PUB, HPUB, SUB, UNSUB, PING, PONG). No
// sockets here: the client (client.h) feeds the parser what it reads, and writes what the
// writers append. Every frame comes from untrusted bytes: the parser never throws, checks each
// declared length against its limits before buffering it, and reports the first malformed
// frame as an error after which the connection is to be dropped (the server does the same).
// Plain objects owned by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infera/common/status.h"

namespace infera::nats {

// The server's INFO (the fields a client acts on).
struct ServerInfo {
  std::string server_id;
  std::string version;
  uint64_t max_payload = 1024 * 1024;  // the server's limit on one message's bytes
  bool headers = false;                // HPUB/HMSG supported (2.2+)
  bool tls_required = false;
  bool tls_available = false;
  bool auth_required = false;
  std::vector<std::string> connect_urls;  // the cluster's other servers
};
// The JSON after "INFO ". Unknown fields are ignored; a malformed document is an error.
Result<ServerInfo> parse_info(std::string_view json);

enum class FrameKind : uint8_t { kInfo, kMsg, kPing, kPong, kOk, kErr };

// One parsed frame. The views point into the parser's buffer and stay valid until the next
// call of next() or feed().
struct Frame {
  FrameKind kind = FrameKind::kPing;
  std::string_view subject;  // MSG/HMSG
  uint64_t sid = 0;
  std::string_view reply;    // MSG/HMSG, may be empty
  std::string_view headers;  // HMSG: the header block ("NATS/1.0...\r\n\r\n"), else empty
  std::string_view payload;  // MSG/HMSG: the payload; INFO: the JSON; -ERR: the message
};

struct ParserLimits {
  size_t max_control_line = 4096;  // the server's own default for a protocol line
  size_t max_payload = 1024 * 1024 + 64 * 1024;  // headers + payload of one message
};

class Parser {
 public:
  explicit Parser(ParserLimits limits = {}) : limits_(limits) {}

  // Appends bytes read from the connection.
  void feed(std::string_view bytes);
  enum class Next : uint8_t { kFrame, kNeedMore, kError };
  // The next complete frame, if the buffer holds one. After kError the parser stays failed.
  Next next(Frame& out);
  const std::string& error() const { return error_; }
  // Forgets everything buffered (a new connection).
  void reset();
  void set_max_payload(size_t n) { limits_.max_payload = n; }
  size_t buffered() const { return buf_.size() - start_; }

 private:
  Next fail(std::string message);
  Next parse_msg(std::string_view line, size_t line_end, bool with_headers, Frame& out);

  ParserLimits limits_;
  std::string buf_;
  size_t start_ = 0;  // first unconsumed byte of buf_
  std::string error_;
};

// A message's header block (NATS/1.0 with an optional status, then MIME-style fields).
struct MessageHeaders {
  int status = 0;  // 0: none (a plain header block); 503: no responders; 408: timeout
  std::string description;
  std::vector<std::pair<std::string, std::string>> fields;
  std::string_view get(std::string_view name) const;  // case-insensitive; "" when absent
};
Result<MessageHeaders> parse_headers(std::string_view block);
// A header block of `fields` (names and values must be free of CR, LF and ':' in names).
std::string header_block(std::span<const std::pair<std::string, std::string>> fields);

// Subjects: tokens separated by '.', no whitespace, no empty token; with `wildcards`, a token
// may be '*' and the last one '>'.
bool valid_subject(std::string_view subject, bool wildcards = false);

// A protocol number (a sid, a size, a header's count): decimal digits only, at most 19 of them.
bool parse_u64(std::string_view s, uint64_t& out);

// A worker id as one subject token (docs/contracts.md section 11): '.', ':', '*', '>' and
// whitespace become '_'.
std::string subject_token(std::string_view worker_id);

// What CONNECT says about the client.
struct ConnectOptions {
  std::string name;
  std::string user, password, token;
  bool tls_required = false;
  bool headers = true;        // we send and accept HPUB/HMSG
  bool no_responders = true;  // a request with no subscriber gets a 503 status at once
};
std::string connect_line(const ConnectOptions& options);  // "CONNECT {...}\r\n"

// Writers (append to a connection's outbound buffer). Subjects and reply subjects are the
// caller's, checked with valid_subject() before they get here.
void append_pub(std::string& out, std::string_view subject, std::string_view reply,
                std::string_view payload);
void append_hpub(std::string& out, std::string_view subject, std::string_view reply,
                 std::string_view headers, std::string_view payload);
void append_sub(std::string& out, std::string_view subject, std::string_view queue, uint64_t sid);
void append_unsub(std::string& out, uint64_t sid);

}  // namespace infera::nats
