#include "infera/discovery/etcd.h"

#include <boost/json.hpp>

#include "infera/common/base64.h"
#include "infera/common/log.h"
#include "infera/http/net.h"

namespace infera::discovery {
namespace json = boost::json;
namespace {

// The range end that selects every key starting with `prefix` (etcd clientv3 GetPrefixRangeEnd).
std::string prefix_end(std::string prefix) {
  for (size_t i = prefix.size(); i-- > 0;) {
    if (static_cast<uint8_t>(prefix[i]) < 0xFF) {
      prefix[i] = static_cast<char>(prefix[i] + 1);
      prefix.resize(i + 1);
      return prefix;
    }
  }
  return std::string(1, '\0');  // every key
}

// etcd's JSON gateway encodes int64 as strings.
int64_t as_int(const json::value* v) {
  if (!v) return 0;
  if (v->is_string()) {
    try {
      return std::stoll(std::string(v->get_string()));
    } catch (...) {  // untrusted text: a malformed number counts as absent
      return 0;
    }
  }
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->get_uint64());
  return 0;
}

Result<json::object> parse_object(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return data_loss("etcd answered something that is not a JSON object");
  json::object o = std::move(v.get_object());
  if (const json::value* err = o.if_contains("error")) {
    const std::string message = err->is_string() ? std::string(err->get_string()) : "etcd error";
    const int64_t code = as_int(o.if_contains("code"));
    if (code == 5) return not_found(message);  // gRPC NOT_FOUND
    return unavailable("etcd: " + message);
  }
  return o;
}

Result<EtcdKeyValue> decode_kv(const json::value& kv) {
  if (!kv.is_object()) return data_loss("etcd kv is not an object");
  const json::object& o = kv.get_object();
  EtcdKeyValue out;
  const json::value* k = o.if_contains("key");
  const json::value* v = o.if_contains("value");
  if (!k || !k->is_string()) return data_loss("etcd kv without a key");
  INFERA_ASSIGN_OR_RETURN(out.key, base64_decode(k->get_string()));
  if (v && v->is_string()) {
    INFERA_ASSIGN_OR_RETURN(out.value, base64_decode(v->get_string()));
  }
  return out;
}

http::Request post(const std::string& path, std::string body) {
  http::Request r;
  r.method = http::Method::kPost;
  r.target = path;
  r.headers.push_back({"Content-Type", "application/json"});
  r.body = std::move(body);
  return r;
}

// Sleeps `d` unless cancelled; false when cancelled.
}  // namespace

net::awaitable<Result<std::string>> EtcdClient::call(std::string path, std::string body) {
  auto r = co_await client_.request(endpoint_, post(path, std::move(body)));
  if (!r.ok()) co_return r.error().status;
  if (r->status != 200) {
    // The gateway answers errors with a JSON body too; prefer its message.
    auto o = parse_object(r->body);
    if (!o.ok()) co_return o.status();
    co_return unavailable("etcd " + path + " answered HTTP " + std::to_string(r->status));
  }
  co_return std::move(r->body);
}

net::awaitable<Result<int64_t>> EtcdClient::grant_lease(std::chrono::seconds ttl) {
  std::string request = json::serialize(json::object{{"TTL", ttl.count()}});
  auto body = co_await call("/v3/lease/grant", std::move(request));
  if (!body.ok()) co_return body.status();
  auto o = parse_object(*body);
  if (!o.ok()) co_return o.status();
  const int64_t id = as_int(o->if_contains("ID"));
  if (id == 0) co_return data_loss("etcd granted no lease id");
  co_return id;
}

net::awaitable<Status> EtcdClient::keep_alive(int64_t lease) {
  // LeaseKeepAlive is a bidirectional stream; the gateway answers the one request with one JSON
  // line and keeps the stream open: read that line, then close.
  http::Request request =
      post("/v3/lease/keepalive", json::serialize(json::object{{"ID", std::to_string(lease)}}));
  auto opened = co_await client_.stream(endpoint_, std::move(request));
  if (!opened.ok()) co_return opened.error().status;
  http::ClientStream& s = opened.value();
  std::string line;
  while (line.find('\n') == std::string::npos && line.size() < 65536) {
    auto piece = co_await s.read();
    if (!piece.ok()) co_return piece.status();
    if (piece->empty()) break;
    line += *piece;
  }
  s.close();
  auto o = parse_object(line.substr(0, line.find('\n')));
  if (!o.ok()) co_return o.status();
  const json::value* result = o->if_contains("result");
  if (!result || !result->is_object() || as_int(result->get_object().if_contains("TTL")) <= 0) {
    co_return not_found("etcd lease " + std::to_string(lease) + " is gone");
  }
  co_return ok_status();
}

net::awaitable<Status> EtcdClient::revoke(int64_t lease) {
  std::string request = json::serialize(json::object{{"ID", std::to_string(lease)}});
  auto body = co_await call("/v3/lease/revoke", std::move(request));
  if (!body.ok()) co_return body.status();
  co_return parse_object(*body).status();
}

net::awaitable<Status> EtcdClient::put(std::string key, std::string value,
                                       int64_t lease) {
  json::object req{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease) req["lease"] = std::to_string(lease);
  std::string request = json::serialize(req);
  auto body = co_await call("/v3/kv/put", std::move(request));
  if (!body.ok()) co_return body.status();
  co_return parse_object(*body).status();
}

net::awaitable<Status> EtcdClient::remove(std::string key) {
  std::string request = json::serialize(json::object{{"key", base64_encode(key)}});
  auto body = co_await call("/v3/kv/deleterange", std::move(request));
  if (!body.ok()) co_return body.status();
  co_return parse_object(*body).status();
}

net::awaitable<Result<EtcdClient::Range>> EtcdClient::range_prefix(std::string prefix) {
  std::string request = json::serialize(
      json::object{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}});
  auto body = co_await call("/v3/kv/range", std::move(request));
  if (!body.ok()) co_return body.status();
  auto o = parse_object(*body);
  if (!o.ok()) co_return o.status();
  Range range;
  if (const json::value* h = o->if_contains("header"); h && h->is_object()) {
    range.revision = as_int(h->get_object().if_contains("revision"));
  }
  if (const json::value* kvs = o->if_contains("kvs"); kvs && kvs->is_array()) {
    for (const json::value& kv : kvs->get_array()) {
      auto decoded = decode_kv(kv);
      if (!decoded.ok()) co_return decoded.status();
      range.kvs.push_back(std::move(*decoded));
    }
  }
  co_return range;
}

net::awaitable<Status> EtcdClient::watch_prefix(
    std::string prefix, int64_t start_revision, std::function<void(const EtcdWatchEvent&)> on_event,
    const std::atomic<bool>& stop) {
  json::object create{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))},
                      {"start_revision", std::to_string(start_revision)}};
  http::Request request = post("/v3/watch", json::serialize(json::object{{"create_request", create}}));
  auto opened = co_await client_.stream(endpoint_, std::move(request));
  if (!opened.ok()) co_return opened.error().status;
  http::ClientStream& s = opened.value();
  if (s.status() != 200) co_return unavailable("etcd watch answered HTTP " + std::to_string(s.status()));
  std::string buffer;
  while (!stop.load()) {
    auto piece = co_await s.read();
    if (!piece.ok()) co_return piece.status();
    if (piece->empty()) co_return unavailable("etcd closed the watch stream");
    buffer += *piece;
    if (buffer.size() > (size_t{8} << 20)) co_return data_loss("etcd watch line too long");
    size_t nl;
    while ((nl = buffer.find('\n')) != std::string::npos) {
      const std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (line.empty()) continue;
      auto o = parse_object(line);
      if (!o.ok()) co_return o.status();
      const json::value* result = o->if_contains("result");
      if (!result || !result->is_object()) continue;
      const json::object& r = result->get_object();
      if (r.if_contains("canceled") && r.at("canceled").is_bool() && r.at("canceled").get_bool()) {
        co_return unavailable("etcd cancelled the watch (compacted?)");
      }
      const json::value* events = r.if_contains("events");
      if (!events || !events->is_array()) continue;
      for (const json::value& e : events->get_array()) {
        if (!e.is_object()) continue;
        const json::object& eo = e.get_object();
        EtcdWatchEvent ev;
        const json::value* type = eo.if_contains("type");
        ev.deleted = type && type->is_string() && type->get_string() == "DELETE";
        const json::value* kv = eo.if_contains("kv");
        if (!kv) continue;
        auto decoded = decode_kv(*kv);
        if (!decoded.ok()) co_return decoded.status();
        ev.kv = std::move(*decoded);
        ev.revision = as_int(kv->get_object().if_contains("mod_revision"));
        on_event(ev);
      }
    }
  }
  co_return cancelled("watch stopped");
}

// ---------------------------------------------------------------------------------------------

struct EtcdPrefixWatch::Cancel {
  explicit Cancel(net::io_context& context) : strand(net::make_strand(context)) {}
  net::strand<net::io_context::executor_type> strand;
  net::cancellation_signal signal;
};

EtcdPrefixWatch::EtcdPrefixWatch(http::EventLoop& loop, http::Endpoint endpoint,
                                 EtcdSourceOptions options)
    : loop_(loop),
      endpoint_(std::move(endpoint)),
      options_(std::move(options)),
      cancel_(std::make_shared<Cancel>(loop_.context())) {
  http::ClientOptions co;
  co.connect_timeout = std::chrono::milliseconds(2'000);
  co.response_timeout = std::chrono::milliseconds(5'000);
  co.read_timeout = std::chrono::milliseconds(60'000);  // an idle watch resyncs once a minute
  client_ = std::make_unique<http::Client>(co);
  done_future_ = done_.get_future();
}

EtcdPrefixWatch::~EtcdPrefixWatch() {
  stop();
}

std::string EtcdPrefixWatch::last_error() const {
  std::lock_guard lock(error_mu_);
  return last_error_;
}

void EtcdPrefixWatch::start(Handlers handlers) {
  handlers_ = std::move(handlers);
  started_ = true;
  // On a strand, so that stop() can deliver the cancellation on the watcher's own executor.
  net::co_spawn(
      cancel_->strand, run(),
      net::bind_cancellation_slot(cancel_->signal.slot(), [this](const std::exception_ptr& e) {
        if (e && !stop_.load()) {
          INFERA_LOG(kError, "discovery").msg("etcd watcher stopped by an exception");
        }
        done_.set_value();
      }));
}

void EtcdPrefixWatch::stop() {
  if (!started_) return;
  started_ = false;
  stop_.store(true);
  // Cancel the pending read or pause; the watcher then returns at once. The posted handler owns
  // the signal: when the watcher has already returned (it saw stop_ after a read), the wait below
  // ends at once and this watch may be destroyed before the handler runs.
  net::post(cancel_->strand,
            [cancel = cancel_] { cancel->signal.emit(net::cancellation_type::terminal); });
  done_future_.wait();
}

void EtcdPrefixWatch::set_disconnected(const Status& why) {
  {
    std::lock_guard lock(error_mu_);
    last_error_ = std::string(why.message());
  }
  if (connected_.exchange(false)) {
    INFERA_LOG(kWarn, "discovery")
        .msg("etcd unreachable; keeping the last known records")
        .kv("endpoint", endpoint_.key())
        .kv("prefix", options_.prefix)
        .kv("error", why.message());
  }
}

net::awaitable<void> EtcdPrefixWatch::run() {
  EtcdClient etcd(*client_, endpoint_);
  auto backoff = options_.retry_min;
  while (!stop_.load()) {
    auto range = co_await etcd.range_prefix(options_.prefix);
    if (range.ok()) {
      connected_.store(true);
      resyncs_.fetch_add(1);
      backoff = options_.retry_min;
      if (handlers_.on_reset) handlers_.on_reset(range->kvs);
      const Status ended = co_await etcd.watch_prefix(
          options_.prefix, range->revision + 1,
          [&](const EtcdWatchEvent& ev) {
            if (handlers_.on_event) handlers_.on_event(ev);
          },
          stop_);
      if (stop_.load()) break;
      if (ended.code() != StatusCode::kDeadlineExceeded) {
        INFERA_LOG(kWarn, "discovery")
            .msg("etcd watch ended; resyncing")
            .kv("prefix", options_.prefix)
            .kv("error", ended.message());
      }
      continue;  // an idle watch timing out just resyncs
    }
    // etcd unreachable: the caller keeps what it had; retry.
    set_disconnected(range.status());
    for (auto waited = std::chrono::milliseconds(0); waited < backoff && !stop_.load();
         waited += std::chrono::milliseconds(100)) {
      co_await pause_for(std::chrono::milliseconds(100));
    }
    backoff = std::min(backoff * 2, options_.retry_max);
  }
}

// ---------------------------------------------------------------------------------------------

EtcdWorkerSource::EtcdWorkerSource(http::EventLoop& loop, http::Endpoint endpoint,
                                   EtcdSourceOptions options)
    : watch_(loop, std::move(endpoint), std::move(options)) {}

EtcdWorkerSource::~EtcdWorkerSource() {
  stop();
}

std::string EtcdWorkerSource::describe() const {
  return "etcd " + watch_.endpoint().key() + " prefix " + watch_.options().prefix;
}

void EtcdWorkerSource::start(Listener listener) {
  listener_ = std::move(listener);
  EtcdPrefixWatch::Handlers h;
  h.on_reset = [this](const std::vector<EtcdKeyValue>& kvs) {
    workers_.clear();
    for (const auto& kv : kvs) apply(kv.key, kv.value, false);
    publish();
  };
  h.on_event = [this](const EtcdWatchEvent& ev) {
    apply(ev.kv.key, ev.kv.value, ev.deleted);
    publish();
  };
  watch_.start(std::move(h));
}

void EtcdWorkerSource::stop() {
  watch_.stop();
}

void EtcdWorkerSource::apply(const std::string& key, const std::string& value, bool deleted) {
  if (deleted) {
    workers_.erase(key);
    return;
  }
  auto w = parse_worker_record(value);
  if (!w.ok()) {
    invalid_.fetch_add(1);
    INFERA_LOG(kWarn, "discovery")
        .msg("skipping malformed worker record")
        .kv("key", key)
        .kv("error", w.status().message());
    workers_.erase(key);
    return;
  }
  workers_[key] = std::move(*w);
}

void EtcdWorkerSource::publish() {
  // One worker per id: a record moved between roles is briefly present twice; the last wins.
  std::map<std::string, WorkerInfo> by_id;
  for (const auto& [key, w] : workers_) by_id[w.id] = w;
  auto set = std::make_shared<WorkerSet>();
  for (auto& [id, w] : by_id) set->push_back(std::move(w));
  if (listener_) listener_(std::move(set));
}

// ---------------------------------------------------------------------------------------------

EtcdRegistration::EtcdRegistration(http::EventLoop& loop, http::Endpoint endpoint,
                                   WorkerInfo worker, EtcdRegistrationOptions options)
    : EtcdRegistration(loop, std::move(endpoint), worker_key(options.prefix, worker),
                       worker_record_json(worker), options) {}

EtcdRegistration::EtcdRegistration(http::EventLoop& loop, http::Endpoint endpoint, std::string key,
                                   std::string record, EtcdRegistrationOptions options)
    : loop_(loop),
      endpoint_(std::move(endpoint)),
      options_(std::move(options)),
      key_(std::move(key)),
      record_(std::move(record)) {
  http::ClientOptions co;
  co.connect_timeout = std::chrono::milliseconds(2'000);
  co.response_timeout = std::chrono::milliseconds(5'000);
  co.read_timeout = std::chrono::milliseconds(5'000);
  client_ = std::make_unique<http::Client>(co);
  done_future_ = done_.get_future();
}

EtcdRegistration::~EtcdRegistration() { stop(); }

Status EtcdRegistration::start(std::chrono::milliseconds timeout) {
  auto first = first_put_.get_future();
  started_ = true;
  net::co_spawn(loop_.context(), run(), [this](const std::exception_ptr& e) {
    if (e) {
      INFERA_LOG(kError, "discovery").msg("etcd registration stopped by an exception");
    }
    done_.set_value();
  });
  if (first.wait_for(timeout) != std::future_status::ready) {
    return deadline_exceeded("could not register in etcd at " + endpoint_.key() + " within " +
                             std::to_string(timeout.count()) + " ms");
  }
  return first.get();
}

net::awaitable<void> EtcdRegistration::run() {
  EtcdClient etcd(*client_, endpoint_);
  auto settle = [&](Status s) {
    if (!first_put_set_) {
      first_put_set_ = true;
      first_put_.set_value(std::move(s));
    }
  };
  int64_t lease = 0;
  auto backoff = std::chrono::milliseconds(200);
  while (!stop_.load()) {
    if (lease == 0) {
      // (No co_await inside a conditional expression: GCC 12 destroys its result twice.)
      auto granted = co_await etcd.grant_lease(options_.ttl);
      Status put = granted.status();
      if (granted.ok()) put = co_await etcd.put(key_, record_, *granted);
      if (!put.ok()) {
        INFERA_LOG(kWarn, "discovery").msg("etcd registration failed; retrying")
            .kv("key", key_).kv("error", put.message());
        for (auto waited = std::chrono::milliseconds(0); waited < backoff && !stop_.load();
             waited += std::chrono::milliseconds(100)) {
          co_await pause_for(std::chrono::milliseconds(100));
        }
        backoff = std::min(backoff * 2, std::chrono::milliseconds(5'000));
        continue;
      }
      lease = *granted;
      backoff = std::chrono::milliseconds(200);
      INFERA_LOG(kInfo, "discovery").msg("registered in etcd").kv("key", key_).kv("lease", lease);
      settle(ok_status());
    }
    // Refresh at a third of the TTL, so two refreshes may fail before the record expires.
    const auto period = std::chrono::duration_cast<std::chrono::milliseconds>(options_.ttl) / 3;
    for (auto waited = std::chrono::milliseconds(0); waited < period && !stop_.load();
         waited += std::chrono::milliseconds(100)) {
      co_await pause_for(std::chrono::milliseconds(100));
    }
    if (stop_.load()) break;
    const Status alive = co_await etcd.keep_alive(lease);
    if (alive.code() == StatusCode::kNotFound) {
      INFERA_LOG(kWarn, "discovery").msg("etcd lease lost; registering again").kv("key", key_);
      lease = 0;
    } else if (!alive.ok()) {
      INFERA_LOG(kWarn, "discovery").msg("etcd keepalive failed").kv("error", alive.message());
    }
  }
  // Leave cleanly: the record goes now, not when the lease runs out.
  if (lease != 0) {
    (void)co_await etcd.remove(key_);
    (void)co_await etcd.revoke(lease);
  }
}

void EtcdRegistration::stop() {
  if (!started_) return;
  started_ = false;
  stop_.store(true);
  done_future_.wait();
}

}  // namespace infera::discovery
