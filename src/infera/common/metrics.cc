#include "infera/common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "infera/common/bits.h"
#include "infera/common/check.h"

namespace infera::metrics {
namespace {

bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

void append_number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    const int n = std::snprintf(buf, sizeof(buf), "%.0f", v);
    out.append(buf, static_cast<size_t>(n));
  } else {
    // Shortest text that parses back to the same double (0.1, not 0.10000000000000001).
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof(buf), v);
    out.append(buf, r.ptr);
  }
}

void append_escaped(std::string& out, std::string_view v) {
  for (const char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

void append_labels(std::string& out, const Labels& labels, std::string_view extra_key = {},
                   std::string_view extra_value = {}) {
  if (labels.empty() && extra_key.empty()) return;
  out += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    append_escaped(out, v);
    out += '"';
  }
  if (!extra_key.empty()) {
    if (!first) out += ',';
    out += extra_key;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  INFERA_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()));
}

void Histogram::observe(double v) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                       bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

double Histogram::quantile(double q) const {
  const uint64_t total = count();
  if (total == 0) return 0;
  const double rank = q * static_cast<double>(total);
  uint64_t seen = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    const uint64_t c = bucket_count(i);
    if (c > 0 && static_cast<double>(seen + c) >= rank) {
      const double lo = i == 0 ? 0.0 : bounds_[i - 1];
      if (i == bounds_.size()) return lo;  // +Inf bucket: the best we know is its lower edge
      const double hi = bounds_[i];
      const double within = (rank - static_cast<double>(seen)) / static_cast<double>(c);
      return lo + (hi - lo) * std::clamp(within, 0.0, 1.0);
    }
    seen += c;
  }
  return bounds_.empty() ? 0 : bounds_.back();
}

std::vector<double> latency_buckets_seconds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,     1,      2.5,   5,      10,    20,   40,    60};
}

std::vector<double> duration_buckets_seconds(double max_seconds) {
  std::vector<double> out = latency_buckets_seconds();
  for (const double more : {120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0}) {
    if (more < max_seconds) out.push_back(more);
  }
  if (max_seconds > out.back()) out.push_back(max_seconds);
  return out;
}

std::vector<double> fast_latency_buckets_seconds() {
  return {1e-6,   2.5e-6, 5e-6,  1e-5,   2.5e-5, 5e-5, 1e-4,
          2.5e-4, 5e-4,   1e-3,  2.5e-3, 5e-3,   1e-2, 0.1};
}

std::vector<double> ratio_buckets() { return {0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}; }

Registry::Series& Registry::series(std::string_view name, std::string_view help, Type type,
                                   const Labels& labels, std::vector<double>* bounds) {
  INFERA_CHECK(valid_name(name));
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), Family{type, std::string(help), {}}).first;
  }
  Family& f = it->second;
  INFERA_CHECK(f.type == type);
  if (const auto found = f.by_labels.find(labels); found != f.by_labels.end()) {
    return *found->second;
  }
  auto s = std::make_unique<Series>();
  s->labels = labels;
  switch (type) {
    case Type::kCounter: s->counter = std::make_unique<Counter>(); break;
    case Type::kGauge: s->gauge = std::make_unique<Gauge>(); break;
    case Type::kHistogram:
      s->histogram = std::make_unique<Histogram>(std::move(*bounds));
      break;
  }
  f.by_labels.emplace(labels, s.get());
  f.series.push_back(std::move(s));
  return *f.series.back();
}

size_t Registry::LabelsHash::operator()(const Labels& labels) const {
  size_t h = labels.size();
  const std::hash<std::string> hash;
  for (const auto& [key, value] : labels) {
    h = (h ^ hash(key)) * kFibonacci;
    h = (h ^ hash(value)) * kFibonacci;
  }
  return h;
}

Counter& Registry::counter(std::string_view name, std::string_view help, const Labels& labels) {
  return *series(name, help, Type::kCounter, labels, nullptr).counter;
}

Gauge& Registry::gauge(std::string_view name, std::string_view help, const Labels& labels) {
  return *series(name, help, Type::kGauge, labels, nullptr).gauge;
}

Histogram& Registry::histogram(std::string_view name, std::string_view help,
                               std::vector<double> bounds, const Labels& labels) {
  return *series(name, help, Type::kHistogram, labels, &bounds).histogram;
}

void Registry::remove(std::string_view name, const Labels& labels) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return;
  Family& f = it->second;
  const auto found = f.by_labels.find(labels);
  if (found == f.by_labels.end()) return;
  const Series* gone = found->second;
  f.by_labels.erase(found);
  std::erase_if(f.series, [gone](const auto& x) { return x.get() == gone; });
}

void Registry::remove_labelled(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  for (auto& entry : families_) {
    Family& family = entry.second;  // not a structured binding: clang 14 cannot capture one
    std::erase_if(family.series, [&](const auto& x) {
      const bool labelled =
          std::any_of(x->labels.begin(), x->labels.end(),
                      [&](const auto& l) { return l.first == key && l.second == value; });
      if (labelled) family.by_labels.erase(x->labels);
      return labelled;
    });
  }
}

void Registry::add_collector(Collector fn) {
  std::lock_guard lock(mu_);
  collectors_.push_back(std::move(fn));
}

void Registry::render_into(std::string& out) const {
  std::lock_guard lock(mu_);
  for (const auto& [name, f] : families_) {
    if (f.series.empty()) continue;
    out += "# HELP " + name + " ";
    out += f.help;
    out += "\n# TYPE " + name + " ";
    out += f.type == Type::kCounter ? "counter" : f.type == Type::kGauge ? "gauge" : "histogram";
    out += '\n';
    for (const auto& s : f.series) {
      if (f.type != Type::kHistogram) {
        out += name;
        append_labels(out, s->labels);
        out += ' ';
        append_number(out, s->counter ? s->counter->value() : s->gauge->value());
        out += '\n';
        continue;
      }
      const Histogram& h = *s->histogram;
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= h.bounds().size(); ++i) {
        cumulative += h.bucket_count(i);
        std::string le;
        if (i == h.bounds().size()) {
          le = "+Inf";
        } else {
          append_number(le, h.bounds()[i]);
        }
        out += name + "_bucket";
        append_labels(out, s->labels, "le", le);
        out += ' ' + std::to_string(cumulative) + '\n';
      }
      out += name + "_sum";
      append_labels(out, s->labels);
      out += ' ';
      append_number(out, h.sum());
      out += '\n' + name + "_count";
      append_labels(out, s->labels);
      out += ' ' + std::to_string(h.count()) + '\n';
    }
  }
}

std::string Registry::render() const {
  std::vector<Collector> collectors;
  {
    std::lock_guard lock(mu_);
    collectors = collectors_;
  }
  std::string out;
  render_into(out);
  // Scrape-time values go into a scratch registry so they never linger as stale series.
  if (!collectors.empty()) {
    Registry scratch;
    for (const auto& c : collectors) c(scratch);
    scratch.render_into(out);
  }
  return out;
}

std::string_view Sample::label(std::string_view key) const {
  for (const auto& [k, v] : labels) {
    if (k == key) return v;
  }
  return {};
}

Result<std::vector<Sample>> parse_text(std::string_view text) {
  std::vector<Sample> out;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    auto bad = [&](const char* why) {
      return invalid_argument("metrics line " + std::to_string(line_no) + ": " + why + ": " +
                              std::string(line.substr(0, 200)));
    };
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = std::string(line.substr(0, i));
    if (!valid_name(s.name)) return bad("bad metric name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          return bad("bad label");
        }
        std::string key(line.substr(i, eq - i));
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        if (j >= line.size()) return bad("unterminated label value");
        s.labels.emplace_back(std::move(key), std::move(value));
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return bad("unterminated labels");
      ++i;
    }
    while (i < line.size() && line[i] == ' ') ++i;
    std::string_view rest = line.substr(i);
    const size_t sp = rest.find(' ');  // an optional timestamp follows
    std::string number(rest.substr(0, sp));
    if (number == "+Inf" || number == "Inf") {
      s.value = HUGE_VAL;
    } else if (number == "-Inf") {
      s.value = -HUGE_VAL;
    } else if (number == "NaN") {
      s.value = std::nan("");
    } else {
      char* end = nullptr;
      s.value = std::strtod(number.c_str(), &end);
      if (number.empty() || end != number.c_str() + number.size()) return bad("bad value");
    }
    out.push_back(std::move(s));
  }
  return out;
}

double sum_of(const std::vector<Sample>& samples, std::string_view name, const Labels& match) {
  double total = 0;
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) ok = ok && s.label(k) == v;
    if (ok) total += s.value;
  }
  return total;
}

}  // namespace infera::metrics
