#include "infera/nats/protocol.h"

#include <algorithm>
#include <charconv>

#include <boost/json.hpp>

#include "infera/common/json_string.h"

namespace infera::nats {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t'; }

// Splits a control line's arguments on spaces and tabs; false when there are more than `max`.
bool split_args(std::string_view line, std::string_view* args, size_t max, size_t& n) {
  n = 0;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    if (i == line.size()) break;
    size_t j = i;
    while (j < line.size() && !is_space(line[j])) ++j;
    if (n == max) return false;
    args[n++] = line.substr(i, j - i);
    i = j;
  }
  return true;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);
         });
}

// The operation word of a control line, and what follows it.
std::pair<std::string_view, std::string_view> op_of(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && !is_space(line[i])) ++i;
  size_t j = i;
  while (j < line.size() && is_space(line[j])) ++j;
  return {line.substr(0, i), line.substr(j)};
}

void append_u64(std::string& out, uint64_t v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, p);
}

}  // namespace

bool parse_u64(std::string_view s, uint64_t& out) {
  if (s.empty() || s.size() > 19) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

Result<ServerInfo> parse_info(std::string_view json) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(json, ec);
  if (ec || !v.is_object()) return invalid_argument("NATS INFO is not a JSON object");
  const boost::json::object& o = v.as_object();
  ServerInfo info;
  auto str = [&](const char* key, std::string& out) {
    if (const auto* p = o.if_contains(key); p && p->is_string()) out = std::string(p->as_string());
  };
  auto flag = [&](const char* key, bool& out) {
    if (const auto* p = o.if_contains(key); p && p->is_bool()) out = p->as_bool();
  };
  str("server_id", info.server_id);
  str("version", info.version);
  flag("headers", info.headers);
  flag("tls_required", info.tls_required);
  flag("tls_available", info.tls_available);
  flag("auth_required", info.auth_required);
  if (const auto* p = o.if_contains("max_payload")) {
    if (p->is_int64() && p->as_int64() > 0) info.max_payload = static_cast<uint64_t>(p->as_int64());
    if (p->is_uint64() && p->as_uint64() > 0) info.max_payload = p->as_uint64();
  }
  if (const auto* p = o.if_contains("connect_urls"); p && p->is_array()) {
    for (const auto& u : p->as_array()) {
      if (u.is_string() && info.connect_urls.size() < 64) {
        info.connect_urls.emplace_back(u.as_string());
      }
    }
  }
  return info;
}

void Parser::feed(std::string_view bytes) {
  if (start_ > 0 && start_ >= buf_.size() / 2) {
    buf_.erase(0, start_);
    start_ = 0;
  }
  buf_.append(bytes);
}

void Parser::reset() {
  buf_.clear();
  start_ = 0;
  error_.clear();
}

Parser::Next Parser::fail(std::string message) {
  error_ = std::move(message);
  return Next::kError;
}

Parser::Next Parser::next(Frame& out) {
  if (!error_.empty()) return Next::kError;
  const std::string_view data = std::string_view(buf_).substr(start_);
  const size_t eol = data.find("\r\n");
  if (eol == std::string_view::npos) {
    if (data.size() > limits_.max_control_line) return fail("NATS control line too long");
    return Next::kNeedMore;
  }
  if (eol > limits_.max_control_line) return fail("NATS control line too long");
  const std::string_view line = data.substr(0, eol);
  auto [op, rest] = op_of(line);
  out = Frame{};
  if (iequals(op, "MSG")) return parse_msg(rest, eol, false, out);
  if (iequals(op, "HMSG")) return parse_msg(rest, eol, true, out);
  if (iequals(op, "PING")) {
    out.kind = FrameKind::kPing;
  } else if (iequals(op, "PONG")) {
    out.kind = FrameKind::kPong;
  } else if (iequals(op, "+OK")) {
    out.kind = FrameKind::kOk;
  } else if (iequals(op, "-ERR")) {
    out.kind = FrameKind::kErr;
    std::string_view m = rest;
    if (m.size() >= 2 && m.front() == '\'' && m.back() == '\'') m = m.substr(1, m.size() - 2);
    out.payload = m;
  } else if (iequals(op, "INFO")) {
    out.kind = FrameKind::kInfo;
    out.payload = rest;
  } else {
    return fail("unknown NATS operation '" + std::string(op.substr(0, 16)) + "'");
  }
  start_ += eol + 2;
  return Next::kFrame;
}

Parser::Next Parser::parse_msg(std::string_view args_text, size_t line_end, bool with_headers,
                               Frame& out) {
  std::string_view args[6];
  size_t n = 0;
  if (!split_args(args_text, args, 5, n)) return fail("NATS MSG with too many arguments");
  // MSG subject sid [reply] #bytes; HMSG subject sid [reply] #hdr #total
  const size_t fixed = with_headers ? 5 : 4;  // with the reply subject
  if (n != fixed && n != fixed - 1) return fail("NATS MSG with a wrong number of arguments");
  const bool has_reply = n == fixed;
  uint64_t sid = 0, total = 0, header_len = 0;
  if (!parse_u64(args[1], sid)) return fail("NATS MSG with a bad sid");
  if (!parse_u64(args[n - 1], total)) return fail("NATS MSG with a bad size");
  if (with_headers) {
    if (!parse_u64(args[n - 2], header_len) || header_len > total) {
      return fail("NATS HMSG with a bad header size");
    }
  }
  if (total > limits_.max_payload) return fail("NATS message above the payload limit");
  const size_t body_at = start_ + line_end + 2;
  if (buf_.size() - body_at < total + 2) return Next::kNeedMore;
  if (buf_.compare(body_at + total, 2, "\r\n") != 0) {
    return fail("NATS message not ended by CRLF");
  }
  const std::string_view body(buf_.data() + body_at, total);
  out.kind = FrameKind::kMsg;
  out.subject = args[0];
  out.sid = sid;
  out.reply = has_reply ? args[2] : std::string_view();
  out.headers = body.substr(0, header_len);
  out.payload = body.substr(header_len);
  start_ = body_at + total + 2;
  return Next::kFrame;
}

std::string_view MessageHeaders::get(std::string_view name) const {
  for (const auto& [k, v] : fields) {
    if (iequals(k, name)) return v;
  }
  return {};
}

Result<MessageHeaders> parse_headers(std::string_view block) {
  MessageHeaders h;
  size_t eol = block.find("\r\n");
  if (eol == std::string_view::npos) return invalid_argument("NATS header block without CRLF");
  std::string_view first = block.substr(0, eol);
  if (first.substr(0, 8) != "NATS/1.0") return invalid_argument("NATS header block version");
  first.remove_prefix(8);
  while (!first.empty() && is_space(first.front())) first.remove_prefix(1);
  if (!first.empty()) {
    size_t i = 0;
    while (i < first.size() && first[i] >= '0' && first[i] <= '9') ++i;
    uint64_t status = 0;
    if (i == 3 && parse_u64(first.substr(0, 3), status)) h.status = static_cast<int>(status);
    std::string_view d = first.substr(i);
    while (!d.empty() && is_space(d.front())) d.remove_prefix(1);
    h.description = std::string(d.substr(0, 256));
  }
  size_t at = eol + 2;
  while (at < block.size()) {
    eol = block.find("\r\n", at);
    if (eol == std::string_view::npos) return invalid_argument("NATS header line without CRLF");
    std::string_view line = block.substr(at, eol - at);
    at = eol + 2;
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return invalid_argument("NATS header line without a name");
    }
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && is_space(value.front())) value.remove_prefix(1);
    if (h.fields.size() >= 64) return invalid_argument("NATS header block with too many fields");
    h.fields.emplace_back(std::string(line.substr(0, colon)), std::string(value));
  }
  return h;
}

std::string header_block(std::span<const std::pair<std::string, std::string>> fields) {
  std::string out = "NATS/1.0\r\n";
  for (const auto& [k, v] : fields) {
    out += k;
    out += ": ";
    out += v;
    out += "\r\n";
  }
  out += "\r\n";
  return out;
}

bool valid_subject(std::string_view subject, bool wildcards) {
  if (subject.empty() || subject.size() > 1024) return false;
  size_t at = 0;
  for (;;) {
    const size_t dot = subject.find('.', at);
    const std::string_view token =
        subject.substr(at, dot == std::string_view::npos ? std::string_view::npos : dot - at);
    if (token.empty()) return false;
    for (char c : token) {
      if (is_space(c) || c == '\r' || c == '\n' || c == '\0') return false;
    }
    const bool wild = token.find_first_of("*>") != std::string_view::npos;
    if (wild) {
      if (!wildcards || token.size() != 1) return false;
      if (token == ">" && dot != std::string_view::npos) return false;
    }
    if (dot == std::string_view::npos) return true;
    at = dot + 1;
  }
}

std::string subject_token(std::string_view worker_id) {
  std::string out(worker_id);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '.' || c == ':' || c == '*' || c == '>' || u <= 0x20 || u == 0x7f) c = '_';
  }
  if (out.empty()) out = "_";
  return out;
}

std::string connect_line(const ConnectOptions& o) {
  std::string out = "CONNECT {\"verbose\":false,\"pedantic\":false,\"lang\":\"cpp-infera\",";
  out += "\"version\":\"1\",\"protocol\":1,\"echo\":true,";
  out += o.tls_required ? "\"tls_required\":true," : "\"tls_required\":false,";
  out += o.headers ? "\"headers\":true," : "\"headers\":false,";
  out += o.no_responders ? "\"no_responders\":true" : "\"no_responders\":false";
  auto field = [&](const char* key, const std::string& value) {
    if (value.empty()) return;
    out += ",\"";
    out += key;
    out += "\":";
    append_json_string(out, value);
  };
  field("name", o.name);
  field("user", o.user);
  field("pass", o.password);
  field("auth_token", o.token);
  out += "}\r\n";
  return out;
}

void append_pub(std::string& out, std::string_view subject, std::string_view reply,
                std::string_view payload) {
  out += "PUB ";
  out += subject;
  out += ' ';
  if (!reply.empty()) {
    out += reply;
    out += ' ';
  }
  append_u64(out, payload.size());
  out += "\r\n";
  out += payload;
  out += "\r\n";
}

void append_hpub(std::string& out, std::string_view subject, std::string_view reply,
                 std::string_view headers, std::string_view payload) {
  out += "HPUB ";
  out += subject;
  out += ' ';
  if (!reply.empty()) {
    out += reply;
    out += ' ';
  }
  append_u64(out, headers.size());
  out += ' ';
  append_u64(out, headers.size() + payload.size());
  out += "\r\n";
  out += headers;
  out += payload;
  out += "\r\n";
}

void append_sub(std::string& out, std::string_view subject, std::string_view queue, uint64_t sid) {
  out += "SUB ";
  out += subject;
  out += ' ';
  if (!queue.empty()) {
    out += queue;
    out += ' ';
  }
  append_u64(out, sid);
  out += "\r\n";
}

void append_unsub(std::string& out, uint64_t sid) {
  out += "UNSUB ";
  append_u64(out, sid);
  out += "\r\n";
}

}  // namespace infera::nats
