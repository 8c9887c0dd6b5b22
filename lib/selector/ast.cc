#include "lib/selector/ast.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "fmt/format.h"
#include "lib/selector/numeric.h"

namespace gryph::selector_ast {

namespace {

StaticType TypeOfLiteral(const AttributeValue& v) {
  switch (v.index()) {
    case 0:
    case 1: return StaticType::kNumeric;
    case 2: return StaticType::kString;
    default: return StaticType::kBoolean;
  }
}

}  // namespace

bool IsArithmetic(NodeKind kind) {
  return kind == NodeKind::kAdd || kind == NodeKind::kSubtract || kind == NodeKind::kMultiply ||
         kind == NodeKind::kDivide;
}

bool IsComparison(NodeKind kind) {
  return kind == NodeKind::kEqual || kind == NodeKind::kNotEqual || kind == NodeKind::kLess ||
         kind == NodeKind::kLessEqual || kind == NodeKind::kGreater ||
         kind == NodeKind::kGreaterEqual;
}

absl::string_view KindName(NodeKind kind) {
  switch (kind) {
    case NodeKind::kLiteral: return "literal";
    case NodeKind::kIdentifier: return "identifier";
    case NodeKind::kNegate: return "-";
    case NodeKind::kUnaryPlus: return "+";
    case NodeKind::kNot: return "NOT";
    case NodeKind::kAdd: return "+";
    case NodeKind::kSubtract: return "-";
    case NodeKind::kMultiply: return "*";
    case NodeKind::kDivide: return "/";
    case NodeKind::kEqual: return "=";
    case NodeKind::kNotEqual: return "<>";
    case NodeKind::kLess: return "<";
    case NodeKind::kLessEqual: return "<=";
    case NodeKind::kGreater: return ">";
    case NodeKind::kGreaterEqual: return ">=";
    case NodeKind::kAnd: return "AND";
    case NodeKind::kOr: return "OR";
    case NodeKind::kBetween: return "BETWEEN";
    case NodeKind::kIn: return "IN";
    case NodeKind::kLike: return "LIKE";
    case NodeKind::kIsNull: return "IS NULL";
  }
  return "?";
}

LiteralNode::LiteralNode(AttributeValue v, size_t offset)
    : Node(NodeKind::kLiteral, TypeOfLiteral(v), offset), value(std::move(v)) {}

UnaryNode::UnaryNode(NodeKind kind, NodePtr o, size_t offset)
    : Node(kind, kind == NodeKind::kNot ? StaticType::kBoolean : StaticType::kNumeric, offset),
      operand(std::move(o)) {}

BinaryNode::BinaryNode(NodeKind kind, NodePtr l, NodePtr r, size_t offset)
    : Node(kind, IsArithmetic(kind) ? StaticType::kNumeric : StaticType::kBoolean, offset),
      lhs(std::move(l)),
      rhs(std::move(r)) {}

InNode::InNode(bool neg, std::string attr, std::vector<AttributeValue> vals, size_t offset)
    : Node(NodeKind::kIn, StaticType::kBoolean, offset),
      negated(neg),
      attribute(std::move(attr)),
      values(std::move(vals)),
      numeric(!values.empty() && !std::holds_alternative<std::string>(values.front())) {
  for (const AttributeValue& v : values) {
    if (const auto* s = std::get_if<std::string>(&v)) {
      strings.insert(*s);
    } else if (const auto* i = std::get_if<int64_t>(&v)) {
      ints.push_back(*i);
    } else if (const auto* d = std::get_if<double>(&v)) {
      doubles.push_back(*d);
    }
  }
  std::sort(ints.begin(), ints.end());
  std::sort(doubles.begin(), doubles.end());  // literals are finite: no NaN to upset the order
}

bool InNode::ContainsInt64(int64_t v) const {
  if (std::binary_search(ints.begin(), ints.end(), v)) return true;
  auto it = std::lower_bound(doubles.begin(), doubles.end(), v,
                             [](double d, int64_t x) { return CompareInt64Double(x, d) > 0; });
  return it != doubles.end() && CompareInt64Double(v, *it) == 0;
}

bool InNode::ContainsDouble(double d) const {
  if (std::binary_search(doubles.begin(), doubles.end(), d)) return true;
  auto it = std::lower_bound(ints.begin(), ints.end(), d,
                             [](int64_t x, double y) { return CompareInt64Double(x, y) < 0; });
  return it != ints.end() && CompareInt64Double(*it, d) == 0;
}

std::vector<const Node*> Children(const Node& node) {
  if (const auto* u = node.As<UnaryNode>()) return {u->operand.get()};
  if (const auto* b = node.As<BinaryNode>()) return {b->lhs.get(), b->rhs.get()};
  if (const auto* l = node.As<LogicalNode>()) {
    std::vector<const Node*> out;
    for (const NodePtr& op : l->operands) out.push_back(op.get());
    return out;
  }
  if (const auto* b = node.As<BetweenNode>()) return {b->value.get(), b->low.get(), b->high.get()};
  return {};
}

std::vector<const Node*> Conjuncts(const Node* root) {
  std::vector<const Node*> out;
  if (root == nullptr) return out;
  // Iterative, so that the order is left to right without recursion.
  std::vector<const Node*> stack = {root};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n->kind() == NodeKind::kAnd) {
      const auto& ops = n->As<LogicalNode>()->operands;
      for (auto it = ops.rbegin(); it != ops.rend(); ++it) stack.push_back(it->get());
    } else {
      out.push_back(n);
    }
  }
  return out;
}

namespace {

bool IsNumericLiteral(const Node& n) {
  const auto* lit = n.As<LiteralNode>();
  return lit != nullptr && lit->type() == StaticType::kNumeric;
}

// The comparison seen from the attribute's side: `5 < a` is `a > 5`.
NodeKind Mirror(NodeKind k) {
  switch (k) {
    case NodeKind::kLess: return NodeKind::kGreater;
    case NodeKind::kLessEqual: return NodeKind::kGreaterEqual;
    case NodeKind::kGreater: return NodeKind::kLess;
    case NodeKind::kGreaterEqual: return NodeKind::kLessEqual;
    default: return k;
  }
}

}  // namespace

std::optional<IndexableConjunct> AsIndexable(const Node& conjunct) {
  IndexableConjunct out;
  if (const auto* in = conjunct.As<InNode>()) {
    if (in->negated) return std::nullopt;
    out.kind = IndexableConjunct::Kind::kIn;
    out.attribute = in->attribute;
    for (const AttributeValue& v : in->values) out.values.push_back(&v);
    return out;
  }
  if (const auto* between = conjunct.As<BetweenNode>()) {
    const auto* id = between->value->As<IdentifierNode>();
    if (between->negated || id == nullptr || !IsNumericLiteral(*between->low) ||
        !IsNumericLiteral(*between->high)) {
      return std::nullopt;
    }
    out.kind = IndexableConjunct::Kind::kRange;
    out.attribute = id->name;
    out.lower = &between->low->As<LiteralNode>()->value;
    out.lower_inclusive = true;
    out.upper = &between->high->As<LiteralNode>()->value;
    out.upper_inclusive = true;
    return out;
  }
  const auto* cmp = conjunct.As<BinaryNode>();
  if (cmp == nullptr || !IsComparison(cmp->kind()) || cmp->kind() == NodeKind::kNotEqual) {
    return std::nullopt;
  }
  NodeKind kind = cmp->kind();
  const IdentifierNode* id = cmp->lhs->As<IdentifierNode>();
  const LiteralNode* lit = cmp->rhs->As<LiteralNode>();
  if (id == nullptr || lit == nullptr) {
    id = cmp->rhs->As<IdentifierNode>();
    lit = cmp->lhs->As<LiteralNode>();
    kind = Mirror(kind);
  }
  if (id == nullptr || lit == nullptr) return std::nullopt;
  out.attribute = id->name;
  if (kind == NodeKind::kEqual) {
    out.kind = IndexableConjunct::Kind::kEqual;
    out.values.push_back(&lit->value);
    return out;
  }
  if (lit->type() != StaticType::kNumeric) return std::nullopt;  // the parser rejects these
  out.kind = IndexableConjunct::Kind::kRange;
  if (kind == NodeKind::kGreater || kind == NodeKind::kGreaterEqual) {
    out.lower = &lit->value;
    out.lower_inclusive = kind == NodeKind::kGreaterEqual;
  } else {
    out.upper = &lit->value;
    out.upper_inclusive = kind == NodeKind::kLessEqual;
  }
  return out;
}

namespace {

std::string QuoteString(absl::string_view s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

std::string LiteralToString(const AttributeValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i);
  if (const auto* d = std::get_if<double>(&v)) {
    // Shortest text that reads back as the same double, marked approximate by '.' or 'e'.
    std::string s = fmt::format("{}", *d);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
  }
  if (const auto* s = std::get_if<std::string>(&v)) return QuoteString(*s);
  return std::get<bool>(v) ? "TRUE" : "FALSE";
}

}  // namespace

std::string ToString(const Node& node) {
  switch (node.kind()) {
    case NodeKind::kLiteral: return LiteralToString(node.As<LiteralNode>()->value);
    case NodeKind::kIdentifier: return node.As<IdentifierNode>()->name;
    case NodeKind::kNegate:
    case NodeKind::kUnaryPlus:
      return absl::StrCat("(", KindName(node.kind()), ToString(*node.As<UnaryNode>()->operand),
                          ")");
    case NodeKind::kNot:
      return absl::StrCat("(NOT ", ToString(*node.As<UnaryNode>()->operand), ")");
    case NodeKind::kAnd:
    case NodeKind::kOr: {
      std::vector<std::string> parts;
      for (const NodePtr& op : node.As<LogicalNode>()->operands) parts.push_back(ToString(*op));
      return absl::StrCat("(", absl::StrJoin(parts, absl::StrCat(" ", KindName(node.kind()), " ")),
                          ")");
    }
    case NodeKind::kBetween: {
      const auto* b = node.As<BetweenNode>();
      return absl::StrCat("(", ToString(*b->value), b->negated ? " NOT" : "", " BETWEEN ",
                          ToString(*b->low), " AND ", ToString(*b->high), ")");
    }
    case NodeKind::kIn: {
      const auto* in = node.As<InNode>();
      std::vector<std::string> parts;
      for (const AttributeValue& v : in->values) parts.push_back(LiteralToString(v));
      return absl::StrCat("(", in->attribute, in->negated ? " NOT" : "", " IN (",
                          absl::StrJoin(parts, ", "), "))");
    }
    case NodeKind::kLike: {
      const auto* like = node.As<LikeNode>();
      return absl::StrCat(
          "(", like->attribute, like->negated ? " NOT" : "", " LIKE ", QuoteString(like->pattern),
          like->escape.empty() ? "" : absl::StrCat(" ESCAPE ", QuoteString(like->escape)), ")");
    }
    case NodeKind::kIsNull: {
      const auto* n = node.As<IsNullNode>();
      return absl::StrCat("(", n->attribute, n->negated ? " IS NOT NULL" : " IS NULL", ")");
    }
    default: {
      const auto* b = node.As<BinaryNode>();
      return absl::StrCat("(", ToString(*b->lhs), " ", KindName(node.kind()), " ",
                          ToString(*b->rhs), ")");
    }
  }
}

}  // namespace gryph::selector_ast
