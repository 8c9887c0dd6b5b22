// Internal: evaluates a selector tree against an event with SQL's three-valued logic.
//
// The typing rules are those of include/gryph/selector.h and docs/selectors.md. Evaluation reads
// attributes in place (strings are compared as views) and allocates nothing. Recursion is
// bounded by the tree's height (at most Selector::kMaxDepth).
//
// Thread-safety: pure functions of their arguments; thread-safe.

#ifndef GRYPH_LIB_SELECTOR_EVALUATOR_H_
#define GRYPH_LIB_SELECTOR_EVALUATOR_H_

#include "gryph/event.h"
#include "gryph/selector.h"
#include "lib/selector/ast.h"

namespace gryph::selector_ast {

// SQL's AND, OR and NOT on TRUE / FALSE / UNKNOWN.
inline Truth And(Truth a, Truth b) {
  if (a == Truth::kFalse || b == Truth::kFalse) return Truth::kFalse;
  if (a == Truth::kUnknown || b == Truth::kUnknown) return Truth::kUnknown;
  return Truth::kTrue;
}
inline Truth Or(Truth a, Truth b) {
  if (a == Truth::kTrue || b == Truth::kTrue) return Truth::kTrue;
  if (a == Truth::kUnknown || b == Truth::kUnknown) return Truth::kUnknown;
  return Truth::kFalse;
}
inline Truth Not(Truth t) {
  if (t == Truth::kUnknown) return t;
  return t == Truth::kTrue ? Truth::kFalse : Truth::kTrue;
}

// The truth of a condition node. REQUIRES: node.type() is kBoolean or kAny (a bare identifier,
// TRUE only when the attribute is boolean true).
Truth EvaluateCondition(const Node& node, const Event& event);

}  // namespace gryph::selector_ast

#endif  // GRYPH_LIB_SELECTOR_EVALUATOR_H_
