// The request and answer bodies of a disaggregated exchange (shared/wire/KV_EVENTS.md section 4),
// as pure functions of their inputs: what the gateway sends each stage's worker, and what it
// reads back from a prefill answer. No I/O, no state; every function is unit-tested
// (bodies_test.cc). Inputs are bodies the gateway has validated already; a body that is not a
// JSON object anyway comes back unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infera/common/status.h"
#include "infera/http/message.h"

namespace infera::proxy {

// vLLM's prefill call (as its disaggregation proxy sends it): the client's request with one
// output token, no stream, and kv_transfer_params asking the worker to keep the prompt's KV
// blocks for a remote decode.
std::string prefill_body(std::string_view client_body);

// The client's body, byte for byte, plus `fields` (name, JSON text) before its closing brace. A
// body that already has one of the names is re-serialized with the fields replacing its own.
std::string with_fields(std::string_view client_body,
                        const std::vector<std::pair<std::string_view, std::string>>& fields);

// vLLM's decode call: the client's body plus "kv_transfer_params": <params> (a JSON object).
std::string decode_body(std::string_view client_body, std::string_view params);

// SGLang's body for both workers of a pair: the client's, plus the prefill worker's bootstrap
// server (`host` as in its URL, IPv6 bracketed; `port`, or null when 0: it registered none)
// and the transfer session's room.
std::string bootstrap_body(std::string_view client_body, std::string_view host, uint32_t port,
                           uint64_t room);

// The bootstrap host of a worker id "host:port" ("[v6]:port" keeps the brackets, as SGLang's
// router sends it).
std::string_view bootstrap_host(std::string_view worker_id);

// A prefill answer's kv_transfer_params, serialized; nullopt when absent, null or not an object
// (the decode worker then computes the prompt itself).
std::optional<std::string> transfer_params(std::string_view answer_body);

// Whether a prefill answer is good: 2xx and, when streamed, without an OpenAI error event.
Status check_prefill_answer(const http::Response& answer);

}  // namespace infera::proxy
