// A Jinja2 template engine with the semantics Hugging Face transformers renders chat templates
// with (jinja2 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, the
// `generation` tag, transformers' `tojson`, raise_exception and strftime_now).
// A Template is parsed once and immutable afterwards: render() may run on any number of threads
// at once; each render owns its own memory, bounded by Limits. Copies share the parsed program.
#pragma once

#include <boost/json/object.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "infera/common/status.h"

namespace infera::jinja {

// Bounds on one render. A template that loops forever, recurses without end or builds huge
// values stops with RESOURCE_EXHAUSTED instead of taking the process down.
struct Limits {
  uint64_t max_steps = 5'000'000;        // evaluated nodes, loop iterations, builtin work units
  size_t max_output_bytes = 32u << 20;   // rendered text (and any captured block)
  size_t max_memory_bytes = 128u << 20;  // the render's arena: strings, lists, scopes
  int max_call_depth = 64;               // nested macro calls
};

struct Program;
struct Binding;
class ChatTemplate;

class Template {
 public:
  // Parse errors are INVALID_ARGUMENT with the line and column.
  static Result<Template> parse(std::string_view source);

  // Renders with `context` as the top-level names (in addition to jinja2's globals range,
  // namespace, dict and transformers' raise_exception, strftime_now). The context must not
  // change during the call. Errors: INVALID_ARGUMENT for template errors (undefined values used,
  // type errors) with the line; raise_exception's message verbatim; RESOURCE_EXHAUSTED when a
  // limit is hit. `now` is what strftime_now formats (local time); the system clock by default.
  Result<std::string> render(const boost::json::object& context, const Limits& limits = {},
                             std::optional<std::chrono::system_clock::time_point> now = {}) const;

 private:
  friend class ChatTemplate;
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  // The context as bindings to caller-owned JSON: ChatTemplate renders without copying the
  // conversation into a new object.
  Result<std::string> render_bindings(
      const Binding* bindings, size_t count, const Limits& limits,
      std::optional<std::chrono::system_clock::time_point> now) const;

  std::shared_ptr<const Program> program_;
};

}  // namespace infera::jinja
