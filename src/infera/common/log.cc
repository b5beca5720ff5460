#include "infera/common/log.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "infera/common/json_string.h"

namespace infera {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::atomic<LogFormat> g_format{LogFormat::kLogfmt};

std::string_view level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kOff: return "OFF";
  }
  return "?";
}

// Wall-clock time is right here: log timestamps are for humans correlating events. The text up
// to the second is formatted once per second and thread (an access line per request would
// otherwise pay gmtime_r and snprintf each time); the milliseconds are appended by hand.
void append_timestamp(std::string& out) {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch());
  const int64_t secs = ms.count() / 1000;
  thread_local int64_t cached_secs = -1;
  thread_local char cached[24];  // "YYYY-MM-DDTHH:MM:SS"
  thread_local size_t cached_len = 0;
  if (secs != cached_secs) {
    const std::time_t t = static_cast<std::time_t>(secs);
    std::tm tm{};
    gmtime_r(&t, &tm);
    const int n = std::snprintf(cached, sizeof(cached), "%04d-%02d-%02dT%02d:%02d:%02d",
                                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                                tm.tm_min, tm.tm_sec);
    cached_len = n > 0 ? std::min(static_cast<size_t>(n), sizeof(cached) - 1) : 0;
    cached_secs = secs;
  }
  const int milli = static_cast<int>(ms.count() % 1000);
  const char tail[] = {'.', static_cast<char>('0' + milli / 100),
                       static_cast<char>('0' + milli / 10 % 10), static_cast<char>('0' + milli % 10),
                       'Z'};
  out.append(cached, cached_len);
  out.append(tail, sizeof(tail));
}

void write_all(std::string_view bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(STDERR_FILENO, bytes.data() + off, bytes.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

constexpr size_t kLogBufferBytes = size_t{32} * 1024;

struct LogBuffer {
  std::mutex mu;
  std::string bytes;  // whole lines; guarded by mu
};

LogBuffer& log_buffer() {
  static LogBuffer* const buffer = new LogBuffer;  // never destroyed: loggers may outlive main
  return *buffer;
}

}  // namespace

void flush_log_buffer() {
  LogBuffer& b = log_buffer();
  std::lock_guard lock(b.mu);
  write_all(b.bytes);
  b.bytes.clear();
}

void set_log_level(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }

Result<LogLevel> parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn" || name == "warning") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  if (name == "off") return LogLevel::kOff;
  return invalid_argument("unknown log level '" + std::string(name) +
                          "' (expected debug, info, warn, error or off)");
}

void set_log_format(LogFormat format) { g_format.store(format, std::memory_order_relaxed); }
LogFormat log_format() { return g_format.load(std::memory_order_relaxed); }

Result<LogFormat> parse_log_format(std::string_view name) {
  if (name == "logfmt") return LogFormat::kLogfmt;
  if (name == "json") return LogFormat::kJson;
  return invalid_argument("unknown log format '" + std::string(name).substr(0, 64) +
                          "' (expected logfmt or json)");
}

void append_log_value(std::string& out, std::string_view value) {
  bool plain = !value.empty();
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || c == '"' || c == '\\' || c == '=' || u == 0x7f) {
      plain = false;
      break;
    }
  }
  if (plain) {
    out += value;
    return;
  }
  out += '"';
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

LogLine::LogLine(LogLevel level, std::string_view component) : json_(log_format() == LogFormat::kJson) {
  line_.reserve(160);
  if (json_) {
    line_ += R"({"ts":")";
    append_timestamp(line_);
    line_ += R"(","level":")";
    line_ += level_name(level);
    line_ += R"(","component":)";
    append_json_string(line_, component);
    return;
  }
  append_timestamp(line_);
  line_ += ' ';
  line_ += level_name(level);
  line_ += ' ';
  line_ += component;
}

LogLine::~LogLine() {
  if (json_) line_ += '}';
  line_ += '\n';
  if (buffered_) {
    LogBuffer& b = log_buffer();
    std::lock_guard lock(b.mu);
    b.bytes += line_;
    if (b.bytes.size() >= kLogBufferBytes) {
      write_all(b.bytes);  // under the lock: buffered lines keep their order
      b.bytes.clear();
    }
    return;
  }
  // One write per line so concurrent loggers never interleave within a line.
  write_all(line_);
}

LogLine& LogLine::msg(std::string_view text) {
  if (json_) {
    line_ += R"(,"msg":)";
    append_json_string(line_, text);
    return *this;
  }
  line_ += ' ';
  append_log_value(line_, text);
  return *this;
}

LogLine& LogLine::kv(std::string_view key, std::string_view value) {
  if (json_) {
    line_ += ',';
    append_json_string(line_, key);
    line_ += ':';
    append_json_string(line_, value);
    return *this;
  }
  line_ += ' ';
  line_ += key;
  line_ += '=';
  append_log_value(line_, value);
  return *this;
}

LogLine& LogLine::raw(std::string_view key, std::string_view literal) {
  if (!json_) return kv(key, literal);
  line_ += ',';
  append_json_string(line_, key);
  line_ += ':';
  line_ += literal;
  return *this;
}

LogLine& LogLine::kv(std::string_view key, double value) {
  if (!std::isfinite(value)) return kv(key, value > 0 ? "inf" : value < 0 ? "-inf" : "nan");
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::general, 6);  // %.6g
  return raw(key, std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
}

LogLine& LogLine::kv_int(std::string_view key, int64_t value) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), value);
  return raw(key, std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
}

LogLine& LogLine::kv_uint(std::string_view key, uint64_t value) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), value);
  return raw(key, std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
}

}  // namespace infera
