// A selector: a JMS 2.0 message selector (JMS 2.0 §3.8.1.1, an SQL-92 subset) that decides
// whether an event interests a subscriber by testing the event's attributes.
//
//   Selector::Parse("symbol = 'IBM' AND price BETWEEN 100 AND 150.5")
//   Selector::Parse("region IN ('us', 'eu') AND NOT (urgent OR note LIKE 'x\\_%' ESCAPE '\\')")
//
// Identifiers name event attributes (Event::Find); a missing attribute is SQL NULL. Evaluation
// uses SQL's three-valued logic and returns a Truth; an event matches only when the selector is
// kTrue. The grammar, the typing rules and every choice made where the specification is silent
// are in docs/selectors.md; the essential ones:
//
//   - Only like types compare. int64 and double compare with each other by exact value
//     (1 = 1.0 is TRUE; 2^53+1 = 2^53 as a double is FALSE), not by a lossy conversion.
//     Comparing other unlike types (a string with a number, ...) is FALSE, never UNKNOWN.
//   - A NULL operand makes a comparison, arithmetic, IN, LIKE and BETWEEN UNKNOWN. BETWEEN is
//     exactly `v >= lo AND v <= hi` (NOT BETWEEN: `v < lo OR v > hi`), so a NULL bound gives
//     FALSE when the other bound already fails.
//   - A NaN operand makes a comparison (and IN, BETWEEN) UNKNOWN.
//   - Strings and booleans compare only with = and <>. An ordering operator (< <= > >=) with an
//     operand that is a string or boolean *literal or condition* is a parse error; when the
//     string or boolean only shows up at run time (an attribute), the comparison is FALSE.
//   - Arithmetic (+ - * /, unary -) follows Java: int64 op int64 gives int64 (division truncates),
//     anything with a double gives double. Except: an int64 overflow gives the double result
//     instead of wrapping; division by zero (integer or floating) gives NULL, hence UNKNOWN.
//     Arithmetic on a string or boolean attribute makes the enclosing comparison FALSE (as a
//     type mismatch), unless another operand is NULL (NULL wins: UNKNOWN).
//   - IN and LIKE need a string attribute; on another type the predicate is FALSE, and so is its
//     NOT IN / NOT LIKE form (as for a mismatched `<>`). IN also accepts a list of numeric
//     literals (an extension), which then matches numeric attributes by exact value.
//   - An attribute used directly as a condition (`urgent AND qty > 5`) must hold a boolean;
//     any other type is UNKNOWN.
//   - An empty or whitespace-only selector matches every event.
//
// Parsing is bounded: a selector longer than SelectorOptions::max_length (64 KiB unless told
// otherwise) is refused unread, and a parse allocates in proportion to the text it accepted, so
// that input which fails early (a megabyte of `(`) fails fast and cheaply. LIKE matching takes
// time linear in the attribute's length (docs/selectors.md, "LIKE").
//
// A parsed selector is compiled into one flat program (lib/selector/program.h) that Evaluate runs
// and gryph's matcher keeps; the parsed tree is not kept. Encode() gives that program's bytes
// (with the text), and Decode() takes them back without parsing, for storing many selectors.
//
// Thread-safety: a Selector is immutable after Parse or Decode and thread-safe; copies share the
// compiled program and the text (copying is two reference-count increments), and any number of
// threads may evaluate the same Selector concurrently.

#ifndef GRYPH_SELECTOR_H_
#define GRYPH_SELECTOR_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/event.h"

namespace gryph {

namespace selector_program {
class Program;
}  // namespace selector_program

// SQL's three truth values.
enum class Truth : uint8_t { kFalse, kTrue, kUnknown };

// How Selector::Parse treats its input.
struct SelectorOptions {
  // The default max_length: 64 KiB.
  static constexpr size_t kDefaultMaxLength = 64 * 1024;

  // The longest selector text Parse accepts, in bytes. A longer one fails with InvalidArgument
  // before any of it is parsed. SIZE_MAX for no limit (for texts accepted before, such as stored
  // subscriptions). What a parse allocates is proportional to its input, so this bounds it too.
  size_t max_length = kDefaultMaxLength;
};

class Selector {
 public:
  // Parentheses, NOT and unary signs may nest at most this deep, and the parsed expression tree
  // may be at most this tall (a chain of 300 `+` is too tall): Parse rejects deeper input, so
  // neither parsing nor evaluation can exhaust the stack.
  static constexpr int kMaxDepth = 256;

  // The first byte of every encoded selector. DO NOT CHANGE: stored on disk.
  static constexpr uint8_t kEncodingVersion = 1;

  // The empty selector, which matches every event (same as Parse("")).
  Selector();
  Selector(const Selector& other);
  Selector(Selector&& other) noexcept;
  Selector& operator=(const Selector& other);
  Selector& operator=(Selector&& other) noexcept;
  ~Selector();

  // Parses `text`. Fails with InvalidArgument on a syntax or type error, or when `text` is longer
  // than options.max_length; the message has the form "selector:LINE:COLUMN: what was expected
  // and what was found" (1-based, columns count bytes; for a text too long, the position of its
  // first byte beyond the limit, and the message names the limit). Never crashes or reads
  // outside `text`, whatever its bytes.
  static absl::StatusOr<Selector> Parse(absl::string_view text,
                                        const SelectorOptions& options = SelectorOptions());

  // Evaluates the selector against `event` with three-valued logic. Does not allocate.
  Truth Evaluate(const Event& event) const;

  // True only when Evaluate(event) is kTrue.
  bool Matches(const Event& event) const { return Evaluate(event) == Truth::kTrue; }

  // The text given to Parse, unchanged. Valid as long as any copy of this Selector lives.
  absl::string_view text() const;

  // True for an empty or whitespace-only selector.
  bool matches_everything() const;

  // A fully parenthesized rendering with upper-case keywords, e.g. "((a = 1) OR ((b = 2) AND (NOT
  // c)))": shows how the text was understood. It is itself a selector that parses to the same
  // tree (unless that would exceed kMaxDepth). The empty selector renders as "".
  std::string DebugString() const;

  // The persisted form (docs/selectors.md, "Encoding"):
  //
  //   version  1 byte  = kEncodingVersion
  //   text     varint length, then the text given to Parse
  //   program  varint length, then the compiled program (lib/selector/program.h); length 0 for a
  //            selector that matches everything
  //   crc      4 bytes, big-endian: CRC-32C of everything before it
  //
  // Appends to *out, or returns the bytes.
  void EncodeTo(std::string* out) const;
  std::string Encode() const;

  // The selector whose Encode() is `bytes`, without parsing its text: the program is checked
  // instead (every operation, operand, type and jump), in time linear in its size. Fails with
  // DataLoss (a message naming what is wrong and where) on truncated, damaged or trailing bytes
  // (a checksum mismatch among them), and with InvalidArgument on an unknown version. Never crashes
  // or reads outside `bytes`. Any input it accepts gives a selector whose Encode() is `bytes`
  // again.
  static absl::StatusOr<Selector> Decode(absl::string_view bytes);

  // The program alone, for a store that keeps the text beside it (the SHB's subscription rows):
  //
  //   version  1 byte  = kEncodingVersion
  //   program  the compiled program (nothing for a selector that matches everything)
  //   crc      4 bytes, big-endian: CRC-32C of the text's length (4 bytes, big-endian), the
  //            text, the version and the program, so that it checks the pair
  std::string EncodeProgram() const;

  // The selector of `text` whose EncodeProgram() is `bytes`, without parsing `text`: the checksum
  // over both, then the program as Decode checks it, with the same errors (DataLoss naming the
  // damage, a program stored with another text among it; InvalidArgument for an unknown
  // version).
  static absl::StatusOr<Selector> DecodeProgram(absl::string_view text, absl::string_view bytes);

  // The compiled program, for gryph's matcher (lib/selector/program.h); nullptr when the
  // selector matches every event. Valid as long as any copy of this Selector lives.
  const selector_program::Program* program() const { return program_; }

 private:
  // A text shared by the copies of a Selector: a count, the length and the bytes, in one
  // allocation (lib/selector/selector.cc).
  struct Text;

  // Takes over a reference to each (either may be null).
  Selector(const selector_program::Program* program, const Text* text)
      : program_(program), text_(text) {}

  // Decode and DecodeProgram, once the framing is read: `code` checked as the program of `text`.
  static absl::StatusOr<Selector> FromProgram(absl::string_view text, absl::string_view code);

  // A counted reference (lib/selector/program.h ProgramRef), or null: matches everything.
  const selector_program::Program* program_ = nullptr;
  const Text* text_ = nullptr;  // a counted reference, or null for an empty text
};

}  // namespace gryph

#endif  // GRYPH_SELECTOR_H_
