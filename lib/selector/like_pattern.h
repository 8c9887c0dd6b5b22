// Internal: a compiled LIKE pattern.
//
// In a pattern `_` matches exactly one character, `%` matches any sequence of characters
// (including none), and every other character matches itself, case-sensitively. With an escape
// character E, `E_`, `E%` and `EE` match a literal `_`, `%` and E; E before anything else, or at
// the end, is an error (SQL-92's rule). Characters are UTF-8 sequences as utf8.h defines them:
// the text and the pattern each split into characters in their one way, and a literal character
// matches a character of the text with the same bytes (so the pattern's lone byte 0xE2 does not
// match the first byte of the text's "€", E2 82 AC).
//
// Compiling splits the pattern at its `%`s into segments of literal runs and `_`s, once, at parse
// time. Matches() then needs no allocation: the segment before the first `%` must match at the
// start of the text, the one after the last `%` at the end, and each one in between is found at
// its leftmost place after the previous one (which leaves the most text to those after it). The
// search for a segment in between looks for its first literal run with Knuth-Morris-Pratt over
// bytes (tables built at compile time), keeping only occurrences that start and end on character
// boundaries, and checks the rest of the segment at each. Matching therefore takes time linear
// in text + pattern, except for a segment between two `%`s with a `_` after its first literal
// run: that one costs at most O(text × segment) (every occurrence of the run checked).
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
  // The longest pattern Compile accepts, in bytes (positions are kept in 32 bits).
  static constexpr size_t kMaxPatternBytes = UINT32_MAX;

  // Compiles `pattern`; `escape` is empty (no escape character) or exactly one character.
  // Fails with InvalidArgument (a message without position) when `escape` is not one character,
  // the escape character is misused in `pattern`, or `pattern` is longer than kMaxPatternBytes.
  static absl::StatusOr<LikePattern> Compile(absl::string_view pattern, absl::string_view escape);

  // Whether `text` matches the whole pattern.
  bool Matches(absl::string_view text) const;

  // The literal text before the first wildcard (all of it for a pattern without wildcards).
  absl::string_view literal_prefix() const;
  // True when the pattern has no wildcard: it matches exactly literal_prefix().
  bool is_exact() const { return !has_wildcards_; }
  // True when the pattern is a nonempty literal followed by `%`s only, and a text matches it
  // exactly when its bytes start with literal_prefix() (false when the literal ends in a
  // character the text could continue, such as a lone lead byte).
  bool is_prefix() const;

 private:
  struct Element {
    enum class Kind : uint8_t { kLiteral, kAnyChars, kAnySequence };
    Kind kind;
    uint32_t begin = 0;  // kLiteral: the bytes literals_[begin, begin + size)
    uint32_t size = 0;   // kLiteral: bytes; kAnyChars: how many characters (a run of `_`)
    uint32_t table = 0;  // kLiteral searched for: its KMP table is tables_[table, table + size)
  };
  static constexpr uint32_t kNone = UINT32_MAX;

  LikePattern() = default;
  absl::string_view LiteralOf(const Element& e) const {
    return absl::string_view(literals_).substr(e.begin, e.size);
  }
  // Where elements_[first, last) (no kAnySequence among them) end when they match `text` from
  // the character boundary `pos`; absl::string_view::npos when they do not match there.
  size_t MatchAt(size_t first, size_t last, absl::string_view text, size_t pos) const;
  // Where the leftmost match at or after `pos` of elements_[first, last) (a segment between two
  // `%`s) ends; npos when there is none.
  size_t Find(size_t first, size_t last, absl::string_view text, size_t pos) const;

  std::string literals_;           // the unescaped literal runs, back to back
  std::vector<Element> elements_;  // no two adjacent of the same kind
  // The failure functions of the literal runs Find searches for: tables_[table + i] is the
  // length of the longest proper border of the run's first i + 1 bytes.
  std::vector<uint32_t> tables_;
  uint32_t first_star_ = kNone;  // the first kAnySequence element, if any
  uint32_t last_star_ = kNone;   // the last kAnySequence element, if any
  uint32_t suffix_chars_ = 0;    // characters matched by the elements after last_star_
  bool has_wildcards_ = false;
};

}  // namespace gryph::selector_ast

#endif  // GRYPH_LIB_SELECTOR_LIKE_PATTERN_H_
