// libFuzzer target for SseParser (bytes from engines are untrusted): the input is fed whole and
// split at two fuzzer-chosen points; both must yield the same events, the parser must respect
// its size bound, and framing a payload must parse back to the same payload. Input: bytes 0-1
// choose the split points, the rest is the stream.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "infera/http/sse.h"

namespace {

using infera::http::SseEvent;
using infera::http::SseParser;

constexpr size_t kMaxEventBytes = 4096;

struct Collected {
  std::vector<std::string> events;  // event + '\0' + data + '\0' + id
  bool failed = false;
};

Collected parse(const std::vector<std::string_view>& parts) {
  SseParser parser(SseParser::Options{.max_event_bytes = kMaxEventBytes});
  Collected out;
  SseEvent ev;
  for (std::string_view part : parts) {
    parser.feed(part);
    while (parser.next(ev)) {
      if (ev.data.size() > kMaxEventBytes) std::abort();
      std::string e(ev.event);
      e.push_back('\0');
      e.append(ev.data);
      e.push_back('\0');
      e.append(ev.id);
      out.events.push_back(std::move(e));
    }
  }
  out.failed = !parser.status().ok();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 2, size - 2);
  const size_t a = stream.empty() ? 0 : data[0] % (stream.size() + 1);
  const size_t b = stream.empty() ? 0 : a + data[1] % (stream.size() - a + 1);
  const Collected whole = parse({stream});
  const Collected split = parse({stream.substr(0, a), stream.substr(a, b - a), stream.substr(b)});
  if (!whole.failed && !split.failed && whole.events != split.events) std::abort();

  // Framing round trip: any payload without line breaks comes back byte for byte.
  std::string payload(stream.substr(0, 512));
  for (char& c : payload) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  SseParser parser;
  parser.feed(infera::http::sse_event(payload));
  SseEvent ev;
  if (!parser.next(ev) || ev.data != payload) std::abort();
  return 0;
}
