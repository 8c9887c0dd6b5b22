// Internal: splits selector text into tokens.
//
// Tokens follow JMS 2.0 §3.8.1.1: identifiers (a letter, `_` or `$`, then letters, digits, `_`
// or `$`; non-ASCII UTF-8 characters count as letters), keywords (case-insensitive: NULL TRUE
// FALSE NOT AND OR BETWEEN LIKE IN IS ESCAPE), string literals in single quotes with '' for a
// quote, numeric literals in Java syntax, operators and parentheses. Whitespace is space, tab,
// form feed, CR and LF.
//
// The parser asks for tokens one at a time, so that a parse that fails early has read (and
// allocated for) no more of the text than it accepted.

#ifndef GRYPH_LIB_SELECTOR_LEXER_H_
#define GRYPH_LIB_SELECTOR_LEXER_H_

#include <cstdint>
#include <forward_list>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gryph::selector_ast {

enum class TokenKind : uint8_t {
  kEnd,
  kError,  // not a token: where the parser's Lexer failed
  kIdentifier,
  kInteger,  // exact numeric literal
  kDouble,   // approximate numeric literal
  kString,
  // Keywords.
  kNull,
  kTrue,
  kFalse,
  kNot,
  kAnd,
  kOr,
  kBetween,
  kLike,
  kIn,
  kIs,
  kEscape,
  // Punctuation.
  kLeftParen,
  kRightParen,
  kComma,
  kEqual,
  kNotEqual,
  kLess,
  kLessEqual,
  kGreater,
  kGreaterEqual,
  kPlus,
  kMinus,
  kStar,
  kSlash,
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  size_t offset = 0;  // of the first byte in the text
  size_t length = 0;  // bytes of text
  // kInteger. A decimal literal has magnitude <= 2^63 (2^63 is valid only after a unary minus,
  // which the parser checks); a hexadecimal or octal literal is any 64-bit pattern, read as a
  // two's complement int64 as Java does (0xFFFFFFFFFFFFFFFFL is -1).
  uint64_t integer = 0;
  bool decimal = true;
  double number = 0;  // kDouble
  // kIdentifier: the name; kString: the value (with '' undone). A view into the selector text,
  // or, for a string literal holding '', into a copy the Lexer keeps (the only case that
  // allocates). Tokens are plain values: copying one copies no string.
  absl::string_view value() const { return view; }
  absl::string_view view;
};

// Splits a text into tokens, from its start, one per call.
//
// Thread-compatible. The text must outlive the Lexer; the tokens' views live as long as both.
class Lexer {
 public:
  explicit Lexer(absl::string_view text) : text_(text) {}

  // Reads the next token into *token: kEnd at text.size() once the text is used up, and again on
  // every later call. Fails with InvalidArgument ("selector:LINE:COLUMN: ...") on an unterminated
  // string, a malformed or out-of-range number, a character that starts no token, or invalid
  // UTF-8 outside a string literal; the Lexer is then not to be used again.
  absl::Status Next(Token* token);

 private:
  absl::string_view text_;
  size_t pos_ = 0;                            // where the next token's leading whitespace starts
  std::forward_list<std::string> unescaped_;  // string literals with '' undone (stable)
};

// "LINE:COLUMN" (1-based; columns count bytes) of byte `offset` of `text`.
std::string PositionOf(absl::string_view text, size_t offset);

// An InvalidArgument status "selector:LINE:COLUMN: message" for byte `offset` of `text`.
absl::Status SyntaxError(absl::string_view text, size_t offset, absl::string_view message);

// The token for an error message: "'price'", "'<>'", "'abc'" (a string literal, with its own
// quotes), "end of selector". Long or unprintable source text is shortened and escaped.
std::string Describe(absl::string_view text, const Token& token);

}  // namespace gryph::selector_ast

#endif  // GRYPH_LIB_SELECTOR_LEXER_H_
