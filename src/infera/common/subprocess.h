// Child processes without a shell: spawn an argv (PATH lookup for a bare name), optionally
// with extra environment variables and stdout/stderr sent to files, then wait with a deadline
// or signal it. Used by `infera demo` (engines and a server), the engine launchers, the plot
// helper and the e2e tests. A Subprocess object owns its child: destroying a running one kills
// it (SIGKILL) and reaps it, so no child outlives its owner by accident. One owner thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "infera/common/status.h"

namespace infera {

struct SpawnOptions {
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing in) ours
  std::string stdout_path;  // empty: inherit
  std::string stderr_path;  // empty: inherit; "stdout": same as stdout
  bool new_process_group = false;  // so a signal to the group reaches its children too
  // The child gets SIGKILL when the thread that spawned it exits (Linux PR_SET_PDEATHSIG), so a
  // test or demo that dies never leaves engines or etcd behind. Spawn from a long-lived thread.
  bool kill_with_parent = true;
};

class Subprocess {
 public:
  Subprocess() = default;
  ~Subprocess();
  Subprocess(Subprocess&& o) noexcept : pid_(std::exchange(o.pid_, -1)), status_(o.status_) {}
  Subprocess& operator=(Subprocess&& o) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  static Result<Subprocess> spawn(const std::vector<std::string>& argv,
                                  const SpawnOptions& options = {});

  pid_t pid() const { return pid_; }
  bool running();
  // Sends `sig` to the child (or its group when it has its own).
  void signal(int sig);
  // Waits for exit up to `timeout`; the exit code (128 + signal when killed), or nullopt on
  // timeout.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  // SIGTERM, wait up to `grace`, then SIGKILL; returns the exit code.
  int stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

 private:
  explicit Subprocess(pid_t pid, bool group) : pid_(pid), group_(group) {}
  bool reap(bool block);

  pid_t pid_ = -1;
  bool group_ = false;
  std::optional<int> status_;
};

// Runs argv to completion (deadline `timeout`), returning its exit code; stdout and stderr go
// to `log_path` when given.
Result<int> run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                        const std::string& log_path = {});

}  // namespace infera
