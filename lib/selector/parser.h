// Internal: turns selector text into an Ast.
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
// Comparisons do not chain (`a = b = c` is an error). Type checks happen as nodes are built
// (see the invariants in ast.h).

#ifndef GRYPH_LIB_SELECTOR_PARSER_H_
#define GRYPH_LIB_SELECTOR_PARSER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/selector.h"
#include "lib/selector/ast.h"

namespace gryph::selector_ast {

// Parses `text`. Fails with InvalidArgument "selector:LINE:COLUMN: ..." on any syntax or type
// error, when nesting exceeds Selector::kMaxDepth, or when `text` is longer than
// options.max_length (then without reading it). Reads tokens only as far as it accepts the
// text, so what it allocates is proportional to what it accepted.
absl::StatusOr<std::shared_ptr<const Ast>> ParseSelector(absl::string_view text,
                                                         const SelectorOptions& options);

}  // namespace gryph::selector_ast

#endif  // GRYPH_LIB_SELECTOR_PARSER_H_
