// Workloads for `infera bench` and `infera sim` (docs/contracts.md section 10): seeded generators
// of prefix-sharing request streams (prefix families, multi-turn chat, RAG, agentic loops) and the
// Mooncake trace replay. A workload is a list of requests with prompts (as recipes, see Prompt),
// output lengths, open-loop arrival times and, for conversations and agents, dependencies on
// earlier requests (see Dependencies). The same workload object drives real HTTP (bench) and
// virtual time (sim). Pure data; any thread (a Dependencies object belongs to one driver).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "infera/common/status.h"

namespace infera::sim {

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
  // The token ids, or the first `count` of them (replaces `out`'s content).
  void tokens(std::vector<uint32_t>& out, size_t count = SIZE_MAX) const;
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
  uint64_t id = 0;          // unique within its workload
  double arrival_s = 0;     // open-loop arrival, seconds from the start (an estimate if `after`)
  Prompt prompt;            // token ids, made on demand
  uint32_t max_tokens = 0;  // output length (sent with ignore_eos)
  uint32_t group = 0;       // prefix family, session or document set, for reports
  // Empty: independent, sent at arrival_s. Otherwise sent think_s after the last of these
  // requests (by id) has finished, failed ones included: the previous turn of a conversation,
  // or every sibling of an agent's fan-out (a join).
  std::vector<uint64_t> after;
  double think_s = 0;  // seconds
};

struct Workload {
  std::string name;
  std::vector<RequestSpec> requests;  // sorted by arrival_s
  // Token totals, for reports and sanity checks.
  uint64_t prompt_tokens() const;
  uint64_t output_tokens() const;
};

// Sizes and rates. multi-turn and agentic have shapes of their own (workload.cc: the
// distributions and what they are fitted to); of these options they follow `requests`, `seed`,
// `tool_tokens` (agentic) and `rate_rps` when it is set. For them both count every
// request, later turns and fan-out siblings included: `requests` N gives N requests (the last
// session cut short), and sessions start (Poisson) so that the N arrive over N / rate seconds.
struct WorkloadOptions {
  uint32_t requests = 0;    // 0: the workload's default size
  // Poisson arrival rate, requests/s; unset: the workload's own (8 for prefix-families and rag;
  // multi-turn and agentic: workload.cc). rate_scale multiplies either.
  std::optional<double> rate_rps;
  double rate_scale = 1.0;
  uint64_t seed = 1;
  // prefix-families: G groups x M requests share a P-token system prompt plus a Q-token question
  uint32_t groups = 8;
  uint32_t system_tokens = 2048;
  uint32_t question_tokens = 128;
  uint32_t output_tokens = 64;
  // agentic: the tool-description prompt every session shares (tokens)
  uint32_t tool_tokens = 4096;
  // rag: a pool of documents, each request reads `docs_per_request` of them (Zipf popularity)
  uint32_t documents = 32;
  uint32_t document_tokens = 1024;
  uint32_t docs_per_request = 2;
};

// "prefix-families", "multi-turn", "rag" or "agentic".
Result<Workload> make_workload(std::string_view name, const WorkloadOptions& options);
std::vector<std::string> workload_names();

// Which requests become ready as others finish (RequestSpec::after, all of them): a driver
// sends the independent ones at their arrival and the others when finished() reports them.
// A dependency on an id the workload does not hold, or on the request itself, is ignored (a
// request with no other dependency is independent), so a bad `after` cannot stall a run; the
// ids must not form cycles (make_workload's depend only on earlier requests). Not thread-safe.
class Dependencies {
 public:
  explicit Dependencies(const Workload& workload);

  // Request `index` (into workload.requests) waits for nobody: send it at its arrival_s.
  bool independent(size_t index) const { return independent_[index]; }
  // Request `id` (RequestSpec::id) finished or failed: appends the indices of the requests
  // whose last dependency it was. Each request is reported at most once; independent ones
  // never. A second call for the same id reports nothing.
  void finished(uint64_t id, std::vector<size_t>& ready);

 private:
  std::unordered_map<uint64_t, std::vector<size_t>> dependents_;  // id -> waiting indices
  std::vector<uint32_t> remaining_;  // per request: dependencies not finished yet
  std::vector<bool> independent_;
};

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

}  // namespace infera::sim
