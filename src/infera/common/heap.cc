#include "infera/common/heap.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// jemalloc's control interface, when the binary links it (the infera binary does outside
// sanitizer builds: docs/decisions/0002-jemalloc.md). Weak: null when it is not linked.
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen)
    __attribute__((weak));

namespace infera {

namespace {
// MALLCTL_ARENAS_ALL in jemalloc 5: "arena.<i>.purge" for every arena at once.
constexpr const char* kPurgeAllArenas = "arena.4096.purge";
}  // namespace

const char* heap_allocator() {
  return mallctl != nullptr ? "jemalloc" : "libc";
}

std::optional<uint64_t> resident_bytes(int64_t pid) {
  // "size resident shared text lib data dt", in pages.
  char path[48];
  if (pid == 0) {
    std::snprintf(path, sizeof(path), "/proc/self/statm");
  } else {
    std::snprintf(path, sizeof(path), "/proc/%lld/statm", static_cast<long long>(pid));
  }
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  ::close(fd);
  if (n <= 0) return std::nullopt;
  const char* p = buf;
  const char* end = buf + n;
  while (p < end && *p != ' ') ++p;  // skip "size"
  if (p == end) return std::nullopt;
  ++p;
  uint64_t pages = 0;
  if (std::from_chars(p, end, pages).ec != std::errc()) return std::nullopt;
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages * static_cast<uint64_t>(page > 0 ? page : 4096);
}

bool release_free_heap() {
  if (mallctl != nullptr) return mallctl(kPurgeAllArenas, nullptr, nullptr, nullptr, 0) == 0;
#if defined(__GLIBC__)
  return ::malloc_trim(0) != 0;
#else
  return false;
#endif
}

std::optional<HeapTrimmer::Trim> HeapTrimmer::maybe_trim(uint64_t load) {
  peak_load_ = std::max(peak_load_, load);
  const std::optional<uint64_t> rss = resident_bytes();
  if (!rss) return std::nullopt;
  if (!baseline_ || *rss < *baseline_) {
    baseline_ = rss;  // the first check, or memory freed on its own: follow it down
    return std::nullopt;
  }
  if (*rss < *baseline_ + growth_ || load * 8 > peak_load_) return std::nullopt;
  Trim t;
  t.rss_before = *rss;
  const auto start = std::chrono::steady_clock::now();
  release_free_heap();
  t.took = std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now() - start);
  t.rss_after = resident_bytes().value_or(*rss);
  baseline_ = t.rss_after;
  peak_load_ = load;
  return t;
}

}  // namespace infera
