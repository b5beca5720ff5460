// metrics::add_process_collector: the process_* set, as Prometheus' client libraries export it
// on Linux (from /proc/self/stat, /proc/stat, /proc/self/fd and RLIMIT_NOFILE).
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "infera/common/metrics.h"

namespace infera::metrics {
namespace {

struct ProcStat {
  double cpu_seconds = 0;
  double start_since_boot_seconds = 0;
  double virtual_bytes = 0;
  double resident_bytes = 0;
};

// /proc/self/stat's fields after the command name (which may hold spaces and parentheses).
std::optional<ProcStat> read_stat() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  std::string f[23];  // fields 3 (state) .. 24 (rss)
  for (std::string& x : f) {
    if (!(fields >> x)) return std::nullopt;
  }
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  if (tick <= 0 || page <= 0) return std::nullopt;
  ProcStat s;
  // f[11] = utime (field 14), f[12] = stime, f[19] = starttime (22), f[20] = vsize, f[21] = rss.
  s.cpu_seconds = (std::strtod(f[11].c_str(), nullptr) + std::strtod(f[12].c_str(), nullptr)) / tick;
  s.start_since_boot_seconds = std::strtod(f[19].c_str(), nullptr) / tick;
  s.virtual_bytes = std::strtod(f[20].c_str(), nullptr);
  s.resident_bytes = std::strtod(f[21].c_str(), nullptr) * page;
  return s;
}

// The boot time, seconds since the epoch (/proc/stat's btime).
std::optional<double> boot_time() {
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("btime ", 0) == 0) return std::strtod(line.c_str() + 6, nullptr);
  }
  return std::nullopt;
}

std::optional<double> open_fds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  double n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') n += 1;
  }
  closedir(dir);
  return n - 1;  // the directory's own descriptor, open while it is read
}

}  // namespace

void add_process_collector(Registry& registry) {
  registry.add_collector([](Registry& out) {
    if (const std::optional<ProcStat> s = read_stat()) {
      out.counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.")
          .inc(s->cpu_seconds);
      out.gauge("process_resident_memory_bytes", "Resident memory size in bytes.").set(s->resident_bytes);
      out.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.").set(s->virtual_bytes);
      if (const std::optional<double> boot = boot_time()) {
        out.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.")
            .set(*boot + s->start_since_boot_seconds);
      }
    }
    if (const std::optional<double> fds = open_fds()) {
      out.gauge("process_open_fds", "Number of open file descriptors.").set(*fds);
    }
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      out.gauge("process_max_fds", "Maximum number of open file descriptors.")
          .set(static_cast<double>(limit.rlim_cur));
    }
  });
}

}  // namespace infera::metrics
