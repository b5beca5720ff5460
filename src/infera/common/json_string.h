// JSON string literals from untrusted bytes: one escaper for error bodies, SSE error events and
// JSON log lines. Pure; any thread.
#pragma once

#include <string>
#include <string_view>

namespace infera {

// Appends `text` as a JSON string literal (quoted, escaped). Invalid UTF-8 becomes U+FFFD, so
// untrusted bytes (a model name, an engine's message) cannot break the document.
void append_json_string(std::string& out, std::string_view text);

}  // namespace infera
