// The lifecycle of the real `infera server` under load, in front of real `infera engine mock`
// processes: SIGTERM with --drain-delay-s (/readyz fails at once, requests are still served for
// the delay, then the listener closes and in-flight streams finish within --shutdown-grace-s,
// exit 0), and repeated SIGHUPs that reload a --config file and an --admin-token-file while
// requests run. Client threads keep a few connections busy (streamed and whole answers, a fresh
// connection per request) and every request is accounted for: completed, or (SIGTERM only)
// refused with a connection error once the listener had closed, which a client can retry; any
// other outcome is lost and fails the test. Each test prints one FAULT_ROW (docs/reliability.md).
// Every wait polls another process's observable state with a deadline.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <regex>
#include <thread>

#include "tests/e2e/e2e_support.h"

namespace infera::e2e {
namespace {

using SteadyClock = std::chrono::steady_clock;
using TimePoint = SteadyClock::time_point;

double ms_between(TimePoint from, TimePoint to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// One request a client thread sent, with when it was sent and when its answer ended.
struct Sample {
  TimePoint start;
  TimePoint end;
  bool stream = false;
  Reply reply;
};

// A completed answer: 200 with choices, or a stream of chunks ending in [DONE] without an error.
bool completed(const Sample& s) {
  if (s.reply.status != 200 || !s.reply.complete) return false;
  if (!s.stream) return find(parse_json(s.reply.body), "choices") != nullptr;
  const std::vector<std::string> events = sse_data(s.reply.body);
  if (events.size() < 2 || events.back() != "[DONE]") return false;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    if (!string_at(parse_json(events[i]), "error/message").empty()) return false;
  }
  return true;
}

// Client threads, each sending one request after another on a fresh connection, until stop()
// or until a request gets no answer at all (the server no longer takes connections).
class Load {
 public:
  Load(uint16_t port, int streams, int whole, int stream_tokens, int whole_tokens) {
    for (int i = 0; i < streams + whole; ++i) {
      const bool stream = i < streams;
      threads_.emplace_back([this, port, stream, i, tokens = stream ? stream_tokens : whole_tokens] {
        for (uint64_t n = 0; !stop_.load(); ++n) {
          Sample s;
          s.stream = stream;
          s.start = SteadyClock::now();
          s.reply = post(port, "/v1/completions",
                         completion_body(token_ids(static_cast<uint64_t>(i) * 100000 + n, 64),
                                         tokens, stream),
                         Ms(30'000));
          s.end = SteadyClock::now();
          const bool answered = s.reply.status != 0;
          {
            std::lock_guard lock(mu_);
            samples_.push_back(std::move(s));
          }
          done_.fetch_add(1);
          if (stream) streams_done_.fetch_add(1);
          if (!answered) return;
        }
      });
    }
  }
  ~Load() { stop(); }

  int done() const { return done_.load(); }  // requests answered or failed, streams included
  int streams_done() const { return streams_done_.load(); }
  // Stops the threads (each after its current request) and returns every sample.
  std::vector<Sample> stop() {
    stop_ = true;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    std::lock_guard lock(mu_);
    return samples_;
  }
  // Waits for the threads to end on their own (the server went away), at most `deadline`.
  bool wait_ended(Ms deadline) {
    return eventually([&] { return ended_threads() == threads_.size(); }, deadline);
  }

 private:
  size_t ended_threads() {
    std::lock_guard lock(mu_);
    size_t ended = 0;
    for (const Sample& s : samples_) ended += s.reply.status == 0 ? 1 : 0;
    return ended;
  }

  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int> done_{0};
  std::atomic<int> streams_done_{0};
  std::mutex mu_;
  std::vector<Sample> samples_;  // guarded by mu_
};

// GET `target` on a fresh connection with an admin bearer token; the status (0: no answer).
int get_with_token(uint16_t port, std::string_view target, const std::string& token) {
  http::testing::RawConn c(port);
  if (!c.ok()) return 0;
  const std::string request = "GET " + std::string(target) +
                              " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                              "Authorization: Bearer " +
                              token + "\r\n\r\n";
  if (!c.send_all(request)) return 0;
  return c.read_response(Ms(10'000)).status;
}

// What a probe thread saw while it polled /readyz and /livez (and /metrics on the admin
// listener) as fast as they answered, until the main listener refused a connection and, for the
// admin listener, until that refused one too.
class ProbeWatch {
 public:
  // Between two polls: pacing, so that the probes leave the 2 cores to the load (nothing waits
  // on it).
  static constexpr Ms kProbePace{5};

  ProbeWatch(uint16_t port, uint16_t admin_port) {
    main_ = std::thread([this, port] {
      while (!stop_.load()) {
        const Reply ready = get(port, "/readyz");
        const TimePoint at = SteadyClock::now();
        if (ready.status == 0) {
          std::lock_guard lock(mu_);
          main_closed_ = at;
          return;
        }
        const Reply live = get(port, "/livez");
        {
          std::lock_guard lock(mu_);
          if (live.status != 200 && live.status != 0) ++livez_failures_;
          if (ready.status == 503 && !first_503_) {
            first_503_ = at;
            reason_ = string_at(parse_json(ready.body), "reason");
          }
          if (ready.status == 200 && first_503_) ++ready_after_503_;
        }
        std::this_thread::sleep_for(kProbePace);
      }
    });
    admin_ = std::thread([this, admin_port] {
      while (!stop_.load()) {
        const int status = get(admin_port, "/metrics").status;
        const TimePoint at = SteadyClock::now();
        if (status == 0) return;
        {
          std::lock_guard lock(mu_);
          if (status != 200) ++metrics_failures_;
          last_admin_metrics_ = at;
        }
        std::this_thread::sleep_for(kProbePace);
      }
    });
  }
  ~ProbeWatch() { stop(); }
  void join() {
    if (main_.joinable()) main_.join();
    if (admin_.joinable()) admin_.join();
  }
  void stop() {
    stop_ = true;
    join();
  }

  std::optional<TimePoint> first_503() {
    std::lock_guard lock(mu_);
    return first_503_;
  }
  std::optional<TimePoint> main_closed() {
    std::lock_guard lock(mu_);
    return main_closed_;
  }
  std::optional<TimePoint> last_admin_metrics() {
    std::lock_guard lock(mu_);
    return last_admin_metrics_;
  }
  std::string reason() {
    std::lock_guard lock(mu_);
    return reason_;
  }
  int livez_failures() {
    std::lock_guard lock(mu_);
    return livez_failures_;
  }
  int metrics_failures() {
    std::lock_guard lock(mu_);
    return metrics_failures_;
  }
  int ready_after_503() {
    std::lock_guard lock(mu_);
    return ready_after_503_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::optional<TimePoint> first_503_;          // guarded by mu_, as the rest
  std::optional<TimePoint> main_closed_;        // the first /readyz with no answer
  std::optional<TimePoint> last_admin_metrics_;  // the last admin /metrics answered
  std::string reason_;
  int livez_failures_ = 0;
  int metrics_failures_ = 0;
  int ready_after_503_ = 0;
  std::thread main_;
  std::thread admin_;
};

uint16_t admin_port_of(const InferaProcess& server) {
  static const std::regex kAdmin(R"(admin on http://[0-9.]+:(\d+))");
  std::smatch m;
  const std::string log = server.log();
  return std::regex_search(log, m, kAdmin) ? static_cast<uint16_t>(std::stoi(m[1].str())) : 0;
}

size_t count_lines(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = 0; (pos = text.find(needle, pos)) != std::string::npos; pos += needle.size()) {
    ++n;
  }
  return n;
}

constexpr double kDrainDelayS = 1;
constexpr double kGraceS = 5;
constexpr int kStreamTokens = 300;  // ~1.7 s at the mock's speed: streams span the listener's close
constexpr int kWholeTokens = 8;

// SIGTERM with a drain delay, under load: /readyz 503 at once, everything still served for the
// delay, the listener closed after it, the streams in flight finished, nothing lost, exit 0.
TEST(LifecycleE2eTest, SigtermUnderLoadDrainsServesTheDelayAndLosesNothing) {
  auto e0 = start_engine("life_drain_e0");
  auto e1 = start_engine("life_drain_e1");
  ASSERT_TRUE(e0->ready() && e1->ready());
  auto server = start_server(
      "life_drain_server",
      {"--worker", e0->worker_flag(), "--worker", e1->worker_flag(), "--drain-delay-s",
       std::to_string(kDrainDelayS), "--shutdown-grace-s", std::to_string(kGraceS),
       "--admin-host", "127.0.0.1", "--admin-port", "0"});
  ASSERT_TRUE(server->ready());
  const uint16_t port = server->port();
  const uint16_t admin = admin_port_of(*server);
  ASSERT_NE(admin, 0) << server->log();
  ASSERT_TRUE(eventually([&] { return get(port, "/readyz").status == 200; })) << server->log();
  ASSERT_TRUE(eventually([&] { return fleet_is(admin, {e0->id(), e1->id()}); }));
  const double retries_before = metric_sum(get(admin, "/metrics").body,
                                           "infera_upstream_retries_total");

  ProbeWatch probes(port, admin);
  Load load(port, /*streams=*/2, /*whole=*/2, kStreamTokens, kWholeTokens);
  // Steady load first: whole answers and streams have finished, and new ones are running.
  ASSERT_TRUE(eventually([&] { return load.streams_done() >= 2 && load.done() >= 12; },
                         Ms(60'000)));
  const TimePoint term = SteadyClock::now();
  server->process().signal(SIGTERM);
  ASSERT_TRUE(eventually([&] { return probes.first_503().has_value(); }, Ms(10'000)));
  const double retries = metric_sum(get(admin, "/metrics").body, "infera_upstream_retries_total") -
                         retries_before;
  const std::optional<int> exit_code = server->process().wait_for(Ms(30'000));
  ASSERT_TRUE(load.wait_ended(Ms(30'000)));
  const std::vector<Sample> samples = load.stop();
  probes.join();

  ASSERT_TRUE(exit_code.has_value()) << server->log();
  EXPECT_EQ(*exit_code, 0) << server->log();
  const std::optional<TimePoint> closed = probes.main_closed();
  ASSERT_TRUE(closed.has_value());
  const TimePoint delay_end =
      term + std::chrono::milliseconds(static_cast<int64_t>(kDrainDelayS * 1000));
  // /readyz failed at once, with the reason, and never came back; the listener stayed open for
  // the whole delay (the server got the signal after `term`).
  const double readyz_ms = ms_between(term, *probes.first_503());
  EXPECT_LT(readyz_ms, kDrainDelayS * 1000);
  EXPECT_EQ(probes.reason(), "draining");
  EXPECT_EQ(probes.ready_after_503(), 0);
  EXPECT_GE(ms_between(term, *closed), kDrainDelayS * 1000);
  EXPECT_EQ(probes.livez_failures(), 0);
  EXPECT_EQ(probes.metrics_failures(), 0);
  // The admin listener answered /metrics after the main one had closed (during the grace).
  ASSERT_TRUE(probes.last_admin_metrics().has_value());
  EXPECT_GT(*probes.last_admin_metrics(), *closed);

  int succeeded = 0, refused = 0, lost = 0, during_delay = 0, in_flight_at_close = 0;
  double max_ms = 0;
  for (const Sample& s : samples) {
    if (completed(s)) {
      ++succeeded;
      max_ms = std::max(max_ms, ms_between(s.start, s.end));
      if (s.start > term && s.start < delay_end) ++during_delay;
      if (s.start < *closed && s.end > *closed) ++in_flight_at_close;
    } else if (s.reply.status == 0 && s.end >= delay_end) {
      ++refused;  // no answer at all, once the listener could have closed: retryable
    } else {
      ++lost;
      ADD_FAILURE() << "lost: status " << s.reply.status << ", complete " << s.reply.complete
                    << ", " << ms_between(term, s.end) << " ms after SIGTERM, error '"
                    << s.reply.error << "', body " << s.reply.body.substr(0, 300);
    }
  }
  EXPECT_EQ(lost, 0);
  EXPECT_GE(during_delay, 2) << "requests sent during the drain delay";
  EXPECT_GE(in_flight_at_close, 1) << "streams in flight when the listener closed";
  EXPECT_EQ(refused, 4) << "each client thread ends on its first refused connection";
  std::printf(
      "FAULT_ROW {\"fault\":\"SIGTERM under load, drain delay %.0f s, grace %.0f s\",\"sent\":%d,"
      "\"succeeded\":%d,\"retried\":%.0f,\"failed_clean\":0,\"lost\":%d,\"max_latency_ms\":%.0f,"
      "\"refused_after_close\":%d,\"sent_during_delay\":%d,\"in_flight_at_close\":%d,"
      "\"readyz_503_after_ms\":%.0f,\"listener_closed_after_ms\":%.0f,\"exit_code\":%d}\n",
      kDrainDelayS, kGraceS, succeeded + lost, succeeded, retries, lost, max_ms, refused,
      during_delay, in_flight_at_close, readyz_ms, ms_between(term, *closed), *exit_code);
  std::fflush(stdout);
}

// A second SIGTERM during the drain delay ends it: the listener closes at once, not after the
// delay.
TEST(LifecycleE2eTest, ASecondSigtermEndsTheDrainDelay) {
  auto e0 = start_engine("life_twice_e0");
  ASSERT_TRUE(e0->ready());
  auto server = start_server("life_twice_server",
                             {"--worker", e0->worker_flag(), "--drain-delay-s", "600"});
  ASSERT_TRUE(server->ready());
  const uint16_t port = server->port();
  ASSERT_TRUE(eventually([&] { return get(port, "/readyz").status == 200; }));
  server->process().signal(SIGTERM);
  ASSERT_TRUE(eventually([&] { return get(port, "/readyz").status == 503; }));
  const Reply during = post(port, "/v1/completions", completion_body(token_ids(7, 32), 2));
  EXPECT_EQ(during.status, 200) << during.body;
  server->process().signal(SIGTERM);
  // Well within the 600 s delay.
  const std::optional<int> exit_code = server->process().wait_for(Ms(20'000));
  ASSERT_TRUE(exit_code.has_value()) << "still draining\n" << server->log();
  EXPECT_EQ(*exit_code, 0);
}

// The config file a reload reads: the log level, and the admin token's file.
void write_config(const fs::path& file, const fs::path& token_file, const std::string& level,
                  const std::string& extra = {}) {
  std::ofstream(file) << "log-level: " << level << "\nadmin-token-file: " << token_file.string()
                      << "\n"
                      << extra;
}

bool server_has_flag(const std::string& flag) {
  const fs::path out = fs::temp_directory_path() /
                       ("infera_lifecycle_help_" + std::to_string(::getpid()));
  const Result<int> rc = run_process({kBinary, "server", "--help"}, Ms(10'000), out.string());
  const std::string help = read_text(out);
  fs::remove(out);
  return rc.ok() && *rc == 0 && help.find("  " + flag + " ") != std::string::npos;
}

// Repeated SIGHUPs under load: each reload reads the --config file and the token file again
// and applies the log level and the admin token live; no request fails, and a setting that
// needs a restart is logged as not applied.
TEST(LifecycleE2eTest, SighupUnderLoadReloadsLogLevelAndAdminTokenAndLosesNothing) {
  if (!server_has_flag("--config") || !server_has_flag("--admin-token-file")) {
    GTEST_SKIP() << "waits for `infera server --config FILE` and --admin-token-file";
  }
  const fs::path dir =
      fs::temp_directory_path() / ("infera_lifecycle_hup_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path config = dir / "infera.yaml";
  const fs::path token = dir / "admin-token";
  std::ofstream(token) << "token-0\n";
  write_config(config, token, "warn");

  auto e0 = start_engine("life_hup_e0");
  auto e1 = start_engine("life_hup_e1");
  ASSERT_TRUE(e0->ready() && e1->ready());
  // No --log-level on the command line: it would win over the file's.
  auto server = std::make_unique<InferaProcess>(
      "life_hup_server",
      std::vector<std::string>{"server", "--host", "127.0.0.1", "--port", "0",
                               "--shutdown-grace-s", "5", "--config", config.string(),
                               "--worker", e0->worker_flag(), "--worker", e1->worker_flag()});
  ASSERT_TRUE(server->ready());
  const uint16_t port = server->port();
  ASSERT_EQ(get_with_token(port, "/metrics", "token-0"), 200);
  ASSERT_TRUE(eventually([&] { return get(port, "/readyz").status == 200; }));

  Load load(port, /*streams=*/2, /*whole=*/2, /*stream_tokens=*/100, kWholeTokens);
  ASSERT_TRUE(eventually([&] { return load.done() >= 8; }, Ms(60'000)));
  constexpr int kReloads = 6;
  const TimePoint start = SteadyClock::now();
  double max_reload_ms = 0;
  for (int i = 1; i <= kReloads; ++i) {
    // Odd reloads go to info (their "reloaded" line shows), even ones back to warn (it does
    // not); the third also changes a restart-only setting, the fourth puts it back.
    const std::string level = i % 2 ? "info" : "warn";
    std::ofstream(token) << "token-" << i << "\n";
    write_config(config, token, level, i == 3 ? "max-queue: 100\n" : "");
    const std::string new_token = "token-" + std::to_string(i);
    const TimePoint sent = SteadyClock::now();
    server->process().signal(SIGHUP);
    ASSERT_TRUE(eventually([&] { return get_with_token(port, "/metrics", new_token) == 200; },
                           Ms(10'000)))
        << "reload " << i << " not applied\n"
        << server->log();
    max_reload_ms = std::max(max_reload_ms, ms_between(sent, SteadyClock::now()));
    EXPECT_EQ(get_with_token(port, "/metrics", "token-" + std::to_string(i - 1)), 401);
    EXPECT_TRUE(server->process().running());
    // Requests finish between two reloads (and streams run across them).
    const int before = load.done();
    ASSERT_TRUE(eventually([&] { return load.done() >= before + 4; }, Ms(30'000)));
  }
  const double seconds = ms_between(start, SteadyClock::now()) / 1000;
  // A file that does not parse: the error is logged, the running config kept.
  std::ofstream(config) << "log-level: loud\n";
  server->process().signal(SIGHUP);
  EXPECT_TRUE(eventually([&] {
    return server->log().find("\"reload failed; the running config is kept\"") != std::string::npos;
  })) << server->log();
  EXPECT_EQ(get_with_token(port, "/metrics", "token-" + std::to_string(kReloads)), 200);
  const std::vector<Sample> samples = load.stop();
  ASSERT_TRUE(server->process().running()) << "the server exited\n" << server->log();
  server->process().signal(SIGTERM);
  const std::optional<int> exit_code = server->process().wait_for(Ms(30'000));
  ASSERT_TRUE(exit_code.has_value());
  EXPECT_EQ(*exit_code, 0);

  int succeeded = 0, lost = 0;
  double max_ms = 0;
  for (const Sample& s : samples) {
    if (completed(s)) {
      ++succeeded;
      max_ms = std::max(max_ms, ms_between(s.start, s.end));
    } else {
      ++lost;
      ADD_FAILURE() << "failed during reloads: status " << s.reply.status << ", error '"
                    << s.reply.error << "', body " << s.reply.body.substr(0, 300);
    }
  }
  EXPECT_EQ(lost, 0);
  // The log level took effect both ways: the three reloads to info logged their line, the three
  // to warn (applied, as their tokens show) did not.
  const std::string log = server->log();
  EXPECT_EQ(count_lines(log, "INFO gateway reloaded"), 3u) << log;
  EXPECT_EQ(count_lines(log, "applied=--admin-token,--log-level"), 3u) << log;
  EXPECT_EQ(count_lines(log, "\"not applied live (restart needed)\" flags=--max-queue"), 1u) << log;
  EXPECT_FALSE(std::regex_search(log, std::regex("token-[0-9]"))) << "a token reached the log";
  std::printf(
      "FAULT_ROW {\"fault\":\"SIGHUP under load, %d reloads (log level, admin token file)\","
      "\"sent\":%zu,\"succeeded\":%d,\"retried\":0,\"failed_clean\":0,\"lost\":%d,"
      "\"max_latency_ms\":%.0f,\"reload_applied_max_ms\":%.0f,\"seconds\":%.1f,"
      "\"exit_code\":%d}\n",
      kReloads, samples.size(), succeeded, lost, max_ms, max_reload_ms, seconds, *exit_code);
  std::fflush(stdout);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace infera::e2e
