// The errors of the template layer. Every failure to parse or render a chat template is a
// TemplateError (a pagedkv::Error), never a crash or partial text; the kind says whose fault it is.
#pragma once

#include <string>

#include "pagedkv/core/error.h"

namespace pagedkv::jinja {

// Base of every template failure. line() is the template's 1-based source line (0 if unknown).
class TemplateError : public Error {
 public:
  TemplateError(const std::string& message, int line) : Error(message), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

// The source is not a template this interpreter accepts (bad syntax, an unsupported tag).
class TemplateSyntaxError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

// The template called raise_exception(message): what() is exactly the template's own message, as
// jinja2's TemplateError carries it, so callers can show it to the client unchanged.
class TemplateRaisedError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

// Evaluation failed the way Python's jinja2 would fail (TypeError, UndefinedError, a forbidden
// attribute): the message names the operation and the template line.
class TemplateRenderError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

// A parse or render limit (limits.h) was exceeded; the message names the limit.
class TemplateLimitError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

}  // namespace pagedkv::jinja
