// Process memory: the resident set size, and handing freed heap memory back to the kernel.
//
// glibc keeps memory a program frees mapped for reuse; only free space at the very top of a
// heap is returned on its own. After a burst of large requests (thousands of long prompts in
// flight at once) a long-running server would therefore stay at its high-water RSS, although
// most of it is free. HeapTrimmer lets the gateway's maintenance thread return it once the burst
// is over: trimming during one would hand back pages the burst at once faults in again, and
// stall its allocations while the heap is walked (about 16 ms for 100 MB here). A server in
// steady state never pays for a trim. Any thread; a HeapTrimmer is for one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "infera/common/clock.h"

namespace infera {

// A process's resident set size in bytes (/proc/PID/statm; pid 0: this process); nullopt
// where it is unknown (no such process, no /proc).
std::optional<uint64_t> resident_bytes(int64_t pid = 0);

// Returns the heap's free pages to the kernel (jemalloc: every arena purged; glibc:
// malloc_trim). False when nothing was returned or the allocator cannot do it.
bool release_free_heap();

// The allocator this process runs on: "jemalloc" (the infera binary outside sanitizer builds)
// or "libc".
const char* heap_allocator();

class HeapTrimmer {
 public:
  struct Trim {
    uint64_t rss_before = 0;
    uint64_t rss_after = 0;
    Nanos took{0};
  };
  // `growth`: how far the RSS must exceed what the last trim (or the first check) left.
  explicit HeapTrimmer(uint64_t growth = uint64_t{32} << 20) : growth_(growth) {}
  // Called periodically with the current load (requests in flight). Trims when the RSS has
  // grown by `growth` and the load has fallen to an eighth of its peak since the last trim.
  std::optional<Trim> maybe_trim(uint64_t load);

 private:
  uint64_t growth_;
  std::optional<uint64_t> baseline_;
  uint64_t peak_load_ = 0;
};

}  // namespace infera
