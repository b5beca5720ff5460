#include "infera/sim/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <boost/json.hpp>

namespace infera::sim {

double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

void RunRecorder::request(double arrival_s, double first_token_s, double finish_s,
                          uint32_t prompt_tokens, uint32_t cached_tokens, uint32_t output_tokens,
                          uint32_t worker) {
  arrival_s_.push_back(arrival_s);
  ttft_s_.push_back(first_token_s - arrival_s);
  e2e_s_.push_back(finish_s - arrival_s);
  prompt_tokens_ += prompt_tokens;
  cached_tokens_ += cached_tokens;
  output_tokens_ += output_tokens;
  if (worker < requests_per_worker_.size()) ++requests_per_worker_[worker];
  if (first_arrival_s_ < 0 || arrival_s < first_arrival_s_) first_arrival_s_ = arrival_s;
  last_finish_s_ = std::max(last_finish_s_, finish_s);
}

PolicyReport RunRecorder::summarize(double window_s) const {
  PolicyReport r;
  if (window_s > 0 && !ttft_s_.empty()) {
    std::vector<std::vector<double>> by_window;
    for (size_t i = 0; i < ttft_s_.size(); ++i) {
      const auto w = static_cast<size_t>((arrival_s_[i] - first_arrival_s_) / window_s);
      if (w >= by_window.size()) by_window.resize(w + 1);
      by_window[w].push_back(ttft_s_[i]);
    }
    for (size_t w = 0; w < by_window.size(); ++w) {
      PolicyReport::Window win;
      win.start_s = static_cast<double>(w) * window_s;
      win.requests = by_window[w].size();
      win.ttft_p50_ms = quantile(by_window[w], 0.5) * 1e3;
      win.ttft_p99_ms = quantile(by_window[w], 0.99) * 1e3;
      r.windows.push_back(win);
    }
  }
  r.shed = shed_;
  std::vector<double> ttft = ttft_s_, e2e = e2e_s_;
  std::vector<double> itl(itl_s_.begin(), itl_s_.end());
  r.requests = ttft.size();
  r.errors = errors_;
  r.hit_ratio = prompt_tokens_ ? static_cast<double>(cached_tokens_) / static_cast<double>(prompt_tokens_) : 0;
  r.ttft_p50_ms = quantile(ttft, 0.5) * 1e3;
  r.ttft_p90_ms = quantile(ttft, 0.9) * 1e3;
  r.ttft_p99_ms = quantile(ttft, 0.99) * 1e3;
  r.itl_p50_ms = quantile(itl, 0.5) * 1e3;
  r.e2e_p50_ms = quantile(e2e, 0.5) * 1e3;
  r.duration_s = r.requests ? last_finish_s_ - first_arrival_s_ : 0;
  if (r.duration_s > 0) {
    r.throughput_rps = static_cast<double>(r.requests) / r.duration_s;
    r.output_tok_s = static_cast<double>(output_tokens_) / r.duration_s;
  }
  r.requests_per_worker = requests_per_worker_;
  uint64_t total = 0, most = 0;
  for (uint64_t n : requests_per_worker_) {
    total += n;
    most = std::max(most, n);
  }
  if (total > 0) {
    r.load_spread = static_cast<double>(most) /
                    (static_cast<double>(total) / static_cast<double>(requests_per_worker_.size()));
  }
  for (int p = 0; p <= 100; ++p) r.ttft_cdf_ms.push_back(quantile(ttft, p / 100.0) * 1e3);
  if (predicted_blocks_ > 0) {
    r.predicted_hit_ratio = static_cast<double>(predicted_hits_) / static_cast<double>(predicted_blocks_);
  }
  return r;
}

std::string to_json(const RunReport& report) {
  namespace json = boost::json;
  auto round = [](double v) { return std::isfinite(v) ? std::round(v * 1e4) / 1e4 : 0.0; };
  json::object policies;
  for (const auto& [name, p] : report.policies) {
    json::object o;
    o["hit_ratio"] = round(p.hit_ratio);
    o["ttft_p50_ms"] = round(p.ttft_p50_ms);
    o["ttft_p90_ms"] = round(p.ttft_p90_ms);
    o["ttft_p99_ms"] = round(p.ttft_p99_ms);
    o["itl_p50_ms"] = round(p.itl_p50_ms);
    o["e2e_p50_ms"] = round(p.e2e_p50_ms);
    o["throughput_rps"] = round(p.throughput_rps);
    o["output_tok_s"] = round(p.output_tok_s);
    o["load_spread"] = round(p.load_spread);
    o["errors"] = p.errors;
    o["shed"] = p.shed;
    o["requests"] = p.requests;
    o["duration_s"] = round(p.duration_s);
    json::array per_worker;
    for (uint64_t n : p.requests_per_worker) per_worker.push_back(n);
    o["requests_per_worker"] = std::move(per_worker);
    json::array cdf;
    for (double v : p.ttft_cdf_ms) cdf.push_back(round(v));
    o["ttft_cdf_ms"] = std::move(cdf);
    if (!p.windows.empty()) {
      json::array windows;
      for (const PolicyReport::Window& w : p.windows) {
        windows.push_back(json::object{{"start_s", round(w.start_s)},
                                       {"requests", w.requests},
                                       {"ttft_p50_ms", round(w.ttft_p50_ms)},
                                       {"ttft_p99_ms", round(w.ttft_p99_ms)}});
      }
      o["windows"] = std::move(windows);
    }
    if (p.predicted_hit_ratio >= 0) o["predicted_hit_ratio"] = round(p.predicted_hit_ratio);
    if (p.prefill_hit_ratio >= 0) {
      o["prefill_hit_ratio"] = round(p.prefill_hit_ratio);
      o["decode_hit_ratio"] = round(p.decode_hit_ratio);
      o["kv_pulled_blocks"] = p.kv_pulled_blocks;
    }
    if (p.decision_p50_us >= 0) {
      o["decision_p50_us"] = round(p.decision_p50_us);
      o["decision_p99_us"] = round(p.decision_p99_us);
    }
    if (p.index_bytes_per_worker >= 0) {
      o["index_bytes_per_worker"] = std::round(p.index_bytes_per_worker);
    }
    policies[name] = std::move(o);
  }
  json::object root;
  root["policies"] = std::move(policies);
  if (report.bounds) {
    json::object bounds{
        {"infinite_cache_hit_ratio", round(report.bounds->infinite_cache_hit_ratio)},
        {"pooled_lru_hit_ratio", round(report.bounds->pooled_lru_hit_ratio)}};
    if (report.bounds->ttft_lower_p50_ms >= 0) {
      bounds["ttft_lower_bound_p50_ms"] = round(report.bounds->ttft_lower_p50_ms);
      bounds["ttft_lower_bound_p90_ms"] = round(report.bounds->ttft_lower_p90_ms);
      bounds["ttft_lower_bound_p99_ms"] = round(report.bounds->ttft_lower_p99_ms);
    }
    root["bounds"] = std::move(bounds);
  }
  json::object settings;
  for (const auto& [k, v] : report.settings) settings[k] = v;
  root["settings"] = std::move(settings);
  return json::serialize(root) + "\n";
}

std::string format_table(const RunReport& report) {
  std::string out;
  char line[512];
  // Rows like "kv-aware:prefill-aware (8 routers, sync 5 ms)" widen the first column.
  int width = 22;
  for (const auto& [name, p] : report.policies) {
    width = std::max(width, static_cast<int>(std::min<size_t>(name.size(), 200)));
  }
  std::snprintf(line, sizeof(line), "%-*s %8s %10s %10s %10s %8s %9s %9s %10s %7s %6s\n", width,
                "policy", "hit", "ttft p50", "ttft p90", "ttft p99", "itl p50", "e2e p50", "req/s",
                "out tok/s", "spread", "errors");
  out += line;
  for (const auto& [name, p] : report.policies) {
    std::snprintf(line, sizeof(line),
                  "%-*s %7.1f%% %8.1fms %8.1fms %8.1fms %6.1fms %7.0fms %9.2f %10.0f %7.2f %6llu\n",
                  width, name.c_str(), p.hit_ratio * 100, p.ttft_p50_ms, p.ttft_p90_ms,
                  p.ttft_p99_ms, p.itl_p50_ms, p.e2e_p50_ms, p.throughput_rps, p.output_tok_s,
                  p.load_spread, static_cast<unsigned long long>(p.errors));
    out += line;
  }
  for (const auto& [name, p] : report.policies) {
    if (p.decision_p50_us < 0) continue;
    std::snprintf(line, sizeof(line),
                  "%-*s router: decision p50 %.1f us, p99 %.1f us (wall clock); index %.0f bytes "
                  "per worker\n",
                  width, name.c_str(), p.decision_p50_us, p.decision_p99_us,
                  p.index_bytes_per_worker);
    out += line;
  }
  for (const auto& [name, p] : report.policies) {
    if (p.shed == 0) continue;
    std::snprintf(line, sizeof(line), "%-22s shed: %llu requests refused with 429/503 (not errors)\n",
                  name.c_str(), static_cast<unsigned long long>(p.shed));
    out += line;
  }
  for (const auto& [name, p] : report.policies) {
    if (p.prefill_hit_ratio < 0) continue;
    std::snprintf(line, sizeof(line),
                  "%-22s stages: prefill hit %.1f%%, decode hit %.1f%%, %llu blocks pulled\n",
                  name.c_str(), p.prefill_hit_ratio * 100, p.decode_hit_ratio * 100,
                  static_cast<unsigned long long>(p.kv_pulled_blocks));
    out += line;
  }
  if (report.bounds) {
    std::snprintf(line, sizeof(line),
                  "bounds: infinite shared cache %.1f%%, pooled LRU of the fleet's capacity %.1f%%\n",
                  report.bounds->infinite_cache_hit_ratio * 100,
                  report.bounds->pooled_lru_hit_ratio * 100);
    out += line;
    if (report.bounds->ttft_lower_p50_ms >= 0) {
      std::snprintf(
          line, sizeof(line),
          "bounds: ttft on an idle engine with the infinite cache p50 %.1fms, p90 %.1fms, "
          "p99 %.1fms (no policy beats it)\n",
          report.bounds->ttft_lower_p50_ms, report.bounds->ttft_lower_p90_ms,
          report.bounds->ttft_lower_p99_ms);
      out += line;
    }
  }
  return out;
}

}  // namespace infera::sim
