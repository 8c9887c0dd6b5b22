#include "lib/selector/evaluator.h"

#include <cmath>
#include <cstdint>

#include "lib/selector/numeric.h"

namespace gryph::selector_ast {

namespace {

// A value during evaluation. Strings are views into the event or the tree, so building a Value
// never allocates.
struct Value {
  enum class Kind : uint8_t {
    kNull,       // a missing attribute, UNKNOWN as a value, division by zero
    kTypeError,  // arithmetic on a string or boolean: makes the enclosing comparison FALSE
    kInt64,
    kDouble,
    kString,
    kBool,
  };
  Kind kind = Kind::kNull;
  int64_t i = 0;
  double d = 0;
  bool b = false;
  absl::string_view s;

  static Value Null() { return Value(); }
  static Value TypeError() { return Of(Kind::kTypeError); }
  static Value Int64(int64_t v) {
    Value r = Of(Kind::kInt64);
    r.i = v;
    return r;
  }
  static Value Double(double v) {
    Value r = Of(Kind::kDouble);
    r.d = v;
    return r;
  }
  static Value String(absl::string_view v) {
    Value r = Of(Kind::kString);
    r.s = v;
    return r;
  }
  static Value Bool(bool v) {
    Value r = Of(Kind::kBool);
    r.b = v;
    return r;
  }
  static Value Of(Kind k) {
    Value r;
    r.kind = k;
    return r;
  }

  bool is_numeric() const { return kind == Kind::kInt64 || kind == Kind::kDouble; }
  double AsDouble() const { return kind == Kind::kInt64 ? static_cast<double>(i) : d; }
};

Value FromAttribute(const AttributeValue* v) {
  if (v == nullptr) return Value::Null();
  switch (v->index()) {
    case 0: return Value::Int64(*std::get_if<int64_t>(v));
    case 1: return Value::Double(*std::get_if<double>(v));
    case 2: return Value::String(*std::get_if<std::string>(v));
    default: return Value::Bool(*std::get_if<bool>(v));
  }
}

Truth FromBool(bool b) { return b ? Truth::kTrue : Truth::kFalse; }

// Whether an ordering `cmp` (-1, 0, 1) satisfies the comparison `op`.
bool Satisfies(NodeKind op, int cmp) {
  switch (op) {
    case NodeKind::kEqual: return cmp == 0;
    case NodeKind::kNotEqual: return cmp != 0;
    case NodeKind::kLess: return cmp < 0;
    case NodeKind::kLessEqual: return cmp <= 0;
    case NodeKind::kGreater: return cmp > 0;
    case NodeKind::kGreaterEqual: return cmp >= 0;
    default: return false;
  }
}

// `a op b` for a comparison op, with the JMS typing rules.
Truth Compare(NodeKind op, const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.kind == K::kNull || b.kind == K::kNull) return Truth::kUnknown;
  if (a.is_numeric() && b.is_numeric()) {
    if ((a.kind == K::kDouble && std::isnan(a.d)) || (b.kind == K::kDouble && std::isnan(b.d))) {
      return Truth::kUnknown;  // NaN has no place in the order
    }
    int cmp;
    if (a.kind == K::kInt64 && b.kind == K::kInt64) {
      cmp = CompareInt64(a.i, b.i);
    } else if (a.kind == K::kDouble && b.kind == K::kDouble) {
      cmp = CompareDouble(a.d, b.d);
    } else if (a.kind == K::kInt64) {
      cmp = CompareInt64Double(a.i, b.d);
    } else {
      cmp = -CompareInt64Double(b.i, a.d);
    }
    return FromBool(Satisfies(op, cmp));
  }
  const bool equality = op == NodeKind::kEqual || op == NodeKind::kNotEqual;
  // Strings and booleans compare with = and <> only; unlike types (and type errors) never
  // compare: FALSE, whatever the operator.
  if (!equality || a.kind != b.kind) return Truth::kFalse;
  bool equal;
  if (a.kind == K::kString) {
    equal = a.s == b.s;
  } else if (a.kind == K::kBool) {
    equal = a.b == b.b;
  } else {
    return Truth::kFalse;  // both type errors
  }
  return FromBool(equal == (op == NodeKind::kEqual));
}

Value Arithmetic(NodeKind op, const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.kind == K::kNull || b.kind == K::kNull) return Value::Null();
  if (!a.is_numeric() || !b.is_numeric()) return Value::TypeError();
  if (a.kind == K::kInt64 && b.kind == K::kInt64) {
    int64_t r;
    switch (op) {
      case NodeKind::kAdd:
        if (!__builtin_add_overflow(a.i, b.i, &r)) return Value::Int64(r);
        break;
      case NodeKind::kSubtract:
        if (!__builtin_sub_overflow(a.i, b.i, &r)) return Value::Int64(r);
        break;
      case NodeKind::kMultiply:
        if (!__builtin_mul_overflow(a.i, b.i, &r)) return Value::Int64(r);
        break;
      default:  // kDivide
        if (b.i == 0) return Value::Null();
        if (a.i == INT64_MIN && b.i == -1) break;  // the one overflowing quotient
        return Value::Int64(a.i / b.i);            // truncates toward zero, as in Java
    }
    // Overflow: the result does not fit an int64, give it as a double instead of wrapping.
  }
  const double x = a.AsDouble();
  const double y = b.AsDouble();
  switch (op) {
    case NodeKind::kAdd: return Value::Double(x + y);
    case NodeKind::kSubtract: return Value::Double(x - y);
    case NodeKind::kMultiply: return Value::Double(x * y);
    default:
      if (y == 0) return Value::Null();  // also for doubles: division by zero is UNKNOWN
      return Value::Double(x / y);
  }
}

Value EvaluateValue(const Node& node, const Event& event);

Value Negate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kNull: return v;
    case Value::Kind::kInt64:
      if (v.i == INT64_MIN) return Value::Double(-static_cast<double>(v.i));
      return Value::Int64(-v.i);
    case Value::Kind::kDouble: return Value::Double(-v.d);
    default: return Value::TypeError();
  }
}

Truth EvaluateBetween(const BetweenNode& n, const Event& event) {
  const Value v = EvaluateValue(*n.value, event);
  const Value low = EvaluateValue(*n.low, event);
  const Value high = EvaluateValue(*n.high, event);
  // Exactly `v >= low AND v <= high`, or `v < low OR v > high` (JMS 2.0 §3.8.1.1).
  if (n.negated) {
    return Or(Compare(NodeKind::kLess, v, low), Compare(NodeKind::kGreater, v, high));
  }
  return And(Compare(NodeKind::kGreaterEqual, v, low), Compare(NodeKind::kLessEqual, v, high));
}

Truth EvaluateIn(const InNode& n, const Event& event) {
  const AttributeValue* v = event.Find(n.attribute);
  if (v == nullptr) return Truth::kUnknown;
  bool found;
  if (const auto* s = std::get_if<std::string>(v)) {
    if (n.numeric) return Truth::kFalse;
    found = n.ContainsString(*s);
  } else if (const auto* i = std::get_if<int64_t>(v)) {
    if (!n.numeric) return Truth::kFalse;
    found = n.ContainsInt64(*i);
  } else if (const auto* d = std::get_if<double>(v)) {
    if (!n.numeric) return Truth::kFalse;
    if (std::isnan(*d)) return Truth::kUnknown;
    found = n.ContainsDouble(*d);
  } else {
    return Truth::kFalse;  // a boolean is in no list
  }
  return FromBool(found != n.negated);
}

Truth EvaluateLike(const LikeNode& n, const Event& event) {
  const AttributeValue* v = event.Find(n.attribute);
  if (v == nullptr) return Truth::kUnknown;
  const auto* s = std::get_if<std::string>(v);
  if (s == nullptr) return Truth::kFalse;  // LIKE and NOT LIKE apply to strings only
  return FromBool(n.compiled_pattern.Matches(*s) != n.negated);
}

// A value node used as a condition: only a boolean has a truth value.
Truth TruthOf(const Value& v) {
  return v.kind == Value::Kind::kBool ? FromBool(v.b) : Truth::kUnknown;
}

Value EvaluateValue(const Node& node, const Event& event) {
  switch (node.kind()) {
    case NodeKind::kLiteral: {
      const AttributeValue& v = static_cast<const LiteralNode&>(node).value;
      return FromAttribute(&v);
    }
    case NodeKind::kIdentifier:
      return FromAttribute(event.Find(static_cast<const IdentifierNode&>(node).name));
    case NodeKind::kNegate:
      return Negate(EvaluateValue(*static_cast<const UnaryNode&>(node).operand, event));
    case NodeKind::kUnaryPlus: {
      const Value v = EvaluateValue(*static_cast<const UnaryNode&>(node).operand, event);
      return v.kind == Value::Kind::kNull || v.is_numeric() ? v : Value::TypeError();
    }
    case NodeKind::kAdd:
    case NodeKind::kSubtract:
    case NodeKind::kMultiply:
    case NodeKind::kDivide: {
      const auto& b = static_cast<const BinaryNode&>(node);
      return Arithmetic(node.kind(), EvaluateValue(*b.lhs, event), EvaluateValue(*b.rhs, event));
    }
    default:
      // A condition used as a value, as in `(a > 1) = TRUE`: UNKNOWN is NULL.
      switch (EvaluateCondition(node, event)) {
        case Truth::kTrue: return Value::Bool(true);
        case Truth::kFalse: return Value::Bool(false);
        default: return Value::Null();
      }
  }
}

}  // namespace

Truth EvaluateCondition(const Node& node, const Event& event) {
  switch (node.kind()) {
    case NodeKind::kEqual:
    case NodeKind::kNotEqual:
    case NodeKind::kLess:
    case NodeKind::kLessEqual:
    case NodeKind::kGreater:
    case NodeKind::kGreaterEqual: {
      const auto& b = static_cast<const BinaryNode&>(node);
      return Compare(node.kind(), EvaluateValue(*b.lhs, event), EvaluateValue(*b.rhs, event));
    }
    case NodeKind::kNot:
      return Not(EvaluateCondition(*static_cast<const UnaryNode&>(node).operand, event));
    case NodeKind::kAnd: {
      Truth result = Truth::kTrue;
      for (const NodePtr& op : static_cast<const LogicalNode&>(node).operands) {
        result = And(result, EvaluateCondition(*op, event));
        if (result == Truth::kFalse) break;
      }
      return result;
    }
    case NodeKind::kOr: {
      Truth result = Truth::kFalse;
      for (const NodePtr& op : static_cast<const LogicalNode&>(node).operands) {
        result = Or(result, EvaluateCondition(*op, event));
        if (result == Truth::kTrue) break;
      }
      return result;
    }
    case NodeKind::kBetween: return EvaluateBetween(static_cast<const BetweenNode&>(node), event);
    case NodeKind::kIn: return EvaluateIn(static_cast<const InNode&>(node), event);
    case NodeKind::kLike: return EvaluateLike(static_cast<const LikeNode&>(node), event);
    case NodeKind::kIsNull: {
      const auto& n = static_cast<const IsNullNode&>(node);
      return FromBool((event.Find(n.attribute) == nullptr) != n.negated);
    }
    default:
      return TruthOf(EvaluateValue(node, event));  // literal or identifier (or, never, arithmetic)
  }
}

}  // namespace gryph::selector_ast
