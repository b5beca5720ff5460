#include "infera/http/wire.h"

#include <string>
#include <utility>

namespace infera::http::wire {

bhttp::verb to_verb(Method method) {
  switch (method) {
    case Method::kGet:
      return bhttp::verb::get;
    case Method::kHead:
      return bhttp::verb::head;
    case Method::kPost:
      return bhttp::verb::post;
    case Method::kPut:
      return bhttp::verb::put;
    case Method::kDelete:
      return bhttp::verb::delete_;
    case Method::kPatch:
      return bhttp::verb::patch;
    case Method::kOptions:
      return bhttp::verb::options;
    case Method::kOther:
      return bhttp::verb::unknown;
  }
  return bhttp::verb::unknown;
}

Method from_verb(bhttp::verb verb) {
  switch (verb) {
    case bhttp::verb::get:
      return Method::kGet;
    case bhttp::verb::head:
      return Method::kHead;
    case bhttp::verb::post:
      return Method::kPost;
    case bhttp::verb::put:
      return Method::kPut;
    case bhttp::verb::delete_:
      return Method::kDelete;
    case bhttp::verb::patch:
      return Method::kPatch;
    case bhttp::verb::options:
      return Method::kOptions;
    default:
      return Method::kOther;
  }
}

void configure(RequestParser& parser, const RequestLimits& limits) {
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(static_cast<std::uint64_t>(limits.max_body_bytes));
  parser.eager(false);
}

std::optional<RequestError> classify_request_error(beast::error_code ec, bool header_phase) {
  const ErrorOrigin origin = header_phase ? ErrorOrigin::kRequestHeader : ErrorOrigin::kRequestBody;
  if (ec == bhttp::error::header_limit) {
    return RequestError{resource_exhausted("request headers exceed the limit"),
                        ErrorOrigin::kRequestHeader};
  }
  if (ec == bhttp::error::body_limit) {
    return RequestError{resource_exhausted("request body exceeds the limit"),
                        ErrorOrigin::kRequestBody};
  }
  if (ec == beast::error::timeout) {
    return RequestError{deadline_exceeded(header_phase ? "request headers not received in time"
                                                       : "request body not received in time"),
                        origin};
  }
  if (ec == bhttp::error::buffer_overflow) {
    return RequestError{resource_exhausted("request exceeds the read buffer"), origin};
  }
  // Any other parse error of Beast's HTTP category is a malformed request; end of stream,
  // resets and aborts mean the client is gone.
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    return RequestError{invalid_argument("malformed request: " + ec.message()), origin};
  }
  return std::nullopt;
}

std::optional<RequestError> validate_request_header(const RequestParser& parser,
                                                    size_t header_bytes,
                                                    const RequestLimits& limits) {
  if (header_bytes > limits.max_header_bytes) {
    return RequestError{resource_exhausted("request headers exceed the limit"),
                        ErrorOrigin::kRequestHeader};
  }
  const auto& msg = parser.get();
  const std::string_view target = msg.target();
  // Origin-form only ("/path?query"): this is a server, not a forward proxy.
  if (target.empty() || target.front() != '/') {
    return RequestError{invalid_argument("request target must start with '/'"),
                        ErrorOrigin::kRequestHeader};
  }
  if (msg.version() != 11 && msg.version() != 10) {
    return RequestError{invalid_argument("unsupported HTTP version"), ErrorOrigin::kRequestHeader};
  }
  return std::nullopt;
}

Request take_request(RequestParser& parser) {
  auto msg = parser.release();
  Request req;
  req.method = from_verb(msg.method());
  req.target.assign(msg.target());
  copy_headers(msg.base(), req.headers);
  req.body = std::move(msg.body());
  return req;
}

void copy_headers(const bhttp::fields& fields, Headers& out) {
  for (const auto& f : fields) {
    out.push_back(Header{std::string(f.name_string()), std::string(f.value())});
  }
}

void set_headers(bhttp::fields& fields, const Headers& headers) {
  for (const Header& h : headers) {
    if (iequals(h.name, "Content-Length") || iequals(h.name, "Transfer-Encoding") ||
        iequals(h.name, "Connection")) {
      continue;
    }
    fields.insert(h.name, h.value);
  }
}

std::string_view reason_phrase(int status) {
  if (status == 499) return "Client Closed Request";
  return bhttp::obsolete_reason(bhttp::int_to_status(static_cast<unsigned>(status)));
}

namespace {

void append_fields(const bhttp::fields& fields, std::string& out) {
  for (const auto& field : fields) {
    out += field.name_string();
    out += ": ";
    out += field.value();
    out += "\r\n";
  }
  out += "\r\n";
}

}  // namespace

std::string serialize_head(const bhttp::response_header<>& head) {
  std::string out;
  out.reserve(192);
  out += head.version() == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(head.result_int());
  out += ' ';
  out += head.reason();
  out += "\r\n";
  append_fields(head, out);
  return out;
}

std::string serialize_head(const bhttp::request_header<>& head) {
  std::string out;
  out.reserve(256);
  out += head.method_string();
  out += ' ';
  out += head.target();
  out += head.version() == 10 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n";
  append_fields(head, out);
  return out;
}

}  // namespace infera::http::wire

namespace infera::http {

Result<Request> parse_request(std::string_view bytes, const RequestLimits& limits) {
  wire::RequestParser parser;
  wire::configure(parser, limits);
  beast::error_code ec;
  size_t consumed = 0;
  while (!parser.is_done()) {
    if (consumed == bytes.size()) return data_loss("request is incomplete");
    const bool header_phase = !parser.is_header_done();
    const size_t n = parser.put(net::buffer(bytes.data() + consumed, bytes.size() - consumed), ec);
    if (ec == bhttp::error::need_more) {
      // put() wants the whole header (or chunk header) in one buffer; this is all there is.
      return data_loss("request is incomplete");
    }
    if (ec) {
      const std::optional<RequestError> error = wire::classify_request_error(ec, header_phase);
      if (error) return error->status;
      return data_loss("request is incomplete");
    }
    consumed += n;
    if (header_phase && parser.is_header_done()) {
      const std::optional<RequestError> error =
          wire::validate_request_header(parser, consumed, limits);
      if (error) return error->status;
      parser.eager(true);
    } else if (n == 0) {
      return data_loss("request is incomplete");
    }
  }
  return wire::take_request(parser);
}

}  // namespace infera::http
