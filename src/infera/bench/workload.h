// Workloads for `infera bench` and `infera sim` (ARCHITECTURE section 10): seeded generators of
// prefix-sharing request streams (prefix families, multi-turn chat, RAG, agentic loops) and the
// Mooncake trace replay. A workload is a list of requests with token-id prompts, output
// lengths (prompts as recipes, see Prompt), open-loop arrival times and, for conversations, a dependency on the previous turn.
// The same workload object drives real HTTP (bench) and virtual time (sim). Pure data; any
// thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infera/common/status.h"

namespace infera::bench {

// A prompt as the recipe that makes it: runs of synthetic tokens (synth_tokens(key, count);
// a run of `count` is the first `count` tokens of any longer run of the same key), after
// optional literal tokens. A 10-minute soak has half a million requests: as token ids their
// prompts took 2 GB of the bench's memory, as recipes tens of MB. Drivers make the tokens of one
// request when they send or simulate it.
class Prompt {
 public:
  Prompt() = default;
  explicit Prompt(std::vector<uint32_t> literal)
      : literal_(std::move(literal)), size_(literal_.size()) {}

  void append_synth(uint64_t key, uint32_t count);
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The token ids (replaces `out`'s content).
  void tokens(std::vector<uint32_t>& out) const;
  std::vector<uint32_t> tokens() const;

 private:
  struct Run {
    uint64_t key;
    uint32_t count;
  };
  std::vector<uint32_t> literal_;
  std::vector<Run> runs_;
  size_t size_ = 0;
};

struct RequestSpec {
  uint64_t id = 0;
  double arrival_s = 0;           // open-loop arrival, seconds from the start
  Prompt prompt;                  // token ids, made on demand
  uint32_t max_tokens = 0;        // output length (sent with ignore_eos)
  uint32_t group = 0;             // prefix family, session or document set, for reports
  std::optional<uint64_t> after;  // multi-turn: sent only once this request has finished...
  double think_s = 0;             // ...plus this pause
};

struct Workload {
  std::string name;
  std::vector<RequestSpec> requests;  // sorted by arrival_s
  // Token totals, for reports and sanity checks.
  uint64_t prompt_tokens() const;
  uint64_t output_tokens() const;
};

struct WorkloadOptions {
  uint32_t requests = 0;      // 0: the workload's default size
  double rate_rps = 8.0;      // Poisson arrival rate of independent requests/sessions
  uint64_t seed = 1;
  // prefix-families: G groups x M requests share a P-token system prompt plus a Q-token question
  uint32_t groups = 8;
  uint32_t system_tokens = 2048;
  uint32_t question_tokens = 128;
  uint32_t output_tokens = 64;
  // multi-turn / agentic: turns per session, tokens added per turn, pause between turns
  uint32_t turns = 6;
  uint32_t turn_tokens = 256;
  double think_s = 0.5;
  // rag: a pool of documents, each request reads `docs_per_request` of them (Zipf popularity)
  uint32_t documents = 32;
  uint32_t document_tokens = 1024;
  uint32_t docs_per_request = 2;
};

// "prefix-families", "multi-turn", "rag" or "agentic".
Result<Workload> make_workload(std::string_view name, const WorkloadOptions& options);
std::vector<std::string> workload_names();

// Mooncake trace replay (shared/traces/README.md): tokens synthesised per hash id so equal ids
// give equal 512-token blocks, the last block cut to input_length; arrivals are the trace's
// timestamps divided by rate_scale (2.0 replays twice as fast); max_tokens = output_length.
struct TraceOptions {
  double rate_scale = 1.0;
  uint32_t max_requests = 0;  // 0: all
  uint32_t block_tokens = 512;
  uint64_t seed = 1;
};
Result<Workload> load_mooncake_trace(const std::filesystem::path& path, const TraceOptions& options);

// Deterministic pseudo-random token ids for a key: equal keys give equal tokens. Ids stay in a
// range that is ordinary text in the tokenizers infera is tested with (no special tokens).
void synth_tokens(uint64_t key, size_t count, std::vector<uint32_t>& out);

}  // namespace infera::bench
