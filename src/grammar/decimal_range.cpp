#include "decimal_range.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "pagedkv/grammar/grammar_limits.h"

namespace pagedkv::grammar {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Non-negative decimal strings compared by value (canonical integers: no leading zeros).
int compare_integers(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

// Fractions (digits after the point, no trailing zeros) compared by value.
int compare_fractions(std::string_view a, std::string_view b) { return a < b ? -1 : a > b ? 1 : 0; }

int compare_magnitudes(const Decimal& a, const Decimal& b) {
  const int c = compare_integers(a.integer, b.integer);
  return c != 0 ? c : compare_fractions(a.fraction, b.fraction);
}

std::string increment(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') {
      ++s[i];
      return s;
    }
    s[i] = '0';
  }
  s.insert(s.begin(), '1');
  return s;
}

std::string decrement(std::string s) {  // s > 0
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  const size_t nz = s.find_first_not_of('0');
  return nz == std::string::npos ? "0" : s.substr(nz);
}

class RangeBuilder {
 public:
  explicit RangeBuilder(Grammar& g) : g_(g) {}

  ExprId digits(char lo, char hi) { return g_.char_class({{static_cast<uint32_t>(lo), static_cast<uint32_t>(hi)}}); }
  ExprId any_digits(int32_t min) { return g_.repeat(digits('0', '9'), min, kUnbounded); }

  // Digit strings a..b of equal length, digit by digit.
  ExprId same_length(const std::string& a, const std::string& b) {
    if (a.empty()) return g_.empty();
    if (a == b) return g_.literal(a);
    if (a[0] == b[0]) return g_.sequence({g_.literal(a.substr(0, 1)), same_length(a.substr(1), b.substr(1))});
    const size_t rest = a.size() - 1;
    const std::string nines(rest, '9'), zeros(rest, '0');
    const bool low_full = a.substr(1) == zeros, high_full = b.substr(1) == nines;
    const char first_mid = low_full ? a[0] : static_cast<char>(a[0] + 1);
    const char last_mid = high_full ? b[0] : static_cast<char>(b[0] - 1);
    std::vector<ExprId> parts;
    if (!low_full) parts.push_back(g_.sequence({g_.literal(a.substr(0, 1)), same_length(a.substr(1), nines)}));
    if (first_mid <= last_mid)
      parts.push_back(g_.sequence({digits(first_mid, last_mid), g_.repeat(digits('0', '9'), static_cast<int32_t>(rest),
                                                                          static_cast<int32_t>(rest))}));
    if (!high_full) parts.push_back(g_.sequence({g_.literal(b.substr(0, 1)), same_length(zeros, b.substr(1))}));
    return g_.choice(std::move(parts));
  }

  // Canonical integers (no leading zeros) in [lo, hi]; hi absent: no upper bound.
  ExprId integers(const std::string& lo, const std::optional<std::string>& hi) {
    std::vector<ExprId> parts;
    const size_t last = hi ? hi->size() : lo.size();
    for (size_t len = lo.size(); len <= last; ++len) {
      std::string from = lo;
      if (len != lo.size()) {
        from.assign(len, '0');
        from[0] = '1';
      }
      const std::string to = hi && len == hi->size() ? *hi : std::string(len, '9');
      parts.push_back(same_length(from, to));
    }
    if (!hi)  // every longer integer
      parts.push_back(g_.sequence({digits('1', '9'), any_digits(static_cast<int32_t>(lo.size()))}));
    return g_.choice(std::move(parts));
  }

  // The digit strings F after a decimal point (F may be empty: no point at all) with
  // 0.p <(=) 0.F <(=) 0.q; p, q without trailing zeros ("" is zero); q absent: no upper bound.
  struct Fractions {
    bool empty_ok = false;  // F = "" (value 0) is in
    std::optional<ExprId> nonempty;  // the non-empty F, if any
  };

  Fractions fractions(std::string_view p, bool p_excl, std::optional<std::string_view> q, bool q_excl) {
    Fractions out;
    const bool zero_above_low = p.empty() && !p_excl;
    out.empty_ok = zero_above_low && (!q || !q->empty() || !q_excl);
    if (p.empty() && !q) {  // any fraction, or (exclusive) any with a non-zero digit
      out.nonempty = p_excl ? g_.sequence({g_.repeat(digits('0', '0'), 0, kUnbounded), digits('1', '9'), any_digits(0)})
                            : any_digits(1);
      return out;
    }
    if (q && q->empty()) {  // at most zero: only zeros, and only when zero is in
      if (out.empty_ok) out.nonempty = g_.repeat(digits('0', '0'), 1, kUnbounded);
      return out;
    }
    const char p0 = p.empty() ? '0' : p[0];
    const std::string_view p_rest = p.empty() ? p : p.substr(1);
    std::vector<ExprId> parts;
    auto digit_then = [&](char d, const Fractions& tail) {
      const ExprId head = g_.literal(std::string(1, d));
      if (tail.empty_ok && tail.nonempty) parts.push_back(g_.sequence({head, g_.optional(*tail.nonempty)}));
      else if (tail.empty_ok) parts.push_back(head);
      else if (tail.nonempty) parts.push_back(g_.sequence({head, *tail.nonempty}));
    };
    if (!q) {
      if (p0 < '9') parts.push_back(g_.sequence({digits(static_cast<char>(p0 + 1), '9'), any_digits(0)}));
      digit_then(p0, fractions(p_rest, p_excl, std::nullopt, false));
    } else {
      const char q0 = (*q)[0];
      const std::string_view q_rest = q->substr(1);
      if (p0 == q0) {
        digit_then(p0, fractions(p_rest, p_excl, q_rest, q_excl));
      } else {  // p0 < q0
        if (p0 + 1 <= q0 - 1)
          parts.push_back(g_.sequence({digits(static_cast<char>(p0 + 1), static_cast<char>(q0 - 1)), any_digits(0)}));
        digit_then(p0, fractions(p_rest, p_excl, std::nullopt, false));
        digit_then(q0, fractions("", false, q_rest, q_excl));
      }
    }
    if (!parts.empty()) out.nonempty = g_.choice(std::move(parts));
    return out;
  }

  // An integer part followed by the fractions `f` (no point when F is empty).
  std::optional<ExprId> with_fractions(ExprId integer_part, const Fractions& f) {
    std::vector<ExprId> tails;
    if (f.empty_ok) tails.push_back(g_.empty());
    if (f.nonempty) tails.push_back(g_.sequence({g_.literal("."), *f.nonempty}));
    if (tails.empty()) return std::nullopt;
    return g_.sequence({integer_part, g_.choice(std::move(tails))});
  }

  // Non-negative numbers (unsigned text) m with lo <(=) m <(=) hi; hi absent: no upper bound.
  std::optional<ExprId> magnitudes(const DecimalBound& lo, const std::optional<DecimalBound>& hi) {
    if (hi) {
      const int c = compare_magnitudes(lo.value, hi->value);
      if (c > 0 || (c == 0 && (lo.exclusive || hi->exclusive))) return std::nullopt;
    }
    const std::string& a = lo.value.integer;
    std::vector<ExprId> parts;
    auto add = [&](std::optional<ExprId> e) {
      if (e) parts.push_back(*e);
    };
    const Fractions any_fraction{true, any_digits(1)};
    if (!hi) {
      add(with_fractions(g_.literal(a), fractions(lo.value.fraction, lo.exclusive, std::nullopt, false)));
      add(with_fractions(integers(increment(a), std::nullopt), any_fraction));
    } else if (a == hi->value.integer) {
      add(with_fractions(g_.literal(a), fractions(lo.value.fraction, lo.exclusive, hi->value.fraction, hi->exclusive)));
    } else {
      const std::string& b = hi->value.integer;
      add(with_fractions(g_.literal(a), fractions(lo.value.fraction, lo.exclusive, std::nullopt, false)));
      const std::string above = increment(a), below = decrement(b);
      if (compare_integers(above, below) <= 0) add(with_fractions(integers(above, below), any_fraction));
      add(with_fractions(g_.literal(b), fractions("", false, hi->value.fraction, hi->exclusive)));
    }
    if (parts.empty()) return std::nullopt;
    return g_.choice(std::move(parts));
  }

 private:
  Grammar& g_;
};

}  // namespace

Decimal parse_decimal(std::string_view text, int max_integer_digits, int max_fraction_digits) {
  auto bad = [&]() { return GrammarError(fmt::format("'{}' is not a JSON number", text)); };
  size_t i = 0;
  Decimal d;
  if (i < text.size() && text[i] == '-') {
    d.negative = true;
    ++i;
  }
  std::string mantissa;
  int64_t point = -1;
  for (; i < text.size() && (is_digit(text[i]) || text[i] == '.'); ++i) {
    if (text[i] == '.') {
      if (point >= 0) throw bad();
      point = static_cast<int64_t>(mantissa.size());
    } else {
      mantissa.push_back(text[i]);
    }
  }
  if (mantissa.empty()) throw bad();
  if (point < 0) point = static_cast<int64_t>(mantissa.size());
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool negative_exponent = false;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative_exponent = text[i++] == '-';
    if (i == text.size()) throw bad();
    int64_t exponent = 0;
    for (; i < text.size() && is_digit(text[i]); ++i) {
      exponent = exponent * 10 + (text[i] - '0');
      if (exponent > 100'000) throw bad();
    }
    point += negative_exponent ? -exponent : exponent;
  }
  if (i != text.size()) throw bad();
  // Digits before the point, then after it.
  const size_t first = mantissa.find_first_not_of('0');
  if (first == std::string::npos) return Decimal{};  // zero (also "-0.0")
  const int64_t lead = static_cast<int64_t>(first);  // leading zeros do not move the point
  mantissa.erase(0, first);
  point -= lead;
  mantissa.erase(mantissa.find_last_not_of('0') + 1);
  const auto digits = static_cast<int64_t>(mantissa.size());
  if (point > max_integer_digits)
    throw GrammarError(fmt::format("{} has more than {} integer digits", text, max_integer_digits));
  if (digits - point > max_fraction_digits)
    throw GrammarError(fmt::format("{} has more than {} digits after the point", text, max_fraction_digits));
  // Digit k of the number (k = 0 is the first after the leading zeros), zeros beyond the mantissa.
  auto digit_at = [&](int64_t k) { return k >= 0 && k < digits ? mantissa[static_cast<size_t>(k)] : '0'; };
  d.integer.clear();
  for (int64_t k = 0; k < point; ++k) d.integer.push_back(digit_at(k));
  if (d.integer.empty()) d.integer.push_back('0');
  for (int64_t k = std::min<int64_t>(point, 0); k < digits; ++k)
    if (k >= point) d.fraction.push_back(digit_at(k));
  return d;
}

int compare_decimals(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int c = compare_magnitudes(a, b);
  return a.negative ? -c : c;
}

ExprId decimal_range_expr(Grammar& g, const std::optional<DecimalBound>& lo, const std::optional<DecimalBound>& hi) {
  if (lo && hi) {
    const int c = compare_decimals(lo->value, hi->value);
    if (c > 0 || (c == 0 && (lo->exclusive || hi->exclusive)))
      throw GrammarError("JSON Schema number range is empty (minimum > maximum)");
  }
  auto is_zero = [](const Decimal& d) { return d.integer == "0" && d.fraction.empty(); };
  RangeBuilder b(g);
  std::vector<ExprId> parts;
  // Non-negative numbers: from max(lo, 0) to hi.
  if (!hi || !hi->value.negative) {
    const DecimalBound from = lo && !lo->value.negative ? *lo : DecimalBound{};
    if (auto e = b.magnitudes(from, hi)) parts.push_back(*e);
  }
  // Negative numbers (and -0): their magnitudes from max(-hi, 0) to -lo.
  if (!lo || lo->value.negative || is_zero(lo->value)) {
    DecimalBound from;
    if (hi && (hi->value.negative || is_zero(hi->value)))
      from = {Decimal{false, hi->value.integer, hi->value.fraction}, hi->exclusive};
    std::optional<DecimalBound> to;
    if (lo) to = DecimalBound{Decimal{false, lo->value.integer, lo->value.fraction}, lo->exclusive};
    if (auto e = b.magnitudes(from, to)) parts.push_back(g.sequence({g.literal("-"), *e}));
  }
  if (parts.empty()) throw GrammarError("JSON Schema number range is empty");
  return g.choice(std::move(parts));
}

}  // namespace pagedkv::grammar
