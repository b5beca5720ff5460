#include "infera/http/sse.h"

#include <cstring>
#include <utility>

namespace infera::http {
namespace {

Status event_too_large(size_t max_bytes) {
  return resource_exhausted("SSE event exceeds " + std::to_string(max_bytes) + " bytes");
}

}  // namespace

void append_sse_event(std::string& out, std::string_view payload) {
  size_t start = 0;
  for (;;) {
    size_t end = start;
    while (end < payload.size() && payload[end] != '\n' && payload[end] != '\r') ++end;
    out.append("data: ");
    out.append(payload.data() + start, end - start);
    out.push_back('\n');
    if (end == payload.size()) break;
    // "\r\n" is one line break, as a parser reads it.
    start =
        end +
        ((payload[end] == '\r' && end + 1 < payload.size() && payload[end + 1] == '\n') ? 2 : 1);
  }
  out.push_back('\n');
}

std::string sse_event(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  append_sse_event(out, payload);
  return out;
}

void SseParser::feed(std::string_view bytes) {
  if (!status_.ok() || bytes.empty()) return;
  if (pos_ == buffer_.size()) {
    buffer_.clear();
    pos_ = 0;
  } else if (pos_ > 0 && pos_ >= buffer_.size() / 2) {
    buffer_.erase(0, pos_);  // amortised: only once consumed bytes dominate
    pos_ = 0;
  }
  buffer_.append(bytes);
}

bool SseParser::next(SseEvent& out) {
  if (!status_.ok()) return false;
  for (;;) {
    const char* begin = buffer_.data() + pos_;
    size_t avail = buffer_.size() - pos_;
    if (skip_lf_ && avail > 0) {
      skip_lf_ = false;
      if (*begin == '\n') {
        ++pos_;
        continue;
      }
    }
    if (!bom_checked_) {
      // A leading U+FEFF (EF BB BF) is not part of the first field name.
      static constexpr char kBom[] = "\xEF\xBB\xBF";
      const size_t n = avail < 3 ? avail : 3;
      if (std::memcmp(begin, kBom, n) == 0) {
        if (n < 3) return false;  // might still become a BOM
        pos_ += 3;
        begin += 3;
        avail -= 3;
      }
      bom_checked_ = true;
    }
    // A line ends at "\r\n", "\n" or "\r", whichever comes first. The buffer is not
    // NUL-terminated: memchr bounded by avail is the point (the strchr the check offers would
    // read past it).
    // NOLINTNEXTLINE(bugprone-not-null-terminated-result)
    const auto* lf = static_cast<const char*>(std::memchr(begin, '\n', avail));
    const size_t scan = lf != nullptr ? static_cast<size_t>(lf - begin) : avail;
    const auto* cr = static_cast<const char*>(std::memchr(begin, '\r', scan));
    size_t line_len = 0;
    size_t consumed = 0;
    if (cr != nullptr) {
      line_len = static_cast<size_t>(cr - begin);
      if (line_len + 1 < avail) {
        consumed = line_len + (begin[line_len + 1] == '\n' ? 2 : 1);
      } else {
        consumed = line_len + 1;
        skip_lf_ = true;  // the matching "\n" may arrive with the next feed
      }
    } else if (lf != nullptr) {
      line_len = scan;
      consumed = scan + 1;
    } else {
      if (avail + data_.size() + event_.size() > options_.max_event_bytes) {
        status_ = event_too_large(options_.max_event_bytes);
      }
      return false;
    }
    if (line_len + data_.size() + event_.size() > options_.max_event_bytes) {
      status_ = event_too_large(options_.max_event_bytes);
      return false;
    }
    const std::string_view line(begin, line_len);
    pos_ += consumed;
    if (process_line(line, out)) return true;
    if (!status_.ok()) return false;
  }
}

bool SseParser::process_line(std::string_view line, SseEvent& out) {
  if (line.empty()) {
    if (!has_data_) {
      event_.clear();
      return false;
    }
    // Dispatch: the data without its final "\n"; swap buffers so no allocation once warm.
    data_.pop_back();
    std::swap(out_data_, data_);
    std::swap(out_event_, event_);
    out_id_ = last_id_;
    data_.clear();
    event_.clear();
    has_data_ = false;
    out = SseEvent{out_event_, out_data_, out_id_};
    return true;
  }
  if (line.front() == ':') return false;  // comment (keep-alive pings)
  std::string_view name = line;
  std::string_view value;
  if (const size_t colon = line.find(':'); colon != std::string_view::npos) {
    name = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (name == "data") {
    if (data_.size() + value.size() + 1 > options_.max_event_bytes) {
      status_ = event_too_large(options_.max_event_bytes);
      return false;
    }
    data_.append(value);
    data_.push_back('\n');
    has_data_ = true;
  } else if (name == "event") {
    event_.assign(value);
  } else if (name == "id") {
    if (value.find('\0') == std::string_view::npos) last_id_.assign(value);
  }
  // "retry" and unknown fields are ignored.
  return false;
}

bool SseParser::idle() const {
  return pos_ == buffer_.size() && !has_data_ && event_.empty();
}

void SseParser::reset() {
  status_ = Status();
  buffer_.clear();
  pos_ = 0;
  bom_checked_ = false;
  skip_lf_ = false;
  has_data_ = false;
  data_.clear();
  event_.clear();
  last_id_.clear();
  out_data_.clear();
  out_event_.clear();
  out_id_.clear();
}

}  // namespace infera::http
