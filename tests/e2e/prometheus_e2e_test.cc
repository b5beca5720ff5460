// A real Prometheus server (Debian's) scrapes a live `infera server` in front of a mock engine:
// the exposition parses in Prometheus itself (a malformed line fails the whole scrape), and
// PromQL over the scraped series returns what the test did: the requests by status and model,
// the build info, the process set. Prometheus is started on a free loopback port with its own
// config and data directory; every wait polls its HTTP API with a deadline. The Grafana
// dashboard of deploy/grafana is held to it: each panel's query runs there and returns series.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <regex>

#include "tests/e2e/e2e_support.h"

namespace infera::e2e {
namespace {

std::string url_encode(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", u);
      out += buf;
    }
  }
  return out;
}

class PrometheusProcess {
 public:
  // Scrapes `target` (HOST:PORT) every second as job "infera".
  explicit PrometheusProcess(const std::string& target)
      : dir_(fs::temp_directory_path() / ("infera_prometheus_" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "prometheus.yml")
        << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "scrape_configs:\n  - job_name: infera\n    static_configs:\n      - targets: ['" << target
        << "']\n";
    port_ = testing::free_port();
    SpawnOptions o;
    o.stdout_path = (dir_ / "log").string();
    o.stderr_path = "stdout";
    auto p = Subprocess::spawn({"prometheus", "--config.file=" + (dir_ / "prometheus.yml").string(),
                                "--storage.tsdb.path=" + (dir_ / "data").string(),
                                "--web.listen-address=127.0.0.1:" + std::to_string(port_),
                                "--log.level=warn"},
                               o);
    if (!p.ok()) {
      ADD_FAILURE() << "prometheus: " << p.status().to_string() << " (scripts/install-deps installs it)";
      return;
    }
    process_ = std::move(*p);
  }
  ~PrometheusProcess() {
    process_.stop(Ms(5000));
    fs::remove_all(dir_);
  }

  // The value of an instant query's single result; nullopt when it has none (or Prometheus
  // does not answer yet).
  std::optional<double> query(const std::string& promql) const {
    const Reply r = get(port_, "/api/v1/query?query=" + url_encode(promql));
    if (r.status != 200) return std::nullopt;
    const json::value v = parse_json(r.body);
    const json::value* result = find(v, "data/result");
    if (result == nullptr || !result->is_array() || result->get_array().size() != 1) return std::nullopt;
    const json::value* value = find(result->get_array()[0], "value/1");
    if (value == nullptr || !value->is_string()) return std::nullopt;
    return std::strtod(std::string(value->get_string()).c_str(), nullptr);
  }
  // Waits until `promql` has a single result equal to `want`.
  bool sees(const std::string& promql, double want) const {
    return eventually([&] { return query(promql) == want; }, Ms(60'000));
  }
  std::string log() const { return read_text(dir_ / "log"); }
  uint16_t port() const { return port_; }

 private:
  fs::path dir_;
  uint16_t port_ = 0;
  Subprocess process_;
};

TEST(PrometheusE2eTest, ARealPrometheusScrapesTheServerAndPromQlSeesTheRequests) {
  auto e0 = start_engine("prom_e0", {"--speedup-ratio", "100"});
  ASSERT_TRUE(e0->ready());
  auto server = start_server("prom_server", {"--worker", e0->worker_flag()});
  ASSERT_TRUE(server->ready()) << server->log();
  const uint16_t s = server->port();
  ASSERT_TRUE(eventually([&] { return fleet_is(s, {e0->id()}); })) << server->log();
  PrometheusProcess prometheus("127.0.0.1:" + std::to_string(s));

  // The target is up: every scrape parsed.
  ASSERT_TRUE(prometheus.sees(R"(up{job="infera"})", 1)) << prometheus.log();
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(post(s, "/v1/completions", completion_body(token_ids(40 + static_cast<uint64_t>(i), 64), 2)).status, 200);
  }
  EXPECT_EQ(post(s, "/v1/completions", R"({"model":"nope","prompt":"x"})").status, 404);

  EXPECT_TRUE(prometheus.sees(R"(sum(infera_requests_total{job="infera",status="200",model="m"}))", 5))
      << prometheus.query(R"(sum(infera_requests_total{status="200"}))").value_or(-1) << "\n" << prometheus.log();
  EXPECT_TRUE(prometheus.sees(R"(sum(infera_requests_total{job="infera",status="404",model=""}))", 1));
  EXPECT_TRUE(prometheus.sees(R"(sum(infera_request_duration_seconds_count{job="infera",model="m"}))", 5));
  EXPECT_TRUE(prometheus.sees(R"(count(infera_worker_cached_blocks{job="infera"}))", 1));
  EXPECT_TRUE(prometheus.sees(R"(infera_build_info{job="infera"})", 1));
  EXPECT_TRUE(prometheus.sees(R"(count(process_resident_memory_bytes{job="infera"} > 1e6))", 1));
  EXPECT_TRUE(prometheus.sees(R"(count(process_open_fds{job="infera"} < process_max_fds{job="infera"}))", 1));
  // The last scrape took every sample the server offered, none rejected.
  EXPECT_TRUE(prometheus.sees(R"(count(scrape_samples_scraped{job="infera"} > 100))", 1));
  // A stream, for the inter-token latency panel (whole answers have no gaps between tokens).
  ASSERT_EQ(post(s, "/v1/completions", completion_body(token_ids(50, 64), 4, /*stream=*/true)).status, 200);
  EXPECT_TRUE(prometheus.sees(R"(sum(infera_generation_tokens_total{job="infera",model="m"}))", 5 * 2 + 4));

  // The Grafana dashboard (deploy/grafana): every panel's query is valid PromQL over documented
  // metrics and, with this traffic, returns series.
  const json::value dashboard = parse_json(read_text(fs::path(INFERA_SOURCE_DIR) / "deploy/grafana/infera-dashboard.json"));
  const std::string documented = read_text(fs::path(INFERA_SOURCE_DIR) / "docs/metrics.md");
  const std::regex metric(R"(\b((?:infera|process)_[a-z_]+?)(?:_bucket|_count|_sum)?\b)");
  size_t queries = 0;
  for (const json::value& panel : find(dashboard, "panels")->get_array()) {
    for (const json::value& target : find(panel, "targets")->get_array()) {
      std::string expr = string_at(target, "expr");
      for (auto at = expr.find("$job"); at != std::string::npos; at = expr.find("$job")) expr.replace(at, 4, "infera");
      for (auto at = expr.find("$__rate_interval"); at != std::string::npos; at = expr.find("$__rate_interval")) {
        expr.replace(at, 16, "1m");
      }
      for (std::sregex_iterator m(expr.begin(), expr.end(), metric), end; m != end; ++m) {
        EXPECT_NE(documented.find("`" + (*m)[1].str() + "`"), std::string::npos)
            << (*m)[1].str() << " (in the dashboard) is not in docs/metrics.md";
      }
      EXPECT_TRUE(eventually([&] {
        const Reply r = get(prometheus.port(), "/api/v1/query?query=" + url_encode(expr));
        const json::value v = parse_json(r.body);
        const json::value* result = find(v, "data/result");
        return r.status == 200 && result != nullptr && result->is_array() && !result->get_array().empty();
      }, Ms(60'000))) << string_at(panel, "title") << ": " << expr;
      ++queries;
    }
  }
  EXPECT_GE(queries, 12u);
}

}  // namespace
}  // namespace infera::e2e
