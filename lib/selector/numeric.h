// Internal: exact comparison of selector numbers.
//
// Selectors compare an int64 with a double by exact mathematical value, not by converting the
// int64 to double (which would make 2^53 + 1 equal 2^53). The matcher's range and equality
// indexes must order numbers the same way, so the rule lives here, not inside the evaluator.

#ifndef GRYPH_LIB_SELECTOR_NUMERIC_H_
#define GRYPH_LIB_SELECTOR_NUMERIC_H_

#include <cmath>
#include <cstdint>

namespace gryph::selector_ast {

// -1, 0 or 1 as i is less than, equal to or greater than d. REQUIRES: d is not NaN.
inline int CompareInt64Double(int64_t i, double d) {
  constexpr double kTwo63 = 9223372036854775808.0;  // 2^63, exactly representable
  if (d >= kTwo63) return -1;                       // also +inf
  if (d < -kTwo63) return 1;                        // also -inf
  // Now -2^63 <= d < 2^63, so trunc(d) is an exactly representable int64.
  const double t = std::trunc(d);
  const int64_t ti = static_cast<int64_t>(t);
  if (i != ti) return i < ti ? -1 : 1;
  if (d == t) return 0;
  return d > t ? -1 : 1;  // i == trunc(d): the fraction decides
}

inline int CompareDouble(double a, double b) { return a < b ? -1 : (a > b ? 1 : 0); }
inline int CompareInt64(int64_t a, int64_t b) { return a < b ? -1 : (a > b ? 1 : 0); }

}  // namespace gryph::selector_ast

#endif  // GRYPH_LIB_SELECTOR_NUMERIC_H_
