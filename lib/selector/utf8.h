// Internal: the UTF-8 rules selectors need: the length of the character at a position, and where
// characters start.
//
// Selectors treat text as UTF-8: LIKE's `_` matches one character, an ESCAPE is one character,
// identifiers may contain non-ASCII characters. Input need not be valid UTF-8: a byte that does
// not start a well-formed sequence counts as a character of its own, so every byte string splits
// into characters in exactly one way and no scan can run past the end.

#ifndef GRYPH_LIB_SELECTOR_UTF8_H_
#define GRYPH_LIB_SELECTOR_UTF8_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace gryph::selector_ast {

// The byte length (1 to 4) of the well-formed UTF-8 sequence at s[pos], or 1 when the bytes there
// are not one (stray continuation byte, truncated or overlong sequence, surrogate, > U+10FFFF).
// REQUIRES: pos < s.size().
inline size_t Utf8CharLength(absl::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t c = byte(pos);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  uint32_t min;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 1;
  }
  if (s.size() - pos < n) return 1;
  for (size_t i = 1; i < n; ++i) {
    const uint8_t b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return 1;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 1;
  return n;
}

// Whether a character of `s` (split from its start by Utf8CharLength) starts at byte `pos`;
// true at 0 and at s.size(). Looks at no more than four bytes before `pos`: a byte that is not a
// continuation byte (10xxxxxx) always starts a character, since well-formed sequences continue
// only with continuation bytes; a continuation byte starts one unless the nearest non-continuation
// byte, at most three before it, starts a well-formed sequence that covers it.
// REQUIRES: pos <= s.size().
inline bool IsUtf8CharStart(absl::string_view s, size_t pos) {
  const auto continuation = [&](size_t i) { return (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80; };
  if (pos == 0 || pos == s.size() || !continuation(pos)) return true;
  for (size_t back = 1; back <= 3 && back <= pos; ++back) {
    if (!continuation(pos - back)) return Utf8CharLength(s, pos - back) <= back;
  }
  return true;
}

// The start of the character of `s` that ends at byte `pos`.
// REQUIRES: 0 < pos <= s.size() and IsUtf8CharStart(s, pos).
inline size_t PreviousUtf8CharStart(absl::string_view s, size_t pos) {
  const auto continuation = [&](size_t i) { return (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80; };
  if (!continuation(pos - 1)) return pos - 1;
  // A continuation byte ends a sequence led by the nearest non-continuation byte before it, or
  // is a character of its own.
  for (size_t back = 2; back <= 4 && back <= pos; ++back) {
    if (!continuation(pos - back)) {
      return Utf8CharLength(s, pos - back) == back ? pos - back : pos - 1;
    }
  }
  return pos - 1;
}

}  // namespace gryph::selector_ast

#endif  // GRYPH_LIB_SELECTOR_UTF8_H_
