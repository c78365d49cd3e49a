// The values a template computes with: Python's objects as jinja2 sees them. Data passed in
// (messages, tools) and literals are immutable, as in jinja2's ImmutableSandboxedEnvironment, so
// lists, dicts and strings are shared, never copied, when a value is copied; only namespace()
// objects are mutable (their attributes are assigned with {% set ns.x = ... %}). Dicts keep their
// keys in insertion order, as Python's do, because tojson must print keys in the data's order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pagedkv::jinja {

class Renderer;
struct List;
class Dict;
struct Namespace;
class Callable;

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // undefined
  static Value undefined(std::string hint);
  static Value none() { return Value(Kind::kNone); }
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value shared_list(std::shared_ptr<const List> list);
  static Value dict(std::shared_ptr<const Dict> dict);
  static Value new_namespace(std::vector<std::pair<std::string, Value>> attributes);
  static Value callable(std::shared_ptr<const Callable> callable);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? int64_t{b_} : i_; }
  double as_float() const;  // int, bool or float as a double
  const std::string& as_string() const { return *static_cast<const std::string*>(ptr_.get()); }
  const List& as_list() const { return *static_cast<const List*>(ptr_.get()); }
  std::shared_ptr<const List> list_ptr() const { return std::static_pointer_cast<const List>(ptr_); }
  const Dict& as_dict() const { return *static_cast<const Dict*>(ptr_.get()); }
  // A namespace stays mutable through a const Value, as a Python object does through any reference.
  Namespace& as_namespace() const { return *static_cast<Namespace*>(const_cast<void*>(ptr_.get())); }
  const Callable& as_callable() const { return *static_cast<const Callable*>(ptr_.get()); }
  // Why a value is undefined ("'x' is undefined"), for the error raised when it is used.
  std::string undefined_message() const;

  // Whether two values are the very same object (jinja2's `sameas`), for shared kinds.
  bool same_object(const Value& other) const { return kind_ == other.kind_ && ptr_ == other.ptr_; }

 private:
  explicit Value(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::kUndefined;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<const void> ptr_;  // the string, list, dict, namespace, callable or undefined hint
};

// A list, or a tuple (printed with parentheses; items() yields tuples). Lists and dicts nested
// a million deep (a loop can build them) are destroyed level by level, not by recursion.
struct List {
  std::vector<Value> items;
  bool is_tuple = false;
  ~List();
};

// An insertion-ordered str -> value map. Built once, then read: large dicts get a hash index.
class Dict {
 public:
  Dict() = default;
  Dict(const Dict&) = delete;
  Dict& operator=(const Dict&) = delete;
  ~Dict();  // level by level, as ~List

  // Sets `key` (keeping its first position if it is already there).
  void set(std::string key, Value value);
  const Value* find(std::string_view key) const;
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  // Heterogeneous lookup: find() takes a string_view without building a std::string.
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, size_t, KeyHash, std::equal_to<>> index_;  // only past a few entries
};

// jinja2's namespace(): the one mutable object, so loops can carry state out of their scope.
struct Namespace {
  std::vector<std::pair<std::string, Value>> attributes;
  Value* find(std::string_view name);
};

// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Anything a template can call: macros, the documented globals, bound methods.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual Value call(Renderer& renderer, CallArgs args, int line) const = 0;
  virtual std::string describe() const = 0;  // how str() prints it
};

// Python's type name of a value ("str", "int", "list", "dict", "NoneType", ...), for messages.
std::string_view type_name(const Value& v);

// How many containers inside containers printing, comparing and hashing a value follow before a
// RecursionError (Python allows 1,000; chat templates nest a handful, loops can nest a million).
constexpr int kMaxNestedValueDepth = 200;

// Python truthiness: "", [], {}, 0, 0.0, None, False and undefined are false.
bool truthy(const Value& v);

// Python ==: numbers compare by value across int/float/bool, containers element-wise; undefined
// equals only undefined.
bool values_equal(const Value& a, const Value& b);

// Python's ordering for <, <=, >, >= and sort: numbers with numbers, strings with strings (by code
// point, which UTF-8 byte order preserves), lists lexicographically. Negative, zero or positive;
// throws TemplateRenderError for types Python cannot order.
int compare_values(const Value& a, const Value& b, int line);

}  // namespace pagedkv::jinja
