// libFuzzer target for the NATS frame parser (a server's bytes are untrusted, and so are the
// header blocks and INFO documents inside them): the input is fed whole and split at a
// fuzzer-chosen point; both must yield the same frames or the same failure, no frame may exceed
// the limits, and each header block and INFO JSON must parse without crashing. Byte 0 chooses
// the split point; the rest is the stream.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "infera/nats/protocol.h"

namespace {

using infera::nats::Frame;
using infera::nats::Parser;

struct Collected {
  std::vector<std::string> frames;
  bool failed = false;
};

Collected parse(const std::vector<std::string_view>& parts) {
  Parser parser(infera::nats::ParserLimits{.max_control_line = 256, .max_payload = 4096});
  Collected out;
  Frame f;
  for (std::string_view part : parts) {
    parser.feed(part);
    for (;;) {
      const Parser::Next n = parser.next(f);
      if (n == Parser::Next::kNeedMore) break;
      if (n == Parser::Next::kError) {
        out.failed = true;
        return out;
      }
      if (f.headers.size() + f.payload.size() > 4096) std::abort();
      if (!f.headers.empty()) (void)infera::nats::parse_headers(f.headers);
      if (f.kind == infera::nats::FrameKind::kInfo) (void)infera::nats::parse_info(f.payload);
      std::string flat;
      flat += std::to_string(static_cast<int>(f.kind));
      flat += '\0';
      flat += f.subject;
      flat += '\0';
      flat += std::to_string(f.sid);
      flat += '\0';
      flat += f.reply;
      flat += '\0';
      flat += f.headers;
      flat += '\0';
      flat += f.payload;
      out.frames.push_back(std::move(flat));
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = input.empty() ? 0 : data[0] % (input.size() + 1);
  const Collected whole = parse({input});
  const Collected split = parse({input.substr(0, cut), input.substr(cut)});
  if (whole.frames != split.frames) std::abort();
  if (whole.failed != split.failed) std::abort();
  (void)infera::nats::valid_subject(input, true);
  (void)infera::nats::subject_token(input);
  return 0;
}
