// Internal: the parsed form of a selector, an immutable tree of typed nodes.
//
// The parser (parser.h) builds it, the evaluator (evaluator.h) walks it, and the matcher reads
// it to build predicate indexes: Conjuncts() lists the top-level AND-ed conditions and
// AsIndexable() recognizes the ones an index can serve (`a = lit`, `a IN (...)`, `a < lit`,
// `a BETWEEN lit AND lit`, ...).
//
// Invariants (established by the parser, relied upon by the evaluator without checks):
//   - Every node's type() is what its kind says (see StaticType); operands of arithmetic are
//     kNumeric or kAny; operands of NOT/AND/OR and the root are kBoolean or kAny; ordering
//     comparisons (< <= > >=) have no kString or kBoolean operand.
//   - A LogicalNode has at least two operands (a parenthesized AND inside an AND stays a
//     separate node: use Conjuncts() to flatten).
//   - Unary minus and plus applied to a numeric literal are folded into the literal.
//   - height() <= Selector::kMaxDepth for every node, so recursion over the tree is bounded.
//
// Thread-safety: immutable after construction; any number of threads may read one tree.

#ifndef GRYPH_LIB_SELECTOR_AST_H_
#define GRYPH_LIB_SELECTOR_AST_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "gryph/event.h"
#include "lib/selector/like_pattern.h"

namespace gryph::selector_ast {

enum class NodeKind : uint8_t {
  kLiteral,     // LiteralNode
  kIdentifier,  // IdentifierNode
  kNegate,      // UnaryNode: unary minus of a non-literal
  kUnaryPlus,   // UnaryNode: unary plus of a non-literal (checks the operand is numeric)
  kNot,         // UnaryNode
  kAdd,         // BinaryNode, arithmetic ...
  kSubtract,
  kMultiply,
  kDivide,
  kEqual,  // BinaryNode, comparison ...
  kNotEqual,
  kLess,
  kLessEqual,
  kGreater,
  kGreaterEqual,
  kAnd,      // LogicalNode
  kOr,       // LogicalNode
  kBetween,  // BetweenNode (and NOT BETWEEN)
  kIn,       // InNode (and NOT IN)
  kLike,     // LikeNode (and NOT LIKE)
  kIsNull,   // IsNullNode (and IS NOT NULL)
};

// What the parser knows of a node's value before seeing an event.
enum class StaticType : uint8_t {
  kAny,      // an identifier: any type, or NULL
  kNumeric,  // a numeric literal or arithmetic (int64 or double, or NULL at run time)
  kString,   // a string literal
  kBoolean,  // a boolean literal or a condition (TRUE, FALSE or UNKNOWN at run time)
};

bool IsArithmetic(NodeKind kind);
bool IsComparison(NodeKind kind);
// The operator's spelling: "+", "<=", "AND", "BETWEEN", ...
absl::string_view KindName(NodeKind kind);

class Node {
 public:
  Node(NodeKind kind, StaticType type, size_t offset) : kind_(kind), type_(type), offset_(offset) {}
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  NodeKind kind() const { return kind_; }
  StaticType type() const { return type_; }
  // Byte offset in the selector text of the node's first token.
  size_t offset() const { return offset_; }
  // 1 for a leaf; 1 + the tallest operand otherwise. Set by the parser.
  int height() const { return height_; }
  void set_height(int h) { height_ = h; }

  // The node as a T, or nullptr when it is of another kind: node.As<InNode>().
  template <typename T>
  const T* As() const {
    return T::Is(kind_) ? static_cast<const T*>(this) : nullptr;
  }

 private:
  const NodeKind kind_;
  const StaticType type_;
  const size_t offset_;
  int height_ = 1;
};

using NodePtr = std::unique_ptr<const Node>;

// A literal: int64 (exact numeric), double (approximate numeric), string or bool. A leading sign
// on a numeric literal is part of it (`-5` is the literal -5).
struct LiteralNode final : Node {
  LiteralNode(AttributeValue v, size_t offset);
  static bool Is(NodeKind k) { return k == NodeKind::kLiteral; }
  AttributeValue value;
};

struct IdentifierNode final : Node {
  IdentifierNode(std::string n, size_t offset)
      : Node(NodeKind::kIdentifier, StaticType::kAny, offset), name(std::move(n)) {}
  static bool Is(NodeKind k) { return k == NodeKind::kIdentifier; }
  std::string name;
};

// kNegate, kUnaryPlus (type kNumeric) or kNot (type kBoolean).
struct UnaryNode final : Node {
  UnaryNode(NodeKind kind, NodePtr o, size_t offset);
  static bool Is(NodeKind k) {
    return k == NodeKind::kNegate || k == NodeKind::kUnaryPlus || k == NodeKind::kNot;
  }
  NodePtr operand;
};

// Arithmetic (type kNumeric) or comparison (type kBoolean).
struct BinaryNode final : Node {
  BinaryNode(NodeKind kind, NodePtr l, NodePtr r, size_t offset);
  static bool Is(NodeKind k) { return IsArithmetic(k) || IsComparison(k); }
  NodePtr lhs;
  NodePtr rhs;
};

// kAnd or kOr over two or more operands, evaluated left to right.
struct LogicalNode final : Node {
  LogicalNode(NodeKind kind, std::vector<NodePtr> ops, size_t offset)
      : Node(kind, StaticType::kBoolean, offset), operands(std::move(ops)) {}
  static bool Is(NodeKind k) { return k == NodeKind::kAnd || k == NodeKind::kOr; }
  std::vector<NodePtr> operands;
};

// `value [NOT] BETWEEN low AND high`; every operand is kNumeric or kAny.
struct BetweenNode final : Node {
  BetweenNode(bool neg, NodePtr v, NodePtr lo, NodePtr hi, size_t offset)
      : Node(NodeKind::kBetween, StaticType::kBoolean, offset),
        negated(neg),
        value(std::move(v)),
        low(std::move(lo)),
        high(std::move(hi)) {}
  static bool Is(NodeKind k) { return k == NodeKind::kBetween; }
  bool negated;
  NodePtr value;
  NodePtr low;
  NodePtr high;
};

// `attribute [NOT] IN (literal, ...)`: all string literals, or all numeric literals.
struct InNode final : Node {
  InNode(bool neg, std::string attr, std::vector<AttributeValue> vals, size_t offset);
  static bool Is(NodeKind k) { return k == NodeKind::kIn; }

  // Whether `s` is in a list of strings (false for a numeric list).
  bool ContainsString(absl::string_view s) const { return strings.contains(s); }
  // Whether a number equal by exact value is in a numeric list (false for a string list).
  // REQUIRES: d is not NaN.
  bool ContainsInt64(int64_t v) const;
  bool ContainsDouble(double d) const;

  bool negated;
  std::string attribute;
  std::vector<AttributeValue> values;  // as written, duplicates included
  bool numeric;                        // the list holds numbers (else strings)
  // Lookup structures derived from `values`.
  absl::flat_hash_set<std::string> strings;
  std::vector<int64_t> ints;    // sorted
  std::vector<double> doubles;  // sorted
};

// `attribute [NOT] LIKE 'pattern' [ESCAPE 'c']`.
struct LikeNode final : Node {
  LikeNode(bool neg, std::string attr, std::string pat, std::string esc, LikePattern compiled,
           size_t offset)
      : Node(NodeKind::kLike, StaticType::kBoolean, offset),
        negated(neg),
        attribute(std::move(attr)),
        pattern(std::move(pat)),
        escape(std::move(esc)),
        compiled_pattern(std::move(compiled)) {}
  static bool Is(NodeKind k) { return k == NodeKind::kLike; }
  bool negated;
  std::string attribute;
  std::string pattern;  // as written, without quotes and with '' undone
  std::string escape;   // one character, or empty without ESCAPE
  LikePattern compiled_pattern;
};

// `attribute IS [NOT] NULL`.
struct IsNullNode final : Node {
  IsNullNode(bool neg, std::string attr, size_t offset)
      : Node(NodeKind::kIsNull, StaticType::kBoolean, offset),
        negated(neg),
        attribute(std::move(attr)) {}
  static bool Is(NodeKind k) { return k == NodeKind::kIsNull; }
  bool negated;
  std::string attribute;
};

// A parsed selector: its text and the root of its tree (null for an empty selector).
class Ast {
 public:
  Ast(std::string text, NodePtr root) : text_(std::move(text)), root_(std::move(root)) {}
  const std::string& text() const { return text_; }
  const Node* root() const { return root_.get(); }

 private:
  const std::string text_;
  const NodePtr root_;
};

// The direct operands of `node`, left to right (none for literals, identifiers and the
// attribute-only predicates IN, LIKE and IS NULL).
std::vector<const Node*> Children(const Node& node);

// The conditions whose conjunction is `root` (nested ANDs flattened; just {root} when root is no
// AND). The selector is TRUE exactly when every conjunct is TRUE, so each conjunct is a
// necessary condition a matcher may index on. Empty for a null root (matches everything).
std::vector<const Node*> Conjuncts(const Node* root);

// A conjunct a predicate index can serve. Values point into the tree.
//
// The index must apply the selector's typing rules: a string literal matches only string
// attributes; numeric literals match int64 and double attributes by exact value (literal 5
// matches 5 and 5.0), never NaN; a boolean literal matches only booleans. A conjunct can only be
// TRUE when the attribute is present with a matching type, so an index lookup finds every
// candidate; the matcher still evaluates the whole selector on them.
struct IndexableConjunct {
  enum class Kind {
    kEqual,  // attribute = values[0]            (any literal type)
    kIn,     // attribute IN (values...)         (strings, or numbers)
    kRange,  // lower <(=) attribute <(=) upper  (numeric literals; either bound may be absent)
  };
  Kind kind;
  absl::string_view attribute;
  std::vector<const AttributeValue*> values;  // kEqual, kIn
  const AttributeValue* lower = nullptr;      // kRange
  bool lower_inclusive = false;
  const AttributeValue* upper = nullptr;  // kRange
  bool upper_inclusive = false;
};

// Recognizes `attr = lit`, `lit = attr`, `attr IN (...)`, `attr op lit` / `lit op attr` for op in
// < <= > >=, and `attr BETWEEN lit AND lit` with numeric literals. nullopt for anything else
// (<>, NOT forms, OR, arithmetic, LIKE, ...).
std::optional<IndexableConjunct> AsIndexable(const Node& conjunct);

// Renders a node as a fully parenthesized selector with upper-case keywords.
std::string ToString(const Node& node);

}  // namespace gryph::selector_ast

#endif  // GRYPH_LIB_SELECTOR_AST_H_
