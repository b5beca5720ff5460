// Structured, leveled logging to stderr: one line per event, `key=value` fields (logfmt), values
// quoted and escaped so that untrusted strings (worker ids, client input) cannot forge log
// lines; or, with --log-format json, one JSON object per line ({"ts","level","component","msg",
// and the fields; numbers and booleans as JSON values}). Any thread may log; a line is written
// with one write() so lines never interleave. The level and format are process-wide
// configuration (--log-level, --log-format), set at startup (the level again on reload).
// A line marked buffered() (the per-request access line) instead waits in a process-wide
// buffer that goes out in one write() when it holds 32 KiB or when flush_log_buffer() is called
// (the server does every second and at shutdown), as nginx's `access_log ... buffer=`: one
// system call per few hundred requests. Such lines may appear after later unbuffered ones, and
// a crash loses what is buffered (at most a second's worth).
//
//   INFERA_LOG(kWarn, "events").msg("sequence gap").kv("worker", id).kv("expected", seq);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "infera/common/status.h"

namespace infera {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
inline bool log_enabled(LogLevel level) { return level >= log_level(); }
Result<LogLevel> parse_log_level(std::string_view name);  // debug|info|warn|error|off

enum class LogFormat { kLogfmt = 0, kJson = 1 };
void set_log_format(LogFormat format);
LogFormat log_format();
Result<LogFormat> parse_log_format(std::string_view name);  // logfmt|json

// Writes the buffered lines now. Any thread.
void flush_log_buffer();

class LogLine {
 public:
  LogLine(LogLevel level, std::string_view component);
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;

  LogLine& msg(std::string_view text);
  // The line goes through the buffer (see above) instead of its own write().
  LogLine& buffered() {
    buffered_ = true;
    return *this;
  }
  LogLine& kv(std::string_view key, std::string_view value);
  LogLine& kv(std::string_view key, const char* value) { return kv(key, std::string_view(value)); }
  LogLine& kv(std::string_view key, const std::string& value) {
    return kv(key, std::string_view(value));
  }
  LogLine& kv(std::string_view key, bool value) { return raw(key, value ? "true" : "false"); }
  LogLine& kv(std::string_view key, double value);
  template <typename Int>
    requires std::is_integral_v<Int>
  LogLine& kv(std::string_view key, Int value) {
    if constexpr (std::is_signed_v<Int>) return kv_int(key, static_cast<int64_t>(value));
    else return kv_uint(key, static_cast<uint64_t>(value));
  }

 private:
  LogLine& kv_int(std::string_view key, int64_t value);
  LogLine& kv_uint(std::string_view key, uint64_t value);
  // A field whose value is a JSON literal (a number, true, false): unquoted in both formats.
  LogLine& raw(std::string_view key, std::string_view literal);
  bool json_;
  bool buffered_ = false;
  std::string line_;
};

// Appends `value` to `out`, quoted and escaped when it holds spaces, quotes or control bytes.
void append_log_value(std::string& out, std::string_view value);

}  // namespace infera

#define INFERA_LOG(level, component)                          \
  if (!::infera::log_enabled(::infera::LogLevel::level)) {    \
  } else                                                      \
    ::infera::LogLine(::infera::LogLevel::level, component)
