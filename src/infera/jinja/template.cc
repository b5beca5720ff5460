#include "infera/jinja/template.h"

#include <vector>

#include "infera/jinja/interpreter.h"
#include "infera/jinja/parser.h"

namespace infera::jinja {

Result<Template> Template::parse(std::string_view source) {
  INFERA_ASSIGN_OR_RETURN(std::shared_ptr<const Program> program, parse_program(source));
  return Template(std::move(program));
}

Result<std::string> Template::render(
    const boost::json::object& context, const Limits& limits,
    std::optional<std::chrono::system_clock::time_point> now) const {
  std::vector<Binding> bindings;
  bindings.reserve(context.size());
  for (const auto& kv : context) {
    Binding b;
    b.name = std::string_view(kv.key().data(), kv.key().size());
    b.value = &kv.value();
    bindings.push_back(b);
  }
  return render_bindings(bindings.data(), bindings.size(), limits, now);
}

Result<std::string> Template::render_bindings(
    const Binding* bindings, size_t count, const Limits& limits,
    std::optional<std::chrono::system_clock::time_point> now) const {
  Interpreter interpreter(*program_, limits, now.value_or(std::chrono::system_clock::now()));
  return interpreter.render({bindings, count});
}

}  // namespace infera::jinja
