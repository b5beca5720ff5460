#include "infera/sim/workload.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <fstream>
#include <numbers>
#include <numeric>
#include <optional>

#include "infera/common/random.h"

namespace infera::sim {
namespace {

constexpr uint32_t kTokenBase = 1000;
// [1000, 31000): ordinary tokens of every common vocabulary (Llama 2 has 32000; the mock
// engine without --tokenizer accepts ids below 32000).
constexpr uint32_t kTokenRange = 30000;

// Seeds for the different kinds of content never collide.
uint64_t key_of(uint64_t kind, uint64_t a, uint64_t b = 0) {
  uint64_t s = kind * 0x9E3779B97F4A7C15ULL ^ (a + 0x632BE59BD9B4E019ULL) * 0xBF58476D1CE4E5B9ULL ^
               (b + 0x85EBCA77C2B2AE63ULL) * 0x94D049BB133111EBULL;
  return splitmix64(s);
}

// Poisson arrivals at `rate` per second for `n` independent streams.
std::vector<double> poisson_arrivals(size_t n, double rate, Rng& rng) {
  std::vector<double> t(n);
  double now = 0;
  for (size_t i = 0; i < n; ++i) {
    t[i] = now;
    now += rate > 0 ? -std::log(1.0 - rng.uniform_double()) / rate : 0.0;
  }
  return t;
}

void finish(Workload& w) {
  std::stable_sort(w.requests.begin(), w.requests.end(),
                   [](const RequestSpec& a, const RequestSpec& b) { return a.arrival_s < b.arrival_s; });
}

// prefix-families and rag: 8 requests/s unless the options say otherwise.
constexpr double kDefaultRateRps = 8.0;

// The options' rate (else the workload's own), scaled.
double arrival_rate(const WorkloadOptions& o, double own_rps) {
  return o.rate_rps.value_or(own_rps) * o.rate_scale;
}

Workload prefix_families(const WorkloadOptions& o) {
  Workload w{"prefix-families", {}};
  Rng rng(o.seed);
  const uint32_t total = o.requests ? o.requests : o.groups * 16;
  // Each request draws its family uniformly, so families interleave as independent users do.
  const auto arrivals = poisson_arrivals(total, arrival_rate(o, kDefaultRateRps), rng);
  for (uint32_t i = 0; i < total; ++i) {
    RequestSpec r;
    r.id = i;
    r.arrival_s = arrivals[i];
    r.group = static_cast<uint32_t>(rng.uniform(o.groups));
    r.prompt.append_synth(key_of(1, o.seed, r.group), o.system_tokens);
    r.prompt.append_synth(key_of(2, o.seed, i), o.question_tokens);
    r.max_tokens = o.output_tokens;
    w.requests.push_back(std::move(r));
  }
  return w;
}

// Normal(0, 1) by Box-Muller (one of the pair; the generators here are not hot).
double normal(Rng& rng) {
  const double u1 = 1.0 - rng.uniform_double();  // (0, 1]: log is finite
  const double u2 = rng.uniform_double();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Lognormal with this median and log-space sigma, rounded and clamped to [lo, hi].
uint32_t lognormal(Rng& rng, double median, double sigma, uint32_t lo, uint32_t hi) {
  const double x = std::round(median * std::exp(sigma * normal(rng)));
  return static_cast<uint32_t>(std::clamp(x, static_cast<double>(lo), static_cast<double>(hi)));
}

double lognormal_s(Rng& rng, double median_s, double sigma) {
  return median_s * std::exp(sigma * normal(rng));
}

// 1, 2, 3, ... with P(n) = p (1 - p)^(n - 1), p = 1 / mean, at most `most`.
uint32_t geometric(Rng& rng, double mean, uint32_t most) {
  const double u = 1.0 - rng.uniform_double();  // (0, 1]
  const double n = 1.0 + std::floor(std::log(u) / std::log(1.0 - 1.0 / mean));
  return static_cast<uint32_t>(std::min(n, static_cast<double>(most)));
}

// Every prompt of a session workload fits one model context with its output (Llama 3 and Qwen
// 2.5 serve 128k tokens); a conversation that would outgrow it ends there.
constexpr uint32_t kContextTokens = 131072;

// multi-turn: long-context chat sessions shaped like the "conversation" trace of Mooncake's
// FAST'25 release (kvcache-ai/Mooncake, FAST25-release/traces/conversation_trace.jsonl; its
// statistics as we have them: about 12,000 requests in one hour, 3.3-3.4 requests/s; input
// tokens p50 ~6,900, mean ~12,000, max ~126,000; output p50 ~350; every request's first
// 512-token block is the same). The trace has lengths and block ids only, so the session
// structure below is a model; its parameters were chosen so that the generated requests
// reproduce those statistics (workload_test.cc checks them).
constexpr uint32_t kChatRequests = 12000;
constexpr double kChatRateRps = 12000.0 / 3600;
constexpr uint32_t kChatSystemTokens = 512;  // the trace's one shared block
// A session opens with its own context (a document, a pasted file, a long first message):
// lognormal, median 2,800 tokens, sigma 1.65 (p90 ~23k, p99 ~130k: cut to the context window);
// this is the heavy tail.
constexpr double kChatContextMedian = 2800;
constexpr double kChatContextSigma = 1.65;
// Turns per session: geometric, mean 5 (so 20 % of sessions are a single request), at most 64.
constexpr double kChatMeanTurns = 5;
constexpr uint32_t kChatMaxTurns = 64;
// Each later turn adds the reply (max_tokens of the previous turn) and a new user message:
// lognormal, median 250 tokens, sigma 0.8 (a few hundred, sometimes a few thousand).
constexpr double kChatMessageMedian = 250;
constexpr double kChatMessageSigma = 0.8;
// Outputs: lognormal, median 350 tokens, sigma 0.6, at most 2,048.
constexpr double kChatOutputMedian = 350;
constexpr double kChatOutputSigma = 0.6;
constexpr uint32_t kChatMaxOutput = 2048;
// Think time between a reply and the next message: lognormal, median 30 s, sigma 0.8 (p10 ~11 s,
// p90 ~84 s), so that a five-turn session spans minutes.
constexpr double kChatThinkMedianS = 30;
constexpr double kChatThinkSigma = 0.8;

// agentic: agent sessions over one shared tool-description prompt (WorkloadOptions::tool_tokens).
// A step's prompt is the whole history; after it the model's output and the tool's result are
// appended, and the next step follows a short tool time. Some steps fan out: N parallel
// requests (best-of-N, parallel tool calls) that share the history and differ in a short
// suffix, released together; the step after them is a join that waits for all of them and
// reads all their outputs. Not fitted to a trace (no public agent trace has dependencies); the
// sizes follow what coding and tool-use agents send: a long shared tool prompt, a task, outputs
// of a few hundred tokens, tool results of hundreds to a few thousand.
constexpr uint32_t kAgentRequests = 4000;
// Sized so that 8 simulated workers (`infera sim --workers 8`, the default engine) step most of
// the time but keep up: TTFT p50 64 ms (kv-aware) to 77 ms (round-robin), ITL p50 11-12 ms,
// against 35-68 ms and 8 ms nearly idle (0.5/s).
constexpr double kAgentRateRps = 10;
// The user's task: lognormal, median 300 tokens, sigma 0.8.
constexpr double kAgentTaskMedian = 300;
constexpr double kAgentTaskSigma = 0.8;
// Steps per session: geometric, mean 10, at most 60; a fan-out and its join are two steps.
constexpr double kAgentMeanSteps = 10;
constexpr uint32_t kAgentMaxSteps = 60;
// The model's output (a tool call, a short plan): lognormal, median 150 tokens, sigma 0.7, at
// most 1,024.
constexpr double kAgentOutputMedian = 150;
constexpr double kAgentOutputSigma = 0.7;
constexpr uint32_t kAgentMaxOutput = 1024;
// A tool's result: lognormal, median 500 tokens, sigma 1.0 (p90 ~1,800), at most 8,192.
constexpr double kAgentToolMedian = 500;
constexpr double kAgentToolSigma = 1.0;
constexpr uint32_t kAgentMaxTool = 8192;
// Tool time before the next step: lognormal, median 0.8 s, sigma 0.9 (p10 ~0.25 s, p90 ~2.5 s).
constexpr double kAgentToolMedianS = 0.8;
constexpr double kAgentToolSigmaS = 0.9;
// The share of steps that fan out (never a session's first or last), into 4 to 8 siblings
// (uniform), each with its own suffix of 16 to 64 tokens (uniform).
constexpr double kAgentFanOut = 0.15;
constexpr uint32_t kAgentFanOutMin = 4;
constexpr uint32_t kAgentFanOutMax = 8;
constexpr uint32_t kAgentSuffixMin = 16;
constexpr uint32_t kAgentSuffixMax = 64;

// A generated session's requests in Workload::requests; until start_sessions() their arrival_s
// are offsets from the session's start.
struct Session {
  size_t first = 0;  // index of its first request
  size_t count = 0;
};

// Places sessions' start times (Poisson) so that `w`'s requests arrive at `rate` requests/s
// overall: sessions start at rate * sessions / requests per second. Offsets become arrivals.
void start_sessions(Workload& w, const std::vector<Session>& sessions, double rate, Rng& rng) {
  if (sessions.empty()) return;
  const double session_rate =
      rate * static_cast<double>(sessions.size()) / static_cast<double>(w.requests.size());
  const auto starts = poisson_arrivals(sessions.size(), session_rate, rng);
  for (size_t s = 0; s < sessions.size(); ++s) {
    for (size_t i = sessions[s].first; i < sessions[s].first + sessions[s].count; ++i) {
      w.requests[i].arrival_s += starts[s];
    }
  }
}

Workload multi_turn(const WorkloadOptions& o) {
  Workload w{"multi-turn", {}};
  Rng rng(key_of(30, o.seed));
  const uint32_t total = o.requests ? o.requests : kChatRequests;
  w.requests.reserve(total);
  std::vector<Session> sessions;
  const uint64_t system_key = key_of(31, o.seed);
  while (w.requests.size() < total) {
    const uint32_t s = static_cast<uint32_t>(sessions.size());
    const uint64_t session_key = key_of(32, o.seed, s);
    sessions.push_back({w.requests.size(), 0});
    const uint32_t turns = geometric(rng, kChatMeanTurns, kChatMaxTurns);
    Prompt history;
    history.append_synth(system_key, kChatSystemTokens);
    const uint32_t first_output =
        lognormal(rng, kChatOutputMedian, kChatOutputSigma, 1, kChatMaxOutput);
    history.append_synth(key_of(33, session_key),
                         lognormal(rng, kChatContextMedian, kChatContextSigma, 1,
                                   kContextTokens - kChatSystemTokens - first_output));
    double offset_s = 0;
    std::vector<uint64_t> previous;
    uint32_t output = first_output;
    for (uint32_t turn = 0; turn < turns && w.requests.size() < total; ++turn) {
      double think_s = 0;
      if (turn > 0) {
        // The reply the previous turn asked for, then the user's next message.
        history.append_synth(key_of(34, session_key, uint64_t{turn} * 2),
                             w.requests.back().max_tokens);
        history.append_synth(
            key_of(34, session_key, uint64_t{turn} * 2 + 1),
            lognormal(rng, kChatMessageMedian, kChatMessageSigma, 1, kContextTokens));
        output = lognormal(rng, kChatOutputMedian, kChatOutputSigma, 1, kChatMaxOutput);
        think_s = lognormal_s(rng, kChatThinkMedianS, kChatThinkSigma);
        if (history.size() + output > kContextTokens) break;  // the context window is full
      }
      offset_s += think_s;  // open-loop estimate; drivers honour `after`
      RequestSpec r;
      r.id = w.requests.size();
      r.arrival_s = offset_s;
      r.prompt = history;
      r.max_tokens = output;
      r.group = s;
      r.after = std::move(previous);
      r.think_s = think_s;
      previous = {r.id};
      w.requests.push_back(std::move(r));
      ++sessions.back().count;
    }
  }
  start_sessions(w, sessions, arrival_rate(o, kChatRateRps), rng);
  return w;
}

Workload agentic(const WorkloadOptions& o) {
  Workload w{"agentic", {}};
  Rng rng(key_of(40, o.seed));
  const uint32_t total = o.requests ? o.requests : kAgentRequests;
  w.requests.reserve(total);
  std::vector<Session> sessions;
  const uint64_t tools_key = key_of(41, o.seed);
  auto output_tokens = [&] {
    return lognormal(rng, kAgentOutputMedian, kAgentOutputSigma, 1, kAgentMaxOutput);
  };
  while (w.requests.size() < total) {
    const uint32_t s = static_cast<uint32_t>(sessions.size());
    const uint64_t session_key = key_of(42, o.seed, s);
    sessions.push_back({w.requests.size(), 0});
    const uint32_t steps = geometric(rng, kAgentMeanSteps, kAgentMaxSteps);
    Prompt history;
    history.append_synth(tools_key, o.tool_tokens);
    history.append_synth(key_of(43, session_key),
                         lognormal(rng, kAgentTaskMedian, kAgentTaskSigma, 1, kContextTokens / 4));
    double offset_s = 0, think_s = 0;
    std::vector<uint64_t> previous;
    auto add = [&](Prompt prompt, uint32_t max_tokens) {
      RequestSpec r;
      r.id = w.requests.size();
      r.arrival_s = offset_s;
      r.prompt = std::move(prompt);
      r.max_tokens = max_tokens;
      r.group = s;
      r.after = previous;
      r.think_s = think_s;
      const uint64_t id = r.id;
      w.requests.push_back(std::move(r));
      ++sessions.back().count;
      return id;
    };
    bool joining = false;  // the previous step fanned out: this one joins it
    for (uint32_t step = 0; step < steps && w.requests.size() < total; ++step) {
      const uint64_t step_key = key_of(44, session_key, step);
      if (!joining && step > 0 && step + 1 < steps && rng.uniform_double() < kAgentFanOut) {
        const auto n = static_cast<uint32_t>(kAgentFanOutMin +
                                             rng.uniform(kAgentFanOutMax - kAgentFanOutMin + 1));
        std::vector<uint64_t> siblings;
        Prompt joined = history;  // the join reads every sibling's output
        for (uint32_t b = 0; b < n && w.requests.size() < total; ++b) {
          Prompt prompt = history;
          prompt.append_synth(
              key_of(45, step_key, b),
              static_cast<uint32_t>(kAgentSuffixMin +
                                    rng.uniform(kAgentSuffixMax - kAgentSuffixMin + 1)));
          const uint32_t max_tokens = output_tokens();
          if (prompt.size() + max_tokens > kContextTokens) break;
          siblings.push_back(add(std::move(prompt), max_tokens));
          joined.append_synth(key_of(46, step_key, b), max_tokens);
        }
        if (siblings.empty()) break;
        history = std::move(joined);
        previous = std::move(siblings);
        joining = true;
      } else {
        const uint32_t max_tokens = output_tokens();
        if (history.size() + max_tokens > kContextTokens) break;
        previous = {add(history, max_tokens)};
        // The model's output (a tool call), then the tool's result.
        history.append_synth(key_of(47, step_key), max_tokens);
        history.append_synth(key_of(48, step_key),
                             lognormal(rng, kAgentToolMedian, kAgentToolSigma, 1, kAgentMaxTool));
        joining = false;
      }
      think_s = lognormal_s(rng, kAgentToolMedianS, kAgentToolSigmaS);
      offset_s += think_s;
    }
  }
  start_sessions(w, sessions, arrival_rate(o, kAgentRateRps), rng);
  return w;
}

Workload rag(const WorkloadOptions& o) {
  Workload w{"rag", {}};
  Rng rng(o.seed);
  const uint32_t total = o.requests ? o.requests : 256;
  // Zipf(1.1) popularity over the document pool.
  std::vector<double> cdf(o.documents);
  double sum = 0;
  for (uint32_t d = 0; d < o.documents; ++d) {
    sum += 1.0 / std::pow(static_cast<double>(d + 1), 1.1);
    cdf[d] = sum;
  }
  const auto arrivals = poisson_arrivals(total, arrival_rate(o, kDefaultRateRps), rng);
  for (uint32_t i = 0; i < total; ++i) {
    RequestSpec r;
    r.id = i;
    r.arrival_s = arrivals[i];
    r.prompt.append_synth(key_of(5, o.seed), 256);  // the RAG system prompt
    uint32_t first_doc = 0;
    for (uint32_t k = 0; k < o.docs_per_request; ++k) {
      const double x = rng.uniform_double() * sum;
      const uint32_t d = static_cast<uint32_t>(std::lower_bound(cdf.begin(), cdf.end(), x) - cdf.begin());
      if (k == 0) first_doc = d;
      r.prompt.append_synth(key_of(6, o.seed, d), o.document_tokens);
    }
    r.prompt.append_synth(key_of(7, o.seed, i), o.question_tokens);
    r.group = first_doc;
    r.max_tokens = o.output_tokens;
    w.requests.push_back(std::move(r));
  }
  return w;
}

}  // namespace

uint64_t Workload::prompt_tokens() const {
  uint64_t n = 0;
  for (const auto& r : requests) n += r.prompt.size();
  return n;
}

uint64_t Workload::output_tokens() const {
  uint64_t n = 0;
  for (const auto& r : requests) n += r.max_tokens;
  return n;
}

Dependencies::Dependencies(const Workload& workload)
    : remaining_(workload.requests.size(), 0), independent_(workload.requests.size(), true) {
  std::unordered_map<uint64_t, size_t> index_of;
  index_of.reserve(workload.requests.size());
  for (size_t i = 0; i < workload.requests.size(); ++i) {
    index_of.emplace(workload.requests[i].id, i);
  }
  for (size_t i = 0; i < workload.requests.size(); ++i) {
    const RequestSpec& r = workload.requests[i];
    for (uint64_t id : r.after) {
      if (id == r.id || !index_of.contains(id)) continue;  // could never finish first: ignored
      dependents_[id].push_back(i);
      ++remaining_[i];
      independent_[i] = false;
    }
  }
}

void Dependencies::finished(uint64_t id, std::vector<size_t>& ready) {
  auto it = dependents_.find(id);
  if (it == dependents_.end()) return;
  for (size_t d : it->second) {
    if (--remaining_[d] == 0) ready.push_back(d);
  }
  dependents_.erase(it);  // a second report of `id` finds nothing
}

namespace {
void append_synth_tokens(uint64_t key, size_t count, std::vector<uint32_t>& out) {
  Rng rng(key);
  for (size_t i = 0; i < count; ++i) {
    out.push_back(kTokenBase + static_cast<uint32_t>(rng.uniform(kTokenRange)));
  }
}
}  // namespace

void synth_tokens(uint64_t key, size_t count, std::vector<uint32_t>& out) {
  out.clear();
  append_synth_tokens(key, count, out);
}

void Prompt::append_synth(uint64_t key, uint32_t count) {
  if (count == 0) return;
  runs_.push_back(Run{key, count});
  size_ += count;
}

void Prompt::tokens(std::vector<uint32_t>& out, size_t count) const {
  count = std::min(count, size_);
  out.clear();
  out.reserve(count);
  out.insert(out.end(), literal_.begin(),
             literal_.begin() + static_cast<std::ptrdiff_t>(std::min(count, literal_.size())));
  for (const Run& run : runs_) {
    if (out.size() >= count) break;
    append_synth_tokens(run.key, std::min<size_t>(run.count, count - out.size()), out);
  }
}

std::vector<uint32_t> Prompt::tokens() const {
  std::vector<uint32_t> out;
  tokens(out);
  return out;
}

std::vector<std::string> workload_names() { return {"prefix-families", "multi-turn", "rag", "agentic"}; }

Result<Workload> make_workload(std::string_view name, const WorkloadOptions& o) {
  const double rate = o.rate_rps.value_or(0);
  if (rate < 0 || !std::isfinite(rate) || o.rate_scale < 0 ||
      !std::isfinite(o.rate_scale)) {
    return invalid_argument("rate and rate scale must be >= 0");
  }
  std::optional<Workload> w;
  if (name == "prefix-families") {
    if (o.groups == 0) return invalid_argument("prefix-families needs at least one group");
    w = prefix_families(o);
  } else if (name == "multi-turn") {
    w = multi_turn(o);
  } else if (name == "agentic") {
    // With a task of at most a quarter of the context and one output, a first step fits.
    if (o.tool_tokens > kContextTokens / 2) {
      return invalid_argument("agentic tool prompt must be at most " +
                              std::to_string(kContextTokens / 2) + " tokens");
    }
    w = agentic(o);
  } else if (name == "rag") {
    if (o.documents == 0) return invalid_argument("rag needs at least one document");
    w = rag(o);
  }
  if (w) {
    finish(*w);
    return std::move(*w);
  }
  return invalid_argument("unknown workload '" + std::string(name) +
                          "' (prefix-families, multi-turn, rag, agentic)");
}

Result<Workload> load_mooncake_trace(const std::filesystem::path& path, const TraceOptions& o) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read trace " + path.string());
  if (!(o.rate_scale > 0)) return invalid_argument("rate scale must be > 0");
  Workload w{"trace:" + path.filename().string(), {}};
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    if (o.max_requests && w.requests.size() >= o.max_requests) break;
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(line, ec);
    auto bad = [&](const std::string& why) {
      return invalid_argument(path.string() + ":" + std::to_string(line_no) + ": " + why);
    };
    if (ec || !v.is_object()) return bad("not a JSON object");
    const auto& o2 = v.get_object();
    const auto* ts = o2.if_contains("timestamp");
    const auto* in_len = o2.if_contains("input_length");
    const auto* out_len = o2.if_contains("output_length");
    const auto* ids = o2.if_contains("hash_ids");
    if (!ts || !ts->is_number() || !in_len || !in_len->is_number() || !out_len ||
        !out_len->is_number() || !ids || !ids->is_array()) {
      return bad("needs timestamp, input_length, output_length, hash_ids");
    }
    RequestSpec r;
    r.id = w.requests.size();
    r.arrival_s = ts->to_number<double>() / 1000.0 / o.rate_scale;
    const auto input = in_len->to_number<uint64_t>();
    r.max_tokens = static_cast<uint32_t>(std::max<uint64_t>(1, out_len->to_number<uint64_t>()));
    const auto& hash_ids = ids->get_array();
    if (input > uint64_t{hash_ids.size()} * o.block_tokens || input > (1u << 22)) {
      return bad("input_length does not fit its hash_ids");
    }
    for (size_t b = 0; b < hash_ids.size() && r.prompt.size() < input; ++b) {
      if (!hash_ids[b].is_number()) return bad("hash_ids must be integers");
      // The last block is cut: a shorter run of the key is the start of the full block.
      const auto take = static_cast<uint32_t>(std::min<uint64_t>(o.block_tokens, input - r.prompt.size()));
      r.prompt.append_synth(key_of(9, o.seed, hash_ids[b].to_number<uint64_t>()), take);
    }
    r.group = hash_ids.empty() ? 0 : hash_ids[0].to_number<uint32_t>();
    w.requests.push_back(std::move(r));
  }
  finish(w);
  return w;
}

}  // namespace infera::sim
