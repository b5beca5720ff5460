#include "infera/bench/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

#include <boost/json.hpp>

#include "infera/common/random.h"

namespace infera::bench {
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

Workload prefix_families(const WorkloadOptions& o) {
  Workload w{"prefix-families", {}};
  Rng rng(o.seed);
  const uint32_t total = o.requests ? o.requests : o.groups * 16;
  // Each request draws its family uniformly, so families interleave as independent users do.
  const auto arrivals = poisson_arrivals(total, o.rate_rps, rng);
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

// Sessions whose prompt grows each turn: turn k = turn k-1's prompt + a reply + a new message.
Workload sessions(const WorkloadOptions& o, std::string name, uint32_t shared_system_tokens,
                  uint64_t kind) {
  Workload w{std::move(name), {}};
  Rng rng(o.seed);
  const uint32_t num_sessions = o.requests ? std::max(1u, o.requests / std::max(1u, o.turns)) : 16;
  const auto starts = poisson_arrivals(num_sessions, o.rate_rps / std::max(1u, o.turns), rng);
  uint64_t id = 0;
  for (uint32_t s = 0; s < num_sessions; ++s) {
    Prompt history;
    // Agentic loops share one long tool-description prompt across sessions; chats have their own.
    history.append_synth(shared_system_tokens ? key_of(kind, o.seed) : key_of(kind, o.seed, s + 1),
                         shared_system_tokens ? shared_system_tokens : o.system_tokens / 4);
    std::optional<uint64_t> prev;
    double t = starts[s];
    for (uint32_t turn = 0; turn < o.turns; ++turn) {
      if (turn > 0) {
        history.append_synth(key_of(kind + 10, s, uint64_t{turn} * 2 + 1), o.output_tokens);
      }
      history.append_synth(key_of(kind + 20, s, uint64_t{turn} * 2), o.turn_tokens);
      RequestSpec r;
      r.id = id++;
      r.arrival_s = t;
      r.prompt = history;
      r.max_tokens = o.output_tokens;
      r.group = s;
      r.after = prev;
      r.think_s = turn > 0 ? o.think_s : 0;
      prev = r.id;
      t += o.think_s;  // open-loop estimate; drivers honour `after`
      w.requests.push_back(std::move(r));
    }
  }
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
  const auto arrivals = poisson_arrivals(total, o.rate_rps, rng);
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

void Prompt::tokens(std::vector<uint32_t>& out) const {
  out.clear();
  out.reserve(size_);
  out.insert(out.end(), literal_.begin(), literal_.end());
  for (const Run& run : runs_) append_synth_tokens(run.key, run.count, out);
}

std::vector<uint32_t> Prompt::tokens() const {
  std::vector<uint32_t> out;
  tokens(out);
  return out;
}

std::vector<std::string> workload_names() { return {"prefix-families", "multi-turn", "rag", "agentic"}; }

Result<Workload> make_workload(std::string_view name, const WorkloadOptions& o) {
  if (o.rate_rps < 0 || !std::isfinite(o.rate_rps)) return invalid_argument("rate must be >= 0");
  std::optional<Workload> w;
  if (name == "prefix-families") {
    if (o.groups == 0) return invalid_argument("prefix-families needs at least one group");
    w = prefix_families(o);
  } else if (name == "multi-turn") {
    w = sessions(o, "multi-turn", 0, 3);
  } else if (name == "agentic") {
    w = sessions(o, "agentic", std::max(o.system_tokens, 1u), 4);
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

}  // namespace infera::bench
