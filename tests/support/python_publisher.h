// tests/tools/events/fake_vllm_publisher.py as a child process: a vLLM-like KV-event publisher
// in another process and language (Debian python3-zmq + python3-msgpack), driven line by line
// over pipes (the script's docstring gives the protocol). The first line it prints names its
// endpoints: `pub` (where it binds, or with --connect where it connects) and `replay`.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <chrono>
#include <string>
#include <vector>

extern char** environ;

namespace infera::testing {

// The publisher process, talked to line by line over pipes.
class PythonPublisher {
 public:
  explicit PythonPublisher(const std::vector<std::string>& args) {
    int in[2];
    int out[2];
    EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<std::string> argv = {"/usr/bin/python3",
                                     INFERA_SOURCE_DIR "/tests/tools/events/fake_vllm_publisher.py"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, argv[0].c_str(), &fa, nullptr, cargv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    to_child_ = in[1];
    from_child_ = out[0];
    const boost::json::value ready = read_json();
    pub = std::string(ready.at("pub").as_string());
    replay = std::string(ready.at("replay").as_string());
  }

  ~PythonPublisher() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);  // our own child, by pid
      waitpid(pid_, nullptr, 0);
    }
    close(to_child_);
    close(from_child_);
  }

  boost::json::value call(const boost::json::object& cmd) {
    const std::string line = boost::json::serialize(cmd) + "\n";
    EXPECT_EQ(write(to_child_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    return read_json();
  }

  // Asks the publisher to exit and reaps it (an engine process going away).
  void exit() {
    call({{"op", "exit"}});
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::string pub;
  std::string replay;

 private:
  boost::json::value read_json(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        const std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return boost::json::parse(line);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{from_child_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        ADD_FAILURE() << "publisher did not answer in time";
        return boost::json::object{{"error", "timeout"}};
      }
      char chunk[65536];
      const ssize_t n = read(from_child_, chunk, sizeof(chunk));
      if (n <= 0) {
        ADD_FAILURE() << "publisher exited";
        return boost::json::object{{"error", "eof"}};
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string buffer_;
};

}  // namespace infera::testing
