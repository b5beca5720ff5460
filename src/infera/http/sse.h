// Server-sent events: the one framing and the one parser of the project (gateway relay, engine,
// bench). Framing writes `data: <payload>\n\n` events and the OpenAI terminator `data: [DONE]`;
// SseParser turns bytes split anywhere into events (WHATWG HTML "event stream interpretation").
// Socket-independent. An SseParser is owned by one reader and is not thread-safe.
//
//   SseParser parser;
//   parser.feed(bytes_from_upstream);           // any split: mid-line, mid-"\r\n", ...
//   SseEvent ev;
//   while (parser.next(ev)) { if (ev.done()) ...; use(ev.data); }
//   if (!parser.status().ok()) ...;             // an event grew beyond max_event_bytes
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "infera/common/status.h"

namespace infera::http {

// The OpenAI end-of-stream event.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
inline constexpr std::string_view kSseContentType = "text/event-stream";

// Appends one event carrying `payload` (normally a JSON document): "data: <payload>\n\n".
// A payload with line breaks ("\n", "\r\n" or "\r") is written as one data line per line,
// which every conforming parser joins back with "\n".
void append_sse_event(std::string& out, std::string_view payload);
std::string sse_event(std::string_view payload);

// One dispatched event. The views stay valid until the next call to next() or reset() (feeding
// more bytes does not move them).
struct SseEvent {
  std::string_view event;  // the `event:` field, "" when absent (the default "message")
  std::string_view data;   // data lines joined with "\n"
  std::string_view id;     // the last `id:` seen on the stream, "" when none
  bool done() const { return data == "[DONE]"; }
};

class SseParser {
 public:
  struct Options {
    // Bound on one event (its data plus the line being read): untrusted input cannot grow the
    // parser without limit. Beyond it the parser stops with kResourceExhausted.
    size_t max_event_bytes = size_t{1} << 20;
  };

  SseParser() : SseParser(Options{}) {}
  explicit SseParser(Options options) : options_(options) {}

  // Adds bytes from the stream; no parsing happens until next().
  void feed(std::string_view bytes);
  // Parses buffered bytes up to the next complete event; false when more bytes are needed or
  // the parser failed (see status()).
  bool next(SseEvent& out);
  // Not ok once an event exceeded max_event_bytes; the parser then yields nothing more.
  const Status& status() const { return status_; }
  // True when no partial line or undispatched field is buffered: a stream that ends while this
  // is false was cut in the middle of an event.
  bool idle() const;
  // Forgets everything, as for a new stream.
  void reset();

 private:
  // Applies one complete line; returns true when it dispatched an event into `out`.
  bool process_line(std::string_view line, SseEvent& out);

  Options options_;
  Status status_;
  std::string buffer_;  // bytes fed and not yet consumed, from pos_
  size_t pos_ = 0;
  bool bom_checked_ = false;
  bool skip_lf_ = false;   // the last line ended with "\r" at the end of a feed: a "\n" may follow
  bool has_data_ = false;  // a data field was seen for the pending event
  std::string data_;       // pending event's data, each line followed by "\n"
  std::string event_;      // pending event's type
  std::string last_id_;    // the stream's last event id (persists across events)
  std::string out_data_;   // the dispatched event's data (views in SseEvent point here)
  std::string out_event_;
  std::string out_id_;
};

}  // namespace infera::http
