#include "infera/nats/request_wire.h"

#include "infera/nats/protocol.h"

namespace infera::nats {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;
constexpr std::string_view kHttpPrefix = "Http-";
constexpr size_t kMaxHeaders = 60;

bool clean(std::string_view s) { return s.find_first_of("\r\n") == std::string_view::npos; }

Status add_http_headers(Fields& f, const http::Headers& headers) {
  for (const http::Header& h : headers) {
    if (h.name.empty() || !clean(h.name) || !clean(h.value) || h.name.find(':') != std::string::npos) {
      return invalid_argument("a header the NATS transport cannot carry: " + h.name.substr(0, 64));
    }
    f.emplace_back(std::string(kHttpPrefix) + h.name, h.value);
  }
  return ok_status();
}

http::Headers http_headers_of(const MessageHeaders& h) {
  http::Headers out;
  for (const auto& [k, v] : h.fields) {
    if (k.size() > kHttpPrefix.size() && http::iequals(std::string_view(k).substr(0, kHttpPrefix.size()), kHttpPrefix)) {
      out.push_back({k.substr(kHttpPrefix.size()), v});
    }
  }
  return out;
}

Result<uint64_t> required_u64(const MessageHeaders& h, std::string_view name) {
  uint64_t v = 0;
  if (!parse_u64(h.get(name), v)) {
    return invalid_argument("NATS frame without a valid " + std::string(name));
  }
  return v;
}

}  // namespace

Result<std::vector<RequestPart>> encode_request(const http::Request& request, std::string_view inbox,
                                                uint32_t window, size_t max_payload) {
  if (max_payload <= kFrameOverhead + 1024) {
    return invalid_argument("NATS max_payload of " + std::to_string(max_payload) + " bytes is too small for requests");
  }
  if (request.method == http::Method::kOther || !clean(request.target)) {
    return invalid_argument("a method or target the NATS transport cannot carry");
  }
  Fields f = {{"Infera-Method", std::string(http::method_name(request.method))},
              {"Infera-Target", request.target},
              {"Infera-Window", std::to_string(window)},
              {"Infera-Body-Length", std::to_string(request.body.size())}};
  INFERA_RETURN_IF_ERROR(add_http_headers(f, request.headers));
  std::vector<RequestPart> parts;
  RequestPart first;
  first.headers = header_block(f);
  if (first.headers.size() + 1024 > max_payload) return invalid_argument("request headers above NATS max_payload");
  const std::string_view body = request.body;
  const size_t first_room = max_payload - first.headers.size();
  first.payload = body.substr(0, first_room);
  parts.push_back(std::move(first));
  const size_t room = max_payload - kFrameOverhead;
  uint32_t k = 1;
  for (size_t at = parts[0].payload.size(); at < body.size(); at += room, ++k) {
    RequestPart p;
    const Fields cf = {{"Infera-Continue", std::string(inbox)}, {"Infera-Part", std::to_string(k)}};
    p.headers = header_block(cf);
    p.payload = body.substr(at, room);
    parts.push_back(std::move(p));
  }
  return parts;
}

Result<RequestHead> decode_request(std::string_view header_block_text) {
  INFERA_ASSIGN_OR_RETURN(MessageHeaders h, parse_headers(header_block_text));
  RequestHead r;
  if (const std::string_view inbox = h.get("Infera-Continue"); !inbox.empty()) {
    r.continuation = true;
    r.inbox = std::string(inbox);
    INFERA_ASSIGN_OR_RETURN(uint64_t part, required_u64(h, "Infera-Part"));
    if (part == 0 || part > (1u << 20)) return invalid_argument("NATS request part out of range");
    r.part = static_cast<uint32_t>(part);
    return r;
  }
  const std::string_view method = h.get("Infera-Method");
  r.method = http::Method::kOther;
  for (http::Method m : {http::Method::kGet, http::Method::kHead, http::Method::kPost, http::Method::kPut,
                         http::Method::kDelete, http::Method::kPatch, http::Method::kOptions}) {
    if (method == http::method_name(m)) r.method = m;
  }
  r.target = std::string(h.get("Infera-Target"));
  if (r.method == http::Method::kOther || r.target.empty() || r.target.front() != '/') {
    return invalid_argument("NATS request without Infera-Method and an absolute Infera-Target");
  }
  INFERA_ASSIGN_OR_RETURN(uint64_t window, required_u64(h, "Infera-Window"));
  if (window == 0 || window > 4096) return invalid_argument("NATS request window out of range (1..4096)");
  r.window = static_cast<uint32_t>(window);
  INFERA_ASSIGN_OR_RETURN(r.body_length, required_u64(h, "Infera-Body-Length"));
  r.headers = http_headers_of(h);
  if (r.headers.size() > kMaxHeaders) return invalid_argument("NATS request with too many headers");
  return r;
}

std::string reply_head(uint64_t seq, int status, const http::Headers& headers, std::string_view control,
                       bool last) {
  Fields f = {{"Infera-Seq", std::to_string(seq)},
              {"Infera-Kind", "head"},
              {"Infera-Status", std::to_string(status)},
              {"Infera-Control", std::string(control)}};
  if (last) f.emplace_back("Infera-Last", "1");
  for (const http::Header& h : headers) {
    if (clean(h.name) && clean(h.value) && h.name.find(':') == std::string::npos && !h.name.empty()) {
      f.emplace_back(std::string(kHttpPrefix) + h.name, h.value);
    }
  }
  return header_block(f);
}

std::string reply_data(uint64_t seq, bool last) {
  return "NATS/1.0\r\nInfera-Seq: " + std::to_string(seq) + "\r\nInfera-Kind: data\r\n" +
         (last ? "Infera-Last: 1\r\n\r\n" : "\r\n");
}

std::string reply_end(uint64_t seq) {
  return "NATS/1.0\r\nInfera-Seq: " + std::to_string(seq) + "\r\nInfera-Kind: end\r\n\r\n";
}

std::string reply_error(uint64_t seq, std::string_view message) {
  std::string m(message.substr(0, 512));
  for (char& c : m) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  const Fields f = {{"Infera-Seq", std::to_string(seq)}, {"Infera-Kind", "error"}, {"Infera-Error", m}};
  return header_block(f);
}

Result<ReplyFrame> decode_reply(std::string_view header_block_text) {
  INFERA_ASSIGN_OR_RETURN(MessageHeaders h, parse_headers(header_block_text));
  ReplyFrame r;
  INFERA_ASSIGN_OR_RETURN(r.seq, required_u64(h, "Infera-Seq"));
  const std::string_view kind = h.get("Infera-Kind");
  const std::string_view last = h.get("Infera-Last");
  if (!last.empty() && last != "1") return invalid_argument("NATS reply with a bad Infera-Last");
  r.last = last == "1";
  if (r.last && kind != "data" && kind != "head") return invalid_argument("Infera-Last on a frame that ends anyway");
  if (kind == "data") {
    r.kind = ReplyKind::kData;
  } else if (kind == "head") {
    r.kind = ReplyKind::kHead;
    INFERA_ASSIGN_OR_RETURN(uint64_t status, required_u64(h, "Infera-Status"));
    if (status < 100 || status > 999) return invalid_argument("NATS reply status out of range");
    r.status = static_cast<int>(status);
    r.control = std::string(h.get("Infera-Control"));
    if (!valid_subject(r.control)) return invalid_argument("NATS reply head without a control inbox");
    r.headers = http_headers_of(h);
  } else if (kind == "end") {
    r.kind = ReplyKind::kEnd;
  } else if (kind == "error") {
    r.kind = ReplyKind::kError;
    r.error = std::string(h.get("Infera-Error"));
  } else {
    return invalid_argument("NATS reply of unknown kind");
  }
  return r;
}

std::string control_ack(uint64_t seq) { return "NATS/1.0\r\nInfera-Ack: " + std::to_string(seq) + "\r\n\r\n"; }

std::string control_cancel() { return "NATS/1.0\r\nInfera-Cancel: 1\r\n\r\n"; }

Result<Control> decode_control(std::string_view header_block_text) {
  INFERA_ASSIGN_OR_RETURN(MessageHeaders h, parse_headers(header_block_text));
  Control c;
  c.cancel = h.get("Infera-Cancel") == "1";
  if (const std::string_view ack = h.get("Infera-Ack"); !ack.empty()) {
    uint64_t v = 0;
    if (!parse_u64(ack, v)) return invalid_argument("NATS control with a bad Infera-Ack");
    c.ack = v;
  }
  return c;
}

}  // namespace infera::nats
