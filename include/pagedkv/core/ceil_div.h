// Ceiling division of non-negative integers: how many blocks of `b` tokens hold `a` tokens.
#pragma once

#include <concepts>

namespace pagedkv {

// ceil(a / b) for a >= 0 and b > 0 (a + b - 1 must not overflow T).
template <std::integral T>
constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

}  // namespace pagedkv
