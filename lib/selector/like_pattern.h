// Internal: a compiled LIKE pattern.
//
// In a pattern `_` matches exactly one character, `%` matches any sequence of characters
// (including none), and every other character matches itself, case-sensitively. With an escape
// character E, `E_`, `E%` and `EE` match a literal `_`, `%` and E; E before anything else, or at
// the end, is an error (SQL-92's rule). Characters are UTF-8 sequences as utf8.h defines them.
//
// Compiling splits the pattern into literal runs and wildcards once, at parse time; Matches()
// then needs no allocation and takes O(text × pattern) time at worst (one backtracking point,
// the last `%` seen, never exponential).
//
// Thread-safety: immutable after Compile; thread-safe.

#ifndef GRYPH_LIB_SELECTOR_LIKE_PATTERN_H_
#define GRYPH_LIB_SELECTOR_LIKE_PATTERN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gryph::selector_ast {

class LikePattern {
 public:
  // Compiles `pattern`; `escape` is empty (no escape character) or exactly one character.
  // Fails with InvalidArgument (a message without position) when `escape` is not one character,
  // or the escape character is misused in `pattern`.
  static absl::StatusOr<LikePattern> Compile(absl::string_view pattern, absl::string_view escape);

  // Whether `text` matches the whole pattern.
  bool Matches(absl::string_view text) const;

  // The literal text before the first wildcard (all of it for a pattern without wildcards).
  absl::string_view literal_prefix() const;
  // True when the pattern has no wildcard: it matches exactly literal_prefix().
  bool is_exact() const { return !has_wildcards_; }

 private:
  struct Element {
    enum class Kind : uint8_t { kLiteral, kAnyChar, kAnySequence };
    Kind kind;
    size_t begin = 0;  // kLiteral: the bytes literals_[begin, begin + size)
    size_t size = 0;
  };

  LikePattern() = default;
  absl::string_view LiteralOf(const Element& e) const {
    return absl::string_view(literals_).substr(e.begin, e.size);
  }

  std::string literals_;           // the unescaped literal runs, back to back
  std::vector<Element> elements_;  // no two adjacent kAnySequence, no two adjacent kLiteral
  bool has_wildcards_ = false;
};

}  // namespace gryph::selector_ast

#endif  // GRYPH_LIB_SELECTOR_LIKE_PATTERN_H_
