#include "infera/discovery/kube_api.h"

#include <boost/json.hpp>

#include <optional>

#include "infera/http/tls.h"

namespace infera::discovery {
namespace {

constexpr size_t kChunkBytes = 16u << 10;
constexpr size_t kMaxErrorBody = 64u << 10;

// Where the bytes of an answer's body go: a GET collects them, a watch cuts them into lines.
struct Sink {
  std::string* body = nullptr;                            // GET
  std::function<Status(std::string_view)>* on_line = nullptr;  // watch
  std::string pending;                                     // a watch line not yet complete
  size_t max_bytes = 0;                                    // body (GET) or line (watch)

  Status feed(const char* data, size_t n) {
    if (body) {
      if (body->size() + n > max_bytes) return resource_exhausted("API answer larger than the limit");
      body->append(data, n);
      return ok_status();
    }
    std::string_view rest(data, n);
    while (!rest.empty()) {
      const size_t nl = rest.find('\n');
      const std::string_view part = rest.substr(0, nl);
      if (pending.size() + part.size() > max_bytes) {
        return resource_exhausted("watch event larger than " + std::to_string(max_bytes) + " bytes");
      }
      if (nl == std::string_view::npos) {
        pending.append(part);
        break;
      }
      std::string_view line = part;
      if (!pending.empty()) {
        pending.append(part);
        line = pending;
      }
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!line.empty()) INFERA_RETURN_IF_ERROR((*on_line)(line));
      pending.clear();
      rest.remove_prefix(nl + 1);
    }
    return ok_status();
  }
};

// The API's Status object's message, when the error body is one.
std::string api_message(const std::string& body) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(body, ec);
  if (!ec && v.is_object()) {
    if (const auto* m = v.get_object().if_contains("message"); m && m->is_string()) {
      return std::string(m->get_string()).substr(0, 512);
    }
  }
  return body.substr(0, 200);
}

Status http_error(unsigned code, const std::string& body, const std::string& target) {
  const std::string what = "Kubernetes API " + std::to_string(code) + " for " +
                           target.substr(0, target.find('?')) + ": " + api_message(body);
  switch (code) {
    case 401:
    case 403:
      return unauthenticated(what);
    case 404:
      return not_found(what);
    case 410:
      return out_of_range(what);
    default:
      return unavailable(what);
  }
}

Status transport_error(const beast::error_code& ec, std::string_view during) {
  if (ec == beast::error::timeout) return deadline_exceeded("Kubernetes API: timed out " + std::string(during));
  if (ec == net::error::operation_aborted) return cancelled("Kubernetes API: cancelled " + std::string(during));
  return unavailable("Kubernetes API: " + std::string(during) + ": " + ec.message());
}

}  // namespace

struct KubeApi::State {
  KubeConfig config;
  KubeApiOptions options;
  std::shared_ptr<net::ssl::context> tls;  // null for http://

  template <class Stream>
  net::awaitable<Status> exchange(Stream& stream, const std::string& target, bool watch,
                                  Sink& sink, const std::atomic<bool>* stop);
  net::awaitable<Status> call(std::string target, bool watch, Sink& sink,
                              const std::atomic<bool>* stop);
};

template <class Stream>
net::awaitable<Status> KubeApi::State::exchange(Stream& stream, const std::string& target,
                                                bool watch, Sink& sink,
                                                const std::atomic<bool>* stop) {
  auto& lowest = beast::get_lowest_layer(stream);
  auto token = config.bearer_token();  // re-read per connection: rotated tokens apply
  if (!token.ok()) co_return token.status();
  bhttp::request<bhttp::empty_body> req{bhttp::verb::get, target, 11};
  req.set(bhttp::field::host, config.host);
  req.set(bhttp::field::accept, "application/json");
  req.set(bhttp::field::user_agent, "infera");
  if (!token->empty()) req.set(bhttp::field::authorization, "Bearer " + *token);
  req.keep_alive(false);
  lowest.expires_after(options.response_timeout);
  if (auto [ec, n] = co_await bhttp::async_write(stream, req, use_nothrow); ec) {
    co_return transport_error(ec, "sending the request");
  }
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.header_limit(64u << 10);
  parser.body_limit(boost::none);  // bounded by the sink
  if (auto [ec, n] = co_await bhttp::async_read_header(stream, buffer, parser, use_nothrow); ec) {
    co_return transport_error(ec, "reading the answer's head");
  }
  const unsigned code = parser.get().result_int();
  const bool success = code >= 200 && code < 300;
  std::string error_body;
  char chunk[kChunkBytes];
  while (!parser.is_done()) {
    if (stop && stop->load()) co_return cancelled("watch stopped");
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    if (watch && success) lowest.expires_after(options.read_timeout);
    // read_some: a watch's events are small and must not wait for a full chunk buffer.
    auto [ec, n] = co_await bhttp::async_read_some(stream, buffer, parser, use_nothrow);
    if (ec == bhttp::error::need_buffer) ec = {};
    // An open watch that stays silent past the read deadline is not an error: the API server
    // owes it no event and sends bookmarks only now and then. The caller resumes it.
    if (ec == beast::error::timeout && watch && success) co_return ok_status();
    if (ec) co_return transport_error(ec, "reading the answer");
    const size_t got = sizeof chunk - parser.get().body().size;
    if (success) {
      if (Status s = sink.feed(chunk, got); !s.ok()) co_return s;
    } else if (error_body.size() < kMaxErrorBody) {
      error_body.append(chunk, std::min(got, kMaxErrorBody - error_body.size()));
    }
  }
  if (!success) co_return http_error(code, error_body, target);
  co_return ok_status();
}

net::awaitable<Status> KubeApi::State::call(std::string target, bool watch, Sink& sink,
                                            const std::atomic<bool>* stop) {
  auto executor = co_await net::this_coro::executor;
  // The name lookup has the connect deadline too (a DNS server may not answer).
  tcp::resolver resolver(executor);
  net::steady_timer lookup_deadline(executor);
  lookup_deadline.expires_after(options.connect_timeout);
  auto lookup = co_await (resolver.async_resolve(config.host, std::to_string(config.port), use_nothrow) ||
                          lookup_deadline.async_wait(use_nothrow));
  if (lookup.index() == 1) co_return deadline_exceeded("Kubernetes API: timed out resolving " + config.host);
  auto [rec, endpoints] = std::get<0>(std::move(lookup));
  if (rec) co_return transport_error(rec, "resolving " + config.host);
  beast::tcp_stream tcp_stream(executor);
  tcp_stream.expires_after(options.connect_timeout);
  if (auto [ec, ep] = co_await tcp_stream.async_connect(endpoints, use_nothrow); ec) {
    co_return transport_error(ec, "connecting to " + config.host + ":" + std::to_string(config.port));
  }
  if (!tls) co_return co_await exchange(tcp_stream, target, watch, sink, stop);
  beast::ssl_stream<beast::tcp_stream> stream(std::move(tcp_stream), *tls);
  if (Status s = http::prepare_tls_stream(stream, config.host, !config.insecure_skip_verify); !s.ok()) {
    co_return s;
  }
  beast::get_lowest_layer(stream).expires_after(options.connect_timeout);
  if (auto [ec] = co_await stream.async_handshake(net::ssl::stream_base::client, use_nothrow); ec) {
    co_return transport_error(ec, "TLS handshake with " + config.host);
  }
  co_return co_await exchange(stream, target, watch, sink, stop);
}

KubeApi::KubeApi(std::unique_ptr<State> state) : state_(std::move(state)) {}
KubeApi::~KubeApi() = default;

Result<std::unique_ptr<KubeApi>> KubeApi::create(KubeConfig config, KubeApiOptions options) {
  auto state = std::make_unique<State>();
  if (config.scheme == "https") {
    http::TlsClientConfig tc;
    tc.ca_pem = config.ca_pem;
    tc.cert_pem = config.client_cert_pem;
    tc.key_pem = config.client_key_pem;
    tc.verify = !config.insecure_skip_verify;
    INFERA_ASSIGN_OR_RETURN(state->tls, http::make_tls_client_context(tc));
  }
  state->config = std::move(config);
  state->options = options;
  return std::unique_ptr<KubeApi>(new KubeApi(std::move(state)));
}

const KubeConfig& KubeApi::config() const { return state_->config; }

std::string KubeApi::describe() const {
  const KubeConfig& c = state_->config;
  const bool v6 = c.host.find(':') != std::string::npos;
  return c.scheme + "://" + (v6 ? "[" + c.host + "]" : c.host) + ":" + std::to_string(c.port);
}

net::awaitable<Result<std::string>> KubeApi::get(std::string target) {
  std::string body;
  Sink sink;
  sink.body = &body;
  sink.max_bytes = state_->options.max_body_bytes;
  const Status s = co_await state_->call(std::move(target), false, sink, nullptr);
  if (!s.ok()) co_return s;
  co_return body;
}

net::awaitable<Status> KubeApi::watch(std::string target,
                                      std::function<Status(std::string_view)> on_line,
                                      const std::atomic<bool>& stop) {
  Sink sink;
  sink.on_line = &on_line;
  sink.max_bytes = state_->options.max_line_bytes;
  co_return co_await state_->call(std::move(target), true, sink, &stop);
}

std::string url_query_escape(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(value.size() * 3);
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

}  // namespace infera::discovery
