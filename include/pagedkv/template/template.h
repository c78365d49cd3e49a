// A chat template, parsed once and rendered many times: the Jinja text a model file carries in
// tokenizer.chat_template, evaluated as transformers evaluates it with Python's jinja2
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, the generation tag,
// tojson as json.dumps with ensure_ascii=False, raise_exception, strftime_now). Rendering is
// sandboxed: a template reaches only its variables and the documented globals, never files, the
// network or the process, and every render is bounded by RenderLimits.
//
//   jinja::Template t(source);                       // throws TemplateSyntaxError / TemplateLimitError
//   std::string prompt = t.render({{"messages", messages}, {"add_generation_prompt", true},
//                                  {"bos_token", "<s>"}, {"tools", nullptr}});
//
// A Template is immutable after construction; render() may run on several threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "pagedkv/template/ast.h"
#include "pagedkv/template/limits.h"
#include "pagedkv/template/renderer.h"
#include "pagedkv/template/template_error.h"

namespace pagedkv::jinja {

struct RenderOptions {
  RenderLimits limits;
  TemplateClock clock;  // strftime_now's clock; empty: the system's local time
};

class Template {
 public:
  explicit Template(std::string_view source, const ParseLimits& limits = {});

  // Renders with `variables` (a JSON object: each key a template variable, in the data's key
  // order). A variable absent from it is undefined; a JSON null is none. Throws a TemplateError:
  // TemplateRaisedError carries raise_exception's message exactly.
  std::string render(const nlohmann::ordered_json& variables, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const ast::Program> program_;
};

}  // namespace pagedkv::jinja
