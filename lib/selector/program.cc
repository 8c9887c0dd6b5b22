#include "lib/selector/program.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "fmt/format.h"
#include "lib/selector/numeric.h"
#include "lib/selector/utf8.h"

namespace gryph::selector_program {

namespace sa = selector_ast;

// ---------------------------------------------------------------------------------------------
// Reading operands. The unchecked readers serve evaluation and the view, which run on validated
// programs only; Validate uses the checked Reader.

namespace {

inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t LoadU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline double LoadDouble(const uint8_t* p) {
  double v;
  std::memcpy(&v, p, 8);
  return v;
}

// A varint (LEB128, at most 5 bytes for 32 bits).
inline uint32_t LoadVarint(const uint8_t** p) {
  uint32_t v = 0;
  for (int shift = 0;; shift += 7) {
    const uint8_t b = *(*p)++;
    v |= static_cast<uint32_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return v;
  }
}

// kSmallInt's zigzag coding: 0, -1, 1, -2, ... as 0, 1, 2, 3, ...
inline int64_t UnZigZag(uint32_t u) {
  return static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
}
// kSmallInt holds the integers of magnitude below this (zigzag codes below 2^28: 4 varint bytes).
constexpr int64_t kSmallIntLimit = int64_t{1} << 27;

inline absl::string_view LoadBytes(const uint8_t** p) {
  const uint32_t n = LoadVarint(p);
  absl::string_view s(reinterpret_cast<const char*>(*p), n);
  *p += n;
  return s;
}

// An IN list's header, read from just past its opcode.
struct InList {
  absl::string_view name;
  bool numeric = false;
  uint32_t count = 0;
  const uint8_t* values = nullptr;  // the first value
  const uint8_t* sorted = nullptr;  // u32 offsets, or null for a short list
  const uint8_t* end = nullptr;     // past the operation
};

// The value at `p` of a numeric list: tag (0 int64, 1 double) and 8 bytes.
inline Literal LoadNumber(const uint8_t* p) {
  Literal l;
  if (p[0] == 0) {
    l.type = Literal::Type::kInt64;
    l.i = static_cast<int64_t>(LoadU64(p + 1));
  } else {
    l.type = Literal::Type::kDouble;
    l.d = LoadDouble(p + 1);
  }
  return l;
}

InList LoadIn(const uint8_t* p) {
  InList in;
  in.name = LoadBytes(&p);
  in.numeric = *p++ != 0;
  in.count = LoadVarint(&p);
  const uint32_t bytes = LoadU32(p);
  p += 4;
  in.values = p;
  p += bytes;
  if (in.count > kSortedInThreshold) {
    in.sorted = p;
    p += 4 * static_cast<size_t>(in.count);
  }
  in.end = p;
  return in;
}

// Orders two numbers by exact value: -1, 0, 1. REQUIRES: no NaN.
int CompareNumbers(const Literal& a, const Literal& b) {
  if (a.type == Literal::Type::kInt64) {
    return b.type == Literal::Type::kInt64 ? sa::CompareInt64(a.i, b.i)
                                           : sa::CompareInt64Double(a.i, b.d);
  }
  return b.type == Literal::Type::kInt64 ? -sa::CompareInt64Double(b.i, a.d)
                                         : sa::CompareDouble(a.d, b.d);
}

Literal LoadString(const uint8_t* p) {
  Literal l;
  l.type = Literal::Type::kString;
  l.encoded = p;
  l.s = LoadBytes(&p);
  return l;
}

// The value of an IN list at `offset` from its first value.
Literal InValueAt(const InList& in, uint32_t offset) {
  return in.numeric ? LoadNumber(in.values + offset) : LoadString(in.values + offset);
}

int CompareInValues(const InList& in, const Literal& a, const Literal& b) {
  if (in.numeric) return CompareNumbers(a, b);
  const int c = a.s.compare(b.s);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

// Whether `x` (of the list's type; no NaN) is in the list.
bool InFind(const InList& in, const Literal& x) {
  if (in.sorted == nullptr) {
    const uint8_t* p = in.values;
    for (uint32_t i = 0; i < in.count; ++i) {
      if (in.numeric) {
        if (CompareNumbers(LoadNumber(p), x) == 0) return true;
        p += 9;
      } else {
        if (LoadBytes(&p) == x.s) return true;
      }
    }
    return false;
  }
  uint32_t lo = 0;
  uint32_t hi = in.count;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    const int c = CompareInValues(in, InValueAt(in, LoadU32(in.sorted + 4 * mid)), x);
    if (c == 0) return true;
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Evaluation: the typing rules of include/gryph/selector.h and docs/selectors.md.

// A value on the evaluation stack. Strings are views into the event or the program.
struct Value {
  enum class Kind : uint8_t {
    kNull,       // a missing attribute, UNKNOWN as a value, division by zero
    kTypeError,  // arithmetic on a string or boolean: makes the enclosing comparison FALSE
    kInt64,
    kDouble,
    kString,
    kBool,
  };
  union {
    int64_t i;
    double d;
    bool b;
    const char* s;
  };
  uint32_t len;
  Kind kind;

  static Value Of(Kind k) {
    Value v;
    v.kind = k;
    v.i = 0;
    v.len = 0;
    return v;
  }
  static Value Null() { return Of(Kind::kNull); }
  static Value Int64(int64_t x) {
    Value v = Of(Kind::kInt64);
    v.i = x;
    return v;
  }
  static Value Double(double x) {
    Value v = Of(Kind::kDouble);
    v.d = x;
    return v;
  }
  static Value Bool(bool x) {
    Value v = Of(Kind::kBool);
    v.b = x;
    return v;
  }
  static Value String(absl::string_view x) {
    Value v = Of(Kind::kString);
    v.s = x.data();
    v.len = static_cast<uint32_t>(x.size());
    return v;
  }
  bool is_numeric() const { return kind == Kind::kInt64 || kind == Kind::kDouble; }
  double AsDouble() const { return kind == Kind::kInt64 ? static_cast<double>(i) : d; }
  absl::string_view str() const { return {s, len}; }
};
static_assert(sizeof(Value) == 16);

Value FromAttribute(const AttributeValue* v) {
  if (v == nullptr) return Value::Null();
  switch (v->index()) {
    case 0: return Value::Int64(*std::get_if<int64_t>(v));
    case 1: return Value::Double(*std::get_if<double>(v));
    case 2: {
      // Strings longer than 4 GiB compare by their first 4 GiB; events are far smaller.
      const std::string& s = *std::get_if<std::string>(v);
      return Value::String(absl::string_view(s).substr(0, UINT32_MAX));
    }
    default: return Value::Bool(*std::get_if<bool>(v));
  }
}

inline Truth FromBool(bool b) { return b ? Truth::kTrue : Truth::kFalse; }

// A value used as a condition: only a boolean has a truth value.
inline Truth TruthOf(const Value& v) {
  return v.kind == Value::Kind::kBool ? FromBool(v.b) : Truth::kUnknown;
}
// A condition used as a value, as in `(a > 1) = TRUE`: UNKNOWN is NULL.
inline Value FromTruth(Truth t) {
  return t == Truth::kUnknown ? Value::Null() : Value::Bool(t == Truth::kTrue);
}

bool Satisfies(Op op, int cmp) {
  switch (op) {
    case Op::kEqual: return cmp == 0;
    case Op::kNotEqual: return cmp != 0;
    case Op::kLess: return cmp < 0;
    case Op::kLessEqual: return cmp <= 0;
    case Op::kGreater: return cmp > 0;
    case Op::kGreaterEqual: return cmp >= 0;
    default: return false;
  }
}

// `a op b` for a comparison op.
Truth Compare(Op op, const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.kind == K::kNull || b.kind == K::kNull) return Truth::kUnknown;
  if (a.is_numeric() && b.is_numeric()) {
    if ((a.kind == K::kDouble && std::isnan(a.d)) || (b.kind == K::kDouble && std::isnan(b.d))) {
      return Truth::kUnknown;  // NaN has no place in the order
    }
    int cmp;
    if (a.kind == K::kInt64 && b.kind == K::kInt64) {
      cmp = sa::CompareInt64(a.i, b.i);
    } else if (a.kind == K::kDouble && b.kind == K::kDouble) {
      cmp = sa::CompareDouble(a.d, b.d);
    } else if (a.kind == K::kInt64) {
      cmp = sa::CompareInt64Double(a.i, b.d);
    } else {
      cmp = -sa::CompareInt64Double(b.i, a.d);
    }
    return FromBool(Satisfies(op, cmp));
  }
  const bool equality = op == Op::kEqual || op == Op::kNotEqual;
  // Strings and booleans compare with = and <> only; unlike types (and type errors) never
  // compare: FALSE, whatever the operator.
  if (!equality || a.kind != b.kind) return Truth::kFalse;
  bool equal;
  if (a.kind == K::kString) {
    equal = a.str() == b.str();
  } else if (a.kind == K::kBool) {
    equal = a.b == b.b;
  } else {
    return Truth::kFalse;  // both type errors
  }
  return FromBool(equal == (op == Op::kEqual));
}

Value Arithmetic(Op op, const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.kind == K::kNull || b.kind == K::kNull) return Value::Null();
  if (!a.is_numeric() || !b.is_numeric()) return Value::Of(K::kTypeError);
  if (a.kind == K::kInt64 && b.kind == K::kInt64) {
    int64_t r;
    switch (op) {
      case Op::kAdd:
        if (!__builtin_add_overflow(a.i, b.i, &r)) return Value::Int64(r);
        break;
      case Op::kSubtract:
        if (!__builtin_sub_overflow(a.i, b.i, &r)) return Value::Int64(r);
        break;
      case Op::kMultiply:
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
    case Op::kAdd: return Value::Double(x + y);
    case Op::kSubtract: return Value::Double(x - y);
    case Op::kMultiply: return Value::Double(x * y);
    default:
      if (y == 0) return Value::Null();  // also for doubles: division by zero is UNKNOWN
      return Value::Double(x / y);
  }
}

Value Negate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kNull: return v;
    case Value::Kind::kInt64:
      if (v.i == INT64_MIN) return Value::Double(-static_cast<double>(v.i));
      return Value::Int64(-v.i);
    case Value::Kind::kDouble: return Value::Double(-v.d);
    default: return Value::Of(Value::Kind::kTypeError);
  }
}

}  // namespace

Truth Program::In(const uint8_t* op, const AttributeValue* v) {
  const bool negated = static_cast<Op>(*op) == Op::kNotIn;
  const InList in = LoadIn(op + 1);
  if (v == nullptr) return Truth::kUnknown;
  Literal x;
  switch (v->index()) {
    case 0:
      if (!in.numeric) return Truth::kFalse;
      x.type = Literal::Type::kInt64;
      x.i = *std::get_if<int64_t>(v);
      break;
    case 1:
      if (!in.numeric) return Truth::kFalse;
      x.type = Literal::Type::kDouble;
      x.d = *std::get_if<double>(v);
      if (std::isnan(x.d)) return Truth::kUnknown;
      break;
    case 2:
      if (in.numeric) return Truth::kFalse;
      x.type = Literal::Type::kString;
      x.s = *std::get_if<std::string>(v);
      break;
    default: return Truth::kFalse;  // a boolean is in no list, nor outside one
  }
  return FromBool(InFind(in, x) != negated);
}

Truth Program::EvaluateRange(uint32_t begin, uint32_t end, const Event& event) const {
  Value stack[kMaxStack];
  size_t sp = 0;  // stack[0, sp) in use
  const uint8_t* pc = data() + begin;
  const uint8_t* const stop = data() + end;
  while (pc < stop) {
    const Op op = static_cast<Op>(*pc++);
    switch (op) {
      case Op::kAttr: stack[sp++] = FromAttribute(event.Find(LoadBytes(&pc))); break;
      case Op::kInt32: {
        int32_t v;
        std::memcpy(&v, pc, 4);
        pc += 4;
        stack[sp++] = Value::Int64(v);
        break;
      }
      case Op::kSmallInt: stack[sp++] = Value::Int64(UnZigZag(LoadVarint(&pc))); break;
      case Op::kInt64:
        stack[sp++] = Value::Int64(static_cast<int64_t>(LoadU64(pc)));
        pc += 8;
        break;
      case Op::kDouble:
        stack[sp++] = Value::Double(LoadDouble(pc));
        pc += 8;
        break;
      case Op::kString: stack[sp++] = Value::String(LoadBytes(&pc)); break;
      case Op::kTrue: stack[sp++] = Value::Bool(true); break;
      case Op::kFalse: stack[sp++] = Value::Bool(false); break;
      case Op::kNegate: stack[sp - 1] = Negate(stack[sp - 1]); break;
      case Op::kUnaryPlus: {
        Value& v = stack[sp - 1];
        if (v.kind != Value::Kind::kNull && !v.is_numeric()) v = Value::Of(Value::Kind::kTypeError);
        break;
      }
      case Op::kNot: stack[sp - 1] = FromTruth(Not(TruthOf(stack[sp - 1]))); break;
      case Op::kAdd:
      case Op::kSubtract:
      case Op::kMultiply:
      case Op::kDivide:
        stack[sp - 2] = Arithmetic(op, stack[sp - 2], stack[sp - 1]);
        --sp;
        break;
      case Op::kEqual:
      case Op::kNotEqual:
      case Op::kLess:
      case Op::kLessEqual:
      case Op::kGreater:
      case Op::kGreaterEqual:
        stack[sp - 2] = FromTruth(Compare(op, stack[sp - 2], stack[sp - 1]));
        --sp;
        break;
      case Op::kBetween:
      case Op::kNotBetween: {
        // Exactly `v >= low AND v <= high`, or `v < low OR v > high` (JMS 2.0 §3.8.1.1).
        const Value& v = stack[sp - 3];
        const Value& low = stack[sp - 2];
        const Value& high = stack[sp - 1];
        const Truth t =
            op == Op::kNotBetween
                ? Or(Compare(Op::kLess, v, low), Compare(Op::kGreater, v, high))
                : And(Compare(Op::kGreaterEqual, v, low), Compare(Op::kLessEqual, v, high));
        sp -= 2;
        stack[sp - 1] = FromTruth(t);
        break;
      }
      case Op::kIn:
      case Op::kNotIn: {
        const InList in = LoadIn(pc);
        stack[sp++] = FromTruth(In(pc - 1, event.Find(in.name)));
        pc = in.end;
        break;
      }
      case Op::kLike:
      case Op::kNotLike: {
        const absl::string_view name = LoadBytes(&pc);
        uint16_t index;
        std::memcpy(&index, pc, 2);
        pc += 2;
        LoadBytes(&pc);  // the pattern
        LoadBytes(&pc);  // the escape
        const AttributeValue* v = event.Find(name);
        Truth t;
        if (v == nullptr) {
          t = Truth::kUnknown;
        } else if (const auto* s = std::get_if<std::string>(v)) {
          t = FromBool(like(index).Matches(*s) != (op == Op::kNotLike));
        } else {
          t = Truth::kFalse;  // LIKE and NOT LIKE apply to strings only
        }
        stack[sp++] = FromTruth(t);
        break;
      }
      case Op::kIsNull:
      case Op::kIsNotNull: {
        const bool absent = event.Find(LoadBytes(&pc)) == nullptr;
        stack[sp++] = Value::Bool(absent == (op == Op::kIsNull));
        break;
      }
      case Op::kAndFirst:
      case Op::kOrFirst: {
        const uint32_t skip = LoadVarint(&pc);
        const Truth t = TruthOf(stack[sp - 1]);
        stack[sp - 1] = FromTruth(t);
        if (t == (op == Op::kAndFirst ? Truth::kFalse : Truth::kTrue)) pc += skip;
        break;
      }
      case Op::kAndMore:
      case Op::kOrMore:
      case Op::kAndLast:
      case Op::kOrLast: {
        const uint32_t skip = LoadVarint(&pc);  // kAndLast, kOrLast: the operand count
        const Truth a = TruthOf(stack[sp - 2]);
        const Truth b = TruthOf(stack[sp - 1]);
        const bool is_and = op == Op::kAndMore || op == Op::kAndLast;
        const Truth t = is_and ? And(a, b) : Or(a, b);
        --sp;
        stack[sp - 1] = FromTruth(t);
        if ((op == Op::kAndMore && t == Truth::kFalse) ||
            (op == Op::kOrMore && t == Truth::kTrue)) {
          pc += skip;
        }
        break;
      }
    }
  }
  return TruthOf(stack[0]);
}

// ---------------------------------------------------------------------------------------------
// Building.

AttributeValue Literal::ToValue() const {
  switch (type) {
    case Type::kInt64: return i;
    case Type::kDouble: return d;
    case Type::kString: return std::string(s);
    default: return b;
  }
}

bool operator==(const Literal& a, const AttributeValue& b) { return a.ToValue() == b; }

ProgramRef::ProgramRef(const Program* p) : p_(p) {}
ProgramRef ProgramRef::Share(const Program* p) {
  if (p != nullptr) p->refs_.fetch_add(1, std::memory_order_relaxed);
  return ProgramRef(p);
}
ProgramRef::ProgramRef(const ProgramRef& o) : p_(o.p_) {
  if (p_ != nullptr) p_->refs_.fetch_add(1, std::memory_order_relaxed);
}
ProgramRef::~ProgramRef() {
  if (p_ != nullptr && p_->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    p_->~Program();
    ::operator delete(const_cast<Program*>(p_));
  }
}

Program::~Program() { delete likes_; }

size_t Program::bytes() const {
  size_t n = sizeof(Program) + size_;
  if (likes_ != nullptr) n += sizeof(*likes_) + likes_->capacity() * sizeof(LikePattern);
  return n;
}

void ProgramBuilder::U32(uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  code_.append(b, 4);
}
void ProgramBuilder::U64(uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  code_.append(b, 8);
}
void ProgramBuilder::Varint(uint32_t n) {
  while (n >= 0x80) {
    code_.push_back(static_cast<char>((n & 0x7F) | 0x80));
    n >>= 7;
  }
  code_.push_back(static_cast<char>(n));
}
void ProgramBuilder::Bytes(absl::string_view bytes) {
  // Texts longer than 4 GiB do not reach here (LikePattern and the lexer limit them).
  Varint(static_cast<uint32_t>(bytes.size()));
  code_.append(bytes.data(), bytes.size());
}

void ProgramBuilder::Attr(absl::string_view name) {
  code_.push_back(static_cast<char>(Op::kAttr));
  Bytes(name);
}
void ProgramBuilder::Int64(int64_t v) {
  if (v > -kSmallIntLimit && v < kSmallIntLimit) {  // at most 4 bytes of varint
    code_.push_back(static_cast<char>(Op::kSmallInt));
    Varint(static_cast<uint32_t>(v < 0 ? (uint64_t{static_cast<uint64_t>(-v)} << 1) - 1
                                       : static_cast<uint64_t>(v) << 1));
    return;
  }
  if (v >= INT32_MIN && v <= INT32_MAX) {
    code_.push_back(static_cast<char>(Op::kInt32));
    const int32_t w = static_cast<int32_t>(v);
    char b[4];
    std::memcpy(b, &w, 4);
    code_.append(b, 4);
    return;
  }
  code_.push_back(static_cast<char>(Op::kInt64));
  U64(static_cast<uint64_t>(v));
}
void ProgramBuilder::Double(double v) {
  code_.push_back(static_cast<char>(Op::kDouble));
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  U64(bits);
}
void ProgramBuilder::String(absl::string_view v) {
  code_.push_back(static_cast<char>(Op::kString));
  Bytes(v);
}
void ProgramBuilder::Bool(bool v) {
  code_.push_back(static_cast<char>(v ? Op::kTrue : Op::kFalse));
}
void ProgramBuilder::Simple(Op op) { code_.push_back(static_cast<char>(op)); }

void ProgramBuilder::In(bool negated, absl::string_view name,
                        const std::vector<AttributeValue>& values) {
  code_.push_back(static_cast<char>(negated ? Op::kNotIn : Op::kIn));
  Bytes(name);
  const bool numeric = !values.empty() && !std::holds_alternative<std::string>(values.front());
  code_.push_back(numeric ? 1 : 0);
  Varint(static_cast<uint32_t>(values.size()));
  const size_t bytes_at = code_.size();
  U32(0);  // the values' bytes, filled in below
  const size_t first = code_.size();
  std::vector<uint32_t> offsets;
  offsets.reserve(values.size());
  for (const AttributeValue& v : values) {
    offsets.push_back(static_cast<uint32_t>(code_.size() - first));
    if (const auto* s = std::get_if<std::string>(&v)) {
      Bytes(*s);
    } else if (const auto* i = std::get_if<int64_t>(&v)) {
      code_.push_back(0);
      U64(static_cast<uint64_t>(*i));
    } else {
      code_.push_back(1);
      uint64_t bits;
      const double d = std::get<double>(v);
      std::memcpy(&bits, &d, 8);
      U64(bits);
    }
  }
  const uint32_t bytes = static_cast<uint32_t>(code_.size() - first);
  std::memcpy(&code_[bytes_at], &bytes, 4);
  if (values.size() > kSortedInThreshold) {
    InList in;
    in.numeric = numeric;
    in.values = reinterpret_cast<const uint8_t*>(code_.data() + first);
    std::sort(offsets.begin(), offsets.end(), [&](uint32_t a, uint32_t b) {
      const int c = CompareInValues(in, InValueAt(in, a), InValueAt(in, b));
      return c != 0 ? c < 0 : a < b;
    });
    for (uint32_t o : offsets) U32(o);
  }
}

void ProgramBuilder::Like(bool negated, absl::string_view name, absl::string_view pattern,
                          absl::string_view escape, LikePattern compiled) {
  code_.push_back(static_cast<char>(negated ? Op::kNotLike : Op::kLike));
  Bytes(name);
  const uint16_t index = static_cast<uint16_t>(likes_.size());
  char b[2];
  std::memcpy(b, &index, 2);
  code_.append(b, 2);
  Bytes(pattern);
  Bytes(escape);
  likes_.push_back(std::move(compiled));
}

void ProgramBuilder::IsNull(bool negated, absl::string_view name) {
  code_.push_back(static_cast<char>(negated ? Op::kIsNotNull : Op::kIsNull));
  Bytes(name);
}

size_t ProgramBuilder::LogicalBegin(bool is_or) {
  groups_.push_back(Group{is_or, 1, patches_.size()});
  code_.push_back(static_cast<char>(is_or ? Op::kOrFirst : Op::kAndFirst));
  patches_.push_back(code_.size());
  U32(0);  // a placeholder, made a varint by LogicalEnd
  return groups_.size() - 1;
}

void ProgramBuilder::LogicalNext(size_t group) {
  Group& g = groups_[group];
  code_.push_back(static_cast<char>(g.is_or ? Op::kOrMore : Op::kAndMore));
  patches_.push_back(code_.size());
  U32(0);
  ++g.count;
}

namespace {

size_t VarintLength(uint32_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

}  // namespace

void ProgramBuilder::LogicalEnd(size_t group) {
  const Group g = groups_[group];
  code_.push_back(static_cast<char>(g.is_or ? Op::kOrLast : Op::kAndLast));
  Varint(g.count + 1);
  // The skips, each from just past its own varint to the end of the group, go into the 4-byte
  // placeholders as varints: from the last to the first, since a skip spans the (shrunk)
  // placeholders after it. Nothing before the first placeholder moves.
  const size_t first = g.patches;
  const size_t count = patches_.size() - first;
  absl::InlinedVector<uint32_t, 8> skips(count);
  size_t shrunk = 0;  // bytes the placeholders after the current one lose
  for (size_t k = count; k-- > 0;) {
    const size_t at = patches_[first + k];
    skips[k] = static_cast<uint32_t>(code_.size() - (at + 4) - shrunk);
    shrunk += 4 - VarintLength(skips[k]);
  }
  size_t out = patches_[first];
  for (size_t k = 0; k < count; ++k) {
    const size_t at = patches_[first + k];
    const size_t next = k + 1 < count ? patches_[first + k + 1] : code_.size();
    char buf[5];
    size_t n = 0;
    for (uint32_t v = skips[k];; v >>= 7) {
      buf[n++] = static_cast<char>(v >= 0x80 ? (v & 0x7F) | 0x80 : v);
      if (v < 0x80) break;
    }
    std::memcpy(&code_[out], buf, n);
    out += n;
    std::memmove(&code_[out], &code_[at + 4], next - (at + 4));
    out += next - (at + 4);
  }
  code_.resize(out);
  patches_.resize(g.patches);
  groups_.resize(group);
}

absl::StatusOr<ProgramRef> ProgramBuilder::Finish() {
#ifndef NDEBUG
  std::vector<LikePattern> checked;
  if (absl::Status s = Program::Validate(code_, &checked); !s.ok()) {
    return absl::InternalError(s.message());
  }
#endif
  return Program::Build(code_, std::move(likes_));
}

absl::StatusOr<ProgramRef> Program::Make(absl::string_view code) {
  std::vector<LikePattern> likes;
  if (absl::Status s = Validate(code, &likes); !s.ok()) return s;
  return Build(code, std::move(likes));
}

ProgramRef Program::Build(absl::string_view code, std::vector<LikePattern> likes) {
  void* mem = ::operator new(sizeof(Program) + code.size());
  Program* p = new (mem) Program();
  p->size_ = static_cast<uint32_t>(code.size());
  std::memcpy(static_cast<char*>(mem) + sizeof(Program), code.data(), code.size());
  if (!likes.empty()) p->likes_ = new std::vector<LikePattern>(std::move(likes));
  return ProgramRef(p);
}

// ---------------------------------------------------------------------------------------------
// Validation.

namespace {

enum class Type : uint8_t { kAny, kNumeric, kString, kBoolean };

class Reader {
 public:
  explicit Reader(absl::string_view code)
      : p_(reinterpret_cast<const uint8_t*>(code.data())), end_(p_ + code.size()) {}
  bool done() const { return p_ == end_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  const uint8_t* pos() const { return p_; }
  bool U8(uint8_t* v) {
    if (left() < 1) return false;
    *v = *p_++;
    return true;
  }
  bool Fixed(void* v, size_t n) {
    if (left() < n) return false;
    std::memcpy(v, p_, n);
    p_ += n;
    return true;
  }
  bool Varint(uint32_t* v) {
    uint64_t x = 0;
    for (int i = 0; i < 5; ++i) {
      if (left() < 1) return false;
      const uint8_t b = *p_++;
      x |= static_cast<uint64_t>(b & 0x7F) << (7 * i);
      if ((b & 0x80) == 0) {
        if (x > UINT32_MAX) return false;
        *v = static_cast<uint32_t>(x);
        return true;
      }
    }
    return false;
  }
  bool Bytes(absl::string_view* s) {
    uint32_t n;
    if (!Varint(&n) || left() < n) return false;
    *s = absl::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// An identifier as the lexer reads them: a letter, `_`, `$` or non-ASCII character, then also
// digits; not a keyword.
bool ValidName(absl::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size();) {
    const char c = name[i];
    if (absl::ascii_isalpha(c) || c == '_' || c == '$' || (i > 0 && absl::ascii_isdigit(c))) {
      ++i;
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      const size_t len = sa::Utf8CharLength(name, i);
      if (len == 1) return false;
      i += len;
    } else {
      return false;
    }
  }
  static constexpr absl::string_view kKeywords[] = {
      "NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"};
  for (absl::string_view k : kKeywords) {
    if (k.size() == name.size() && (k[0] | 0x20) == (name[0] | 0x20) &&
        absl::EqualsIgnoreCase(name, k)) {
      return false;
    }
  }
  return true;
}

// A stack on the C++ stack while small (no allocation for typical programs), on the heap
// beyond N elements.
template <typename T, size_t N>
class Stack {
 public:
  Stack() = default;
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  // A new element on top, for the caller to fill in field by field (an element built whole
  // and copied in costs a store-forwarding stall per push).
  T& push() {
    if (size_ == capacity_) Grow();
    return data_[size_++];
  }
  void pop_back() { --size_; }
  T& back() { return data_[size_ - 1]; }
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

 private:
  void Grow() {
    std::vector<T> bigger(2 * capacity_);
    std::copy(data_, data_ + size_, bigger.begin());
    heap_ = std::move(bigger);
    data_ = heap_.data();
    capacity_ *= 2;
  }
  T local_[N];
  std::vector<T> heap_;
  T* data_ = local_;
  size_t size_ = 0;
  size_t capacity_ = N;
};

}  // namespace

absl::Status Program::Validate(absl::string_view code, std::vector<LikePattern>* likes) {
  if (code.size() > UINT32_MAX) return absl::DataLossError("selector program: too long");
  struct Item {
    Type type;
    int height;
  };
  struct Group {
    bool is_or;
    uint32_t count;
    size_t base;            // items below the group's first operand
    const uint8_t* target;  // where its jumps land
  };
  Stack<Item, 64> items;
  Stack<Group, 8> groups;
  size_t vm = 0;  // the evaluation stack's depth
  Reader r(code);
  const uint8_t* const start = reinterpret_cast<const uint8_t*>(code.data());
  auto fail = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("selector program: ", what, " at byte ", r.pos() - start));
  };
  auto push = [&](Type t, int height) -> bool {
    Item& item = items.push();
    item.type = t;
    item.height = height;
    return ++vm <= kMaxStack && height <= Selector::kMaxDepth;
  };
  auto is_condition = [](Type t) { return t == Type::kBoolean || t == Type::kAny; };
  auto is_number = [](Type t) { return t == Type::kNumeric || t == Type::kAny; };
  while (!r.done()) {
    uint8_t byte;
    r.U8(&byte);
    const Op op = static_cast<Op>(byte);
    bool ok = true;
    switch (op) {
      case Op::kAttr: {
        absl::string_view name;
        if (!r.Bytes(&name) || !ValidName(name)) return fail("bad attribute name");
        ok = push(Type::kAny, 1);
        break;
      }
      case Op::kInt32: {
        int32_t v;
        if (!r.Fixed(&v, 4)) return fail("truncated literal");
        ok = push(Type::kNumeric, 1);
        break;
      }
      case Op::kSmallInt: {
        uint32_t v;
        if (!r.Varint(&v)) return fail("truncated literal");
        ok = push(Type::kNumeric, 1);
        break;
      }
      case Op::kInt64: {
        int64_t v;
        if (!r.Fixed(&v, 8)) return fail("truncated literal");
        ok = push(Type::kNumeric, 1);
        break;
      }
      case Op::kDouble: {
        double v;
        if (!r.Fixed(&v, 8)) return fail("truncated literal");
        if (!std::isfinite(v)) return fail("non-finite literal");
        ok = push(Type::kNumeric, 1);
        break;
      }
      case Op::kString: {
        absl::string_view s;
        if (!r.Bytes(&s)) return fail("truncated string");
        ok = push(Type::kString, 1);
        break;
      }
      case Op::kTrue:
      case Op::kFalse: ok = push(Type::kBoolean, 1); break;
      case Op::kNegate:
      case Op::kUnaryPlus:
      case Op::kNot: {
        if (items.empty()) return fail("missing operand");
        const Item a = items.back();
        items.pop_back();
        --vm;
        if (op == Op::kNot ? !is_condition(a.type) : !is_number(a.type)) {
          return fail("mistyped operand");
        }
        ok = push(op == Op::kNot ? Type::kBoolean : Type::kNumeric, a.height + 1);
        break;
      }
      case Op::kAdd:
      case Op::kSubtract:
      case Op::kMultiply:
      case Op::kDivide:
      case Op::kEqual:
      case Op::kNotEqual:
      case Op::kLess:
      case Op::kLessEqual:
      case Op::kGreater:
      case Op::kGreaterEqual: {
        if (items.size() < 2) return fail("missing operand");
        const Item b = items.back();
        items.pop_back();
        const Item a = items.back();
        items.pop_back();
        vm -= 2;
        const bool arithmetic = byte <= static_cast<uint8_t>(Op::kDivide);
        const bool ordering = byte >= static_cast<uint8_t>(Op::kLess);
        if (arithmetic && (!is_number(a.type) || !is_number(b.type))) {
          return fail("mistyped operand");
        }
        if (ordering && (a.type == Type::kString || a.type == Type::kBoolean ||
                         b.type == Type::kString || b.type == Type::kBoolean)) {
          return fail("mistyped operand");
        }
        ok = push(arithmetic ? Type::kNumeric : Type::kBoolean, std::max(a.height, b.height) + 1);
        break;
      }
      case Op::kBetween:
      case Op::kNotBetween: {
        if (items.size() < 3) return fail("missing operand");
        int height = 0;
        for (int i = 0; i < 3; ++i) {
          if (!is_number(items.back().type)) return fail("mistyped operand");
          height = std::max(height, items.back().height);
          items.pop_back();
        }
        vm -= 3;
        ok = push(Type::kBoolean, height + 1);
        break;
      }
      case Op::kIn:
      case Op::kNotIn: {
        absl::string_view name;
        uint8_t numeric;
        uint32_t count;
        if (!r.Bytes(&name) || !ValidName(name)) return fail("bad attribute name");
        if (!r.U8(&numeric) || numeric > 1) return fail("bad IN list type");
        if (!r.Varint(&count) || count == 0) return fail("bad IN list length");
        uint32_t bytes;
        if (!r.Fixed(&bytes, 4)) return fail("truncated IN list");
        const uint8_t* first = r.pos();
        std::vector<uint32_t> starts;
        const bool sorted = count > kSortedInThreshold;
        if (sorted) starts.reserve(count);
        for (uint32_t i = 0; i < count; ++i) {
          if (sorted) starts.push_back(static_cast<uint32_t>(r.pos() - first));
          if (numeric == 1) {
            uint8_t tag;
            uint64_t bits;
            if (!r.U8(&tag) || tag > 1 || !r.Fixed(&bits, 8)) return fail("bad IN value");
            double d;
            std::memcpy(&d, &bits, 8);
            if (tag == 1 && !std::isfinite(d)) return fail("non-finite IN value");
          } else {
            absl::string_view s;
            if (!r.Bytes(&s)) return fail("bad IN value");
          }
        }
        if (r.pos() - first != bytes) return fail("bad IN list size");
        if (sorted) {
          InList in;
          in.numeric = numeric == 1;
          in.values = first;
          uint32_t prev = 0;
          for (uint32_t i = 0; i < count; ++i) {
            uint32_t o;
            if (!r.Fixed(&o, 4)) return fail("truncated IN index");
            // Each offset a value's start, in strictly ascending (value, offset) order: hence
            // distinct, hence a permutation of the values.
            if (!std::binary_search(starts.begin(), starts.end(), o)) {
              return fail("bad IN index");
            }
            if (i > 0) {
              const int c = CompareInValues(in, InValueAt(in, prev), InValueAt(in, o));
              if (c > 0 || (c == 0 && prev >= o)) return fail("unsorted IN index");
            }
            prev = o;
          }
        }
        ok = push(Type::kBoolean, 1);
        break;
      }
      case Op::kLike:
      case Op::kNotLike: {
        absl::string_view name;
        uint16_t index;
        absl::string_view pattern;
        absl::string_view escape;
        if (!r.Bytes(&name) || !ValidName(name)) return fail("bad attribute name");
        if (!r.Fixed(&index, 2) || index != likes->size()) return fail("bad LIKE index");
        if (!r.Bytes(&pattern) || !r.Bytes(&escape)) return fail("truncated LIKE");
        if (!escape.empty() && sa::Utf8CharLength(escape, 0) != escape.size()) {
          return fail("bad LIKE escape");
        }
        absl::StatusOr<LikePattern> p = LikePattern::Compile(pattern, escape);
        if (!p.ok()) return fail("bad LIKE pattern");
        likes->push_back(*std::move(p));
        ok = push(Type::kBoolean, 1);
        break;
      }
      case Op::kIsNull:
      case Op::kIsNotNull: {
        absl::string_view name;
        if (!r.Bytes(&name) || !ValidName(name)) return fail("bad attribute name");
        ok = push(Type::kBoolean, 1);
        break;
      }
      case Op::kAndFirst:
      case Op::kOrFirst: {
        uint32_t skip;
        if (!r.Varint(&skip)) return fail("truncated jump");
        if (items.empty() || !is_condition(items.back().type)) return fail("mistyped operand");
        if (skip > r.left()) return fail("jump out of the program");
        Group& g = groups.push();
        g.is_or = op == Op::kOrFirst;
        g.count = 1;
        g.base = items.size() - 1;
        g.target = r.pos() + skip;
        break;
      }
      case Op::kAndMore:
      case Op::kOrMore:
      case Op::kAndLast:
      case Op::kOrLast: {
        uint32_t operand;
        if (!r.Varint(&operand)) return fail("truncated jump");
        const bool is_or = op == Op::kOrMore || op == Op::kOrLast;
        const bool last = op == Op::kAndLast || op == Op::kOrLast;
        if (groups.empty() || groups.back().is_or != is_or) return fail("unmatched AND/OR");
        Group& g = groups.back();
        if (items.size() != g.base + g.count + 1 || !is_condition(items.back().type)) {
          return fail("bad AND/OR operands");
        }
        --vm;
        if (!last) {
          if (operand > r.left() || r.pos() + operand != g.target) return fail("bad jump");
          ++g.count;
          break;
        }
        if (operand != g.count + 1 || r.pos() != g.target) return fail("bad AND/OR end");
        int height = 0;
        for (uint32_t i = 0; i < operand; ++i) {
          height = std::max(height, items.back().height);
          items.pop_back();
        }
        groups.pop_back();
        Item& item = items.push();
        item.type = Type::kBoolean;
        item.height = height + 1;
        ok = height + 1 <= Selector::kMaxDepth;
        break;
      }
      default: return fail(absl::StrCat("unknown operation ", byte));
    }
    if (!ok) return fail("expression too deep");
  }
  if (!groups.empty()) return fail("unterminated AND/OR");
  if (items.size() != 1) return fail("not one expression");
  if (!is_condition(items.back().type)) return fail("not a condition");
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// The view.

View::View(const Program& program) { Reset(program); }

void View::Reset(const Program& program) {
  program_ = &program;
  nodes_.clear();
  child_index_.clear();
  std::vector<uint32_t>& stack = stack_;  // node indices
  stack.clear();
  const uint8_t* const code = program.data();
  const uint8_t* p = code;
  const uint8_t* const end = code + program.size();
  using K = ViewNode::Kind;
  auto at = [&](const uint8_t* q) { return static_cast<uint32_t>(q - code); };
  while (p < end) {
    const uint8_t* const op_start = p;
    const Op op = static_cast<Op>(*p++);
    ViewNode n;
    n.op = at(op_start);
    n.begin = n.op;
    uint32_t operands = 0;
    switch (op) {
      case Op::kAttr:
        n.kind = K::kIdentifier;
        n.name = LoadBytes(&p);
        break;
      case Op::kInt32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        p += 4;
        n.literal.type = Literal::Type::kInt64;
        n.literal.i = v;
        break;
      }
      case Op::kSmallInt:
        n.literal.type = Literal::Type::kInt64;
        n.literal.i = UnZigZag(LoadVarint(&p));
        break;
      case Op::kInt64:
        n.literal.type = Literal::Type::kInt64;
        n.literal.i = static_cast<int64_t>(LoadU64(p));
        p += 8;
        break;
      case Op::kDouble:
        n.literal.type = Literal::Type::kDouble;
        n.literal.d = LoadDouble(p);
        p += 8;
        break;
      case Op::kString:
        n.literal = LoadString(p);
        LoadBytes(&p);
        break;
      case Op::kTrue:
      case Op::kFalse:
        n.literal.type = Literal::Type::kBool;
        n.literal.b = op == Op::kTrue;
        break;
      case Op::kNegate:
        n.kind = K::kNegate;
        operands = 1;
        break;
      case Op::kUnaryPlus:
        n.kind = K::kUnaryPlus;
        operands = 1;
        break;
      case Op::kNot:
        n.kind = K::kNot;
        operands = 1;
        break;
      case Op::kAdd:
        n.kind = K::kAdd;
        operands = 2;
        break;
      case Op::kSubtract:
        n.kind = K::kSubtract;
        operands = 2;
        break;
      case Op::kMultiply:
        n.kind = K::kMultiply;
        operands = 2;
        break;
      case Op::kDivide:
        n.kind = K::kDivide;
        operands = 2;
        break;
      case Op::kEqual:
        n.kind = K::kEqual;
        operands = 2;
        break;
      case Op::kNotEqual:
        n.kind = K::kNotEqual;
        operands = 2;
        break;
      case Op::kLess:
        n.kind = K::kLess;
        operands = 2;
        break;
      case Op::kLessEqual:
        n.kind = K::kLessEqual;
        operands = 2;
        break;
      case Op::kGreater:
        n.kind = K::kGreater;
        operands = 2;
        break;
      case Op::kGreaterEqual:
        n.kind = K::kGreaterEqual;
        operands = 2;
        break;
      case Op::kBetween:
      case Op::kNotBetween:
        n.kind = K::kBetween;
        n.negated = op == Op::kNotBetween;
        operands = 3;
        break;
      case Op::kIn:
      case Op::kNotIn: {
        const InList in = LoadIn(p);
        n.kind = K::kIn;
        n.negated = op == Op::kNotIn;
        n.name = in.name;
        p = in.end;
        break;
      }
      case Op::kLike:
      case Op::kNotLike: {
        n.kind = K::kLike;
        n.negated = op == Op::kNotLike;
        n.name = LoadBytes(&p);
        uint16_t index;
        std::memcpy(&index, p, 2);
        p += 2;
        LoadBytes(&p);
        LoadBytes(&p);
        n.like = &program.like(index);
        break;
      }
      case Op::kIsNull:
      case Op::kIsNotNull:
        n.kind = K::kIsNull;
        n.negated = op == Op::kIsNotNull;
        n.name = LoadBytes(&p);
        break;
      case Op::kAndFirst:
      case Op::kOrFirst:
      case Op::kAndMore:
      case Op::kOrMore: LoadVarint(&p); continue;  // structure only: operands stay stacked
      case Op::kAndLast:
      case Op::kOrLast:
        n.kind = op == Op::kAndLast ? K::kAnd : K::kOr;
        operands = LoadVarint(&p);
        break;
    }
    n.end = at(p);
    if (operands > 0) {
      n.children = static_cast<uint32_t>(child_index_.size());
      n.child_count = operands;
      const size_t first = stack.size() - operands;
      for (size_t i = first; i < stack.size(); ++i) child_index_.push_back(stack[i]);
      n.begin = nodes_[stack[first]].begin;
      stack.resize(first);
    }
    stack.push_back(static_cast<uint32_t>(nodes_.size()));
    nodes_.push_back(n);
  }
}

ViewNodes View::Conjuncts(const ViewNode* root) const {
  ViewNodes out;
  if (root == nullptr) return out;
  ViewNodes stack = {root};
  while (!stack.empty()) {
    const ViewNode* n = stack.back();
    stack.pop_back();
    if (n->kind == ViewNode::Kind::kAnd) {
      for (size_t k = n->child_count; k-- > 0;) stack.push_back(&child(*n, k));
    } else {
      out.push_back(n);
    }
  }
  return out;
}

ViewNodes View::OrBranches(const ViewNode& node) const {
  ViewNodes out;
  ViewNodes stack = {&node};
  while (!stack.empty()) {
    const ViewNode* n = stack.back();
    stack.pop_back();
    if (n->kind == ViewNode::Kind::kOr) {
      for (size_t k = n->child_count; k-- > 0;) stack.push_back(&child(*n, k));
    } else {
      out.push_back(n);
    }
  }
  return out;
}

std::vector<Literal> InValues(const uint8_t* op) {
  const InList in = LoadIn(op + 1);
  std::vector<Literal> out;
  out.reserve(in.count);
  const uint8_t* p = in.values;
  for (uint32_t i = 0; i < in.count; ++i) {
    if (in.numeric) {
      out.push_back(LoadNumber(p));
      p += 9;
    } else {
      out.push_back(LoadString(p));
      LoadBytes(&p);
    }
  }
  return out;
}

namespace {

bool IsNumericLiteral(const ViewNode& n) {
  return n.kind == ViewNode::Kind::kLiteral && n.literal.is_numeric();
}

// The comparison seen from the attribute's side: `5 < a` is `a > 5`.
ViewNode::Kind Mirror(ViewNode::Kind k) {
  using K = ViewNode::Kind;
  switch (k) {
    case K::kLess: return K::kGreater;
    case K::kLessEqual: return K::kGreaterEqual;
    case K::kGreater: return K::kLess;
    case K::kGreaterEqual: return K::kLessEqual;
    default: return k;
  }
}

bool IsComparison(ViewNode::Kind k) {
  return k >= ViewNode::Kind::kEqual && k <= ViewNode::Kind::kGreaterEqual;
}

}  // namespace

std::optional<IndexableConjunct> AsIndexable(const View& view, const ViewNode& conjunct) {
  using K = ViewNode::Kind;
  IndexableConjunct out;
  if (conjunct.kind == K::kIn) {
    if (conjunct.negated) return std::nullopt;
    out.kind = IndexableConjunct::Kind::kIn;
    out.attribute = conjunct.name;
    out.values = InValues(view.program().data() + conjunct.op);
    return out;
  }
  if (conjunct.kind == K::kBetween) {
    const ViewNode& v = view.child(conjunct, 0);
    const ViewNode& lo = view.child(conjunct, 1);
    const ViewNode& hi = view.child(conjunct, 2);
    if (conjunct.negated || v.kind != K::kIdentifier || !IsNumericLiteral(lo) ||
        !IsNumericLiteral(hi)) {
      return std::nullopt;
    }
    out.kind = IndexableConjunct::Kind::kRange;
    out.attribute = v.name;
    out.lower = &lo.literal;
    out.lower_inclusive = true;
    out.upper = &hi.literal;
    out.upper_inclusive = true;
    return out;
  }
  if (!IsComparison(conjunct.kind) || conjunct.kind == K::kNotEqual) return std::nullopt;
  K kind = conjunct.kind;
  const ViewNode* id = &view.child(conjunct, 0);
  const ViewNode* lit = &view.child(conjunct, 1);
  if (id->kind != K::kIdentifier || lit->kind != K::kLiteral) {
    std::swap(id, lit);
    kind = Mirror(kind);
  }
  if (id->kind != K::kIdentifier || lit->kind != K::kLiteral) return std::nullopt;
  out.attribute = id->name;
  if (kind == K::kEqual) {
    out.kind = IndexableConjunct::Kind::kEqual;
    out.values.push_back(lit->literal);
    return out;
  }
  if (!lit->literal.is_numeric()) return std::nullopt;  // the parser rejects these
  out.kind = IndexableConjunct::Kind::kRange;
  if (kind == K::kGreater || kind == K::kGreaterEqual) {
    out.lower = &lit->literal;
    out.lower_inclusive = kind == K::kGreaterEqual;
  } else {
    out.upper = &lit->literal;
    out.upper_inclusive = kind == K::kLessEqual;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Rendering.

namespace {

std::string QuoteString(absl::string_view s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

std::string LiteralToString(const Literal& v) {
  switch (v.type) {
    case Literal::Type::kInt64: return absl::StrCat(v.i);
    case Literal::Type::kDouble: {
      // Shortest text that reads back as the same double, marked approximate by '.' or 'e'.
      std::string s = fmt::format("{}", v.d);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      return s;
    }
    case Literal::Type::kString: return QuoteString(v.s);
    default: return v.b ? "TRUE" : "FALSE";
  }
}

absl::string_view KindName(ViewNode::Kind kind) {
  using K = ViewNode::Kind;
  switch (kind) {
    case K::kNegate: return "-";
    case K::kUnaryPlus: return "+";
    case K::kAdd: return "+";
    case K::kSubtract: return "-";
    case K::kMultiply: return "*";
    case K::kDivide: return "/";
    case K::kEqual: return "=";
    case K::kNotEqual: return "<>";
    case K::kLess: return "<";
    case K::kLessEqual: return "<=";
    case K::kGreater: return ">";
    case K::kGreaterEqual: return ">=";
    case K::kAnd: return "AND";
    case K::kOr: return "OR";
    default: return "?";
  }
}

}  // namespace

std::string View::ToString(const ViewNode& n) const {
  using K = ViewNode::Kind;
  switch (n.kind) {
    case K::kLiteral: return LiteralToString(n.literal);
    case K::kIdentifier: return std::string(n.name);
    case K::kNegate:
    case K::kUnaryPlus: return absl::StrCat("(", KindName(n.kind), ToString(child(n, 0)), ")");
    case K::kNot: return absl::StrCat("(NOT ", ToString(child(n, 0)), ")");
    case K::kAnd:
    case K::kOr: {
      std::vector<std::string> parts;
      for (size_t k = 0; k < n.child_count; ++k) parts.push_back(ToString(child(n, k)));
      return absl::StrCat("(", absl::StrJoin(parts, absl::StrCat(" ", KindName(n.kind), " ")), ")");
    }
    case K::kBetween:
      return absl::StrCat("(", ToString(child(n, 0)), n.negated ? " NOT" : "", " BETWEEN ",
                          ToString(child(n, 1)), " AND ", ToString(child(n, 2)), ")");
    case K::kIn: {
      std::vector<std::string> parts;
      for (const Literal& v : InValues(program().data() + n.op))
        parts.push_back(LiteralToString(v));
      return absl::StrCat("(", n.name, n.negated ? " NOT" : "", " IN (", absl::StrJoin(parts, ", "),
                          "))");
    }
    case K::kLike: {
      const uint8_t* p = program().data() + n.op + 1;
      LoadBytes(&p);
      p += 2;
      const absl::string_view pattern = LoadBytes(&p);
      const absl::string_view escape = LoadBytes(&p);
      return absl::StrCat("(", n.name, n.negated ? " NOT" : "", " LIKE ", QuoteString(pattern),
                          escape.empty() ? "" : absl::StrCat(" ESCAPE ", QuoteString(escape)), ")");
    }
    case K::kIsNull: return absl::StrCat("(", n.name, n.negated ? " IS NOT NULL" : " IS NULL", ")");
    default:
      return absl::StrCat("(", ToString(child(n, 0)), " ", KindName(n.kind), " ",
                          ToString(child(n, 1)), ")");
  }
}

}  // namespace gryph::selector_program
