// The tree-walking interpreter: renders a parsed Program with a set of variables, with jinja2's
// scoping (a for loop's iterations and a macro call each get their own scope; if does not; macros
// see the template's top-level names), Python's semantics for every operator, and RenderLimits
// counted as it goes. One Renderer renders once; it is not shared between threads.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pagedkv/template/ast.h"
#include "pagedkv/template/limits.h"
#include "pagedkv/template/value.h"

namespace pagedkv::jinja {

// The wall clock strftime_now reads, as local broken-down time; injected so tests can fix the date.
using TemplateClock = std::function<std::tm()>;

class Renderer {
 public:
  // `variables` are the template's globals (messages, tools, bos_token, ...); they and `program`
  // must outlive the Renderer.
  Renderer(const ast::Program& program, const Dict& variables, const RenderLimits& limits, TemplateClock clock);
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  std::string render();

  // ---- for the builtins (filters, tests, methods, globals) -------------------------------------
  const RenderLimits& limits() const { return limits_; }
  // Counts one unit of work; throws TemplateLimitError past max_steps.
  void tick(int line) {
    if (++steps_ > limits_.max_steps) limit_exceeded(line, "max_steps", limits_.max_steps);
  }
  // Throws TemplateLimitError if a string or list of `bytes` would exceed max_output_bytes.
  void check_size(size_t bytes, int line) const {
    if (bytes > limits_.max_output_bytes) limit_exceeded(line, "max_output_bytes", limits_.max_output_bytes);
  }
  // Counts `n` loop iterations (or items of a builtin's loop) against max_loop_iterations.
  void count_iterations(uint64_t n, int line);
  [[noreturn]] void fail(int line, std::string_view message) const;
  [[noreturn]] void fail_undefined(int line, const Value& undefined) const;
  [[noreturn]] void limit_exceeded(int line, std::string_view limit, uint64_t value) const;
  std::string strftime_now(std::string_view format) const;
  // namespace(): a new namespace with these attributes, emptied when the Renderer ends.
  Value new_namespace(std::vector<std::pair<std::string, Value>> attributes);

  // The items a for loop (or a filter) iterates: a list's items, a dict's keys, a string's code
  // points; nothing for undefined; TypeError otherwise.
  std::shared_ptr<const List> iterate(const Value& v, int line);

  // Calls a macro defined by `macro` (or, for a call block's caller(), its body), binding `args`,
  // in a scope whose parent is `parent` (null: the top level).
  struct Scope;
  // The names visible in `scope` below the top level, copied (null when `scope` is the top level):
  // what a macro or caller() defined there sees when it runs.
  std::shared_ptr<Scope> capture(Scope& scope) const;
  Value call_macro(const ast::Stmt& macro, const std::vector<ast::Parameter>& params, const ast::Body& body,
                   Scope* parent, CallArgs args, const Value& caller, int line);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const ast::Body& body, Scope& scope, std::string& out);
  Flow exec(const ast::Stmt& s, Scope& scope, std::string& out);
  void exec_for(const ast::Stmt& s, Scope& scope, std::string& out);
  void exec_set(const ast::Stmt& s, Scope& scope);
  Value eval(const ast::Expr& e, Scope& scope);
  Value eval_binary(const ast::Expr& e, Scope& scope);
  Value eval_compare(const ast::Expr& e, Scope& scope);
  Value eval_call(const ast::Expr& e, Scope& scope);
  Value eval_filter(const ast::Expr& e, Scope& scope, const Value* block_input);
  Value eval_slice(const ast::Expr& e, Scope& scope);
  CallArgs eval_args(const ast::Expr& e, Scope& scope);
  Value lookup(std::string_view name, Scope& scope) const;
  void append_output(std::string& out, const Value& v, int line);

  const ast::Program& program_;
  const Dict& variables_;
  const RenderLimits& limits_;
  TemplateClock clock_;
  uint64_t steps_ = 0;
  uint64_t iterations_ = 0;
  int call_depth_ = 0;
  Scope* root_ = nullptr;
  // Every namespace this render made. A namespace is the one mutable value, so it can come to hold
  // itself, directly (`set ns.n = ns`) or through a macro whose closure holds it: a cycle of shared
  // pointers that would outlive the render. The destructor empties them all, which breaks any.
  std::vector<Value> namespaces_;
};

// A scope of template variables: names assigned in it, then its parent's.
struct Renderer::Scope {
  std::vector<std::pair<std::string, Value>> vars;
  Scope* parent = nullptr;

  Value* find(std::string_view name) {
    for (auto& [k, v] : vars)
      if (k == name) return &v;
    return nullptr;
  }
  void set(std::string_view name, Value v) {
    if (Value* existing = find(name)) {
      *existing = std::move(v);
      return;
    }
    vars.emplace_back(std::string(name), std::move(v));
  }
};

}  // namespace pagedkv::jinja
