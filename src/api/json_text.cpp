#include "pagedkv/api/json_text.h"

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pagedkv::api {
namespace {

using ordered_json = nlohmann::ordered_json;

// nlohmann's SAX interface building the document: the open containers on a stack, and for each
// open object a hash index of its keys, so a member is placed (or a repeated key found) at once.
class InOrderBuilder {
 public:
  using number_integer_t = ordered_json::number_integer_t;
  using number_unsigned_t = ordered_json::number_unsigned_t;
  using number_float_t = ordered_json::number_float_t;
  using string_t = ordered_json::string_t;
  using binary_t = ordered_json::binary_t;

  bool null() { return add(nullptr); }
  bool boolean(bool v) { return add(v); }
  bool number_integer(number_integer_t v) { return add(v); }
  bool number_unsigned(number_unsigned_t v) { return add(v); }
  bool number_float(number_float_t v, const string_t&) { return add(v); }
  bool string(string_t& v) { return add(std::move(v)); }
  bool binary(binary_t& v) { return add(ordered_json::binary(std::move(v))); }
  bool start_object(size_t) { return deeper() && open(ordered_json::object()); }
  bool end_object() { return close(); }
  bool start_array(size_t) { return deeper() && open(ordered_json::array()); }
  bool end_array() { return close(); }
  bool key(string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

  ordered_json take() { return std::move(root_); }

 private:
  struct Open {
    ordered_json* node;
    std::unordered_map<std::string, size_t> positions;  // an object's keys -> their members
  };

  // Places `v` where the text has it; returns where it now lives.
  ordered_json* place(ordered_json&& v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Open& top = open_.back();
    if (top.node->is_array()) {
      auto& items = top.node->get_ref<ordered_json::array_t&>();
      items.push_back(std::move(v));
      return &items.back();
    }
    // The object's vector itself: ordered_map's operator[] and emplace search the keys.
    auto& members = static_cast<ordered_json::object_t::Container&>(top.node->get_ref<ordered_json::object_t&>());
    const auto [at, fresh] = top.positions.try_emplace(key_, members.size());
    if (!fresh) {  // a repeated key: its first position, its last value (as ordered_json::parse)
      members[at->second].second = std::move(v);
      return &members[at->second].second;
    }
    members.emplace_back(std::move(key_), std::move(v));
    return &members.back().second;
  }
  // Returning false ends the parse, and sax_parse reports it as failed.
  bool deeper() const { return static_cast<int>(open_.size()) < kMaxJsonDepth; }
  bool add(ordered_json&& v) {
    place(std::move(v));
    return true;
  }
  // A container's members are placed only while it is the innermost one open, so the pointers
  // on the stack stay valid: its parent grows again only after it is closed.
  bool open(ordered_json&& v) {
    open_.push_back({place(std::move(v)), {}});
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  ordered_json root_;
  std::vector<Open> open_;
  std::string key_;
};

}  // namespace

bool nests_deeper_than(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character, whatever it is
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

ordered_json parse_json_in_order(std::string_view text) {
  InOrderBuilder builder;
  if (!ordered_json::sax_parse(text, &builder)) return ordered_json(ordered_json::value_t::discarded);
  return builder.take();
}

}  // namespace pagedkv::api
