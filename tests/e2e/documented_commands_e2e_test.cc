// The product documentation's command lines, run as written (issue 8, "The documented commands,
// verbatim"): the server with docs/contracts.md section 2's flags, both as `infera server ...` and
// as `python3 -m infera.server ...`; workers through the launchers' Python entry points
// (`python3 -m infera.engine.vllm --model M ... --block-size 16 --enable-kv-events
// --etcd-endpoint E`, `python3 -m infera.engine.sglang --model-path M --page-size 16 ...`)
// with the fake engines of tests/support/fake_engines.h first on PATH; a real etcd. Then the
// documentation's check (a repeated long prefix goes to the worker that caches it and is not
// stored again) and a clean shutdown. The only additions to the documented lines are what the
// test environment needs: loopback, free ports (--port 0), the etcd endpoint, and the Python
// package on PYTHONPATH with INFERA_BIN naming this build's binary.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "tests/e2e/e2e_support.h"
#include "tests/support/fake_engines.h"

namespace infera::e2e {
namespace {

const std::string kPython = "/usr/bin/python3";

std::vector<std::pair<std::string, std::string>> shim_env() {
  return {{"PYTHONPATH", std::string(INFERA_SOURCE_DIR) + "/python"}, {"INFERA_BIN", kBinary}};
}

// docs/contracts.md section 2 / README "Usage", flag for flag, plus loopback and a free port.
std::vector<std::string> documented_server_flags(const std::string& etcd) {
  return {"--router-policy",
          "kv-aware",
          "--router-tokenizer-path",
          kQwen3,
          "--kv-overlap-weight",
          "1.0",
          "--discovery-backend",
          "etcd",
          "--etcd-endpoint",
          etcd,
          "--request-transport",
          "http",
          "--kv-event-transport",
          "zmq",
          "--host",
          "127.0.0.1",
          "--port",
          "0"};
}

std::vector<std::string> concat_args(std::vector<std::string> a,
                                     const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A launcher started through its Python entry point, its fake engine first on PATH. Ready once
// the launcher printed "ready on http://HOST:PORT" (after the engine's /health and the
// registration); its id is the worker id.
struct Worker {
  fs::path fake_dir;
  std::unique_ptr<InferaProcess> launcher;
};

Worker launch(const std::string& name, const std::string& engine, std::vector<std::string> args) {
  Worker w;
  w.fake_dir = fs::temp_directory_path() /
               ("infera_documented_fake_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(w.fake_dir);
  fs::create_directories(w.fake_dir);
  testing::write_fake_engine(w.fake_dir, engine, kBinary);
  const char* path = std::getenv("PATH");
  auto env = shim_env();
  env.emplace_back("PATH", w.fake_dir.string() + ":" + (path ? path : "/usr/bin:/bin"));
  args.insert(args.begin(), {kPython, "-m", "infera.engine." + engine});
  args = testing::with_dev_transports(std::move(args));
  w.launcher = std::make_unique<InferaProcess>(name, Command{std::move(args), env, "ready on"});
  return w;
}

// The number of worker records in etcd (its JSON gateway), or -1 when etcd did not answer.
int64_t etcd_worker_records(uint16_t etcd_port) {
  const Reply r = post(etcd_port, "/v3/kv/range",
                       R"({"key":"aW5mZXJhL3dvcmtlcnMv","range_end":"aW5mZXJhL3dvcmtlcnMw",)"
                       R"("count_only":true})");  // the prefix "infera/workers/"
  if (r.status != 200) return -1;
  const json::value v = parse_json(r.body);
  if (v.is_null()) return -1;
  const std::string count = string_at(v, "count");  // int64 as a string; absent when 0
  return count.empty() ? 0 : std::stoll(count);
}

// True once the server lists exactly `ids`, each serving the model `model`, none busy.
bool fleet_serves(uint16_t server, const std::set<std::string>& ids, const std::string& model) {
  auto t = workers(server);
  if (!t || t->size() != ids.size()) return false;
  for (const auto& [id, w] : *t) {
    if (!ids.contains(id) || w.models != std::vector<std::string>{model} || w.inflight != 0) {
      return false;
    }
  }
  return true;
}

std::string chat_body(const std::string& system, const std::string& question) {
  json::object body;
  body["model"] = kQwen3;
  body["messages"] = json::array{json::object{{"role", "system"}, {"content", system}},
                                 json::object{{"role", "user"}, {"content", question}}};
  body["max_tokens"] = 1;  // only the prompt is computed: its full blocks are what gets stored
  return json::serialize(body);
}

// A long system prompt (about 1,500 tokens), distinct from its first words per `tag`.
std::string long_prefix(const std::string& tag) {
  std::string s = tag + " deployment runbook. ";
  for (int i = 0; i < 100; ++i) {
    s += "Rule " + std::to_string(i) + ": route requests of tenant " + std::to_string(i * 7 % 13) +
         " to the pool that holds its context. ";
  }
  return s;
}

// The documentation's check through one server: two requests with the same long prefix; the
// second goes to the worker that cached the first, hits its cache, and stores nothing new, so
// that worker's cache view stays flat. A third request on the same prefix with another question
// follows the cache too, and is the barrier after which the view is read exactly (one worker's
// KV events arrive in order).
void documented_check(uint16_t s, const std::vector<std::string>& ids, const std::string& tag) {
  SCOPED_TRACE(tag);
  std::map<std::string, int64_t> before;
  for (const std::string& id : ids) before[id] = block_count(s, id);
  const std::string prefix = long_prefix(tag);

  const Routed first =
      send_traced(s, "/v1/chat/completions", chat_body(prefix, "Which pool serves tenant 3?"));
  ASSERT_EQ(first.status, 200);
  ASSERT_FALSE(first.worker.empty());
  EXPECT_GT(first.prompt_tokens, 1000);
  EXPECT_EQ(first.cached_tokens, 0);
  const std::string owner = first.worker;
  const int64_t owned = before[owner] + first.prompt_tokens / 16;
  const auto expect_others_unchanged = [&] {
    for (const std::string& id : ids) {
      if (id != owner) {
        EXPECT_EQ(block_count(s, id), before[id]) << id;
      }
    }
  };
  EXPECT_TRUE(eventually([&] { return block_count(s, owner) == owned; }))
      << "owner " << owner << ": " << block_count(s, owner) << ", expected " << owned;
  expect_others_unchanged();

  // The same request again: the same worker, served from its cache, nothing stored.
  const Routed second = send_traced(s, "/v1/chat/completions",
                                    chat_body(prefix, "Which pool serves tenant 3?"), false);
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(second.worker, owner);
  EXPECT_EQ(second.prompt_tokens, first.prompt_tokens);
  EXPECT_GE(second.cached_tokens, first.prompt_tokens - 16);
  EXPECT_EQ(block_count(s, owner), owned);

  // The barrier: the same prefix, another question.
  const Routed third =
      send_traced(s, "/v1/chat/completions", chat_body(prefix, "And which one serves tenant 5?"));
  ASSERT_EQ(third.status, 200);
  EXPECT_EQ(third.worker, owner);
  EXPECT_GT(third.cached_tokens, first.prompt_tokens - 32);
  EXPECT_EQ(third.cached_tokens % 16, 0);
  const int64_t expected = owned + third.prompt_tokens / 16 - third.cached_tokens / 16;
  EXPECT_GT(expected, owned);
  EXPECT_TRUE(eventually([&] { return block_count(s, owner) >= expected; }));
  EXPECT_EQ(block_count(s, owner), expected) << "the repeated request stored blocks again";
  std::printf(
      "%s: %lld prompt tokens to %s (%lld blocks), repeated: %lld cached, stored 0; "
      "another question: %lld cached, %lld blocks stored\n",
      tag.c_str(), static_cast<long long>(first.prompt_tokens), owner.c_str(),
      static_cast<long long>(owned - before[owner]), static_cast<long long>(second.cached_tokens),
      static_cast<long long>(third.cached_tokens), static_cast<long long>(expected - owned));
  expect_others_unchanged();
}

// README's curl lines (between its curl-check markers), continuation lines joined: one shell
// command each.
std::vector<std::string> readme_curl_commands() {
  std::ifstream in(std::string(INFERA_SOURCE_DIR) + "/README.md");
  std::vector<std::string> commands;
  bool inside = false;
  std::string pending;
  for (std::string line; std::getline(in, line);) {
    if (line == "<!-- curl-check: begin -->") {
      inside = true;
    } else if (line == "<!-- curl-check: end -->") {
      break;
    } else if (inside && line.starts_with("    ")) {
      line = line.substr(4);
      if (line.ends_with("\\")) {
        pending += line.substr(0, line.size() - 1);
        continue;
      }
      while (!line.empty() && line.front() == ' ' && !pending.empty()) line.erase(0, 1);
      commands.push_back(pending + line);
      pending.clear();
    }
  }
  return commands;
}

std::string replace_all(std::string s, std::string_view from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// Runs README's curl check against server `s` with the real curl, the documented address,
// worker id and model replaced by this fleet's, and checks what each line prints.
void curl_check(uint16_t s, const std::string& worker, size_t workers_expected) {
  const std::vector<std::string> commands = readme_curl_commands();
  ASSERT_EQ(commands.size(), 7u) << "README's curl-check block changed; update this test";
  std::vector<std::string> out;
  for (size_t i = 0; i < commands.size(); ++i) {
    std::string c = replace_all(commands[i], "127.0.0.1:8001", "@WORKER@");
    c = replace_all(c, "127.0.0.1:8000", "127.0.0.1:" + std::to_string(s));
    c = replace_all(c, "@WORKER@", worker);
    c = replace_all(c, "Qwen/Qwen3-0.6B", kQwen3);
    const fs::path log = fs::temp_directory_path() / ("infera_documented_curl_" +
                                                     std::to_string(::getpid()) + "_" +
                                                     std::to_string(i));
    auto rc = run_process({"/bin/sh", "-c", c}, Ms(60'000), log.string());
    ASSERT_TRUE(rc.ok()) << c;
    out.push_back(read_text(log));
    fs::remove(log);
    EXPECT_EQ(*rc, 0) << c << "\n" << out.back();
  }
  const json::value models = parse_json(out[0]);
  EXPECT_EQ(string_at(models.at("data").at(0), "id"), kQwen3) << out[0];
  const json::value chat = parse_json(out[1]);
  EXPECT_TRUE(chat.at("choices").at(0).at("message").at("content").is_string()) << out[1];
  EXPECT_TRUE(out[2].starts_with("data: {")) << out[2];
  EXPECT_TRUE(out[2].ends_with("data: [DONE]\n\n")) << out[2];
  EXPECT_EQ(parse_json(out[3]).at("workers").as_array().size(), workers_expected) << out[3];
  const json::value view = parse_json(out[4]);
  EXPECT_EQ(view.as_object().size(), 2u) << out[4];
  EXPECT_EQ(string_at(view, "worker_id"), worker) << out[4];
  EXPECT_TRUE(view.at("block_count").is_int64()) << out[4];
  EXPECT_FALSE(parse_json(out[5]).at("stages").as_array().empty()) << out[5];
  EXPECT_TRUE(out[6].starts_with("infera_requests_total{")) << out[6];
}

TEST(DocumentedCommandsE2eTest, ServerAndLaunchersAsDocumentedRouteByTheCacheAndStopCleanly) {
  auto etcd = testing::EtcdProcess::start();
  ASSERT_TRUE(etcd.ok()) << etcd.status().to_string();
  const std::string e = etcd->endpoint();

  // Workers, as the launchers' documentation starts them.
  std::vector<Worker> fleet;
  fleet.push_back(launch("vllm0", "vllm",
                         {"--model", kQwen3, "--port", "0", "--host", "127.0.0.1", "--block-size",
                          "16", "--enable-kv-events", "--etcd-endpoint", e}));
  fleet.push_back(launch("vllm1", "vllm",
                         {"--model", kQwen3, "--port", "0", "--host", "127.0.0.1", "--block-size",
                          "16", "--enable-kv-events", "--etcd-endpoint", e}));
  fleet.push_back(launch("sglang0", "sglang",
                         {"--model-path", kQwen3, "--port", "0", "--host", "127.0.0.1",
                          "--page-size", "16", "--enable-kv-events", "--etcd-endpoint", e}));
  std::vector<std::string> ids;
  for (const Worker& w : fleet) {
    ASSERT_TRUE(w.launcher->ready());
    ids.push_back(w.launcher->id());
  }
  ASSERT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 3u);
  EXPECT_EQ(etcd_worker_records(etcd->port()), 3);
  // The engines the launchers ran are the fakes, with the launchers' command lines.
  for (size_t i = 0; i < fleet.size(); ++i) {
    const std::string argv = read_text(fleet[i].fake_dir / "argv");
    const std::string head = i < 2 ? "serve\n" + kQwen3 + "\n--host\n127.0.0.1\n--port\n"
                                   : "-m\nsglang.launch_server\n--model-path\n" + kQwen3 +
                                         "\n--host\n127.0.0.1\n--port\n";
    EXPECT_TRUE(argv.starts_with(head)) << argv;
    EXPECT_NE(argv.find("--kv-events-config\n"), std::string::npos) << argv;
  }

  // The server, both ways.
  auto server = std::make_unique<InferaProcess>(
      "documented_server", concat_args({"server"}, documented_server_flags(e)));
  auto shim_server = std::make_unique<InferaProcess>(
      "documented_shim_server",
      Command{concat_args({kPython, "-m", "infera.server"}, documented_server_flags(e)),
              shim_env()});
  ASSERT_TRUE(server->ready() && shim_server->ready());
  const std::set<std::string> id_set(ids.begin(), ids.end());
  for (InferaProcess* s : {server.get(), shim_server.get()}) {
    ASSERT_TRUE(eventually([&] { return fleet_serves(s->port(), id_set, kQwen3); })) << s->log();
  }

  documented_check(server->port(), ids, "Infera");
  documented_check(shim_server->port(), ids, "Python");
  curl_check(server->port(), ids[0], ids.size());

  // SIGTERM to each launcher: it exits 0 and its record leaves etcd; the servers see it go.
  for (Worker& w : fleet) {
    w.launcher->process().signal(SIGTERM);
    const auto code = w.launcher->process().wait_for(Ms(30'000));
    ASSERT_TRUE(code.has_value()) << w.launcher->log();
    EXPECT_EQ(*code, 0) << w.launcher->log();
  }
  EXPECT_EQ(etcd_worker_records(etcd->port()), 0);
  for (InferaProcess* s : {server.get(), shim_server.get()}) {
    EXPECT_TRUE(eventually([&] {
      auto t = workers(s->port());
      return t && t->empty();
    })) << s->log();
    s->process().signal(SIGTERM);
    const auto code = s->process().wait_for(Ms(30'000));
    ASSERT_TRUE(code.has_value()) << s->log();
    EXPECT_EQ(*code, 0) << s->log();
  }
  for (const Worker& w : fleet) fs::remove_all(w.fake_dir);
}

}  // namespace
}  // namespace infera::e2e
