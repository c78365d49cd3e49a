#include "pagedkv/template/renderer.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "pagedkv/template/builtins.h"
#include "pagedkv/template/template_error.h"
#include "pagedkv/template/unicode_text.h"
#include "pagedkv/template/value_format.h"

namespace pagedkv::jinja {

namespace {

using ast::Expr;
using ast::ExprKind;
using ast::Stmt;
using ast::StmtKind;

// A macro defined with {% macro %}: calling it renders its body in a fresh scope whose parent is
// where it was defined. A macro defined at the top level sees the template's names as they are
// when it runs; one defined inside a loop or another macro holds a copy of that scope's names
// (`closure`), so it stays valid if it outlives the scope (stored in a namespace, say).
class MacroCallable final : public Callable {
 public:
  MacroCallable(const Stmt& macro, std::shared_ptr<Renderer::Scope> closure)
      : macro_(macro), closure_(std::move(closure)) {}
  Value call(Renderer& r, CallArgs args, int line) const override {
    return r.call_macro(macro_, macro_.params, macro_.body, closure_.get(), std::move(args), Value(), line);
  }
  std::string describe() const override { return fmt::format("<Macro '{}'>", macro_.name); }

 private:
  const Stmt& macro_;
  std::shared_ptr<Renderer::Scope> closure_;
};

// caller() inside a macro invoked by {% call %}: the call block's body, in the block's scope
// (captured as a macro's is).
class CallerCallable final : public Callable {
 public:
  CallerCallable(const Stmt& block, std::shared_ptr<Renderer::Scope> closure)
      : block_(block), closure_(std::move(closure)) {}
  Value call(Renderer& r, CallArgs args, int line) const override {
    return r.call_macro(block_, block_.params, block_.body, closure_.get(), std::move(args), Value(), line);
  }
  std::string describe() const override { return "<Macro 'caller'>"; }

 private:
  const Stmt& block_;
  std::shared_ptr<Renderer::Scope> closure_;
};

// loop.cycle(a, b, ...): the argument at the iteration's index, round robin.
class LoopCycle final : public Callable {
 public:
  explicit LoopCycle(size_t index0) : index0_(index0) {}
  Value call(Renderer& r, CallArgs args, int line) const override {
    if (args.positional.empty()) r.fail(line, "TypeError: no items for cycling given");
    return args.positional[index0_ % args.positional.size()];
  }
  std::string describe() const override { return "<bound method LoopContext.cycle>"; }

 private:
  size_t index0_;
};

std::string attribute_hint(const Value& obj, std::string_view name) {
  return fmt::format("'{} object' has no attribute '{}'", type_name(obj), name);
}

// obj.name: the attribute (method) first, then the item, as jinja2's getattr.
Value get_attribute(Renderer& r, const Value& obj, std::string_view name, int line) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      r.fail_undefined(line, obj);
    case Value::Kind::kDict: {
      if (has_method(obj, name)) return bound_method(obj, name);
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return Value::undefined(attribute_hint(obj, name));
    }
    case Value::Kind::kNamespace:
      if (Value* v = obj.as_namespace().find(name)) return *v;
      return Value::undefined(attribute_hint(obj, name));
    case Value::Kind::kString:
    case Value::Kind::kList:
      if (has_method(obj, name)) return bound_method(obj, name);
      return Value::undefined(attribute_hint(obj, name));
    default:
      return Value::undefined(attribute_hint(obj, name));
  }
}

// obj[key]: the item first, then (for a string key) the attribute, as jinja2's getitem.
Value get_item(Renderer& r, const Value& obj, const Value& key, int line) {
  if (obj.is_undefined()) r.fail_undefined(line, obj);
  if (key.is_undefined()) return Value::undefined(fmt::format("'{} object' has no element Undefined", type_name(obj)));
  const auto index_of = [&](size_t size) -> std::optional<size_t> {
    if (!key.is_int() && !key.is_bool()) return std::nullopt;
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(size);
    if (i < 0 || static_cast<size_t>(i) >= size) return std::nullopt;
    return static_cast<size_t>(i);
  };
  switch (obj.kind()) {
    case Value::Kind::kDict:
      if (key.is_string()) {
        if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
        if (has_method(obj, key.as_string())) return bound_method(obj, key.as_string());
      }
      return Value::undefined(fmt::format("'dict object' has no attribute {}", python_repr(key)));
    case Value::Kind::kList: {
      const auto& items = obj.as_list().items;
      if (auto i = index_of(items.size())) return items[*i];
      if (key.is_string() && has_method(obj, key.as_string())) return bound_method(obj, key.as_string());
      return Value::undefined(fmt::format("'{} object' has no element {}", type_name(obj), python_repr(key)));
    }
    case Value::Kind::kString: {
      const std::string& s = obj.as_string();
      if (is_ascii(s)) {
        if (auto i = index_of(s.size())) return Value::string(std::string(1, s[*i]));
      } else if (key.is_int() || key.is_bool()) {
        const auto offsets = code_point_offsets(s);
        if (auto i = index_of(offsets.size() - 1))
          return Value::string(s.substr(offsets[*i], offsets[*i + 1] - offsets[*i]));
      }
      if (key.is_string() && has_method(obj, key.as_string())) return bound_method(obj, key.as_string());
      return Value::undefined(fmt::format("'str object' has no element {}", python_repr(key)));
    }
    case Value::Kind::kNamespace:
      if (key.is_string())
        if (Value* v = obj.as_namespace().find(key.as_string())) return *v;
      return Value::undefined(fmt::format("'Namespace object' has no attribute {}", python_repr(key)));
    default:
      return Value::undefined(fmt::format("'{} object' has no element {}", type_name(obj), python_repr(key)));
  }
}

bool checked_add(int64_t a, int64_t b, int64_t& out) { return !__builtin_add_overflow(a, b, &out); }
bool checked_sub(int64_t a, int64_t b, int64_t& out) { return !__builtin_sub_overflow(a, b, &out); }
bool checked_mul(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

}  // namespace

Renderer::Renderer(const ast::Program& program, const Dict& variables, const RenderLimits& limits, TemplateClock clock)
    : program_(program), variables_(variables), limits_(limits), clock_(std::move(clock)) {}

Renderer::~Renderer() {
  for (Value& ns : namespaces_) ns.as_namespace().attributes.clear();
}

Value Renderer::new_namespace(std::vector<std::pair<std::string, Value>> attributes) {
  namespaces_.push_back(Value::new_namespace(std::move(attributes)));
  return namespaces_.back();
}

std::string Renderer::render() {
  Scope root;
  root_ = &root;
  std::string out;
  exec_body(program_.body, root, out);
  root_ = nullptr;
  return out;
}

void Renderer::count_iterations(uint64_t n, int line) {
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations)
    limit_exceeded(line, "max_loop_iterations", limits_.max_loop_iterations);
}

void Renderer::fail(int line, std::string_view message) const {
  throw TemplateRenderError(fmt::format("line {}: {}", line, message), line);
}

void Renderer::fail_undefined(int line, const Value& undefined) const {
  fail(line, fmt::format("UndefinedError: {}", undefined.undefined_message()));
}

void Renderer::limit_exceeded(int line, std::string_view limit, uint64_t value) const {
  throw TemplateLimitError(fmt::format("line {}: template exceeded RenderLimits::{} ({})", line, limit, value), line);
}

std::string Renderer::strftime_now(std::string_view format) const {
  std::tm now{};
  if (clock_) {
    now = clock_();
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  if (format.empty()) return {};
  const std::string fmt_text(format);
  for (size_t capacity = 64 + format.size() * 4; capacity <= 64 * (format.size() + 64); capacity *= 4) {
    std::string buf(capacity, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), fmt_text.c_str(), &now);
    if (n > 0) {
      buf.resize(n);
      return buf;
    }
  }
  return {};  // formats that print nothing (e.g. "%p" in some locales)
}

std::shared_ptr<const List> Renderer::iterate(const Value& v, int line) {
  switch (v.kind()) {
    case Value::Kind::kList:
      return v.list_ptr();
    case Value::Kind::kUndefined:
      return std::make_shared<const List>();
    case Value::Kind::kDict: {
      auto keys = std::make_shared<List>();
      keys->items.reserve(v.as_dict().size());
      for (const auto& [k, item] : v.as_dict().entries()) keys->items.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::kString: {
      auto chars = std::make_shared<List>();
      const std::string& s = v.as_string();
      for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        decode_utf8(s, pos);
        chars->items.push_back(Value::string(s.substr(start, pos - start)));
      }
      return chars;
    }
    default:
      fail(line, fmt::format("TypeError: '{}' object is not iterable", type_name(v)));
  }
}

Value Renderer::call_macro(const ast::Stmt& macro, const std::vector<ast::Parameter>& params, const ast::Body& body,
                           Scope* parent, CallArgs args, const Value& caller, int line) {
  if (call_depth_ >= limits_.max_call_depth)
    limit_exceeded(line, "max_call_depth", static_cast<uint64_t>(limits_.max_call_depth));
  ++call_depth_;
  struct Restore {
    int& depth;
    ~Restore() { --depth; }
  } restore{call_depth_};
  const std::string name = macro.kind == StmtKind::kMacro ? macro.name : "caller";
  if (args.positional.size() > params.size())
    fail(line, fmt::format("TypeError: macro '{}' takes not more than {} argument(s)", name, params.size()));
  Scope scope;
  scope.parent = parent ? parent : root_;
  std::vector<bool> bound(params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    scope.vars.emplace_back(params[i].name, std::move(args.positional[i]));
    bound[i] = true;
  }
  for (auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < params.size() && params[i].name != key) ++i;
    if (i == params.size()) {
      if (key == "caller") {
        scope.set("caller", std::move(value));
        continue;
      }
      fail(line, fmt::format("TypeError: macro '{}' takes no keyword argument '{}'", name, key));
    }
    if (bound[i]) fail(line, fmt::format("TypeError: macro '{}' got multiple values for argument '{}'", name, key));
    scope.set(params[i].name, std::move(value));
    bound[i] = true;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (bound[i]) continue;
    scope.set(params[i].name, params[i].default_value
                                  ? eval(*params[i].default_value, scope)
                                  : Value::undefined(fmt::format("parameter '{}' was not provided", params[i].name)));
  }
  if (!caller.is_undefined()) scope.set("caller", caller);
  std::string out;
  exec_body(body, scope, out);
  return Value::string(std::move(out));
}

std::shared_ptr<Renderer::Scope> Renderer::capture(Scope& scope) const {
  if (&scope == root_) return nullptr;
  auto closure = std::make_shared<Scope>();
  closure->parent = root_;
  for (Scope* s = &scope; s != nullptr && s != root_; s = s->parent)
    for (const auto& [name, value] : s->vars)
      if (closure->find(name) == nullptr) closure->vars.emplace_back(name, value);
  return closure;
}

// ---- statements -----------------------------------------------------------------------------------

Renderer::Flow Renderer::exec_body(const ast::Body& body, Scope& scope, std::string& out) {
  for (const auto& stmt : body) {
    const Flow flow = exec(*stmt, scope, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec(const ast::Stmt& s, Scope& scope, std::string& out) {
  tick(s.line);
  switch (s.kind) {
    case StmtKind::kText:
      check_size(out.size() + s.text.size(), s.line);
      out += s.text;
      return Flow::kNormal;
    case StmtKind::kOutput:
      append_output(out, eval(*s.expr, scope), s.line);
      return Flow::kNormal;
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches)
        if (truthy(eval(*cond, scope))) return exec_body(body, scope, out);
      return exec_body(s.else_body, scope, out);
    case StmtKind::kFor:
      exec_for(s, scope, out);
      return Flow::kNormal;
    case StmtKind::kSet:
      exec_set(s, scope);
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      std::string text;
      exec_body(s.body, scope, text);
      Value v = Value::string(std::move(text));
      if (s.filter) v = eval_filter(*s.filter, scope, &v);
      scope.set(s.targets[0], std::move(v));
      return Flow::kNormal;
    }
    case StmtKind::kMacro: {
      auto macro = std::make_shared<MacroCallable>(s, capture(scope));
      scope.set(s.name, Value::callable(std::move(macro)));
      return Flow::kNormal;
    }
    case StmtKind::kCallBlock: {
      const Expr& call = *s.expr;
      CallArgs args = eval_args(call, scope);
      args.keyword.emplace_back("caller", Value::callable(std::make_shared<CallerCallable>(s, capture(scope))));
      Value callee = eval(*call.target, scope);
      if (!callee.is_callable()) fail(s.line, fmt::format("TypeError: '{}' object is not callable", type_name(callee)));
      append_output(out, callee.as_callable().call(*this, std::move(args), s.line), s.line);
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      std::string text;
      exec_body(s.body, scope, text);
      const Value input = Value::string(std::move(text));
      append_output(out, eval_filter(*s.filter, scope, &input), s.line);
      return Flow::kNormal;
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kScope: {
      Scope inner;
      inner.parent = &scope;
      for (const auto& [name, expr] : s.assignments) inner.set(name, eval(*expr, scope));
      return exec_body(s.body, inner, out);
    }
  }
  return Flow::kNormal;
}

namespace {

// Binds a for / set target list to one value: a name takes it whole, several names unpack it.
void bind_targets(Renderer& r, const std::vector<std::string>& targets, const Value& value, Renderer::Scope& scope,
                  int line) {
  if (targets.size() == 1) {
    scope.set(targets[0], value);
    return;
  }
  std::shared_ptr<const List> items = r.iterate(value, line);
  if (items->items.size() != targets.size())
    r.fail(line, fmt::format("ValueError: cannot unpack {} values into {} names", items->items.size(), targets.size()));
  for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items->items[i]);
}

}  // namespace

void Renderer::exec_for(const ast::Stmt& s, Scope& scope, std::string& out) {
  std::shared_ptr<const List> items = iterate(eval(*s.expr, scope), s.line);
  if (s.condition) {  // {% for x in xs if cond %}: the loop (and loop.length) sees only the kept items
    auto kept = std::make_shared<List>();
    for (const Value& item : items->items) {
      count_iterations(1, s.line);
      Scope probe;
      probe.parent = &scope;
      bind_targets(*this, s.targets, item, probe, s.line);
      if (truthy(eval(*s.condition, probe))) kept->items.push_back(item);
    }
    items = std::move(kept);
  }
  const auto& seq = items->items;
  if (seq.empty()) {
    Scope inner;
    inner.parent = &scope;
    exec_body(s.else_body, inner, out);
    return;
  }
  const auto n = static_cast<int64_t>(seq.size());
  for (int64_t i = 0; i < n; ++i) {
    count_iterations(1, s.line);
    Scope iteration;  // a fresh scope per iteration: sets inside the body do not survive it
    iteration.parent = &scope;
    bind_targets(*this, s.targets, seq[static_cast<size_t>(i)], iteration, s.line);
    if (s.uses_loop_variable) {  // building loop costs more than a simple body: only when it is read
      auto loop = std::make_shared<Dict>();
      loop->set("index", Value::integer(i + 1));
      loop->set("index0", Value::integer(i));
      loop->set("revindex", Value::integer(n - i));
      loop->set("revindex0", Value::integer(n - i - 1));
      loop->set("first", Value::boolean(i == 0));
      loop->set("last", Value::boolean(i == n - 1));
      loop->set("length", Value::integer(n));
      loop->set("depth", Value::integer(1));
      loop->set("depth0", Value::integer(0));
      if (i > 0) loop->set("previtem", seq[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) loop->set("nextitem", seq[static_cast<size_t>(i + 1)]);
      loop->set("cycle", Value::callable(std::make_shared<LoopCycle>(static_cast<size_t>(i))));
      iteration.set("loop", Value::dict(std::move(loop)));
    }
    if (exec_body(s.body, iteration, out) == Flow::kBreak) break;
  }
}

void Renderer::exec_set(const ast::Stmt& s, Scope& scope) {
  Value value = eval(*s.expr, scope);
  if (!s.attribute.empty()) {
    Value target = lookup(s.targets[0], scope);
    if (!target.is_namespace())
      fail(s.line,
           fmt::format("TemplateRuntimeError: cannot assign attribute on non-namespace object '{}'", s.targets[0]));
    Namespace& ns = target.as_namespace();
    if (Value* existing = ns.find(s.attribute)) *existing = std::move(value);
    else ns.attributes.emplace_back(s.attribute, std::move(value));
    return;
  }
  bind_targets(*this, s.targets, value, scope, s.line);
}

// ---- expressions ----------------------------------------------------------------------------------

Value Renderer::lookup(std::string_view name, Scope& scope) const {
  for (Scope* s = &scope; s != nullptr; s = s->parent)
    if (Value* v = s->find(name)) return *v;
  if (const Value* v = variables_.find(name)) return *v;
  if (const Value* f = find_global_function(name)) return *f;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

void Renderer::append_output(std::string& out, const Value& v, int line) {
  append_python_str(out, v, limits_.max_output_bytes);
  check_size(out.size(), line);
}

CallArgs Renderer::eval_args(const ast::Expr& e, Scope& scope) {
  CallArgs args;
  args.positional.reserve(e.operands.size());
  for (const auto& arg : e.operands) args.positional.push_back(eval(*arg, scope));
  for (const auto& kw : e.keywords) args.keyword.emplace_back(kw.name, eval(*kw.value, scope));
  return args;
}

Value Renderer::eval(const ast::Expr& e, Scope& scope) {
  tick(e.line);
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName:
      return lookup(e.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.operands.size());
      for (const auto& item : e.operands) items.push_back(eval(*item, scope));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto dict = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
        Value key = eval(*e.operands[i], scope);
        if (!key.is_string()) fail(e.line, fmt::format("dict keys must be strings here, not '{}'", type_name(key)));
        dict->set(key.as_string(), eval(*e.operands[i + 1], scope));
      }
      return Value::dict(std::move(dict));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      Value v = eval(*e.target, scope);
      if (v.is_undefined()) fail_undefined(e.line, v);
      if (!v.is_number())
        fail(e.line, fmt::format("TypeError: bad operand type for unary {}: '{}'", e.kind == ExprKind::kNeg ? '-' : '+',
                                 type_name(v)));
      if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::number(-v.as_float());
      if (v.as_int() == std::numeric_limits<int64_t>::min()) fail(e.line, "OverflowError: integer too large");
      return Value::integer(-v.as_int());
    }
    case ExprKind::kNot:
      return Value::boolean(!truthy(eval(*e.target, scope)));
    case ExprKind::kAnd: {
      Value left = eval(*e.operands[0], scope);
      return truthy(left) ? eval(*e.operands[1], scope) : left;
    }
    case ExprKind::kOr: {
      Value left = eval(*e.operands[0], scope);
      return truthy(left) ? left : eval(*e.operands[1], scope);
    }
    case ExprKind::kBinary:
      return eval_binary(e, scope);
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& part : e.operands) {
        append_python_str(s, eval(*part, scope), limits_.max_output_bytes);
        check_size(s.size(), e.line);
      }
      return Value::string(std::move(s));
    }
    case ExprKind::kCompare:
      return eval_compare(e, scope);
    case ExprKind::kCondition:
      if (truthy(eval(*e.operands[1], scope))) return eval(*e.operands[0], scope);
      if (e.operands[2]) return eval(*e.operands[2], scope);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    case ExprKind::kGetAttr:
      return get_attribute(*this, eval(*e.target, scope), e.name, e.line);
    case ExprKind::kGetItem: {
      Value obj = eval(*e.target, scope);
      return get_item(*this, obj, eval(*e.operands[0], scope), e.line);
    }
    case ExprKind::kSlice:
      return eval_slice(e, scope);
    case ExprKind::kCall:
      return eval_call(e, scope);
    case ExprKind::kFilter:
      return eval_filter(e, scope, nullptr);
    case ExprKind::kTest: {
      Value subject = eval(*e.target, scope);
      const bool result = apply_test(*this, e.name, subject, eval_args(e, scope), e.line);
      return Value::boolean(result != e.negated);
    }
  }
  return Value();
}

Value Renderer::eval_binary(const ast::Expr& e, Scope& scope) {
  const Value a = eval(*e.operands[0], scope);
  const Value b = eval(*e.operands[1], scope);
  // str % args formats (an undefined argument prints as ""), before the undefined checks.
  if (e.binary_op == ast::BinaryOp::kMod && a.is_string()) return percent_format(*this, a.as_string(), b, e.line);
  if (a.is_undefined()) fail_undefined(e.line, a);
  if (b.is_undefined()) fail_undefined(e.line, b);
  static constexpr std::string_view kSymbols[] = {"+", "-", "*", "/", "//", "%", "**"};
  const auto unsupported = [&]() {  // throws
    fail(e.line, fmt::format("TypeError: unsupported operand type(s) for {}: '{}' and '{}'",
                             kSymbols[static_cast<int>(e.binary_op)], type_name(a), type_name(b)));
  };
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  int64_t r = 0;
  switch (e.binary_op) {
    case ast::BinaryOp::kAdd:
      if (floats) return Value::number(a.as_float() + b.as_float());
      if (numbers) {
        if (!checked_add(a.as_int(), b.as_int(), r)) fail(e.line, "OverflowError: integer result too large");
        return Value::integer(r);
      }
      if (a.is_string() && b.is_string()) {
        check_size(a.as_string().size() + b.as_string().size(), e.line);
        return Value::string(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
        std::vector<Value> items = a.as_list().items;
        check_size((items.size() + b.as_list().items.size()) * sizeof(Value), e.line);
        items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
        return Value::list(std::move(items), a.as_list().is_tuple);
      }
      break;
    case ast::BinaryOp::kSub:
      if (floats) return Value::number(a.as_float() - b.as_float());
      if (numbers) {
        if (!checked_sub(a.as_int(), b.as_int(), r)) fail(e.line, "OverflowError: integer result too large");
        return Value::integer(r);
      }
      break;
    case ast::BinaryOp::kMul: {
      if (floats) return Value::number(a.as_float() * b.as_float());
      if (numbers) {
        if (!checked_mul(a.as_int(), b.as_int(), r)) fail(e.line, "OverflowError: integer result too large");
        return Value::integer(r);
      }
      const bool a_count = a.is_int() || a.is_bool();
      const Value& seq = a_count ? b : a;
      const Value& count_value = a_count ? a : b;
      if (!(count_value.is_int() || count_value.is_bool()) || !(seq.is_string() || seq.is_list())) unsupported();
      const int64_t count = std::max<int64_t>(0, count_value.as_int());
      if (seq.is_string()) {
        const std::string& s = seq.as_string();
        if (!s.empty() && static_cast<uint64_t>(count) > limits_.max_output_bytes / s.size())
          limit_exceeded(e.line, "max_output_bytes", limits_.max_output_bytes);
        std::string out;
        out.reserve(s.size() * static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) out += s;
        return Value::string(std::move(out));
      }
      const auto& items = seq.as_list().items;
      if (!items.empty() && static_cast<uint64_t>(count) > limits_.max_output_bytes / (items.size() * sizeof(Value)))
        limit_exceeded(e.line, "max_output_bytes", limits_.max_output_bytes);
      std::vector<Value> out;
      out.reserve(items.size() * static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) out.insert(out.end(), items.begin(), items.end());
      return Value::list(std::move(out), seq.as_list().is_tuple);
    }
    case ast::BinaryOp::kDiv:
      if (!numbers) unsupported();
      if (b.as_float() == 0.0) fail(e.line, "ZeroDivisionError: division by zero");
      return Value::number(a.as_float() / b.as_float());
    case ast::BinaryOp::kFloorDiv:
      if (!numbers) unsupported();
      if (b.as_float() == 0.0) fail(e.line, "ZeroDivisionError: integer division or modulo by zero");
      if (floats) return Value::number(std::floor(a.as_float() / b.as_float()));
      if (a.as_int() == std::numeric_limits<int64_t>::min() && b.as_int() == -1)
        fail(e.line, "OverflowError: integer result too large");
      {
        const int64_t x = a.as_int(), y = b.as_int();
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return Value::integer(q);
      }
    case ast::BinaryOp::kMod:
      if (!numbers) unsupported();
      if (b.as_float() == 0.0) fail(e.line, "ZeroDivisionError: integer division or modulo by zero");
      if (floats) {
        const double x = a.as_float(), y = b.as_float();
        double m = std::fmod(x, y);
        if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
        if (m == 0.0) m = std::copysign(0.0, y);  // Python: the zero takes the divisor's sign
        return Value::number(m);
      }
      {
        const int64_t x = a.as_int(), y = b.as_int();
        if (y == -1) return Value::integer(0);
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::integer(m);
      }
    case ast::BinaryOp::kPow:
      if (!numbers) unsupported();
      if (!floats && b.as_int() >= 0) {
        int64_t result = 1, base = a.as_int();
        for (int64_t exp = b.as_int(); exp > 0; exp >>= 1) {
          if ((exp & 1) && !checked_mul(result, base, result)) fail(e.line, "OverflowError: integer result too large");
          if (exp > 1 && !checked_mul(base, base, base)) {
            if (base == 0 || base == 1) break;
            fail(e.line, "OverflowError: integer result too large");
          }
        }
        return Value::integer(result);
      }
      if (a.as_float() == 0.0 && b.as_float() < 0)
        fail(e.line, "ZeroDivisionError: 0.0 cannot be raised to a negative power");
      return Value::number(std::pow(a.as_float(), b.as_float()));
  }
  unsupported();
  return Value();
}

namespace {

bool contains(Renderer& r, const Value& container, const Value& item, int line) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string())
        r.fail(line, fmt::format("TypeError: 'in <string>' requires string as left operand, not {}", type_name(item)));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list().items)
        if (values_equal(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      if ((item.is_list() && !item.as_list().is_tuple) || item.is_dict())  // tuples hash; lists and dicts do not
        r.fail(line, fmt::format("TypeError: unhashable type: '{}'", type_name(item)));
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      r.fail(line, fmt::format("TypeError: argument of type '{}' is not iterable", type_name(container)));
  }
}

}  // namespace

Value Renderer::eval_compare(const ast::Expr& e, Scope& scope) {
  Value left = eval(*e.operands[0], scope);
  for (size_t i = 0; i < e.compare_ops.size(); ++i) {
    Value right = eval(*e.operands[i + 1], scope);
    bool ok = false;
    switch (e.compare_ops[i]) {
      case ast::CompareOp::kEq:
        ok = values_equal(left, right);
        break;
      case ast::CompareOp::kNe:
        ok = !values_equal(left, right);
        break;
      case ast::CompareOp::kLt:
        ok = compare_values(left, right, e.line) < 0;
        break;
      case ast::CompareOp::kLe:
        ok = compare_values(left, right, e.line) <= 0;
        break;
      case ast::CompareOp::kGt:
        ok = compare_values(left, right, e.line) > 0;
        break;
      case ast::CompareOp::kGe:
        ok = compare_values(left, right, e.line) >= 0;
        break;
      case ast::CompareOp::kIn:
        ok = contains(*this, right, left, e.line);
        break;
      case ast::CompareOp::kNotIn:
        ok = !contains(*this, right, left, e.line);
        break;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Renderer::eval_call(const ast::Expr& e, Scope& scope) {
  const Expr& callee = *e.target;
  Value fn;
  if (callee.kind == ExprKind::kGetAttr) {
    // obj.method(...) is dispatched at once, without building a bound method.
    Value obj = eval(*callee.target, scope);
    if (obj.is_undefined()) fail_undefined(e.line, obj);
    if (has_method(obj, callee.name)) return call_method(*this, obj, callee.name, eval_args(e, scope), e.line);
    fn = get_attribute(*this, obj, callee.name, e.line);
  } else {
    fn = eval(callee, scope);
  }
  if (fn.is_callable()) return fn.as_callable().call(*this, eval_args(e, scope), e.line);
  if (fn.is_undefined()) fail_undefined(e.line, fn);
  fail(e.line, fmt::format("TypeError: '{}' object is not callable", type_name(fn)));
}

Value Renderer::eval_filter(const ast::Expr& e, Scope& scope, const Value* block_input) {
  Value input;
  if (!e.target) input = block_input ? *block_input : Value();
  else if (e.target->kind == ExprKind::kFilter) input = eval_filter(*e.target, scope, block_input);
  else input = eval(*e.target, scope);
  tick(e.line);
  return apply_filter(*this, e.name, input, eval_args(e, scope), e.line);
}

Value Renderer::eval_slice(const ast::Expr& e, Scope& scope) {
  Value obj = eval(*e.target, scope);
  if (obj.is_undefined()) fail_undefined(e.line, obj);
  std::optional<int64_t> bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (!e.operands[static_cast<size_t>(i)]) continue;
    Value v = eval(*e.operands[static_cast<size_t>(i)], scope);
    if (v.is_none()) continue;
    if (!v.is_int() && !v.is_bool()) fail(e.line, "TypeError: slice indices must be integers or None");
    bounds[i] = v.as_int();
  }
  const int64_t step = bounds[2].value_or(1);
  if (step == 0) fail(e.line, "ValueError: slice step cannot be zero");
  // Python's slice.indices(len).
  const auto indices = [&](int64_t len) {
    const auto clamp = [&](std::optional<int64_t> b, int64_t dflt) {
      if (!b) return dflt;
      int64_t v = *b;
      if (v < 0) v = std::max<int64_t>(v + len, step < 0 ? -1 : 0);
      else v = std::min<int64_t>(v, step < 0 ? len - 1 : len);
      return v;
    };
    const int64_t start = clamp(bounds[0], step < 0 ? len - 1 : 0);
    const int64_t stop = clamp(bounds[1], step < 0 ? -1 : len);
    std::vector<size_t> picked;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picked.push_back(static_cast<size_t>(i));
    return picked;
  };
  if (obj.is_list()) {
    const auto& items = obj.as_list().items;
    std::vector<Value> out;
    for (size_t i : indices(static_cast<int64_t>(items.size()))) out.push_back(items[i]);
    return Value::list(std::move(out), obj.as_list().is_tuple);
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    std::string out;
    if (is_ascii(s)) {
      for (size_t i : indices(static_cast<int64_t>(s.size()))) out.push_back(s[i]);
    } else {
      const auto offsets = code_point_offsets(s);
      for (size_t i : indices(static_cast<int64_t>(offsets.size() - 1)))
        out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
    }
    return Value::string(std::move(out));
  }
  fail(e.line, fmt::format("TypeError: '{}' object is not subscriptable", type_name(obj)));
}

}  // namespace pagedkv::jinja
