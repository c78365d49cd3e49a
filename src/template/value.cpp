#include "pagedkv/template/value.h"

#include <fmt/format.h>

#include "pagedkv/template/template_error.h"

namespace pagedkv::jinja {

namespace {

// Below this many entries a linear scan beats hashing the key.
constexpr size_t kDictIndexThreshold = 12;

// The lists and dicts whose last owner went away while another container of this thread was being
// destroyed: the outermost destructor destroys them one at a time, so a chain of containers nested
// a million deep costs a loop, not a million stack frames.
thread_local std::vector<Value>* pending_release = nullptr;

bool is_container(const Value& v) { return v.is_list() || v.is_dict(); }

// Destroys what `hand_over` moves into the list it is given (a container's container items).
template <class HandOver>
void release_items(HandOver&& hand_over) {
  if (pending_release != nullptr) {  // an outer destructor is emptying the list: it takes them
    hand_over(*pending_release);
    return;
  }
  std::vector<Value> pending;
  pending_release = &pending;
  hand_over(pending);
  while (!pending.empty()) {
    const Value last = std::move(pending.back());
    pending.pop_back();
  }  // each `last` that owned a container hands that container's items over in turn
  pending_release = nullptr;
}

}  // namespace

List::~List() {
  release_items([this](std::vector<Value>& pending) {
    for (Value& v : items)
      if (is_container(v)) pending.push_back(std::move(v));
  });
}

Dict::~Dict() {
  release_items([this](std::vector<Value>& pending) {
    for (auto& entry : entries_)
      if (is_container(entry.second)) pending.push_back(std::move(entry.second));
  });
}

void Dict::set(std::string key, Value value) {
  if (Value* existing = const_cast<Value*>(find(key))) {
    *existing = std::move(value);
    return;
  }
  if (entries_.size() + 1 == kDictIndexThreshold) {
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  }
  if (entries_.size() + 1 >= kDictIndexThreshold) index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

const Value* Dict::find(std::string_view key) const {
  if (entries_.size() >= kDictIndexThreshold) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  for (const auto& [k, v] : entries_)
    if (k == key) return &v;
  return nullptr;
}

Value* Namespace::find(std::string_view name) {
  for (auto& [k, v] : attributes)
    if (k == name) return &v;
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.ptr_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::boolean(bool b) {
  Value v(Kind::kBool);
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v(Kind::kInt);
  v.i_ = i;
  return v;
}

Value Value::number(double f) {
  Value v(Kind::kFloat);
  v.f_ = f;
  return v;
}

Value Value::string(std::string s) {
  Value v(Kind::kString);
  v.ptr_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->is_tuple = is_tuple;
  return shared_list(std::shared_ptr<const List>(std::move(l)));
}

Value Value::shared_list(std::shared_ptr<const List> list) {
  Value v(Kind::kList);
  v.ptr_ = std::move(list);
  return v;
}

Value Value::dict(std::shared_ptr<const Dict> dict) {
  Value v(Kind::kDict);
  v.ptr_ = std::move(dict);
  return v;
}

Value Value::new_namespace(std::vector<std::pair<std::string, Value>> attributes) {
  auto ns = std::make_shared<Namespace>();
  ns->attributes = std::move(attributes);
  Value v(Kind::kNamespace);
  v.ptr_ = std::move(ns);
  return v;
}

Value Value::callable(std::shared_ptr<const Callable> callable) {
  Value v(Kind::kCallable);
  v.ptr_ = std::move(callable);
  return v;
}

double Value::as_float() const {
  switch (kind_) {
    case Kind::kFloat:
      return f_;
    case Kind::kInt:
      return static_cast<double>(i_);
    case Kind::kBool:
      return b_ ? 1.0 : 0.0;
    default:
      return 0.0;
  }
}

std::string Value::undefined_message() const {
  if (kind_ == Kind::kUndefined && ptr_) return *static_cast<const std::string*>(ptr_.get());
  return "value is undefined";
}

std::string_view type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.as_list().items.empty();
    case Value::Kind::kDict:
      return v.as_dict().size() != 0;
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

namespace {

// Lists and dicts can share items (`[x, x]`), so a value of a few hundred nodes can stand for
// 2^40 elements: comparing two such values element by element would never end. Python compares
// an item with itself by identity, and so does this; past kMaxComparedItems the comparison stops.
constexpr uint64_t kMaxComparedItems = 10'000'000;

bool same_container(const Value& a, const Value& b) { return is_container(a) && a.same_object(b); }

[[noreturn]] void too_deep_to_compare(int line) {
  throw TemplateRenderError(line > 0 ? fmt::format("line {}: RecursionError: values nested too deeply to compare", line)
                                     : std::string("RecursionError: values nested too deeply to compare"),
                            line);
}

bool equal_within(const Value& a, const Value& b, uint64_t& budget, int depth = 0) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  if (budget-- == 0)
    throw TemplateLimitError(fmt::format("comparison of values with more than {} items", kMaxComparedItems), 0);
  if (depth > kMaxNestedValueDepth) too_deep_to_compare(0);
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!same_container(x.items[i], y.items[i]) && !equal_within(x.items[i], y.items[i], budget, depth + 1))
          return false;
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries()) {
        const Value* other = y.find(k);
        if (other == nullptr || (!same_container(v, *other) && !equal_within(v, *other, budget, depth + 1)))
          return false;
      }
      return true;
    }
    default:
      return a.same_object(b);
  }
}

}  // namespace

bool values_equal(const Value& a, const Value& b) {
  uint64_t budget = kMaxComparedItems;
  return equal_within(a, b, budget);
}

namespace {

int compare_within(const Value& a, const Value& b, int line, int depth) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    if (depth > kMaxNestedValueDepth) too_deep_to_compare(line);
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return compare_within(x[i], y[i], line, depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined() || b.is_undefined())
    throw TemplateRenderError(fmt::format("line {}: {}", line, (a.is_undefined() ? a : b).undefined_message()), line);
  throw TemplateRenderError(
      fmt::format("line {}: TypeError: comparison not supported between instances of '{}' and '{}'", line, type_name(a),
                  type_name(b)),
      line);
}

}  // namespace

int compare_values(const Value& a, const Value& b, int line) { return compare_within(a, b, line, 0); }

}  // namespace pagedkv::jinja
