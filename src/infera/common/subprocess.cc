#include "infera/common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace infera {
namespace {

int exit_code(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 255;
}

// strerror() may hand every thread the same buffer; the GNU strerror_r returns a static string
// or one written into `buf`.
std::string errno_text(int err) {
  char buf[128];
  return ::strerror_r(err, buf, sizeof buf);
}

}  // namespace

Subprocess& Subprocess::operator=(Subprocess&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      reap(true);
    }
    pid_ = std::exchange(o.pid_, -1);
    group_ = o.group_;
    status_ = o.status_;
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !status_) {
    signal(SIGKILL);
    reap(true);
  }
}

Result<Subprocess> Subprocess::spawn(const std::vector<std::string>& argv,
                                     const SpawnOptions& options) {
  if (argv.empty()) return invalid_argument("empty command");
  // Everything the child needs is prepared here: between fork and exec only async-signal-safe
  // calls are allowed.
  std::string path = argv[0];
  if (path.find('/') == std::string::npos) {
    // Nothing in the process calls setenv or putenv, so no thread can change the environment.
    const char* env_path = std::getenv("PATH");  // NOLINT(concurrency-mt-unsafe)
    std::string dirs = env_path ? env_path : "/usr/local/bin:/usr/bin:/bin";
    path.clear();
    size_t start = 0;
    while (start <= dirs.size()) {
      const size_t colon = dirs.find(':', start);
      std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      start = colon == std::string::npos ? dirs.size() + 1 : colon + 1;
      const std::string candidate = (dir.empty() ? "." : dir) + "/" + argv[0];
      if (::access(candidate.c_str(), X_OK) == 0) {
        path = candidate;
        break;
      }
    }
    if (path.empty()) return unavailable("cannot start '" + argv[0] + "': not found on PATH");
  } else if (::access(path.c_str(), X_OK) != 0) {
    const int err = errno;
    return unavailable("cannot start '" + path + "': " + errno_text(err));
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e);
    bool replaced = false;
    for (const auto& [k, v] : options.env) replaced = replaced || entry.rfind(k + "=", 0) == 0;
    if (!replaced) env_strings.push_back(std::move(entry));
  }
  for (const auto& [k, v] : options.env) {
    env_strings.push_back(std::string(k).append("=").append(v));
  }
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  argp.reserve(args.size() + 1);
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);
  const bool same_file = options.stderr_path == "stdout";
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) return unavailable("fork failed: " + errno_text(errno));
  if (pid == 0) {
    if (options.new_process_group) ::setpgid(0, 0);
    if (options.kill_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    }
    if (!options.stdout_path.empty()) {
      const int fd = ::open(options.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) ::_exit(126);
      ::dup2(fd, STDOUT_FILENO);
      ::close(fd);
    }
    if (same_file) {
      ::dup2(STDOUT_FILENO, STDERR_FILENO);
    } else if (!options.stderr_path.empty()) {
      const int fd = ::open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) ::_exit(126);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    ::execve(path.c_str(), argp.data(), envp.data());
    ::_exit(127);
  }
  if (options.new_process_group) ::setpgid(pid, pid);  // also from the parent: no race on kill
  return Subprocess(pid, options.new_process_group);
}

bool Subprocess::reap(bool block) {
  if (pid_ <= 0 || status_) return true;
  int wstatus = 0;
  const pid_t r = ::waitpid(pid_, &wstatus, block ? 0 : WNOHANG);
  if (r == pid_) {
    status_ = exit_code(wstatus);
    return true;
  }
  if (r < 0 && errno == ECHILD) {
    status_ = 255;
    return true;
  }
  return false;
}

bool Subprocess::running() { return pid_ > 0 && !reap(false); }

void Subprocess::signal(int sig) {
  if (pid_ <= 0 || status_) return;
  ::kill(group_ ? -pid_ : pid_, sig);
}

std::optional<int> Subprocess::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // waitpid has no timeout: poll with a short, growing pause. This waits on a child process,
  // not on a condition another thread of ours sets.
  auto pause = std::chrono::milliseconds(1);
  while (!reap(false)) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return status_;
}

int Subprocess::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return 255;
  signal(SIGTERM);
  if (auto code = wait_for(grace)) return *code;
  signal(SIGKILL);
  reap(true);
  return status_.value_or(255);
}

Result<int> run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                        const std::string& log_path) {
  SpawnOptions o;
  o.stdout_path = log_path;
  o.stderr_path = log_path.empty() ? "" : "stdout";
  INFERA_ASSIGN_OR_RETURN(Subprocess child, Subprocess::spawn(argv, o));
  if (auto code = child.wait_for(timeout)) return *code;
  child.stop(std::chrono::milliseconds(1000));
  return deadline_exceeded("'" + argv[0] + "' did not finish in time");
}

}  // namespace infera
