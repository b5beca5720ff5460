// KubeApi: the few calls Kubernetes discovery makes to the API server (GET a resource or list, a
// watch stream read line by line), over HTTPS with verification (or plain HTTP for a test
// server), authenticated by bearer token (re-read from its file per connection) or client
// certificate. One connection per call; a deadline on the connect, the handshake, the head and
// every read. Bodies and lines are bounded. Calls are coroutines on the caller's executor;
// several may run at once.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "infera/common/status.h"
#include "infera/discovery/kube_config.h"
#include "infera/http/net.h"

namespace infera::discovery {

struct KubeApiOptions {
  std::chrono::milliseconds connect_timeout{5'000};  // connect + TLS handshake
  std::chrono::milliseconds response_timeout{30'000};  // a GET's whole answer
  std::chrono::milliseconds read_timeout{60'000};      // longest silence on a watch stream
  size_t max_body_bytes = 256u << 20;  // a list of many pods (about 5 KiB each)
  size_t max_line_bytes = 4u << 20;    // one watch event
};

// Statuses: 401/403 -> kUnauthenticated / kPermissionDenied, 404 -> kNotFound, 410 (the
// resource version is too old) -> kOutOfRange, other HTTP errors -> kUnavailable, transport
// failures -> kUnavailable or kDeadlineExceeded. Messages include the API's own message.
class KubeApi {
 public:
  static Result<std::unique_ptr<KubeApi>> create(KubeConfig config, KubeApiOptions options = {});
  ~KubeApi();

  const KubeConfig& config() const;
  std::string describe() const;  // "https://host:port"

  // GET `target` (path and query); the body of a 2xx answer.
  net::awaitable<Result<std::string>> get(std::string target);
  // GET `target` as a watch: `on_line` gets each non-empty line as it arrives; a non-ok status
  // from it ends the watch with that status. Returns ok when the server ended the stream or
  // the open stream stayed silent for read_timeout (resume it from the last version seen),
  // kCancelled once `stop` is set (checked between reads; cancel the coroutine to end a read).
  net::awaitable<Status> watch(std::string target,
                               std::function<Status(std::string_view)> on_line,
                               const std::atomic<bool>& stop);

 private:
  struct State;
  explicit KubeApi(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// `value` escaped for a URL query (label selectors hold '=', ',', '!', '(', ' ').
std::string url_query_escape(std::string_view value);

}  // namespace infera::discovery
