// Internal: turns selector text into its compiled program (lib/selector/program.h), in one pass
// with no tree in between.
//
// Grammar (keywords case-insensitive; precedence from loosest to tightest):
//
//   selector    := [ or ]                        (empty: matches everything)
//   or          := and { OR and }
//   and         := not { AND not }
//   not         := NOT not | predicate
//   predicate   := sum [ compare-op sum
//                      | [NOT] BETWEEN sum AND sum
//                      | identifier [NOT] IN '(' literal { ',' literal } ')'
//                      | identifier [NOT] LIKE string [ESCAPE string]
//                      | identifier IS [NOT] NULL ]
//   sum         := product { ('+' | '-') product }
//   product     := unary { ('*' | '/') unary }
//   unary       := ('+' | '-') unary | primary
//   primary     := identifier | number | string | TRUE | FALSE | '(' or ')'
//
// Comparisons do not chain (`a = b = c` is an error). Type checks happen as operators are
// parsed (see the invariants in program.h); a sign before a numeric literal (or a parenthesized
// one) is folded into it.

#ifndef GRYPH_LIB_SELECTOR_PARSER_H_
#define GRYPH_LIB_SELECTOR_PARSER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/selector.h"
#include "lib/selector/program.h"

namespace gryph::selector_ast {

// Parses `text` into its program (null for an empty or blank text). Fails with InvalidArgument
// "selector:LINE:COLUMN: ..." on any syntax or type error, when nesting exceeds
// Selector::kMaxDepth, or when `text` is longer than options.max_length (then without reading
// it). Reads tokens only as far as it accepts the text, so what it allocates is proportional to
// what it accepted; identifiers and string literals are views into the text, not copies.
absl::StatusOr<selector_program::ProgramRef> ParseSelector(absl::string_view text,
                                                           const SelectorOptions& options);

}  // namespace gryph::selector_ast

#endif  // GRYPH_LIB_SELECTOR_PARSER_H_
