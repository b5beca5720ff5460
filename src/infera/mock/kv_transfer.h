// KvTransfers: the prefill side of the mock engine's disaggregation (shared/wire/KV_EVENTS.md
// section 4). A finished prefill offers its held KV blocks under a key (vLLM: the
// remote_request_id it answers with; SGLang: its bootstrap room); the decode engine takes them
// through a pull (POST /infera/kv/pull), which frees the blocks here. An offer nobody takes
// within the timeout is released (vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT; SGLang's bootstrap
// timeout). SGLang's pair is sent at once, so a pull may come before its offer and waits for
// it, and the prefill's answer waits for the pull. Every wait is bounded by the timeout.
// The table lives on its own strand; offer() and take() may be awaited from any coroutine.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "infera/common/status.h"
#include "infera/engine/engine_core.h"
#include "infera/http/awaitable.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace infera::mock {

class KvTransfers {
 public:
  struct Options {
    std::chrono::milliseconds timeout{120'000};
    size_t max_entries = 65536;  // offers and waiting pulls at once
  };
  // `release` frees a core request's held blocks (EngineRunner::release_held).
  KvTransfers(boost::asio::io_context& io, Options options,
              std::function<void(engine::RequestId)> release);
  ~KvTransfers();
  KvTransfers(const KvTransfers&) = delete;
  KvTransfers& operator=(const KvTransfers&) = delete;

  // The core request `id` holds `blocks` blocks for `key`. Without `wait_until_taken`, returns
  // at once (an untaken offer is released after the timeout); with it, returns ok once the
  // blocks were taken, or DeadlineExceeded (released) when the timeout passed first, or
  // Cancelled (released) when the caller was cancelled. FailedPrecondition for a key already
  // on offer (the new blocks are released).
  net::awaitable<Status> offer(std::string key, engine::RequestId id, uint32_t blocks,
                               bool wait_until_taken);

  // Takes `key`'s blocks (freeing them here) and returns how many there were. With
  // `wait_for_offer`, a key not offered yet is waited for, up to the timeout
  // (DeadlineExceeded); without, it is NotFound.
  net::awaitable<Result<uint32_t>> take(std::string key, bool wait_for_offer);

  // Offers not taken yet (for tests and metrics).
  size_t pending() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace infera::mock
