#include "infera/proxy/token_meter.h"

#include <algorithm>

namespace infera::proxy {
namespace {

constexpr size_t kMaxLine = size_t{64} * 1024;
constexpr std::string_view kUsageKey = "\"completion_tokens\":";

}  // namespace

void TokenMeter::find_usage(std::string_view text) {
  // The last occurrence wins (a stream with continuous usage reports a running total).
  for (size_t at = text.find(kUsageKey); at != std::string_view::npos;
       at = text.find(kUsageKey, at + 1)) {
    size_t i = at + kUsageKey.size();
    while (i < text.size() && text[i] == ' ') ++i;
    uint64_t v = 0;
    size_t digits = 0;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9' && digits < 12; ++i, ++digits) {
      v = v * 10 + static_cast<uint64_t>(text[i] - '0');
    }
    if (digits > 0 && i < text.size()) usage_ = v;  // a number cut by the piece's end waits
  }
}

bool TokenMeter::line(std::string_view text) {
  if (!text.starts_with("data:")) return false;
  text.remove_prefix(5);
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  if (text.starts_with("[DONE]")) return false;
  if (text.find(kUsageKey) != std::string_view::npos) find_usage(text);
  // A usage-only chunk (include_usage), an error event, the role-only first chunk and an empty
  // closing delta carry no output.
  if (text.find("\"choices\"") == std::string_view::npos) return false;
  for (std::string_view empty : {"\"choices\":[]", "\"content\":\"\"", "\"text\":\"\"", "\"delta\":{}"}) {
    if (text.find(empty) != std::string_view::npos) return false;
  }
  return true;
}

void TokenMeter::find_id(std::string_view piece) {
  constexpr size_t kHead = 4096;
  constexpr std::string_view kIdKey = "\"id\":\"";
  head_.append(piece.substr(0, kHead - std::min(kHead, head_.size())));
  const size_t at = head_.find(kIdKey);
  if (at != std::string::npos) {
    const size_t from = at + kIdKey.size();
    const size_t end = head_.find('"', from);
    if (end != std::string::npos && end - from <= 128) id_ = head_.substr(from, end - from);
    if (end != std::string::npos || head_.size() - from > 128) id_done_ = true;
  }
  if (head_.size() >= kHead) id_done_ = true;
  if (id_done_) std::string().swap(head_);
}

void TokenMeter::feed(std::string_view piece, Nanos now) {
  if (!id_done_) find_id(piece);
  if (!sse_) {
    // A whole JSON answer: its usage, found across piece boundaries through a short tail.
    partial_.append(piece);
    find_usage(partial_);
    if (partial_.size() > 64) partial_.erase(0, partial_.size() - 64);
    return;
  }
  uint64_t outputs = 0;
  while (!piece.empty()) {
    const size_t nl = piece.find('\n');
    const std::string_view head = piece.substr(0, nl);
    if (nl == std::string_view::npos) {
      if (!skipping_ && partial_.size() + head.size() <= kMaxLine) partial_.append(head);
      else skipping_ = true;
      break;
    }
    piece.remove_prefix(nl + 1);
    if (!skipping_) {
      if (partial_.empty()) {
        outputs += line(head) ? 1u : 0u;
      } else {
        partial_.append(head);
        outputs += line(partial_) ? 1u : 0u;
      }
    }
    partial_.clear();
    skipping_ = false;
  }
  if (outputs == 0) return;
  events_ += outputs;
  if (last_output_.count() != 0 && on_gap_) {
    const double gap = to_seconds(now - last_output_) / static_cast<double>(outputs);
    for (uint64_t i = 0; i < outputs; ++i) on_gap_(gap);
  } else if (on_gap_) {
    for (uint64_t i = 1; i < outputs; ++i) on_gap_(0.0);  // the first token has no gap
  }
  last_output_ = now;
}

}  // namespace infera::proxy
