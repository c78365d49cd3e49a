#include "pagedkv/template/template.h"

#include <new>

#include <fmt/format.h>

#include "pagedkv/template/parser.h"
#include "pagedkv/template/value_format.h"

namespace pagedkv::jinja {

Template::Template(std::string_view source, const ParseLimits& limits)
    : program_(std::make_shared<const ast::Program>(parse_template(source, limits))) {}

std::string Template::render(const nlohmann::ordered_json& variables, const RenderOptions& options) const {
  if (!variables.is_object() && !variables.is_null())
    throw TemplateRenderError("template variables must be a JSON object", 0);
  Dict globals;
  if (variables.is_object())
    for (const auto& [name, value] : variables.items())
      globals.set(name, value_from_json(value, options.limits.max_data_depth));
  try {
    Renderer renderer(*program_, globals, options.limits, options.clock);
    return renderer.render();
  } catch (const TemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    // A standard-library failure inside a builtin (an out-of-range conversion, say) is still the
    // template's failure, reported like the others.
    throw TemplateRenderError(fmt::format("template evaluation failed: {}", e.what()), 0);
  }
}

}  // namespace pagedkv::jinja
