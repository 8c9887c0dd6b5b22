#include "lib/selector/parser.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "gryph/selector.h"
#include "lib/selector/lexer.h"
#include "lib/selector/program.h"
#include "lib/selector/utf8.h"
#include "lib/util/status_macros.h"

namespace gryph::selector_ast {

namespace {

namespace sp = selector_program;

constexpr uint64_t kTwoTo63 = uint64_t{1} << 63;

// What the parser knows of an expression's value before seeing an event.
enum class StaticType : uint8_t {
  kAny,      // an identifier: any type, or NULL
  kNumeric,  // a numeric literal or arithmetic (int64 or double, or NULL at run time)
  kString,   // a string literal
  kBoolean,  // a boolean literal or a condition (TRUE, FALSE or UNKNOWN at run time)
};

// A parsed expression: its code is the builder's from `code` on (postorder: an operator's code
// follows its operands'), and what the type checks and error messages need to know of it.
struct Operand {
  StaticType type = StaticType::kAny;
  bool literal = false;
  size_t offset = 0;  // byte offset in the text of its first token
  int height = 1;     // of its tree: 1 for a leaf
  size_t code = 0;
  absl::string_view name;  // an identifier's
  // A numeric literal's value (for folding a sign into it): an int64 or a double.
  bool is_int = false;
  int64_t i = 0;
  double d = 0;
  AttributeValue value() const { return is_int ? AttributeValue(i) : AttributeValue(d); }
  bool is_identifier() const { return type == StaticType::kAny; }
};

// Binding strength of operators, loosest first. The parser is a precedence climber: it recurses
// only for parentheses, prefix operators and operands of tighter operators, which keeps the
// stack it needs per nesting level small (two frames per parenthesis).
enum Precedence : int {
  kOr = 1,
  kAnd = 2,
  kNot = 3,         // prefix NOT: its operand is a comparison or something tighter
  kComparison = 4,  // = <> < <= > >=, [NOT] BETWEEN, [NOT] IN, [NOT] LIKE, IS [NOT] NULL
  kSum = 5,         // + -
  kProduct = 6,     // * /
  kTightest = 7,
};

bool CanStartValue(TokenKind k) {
  switch (k) {
    case TokenKind::kIdentifier:
    case TokenKind::kInteger:
    case TokenKind::kDouble:
    case TokenKind::kString:
    case TokenKind::kTrue:
    case TokenKind::kFalse:
    case TokenKind::kNull:  // so that Prefix() explains where NULL may appear
    case TokenKind::kLeftParen:
    case TokenKind::kPlus:
    case TokenKind::kMinus: return true;
    default: return false;
  }
}

bool CanStartCondition(TokenKind k) { return k == TokenKind::kNot || CanStartValue(k); }

std::optional<sp::Op> ComparisonKind(TokenKind k) {
  switch (k) {
    case TokenKind::kEqual: return sp::Op::kEqual;
    case TokenKind::kNotEqual: return sp::Op::kNotEqual;
    case TokenKind::kLess: return sp::Op::kLess;
    case TokenKind::kLessEqual: return sp::Op::kLessEqual;
    case TokenKind::kGreater: return sp::Op::kGreater;
    case TokenKind::kGreaterEqual: return sp::Op::kGreaterEqual;
    default: return std::nullopt;
  }
}

// The precedence of `k` as an infix operator; 0 when it is none.
int InfixPrecedence(TokenKind k) {
  switch (k) {
    case TokenKind::kOr: return kOr;
    case TokenKind::kAnd: return kAnd;
    case TokenKind::kNot:  // NOT BETWEEN, NOT IN, NOT LIKE
    case TokenKind::kBetween:
    case TokenKind::kIn:
    case TokenKind::kLike:
    case TokenKind::kIs: return kComparison;
    case TokenKind::kPlus:
    case TokenKind::kMinus: return kSum;
    case TokenKind::kStar:
    case TokenKind::kSlash: return kProduct;
    default: return ComparisonKind(k) ? kComparison : 0;
  }
}

sp::Op ArithmeticKind(TokenKind k) {
  switch (k) {
    case TokenKind::kPlus: return sp::Op::kAdd;
    case TokenKind::kMinus: return sp::Op::kSubtract;
    case TokenKind::kStar: return sp::Op::kMultiply;
    default: return sp::Op::kDivide;
  }
}

// "a string", "an arithmetic expression", ...: what an operand is, for type errors.
std::string WhatIs(const Operand& n) {
  switch (n.type) {
    case StaticType::kAny: return absl::StrCat("the identifier '", n.name, "'");
    case StaticType::kString: return "a string";
    case StaticType::kNumeric: return n.literal ? "a number" : "an arithmetic expression";
    case StaticType::kBoolean: return n.literal ? "a boolean" : "a condition";
  }
  return "a value";
}

// -x for a numeric literal, with the evaluator's overflow rule (int64 overflow gives double).
AttributeValue Negate(const AttributeValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) {
    if (*i == INT64_MIN) return -static_cast<double>(*i);
    return -*i;
  }
  return -std::get<double>(v);
}

// Reads tokens as it goes (one or two ahead of what it has accepted), so that what a parse
// allocates stays proportional to the text it accepted: a long input that fails early costs
// little. Emits the program as it parses: each parse function appends the code of what it
// accepted to builder_ and returns what the checks need to know of it (an Operand).
class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text), lexer_(text) {}

  absl::StatusOr<sp::ProgramRef> Run() {
    if (Peek().kind == TokenKind::kEnd) return sp::ProgramRef();  // empty: matches everything
    if (!CanStartCondition(Peek().kind)) return Unexpected("a condition", Peek());
    // Typical code is about half the text: one allocation for it (bounded, as a long text may
    // fail early).
    builder_.Reserve(std::min<size_t>(text_.size(), 1024));
    GRYPH_ASSIGN_OR_RETURN(Operand root, Expression(kOr));
    if (Peek().kind != TokenKind::kEnd) {
      return Unexpected(
          root.type == StaticType::kBoolean ? "AND, OR or end of selector" : "an operator", Peek());
    }
    GRYPH_RETURN_IF_ERROR(CheckCondition(root, nullptr));
    if (!lex_error_.ok()) return lex_error_;
    return builder_.Finish();
  }

 private:
  // Counts one level of recursion (a parenthesis, NOT or unary sign) for its scope.
  class DepthGuard {
   public:
    explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~DepthGuard() { --*depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    int* depth_;
  };

  // The next token (ahead = 0) or the one after it (ahead = 1), read when first asked for: the
  // lookahead is logically part of the text, hence filled by a const function. Valid until the
  // next Take(). After the end, kEnd; after a lexing error, kError (and lex_error_ is set).
  const Token& Peek(size_t ahead = 0) const {
    while (buffered_ <= ahead) {
      Token& slot = ahead_[buffered_];
      const Token* before = buffered_ > 0 ? &ahead_[buffered_ - 1] : nullptr;
      if (before != nullptr &&
          (before->kind == TokenKind::kEnd || before->kind == TokenKind::kError)) {
        slot = *before;
      } else if (!lex_error_.ok()) {
        slot = Token();
        slot.kind = TokenKind::kError;
        slot.offset = text_.size();
      } else if (absl::Status s = lexer_.Next(&slot); !s.ok()) {
        lex_error_ = std::move(s);
        slot.kind = TokenKind::kError;
      }
      ++buffered_;
    }
    return ahead_[ahead];
  }
  // Consumes the next token and returns it; kEnd and kError stay (and are returned again).
  Token Take() {
    Peek();
    if (ahead_[0].kind == TokenKind::kEnd || ahead_[0].kind == TokenKind::kError) return ahead_[0];
    Token t = std::move(ahead_[0]);
    if (buffered_ == 2) ahead_[0] = std::move(ahead_[1]);
    --buffered_;
    return t;
  }

  // Error builders stay out of line, so that the recursive functions keep small frames. A
  // lexing error met in the lookahead is the error, whatever the parser was about to say: the
  // text is not a sequence of tokens there.
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status Error(size_t offset,
                                                                 absl::string_view message) const {
    if (!lex_error_.ok()) return lex_error_;
    return SyntaxError(text_, offset, message);
  }
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status Unexpected(absl::string_view expected,
                                                                      const Token& found) const {
    return Error(found.offset,
                 absl::StrCat("expected ", expected, ", found ", Describe(text_, found)));
  }
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status TooDeep(size_t offset) const {
    return Error(offset, absl::StrCat("expression is nested too deeply (more than ",
                                      Selector::kMaxDepth, " levels)"));
  }

  // How an operator token is named in messages: keywords in upper case, symbols quoted.
  std::string OperatorName(const Token& t) const {
    switch (t.kind) {
      case TokenKind::kNot: return "NOT";
      case TokenKind::kAnd: return "AND";
      case TokenKind::kOr: return "OR";
      case TokenKind::kBetween: return "BETWEEN";
      default: return absl::StrCat("'", text_.substr(t.offset, t.length), "'");
    }
  }

  // Before parsing the operand of `op`: the next token must be able to start one.
  absl::Status RequireValueAfter(const Token& op) const {
    if (CanStartValue(Peek().kind)) return absl::OkStatus();
    return MissingOperand("a value", op);
  }
  absl::Status RequireConditionAfter(const Token& op) const {
    if (CanStartCondition(Peek().kind)) return absl::OkStatus();
    return MissingOperand("a condition", op);
  }
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status MissingOperand(absl::string_view what,
                                                                          const Token& op) const {
    return Unexpected(absl::StrCat(what, " after ", OperatorName(op)), Peek());
  }

  // An operator over operands of heights up to `height`: fails when it exceeds kMaxDepth.
  absl::StatusOr<Operand> Composite(StaticType type, size_t offset, int height, size_t code,
                                    size_t error_offset) const {
    if (height + 1 > Selector::kMaxDepth) return TooDeep(error_offset);
    Operand out;
    out.type = type;
    out.offset = offset;
    out.height = height + 1;
    out.code = code;
    return out;
  }

  // `n` is a condition operand of `op` (nullptr for the whole selector).
  absl::Status CheckCondition(const Operand& n, const char* op) const {
    if (n.type == StaticType::kBoolean || n.type == StaticType::kAny) return absl::OkStatus();
    return NotACondition(n, op);
  }
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status NotACondition(const Operand& n,
                                                                         const char* op) const {
    return Error(n.offset, op == nullptr
                               ? absl::StrCat("expected a condition, found ", WhatIs(n))
                               : absl::StrCat(op, " needs conditions, found ", WhatIs(n)));
  }

  // `n` is an operand of BETWEEN or of the arithmetic operator `op` (unary when `unary`).
  absl::Status CheckNumeric(const Operand& n, const Token& op, bool unary = false) const {
    if (n.type == StaticType::kNumeric || n.type == StaticType::kAny) return absl::OkStatus();
    return NotANumber(n, op, unary);
  }
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status NotANumber(const Operand& n,
                                                                      const Token& op,
                                                                      bool unary) const {
    return Error(n.offset, absl::StrCat(unary ? "unary " : "", OperatorName(op),
                                        " needs numbers, found ", WhatIs(n)));
  }

  // Parses operators of precedence `min` or tighter, starting with a prefix expression.
  absl::StatusOr<Operand> Expression(int min) {
    // `limit` is the tightest infix operator that may still take `lhs` as its left operand.
    // After `NOT x` only AND and OR may follow (NOT a = b is NOT (a = b)); after a comparison
    // too, since comparisons do not chain (a = b = c is an error); and after `x op y` nothing
    // tighter than op, which y would have taken had its own limit allowed (a AND NOT b = c = d
    // is an error, not (a AND NOT b = c) = d).
    int limit = kTightest;
    GRYPH_ASSIGN_OR_RETURN(Operand lhs, Prefix(&limit));
    while (true) {
      const int prec = InfixPrecedence(Peek().kind);
      if (prec == 0 || prec < min || prec > limit) return lhs;
      if (prec == kOr || prec == kAnd) {
        GRYPH_ASSIGN_OR_RETURN(lhs, Logical(std::move(lhs), prec));
        limit = std::min(limit, prec);
      } else if (prec == kComparison) {
        GRYPH_ASSIGN_OR_RETURN(lhs, Comparison(std::move(lhs)));
        limit = kNot;
      } else {
        GRYPH_ASSIGN_OR_RETURN(lhs, Arithmetic(std::move(lhs), prec));
        limit = std::min(limit, prec);
      }
    }
  }

  // `lhs` + - * or / the operand that follows.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Operand> Arithmetic(Operand lhs, int prec) {
    const Token op = Take();
    GRYPH_RETURN_IF_ERROR(CheckNumeric(lhs, op));
    GRYPH_RETURN_IF_ERROR(RequireValueAfter(op));
    GRYPH_ASSIGN_OR_RETURN(Operand rhs, Expression(prec + 1));  // left-associative
    GRYPH_RETURN_IF_ERROR(CheckNumeric(rhs, op));
    builder_.Simple(ArithmeticKind(op.kind));
    return Composite(StaticType::kNumeric, lhs.offset, std::max(lhs.height, rhs.height), lhs.code,
                     op.offset);
  }

  // `first` AND ... AND ..., or the same with OR, as one node.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Operand> Logical(Operand first, int prec) {
    const TokenKind token = prec == kOr ? TokenKind::kOr : TokenKind::kAnd;
    const char* const name = prec == kOr ? "OR" : "AND";
    GRYPH_RETURN_IF_ERROR(CheckCondition(first, name));
    const size_t group = builder_.LogicalBegin(prec == kOr);
    int height = first.height;
    bool more = false;
    while (Peek().kind == token) {
      if (more) builder_.LogicalNext(group);  // the previous operand was not the last
      const Token op = Take();
      GRYPH_RETURN_IF_ERROR(RequireConditionAfter(op));
      GRYPH_ASSIGN_OR_RETURN(Operand next, Expression(prec + 1));
      GRYPH_RETURN_IF_ERROR(CheckCondition(next, name));
      height = std::max(height, next.height);
      more = true;
    }
    builder_.LogicalEnd(group);
    return Composite(StaticType::kBoolean, first.offset, height, first.code, first.offset);
  }

  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status NotOrderable(
      const Token& op, const Operand& operand) const {
    return Error(op.offset,
                 absl::StrCat(OperatorName(op), " compares only numbers, found ", WhatIs(operand),
                              " (strings and booleans allow only = and <>)"));
  }

  // The comparison-level operator after `lhs`.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Operand> Comparison(Operand lhs) {
    if (std::optional<sp::Op> kind = ComparisonKind(Peek().kind)) {
      const Token op = Take();
      GRYPH_RETURN_IF_ERROR(RequireValueAfter(op));
      GRYPH_ASSIGN_OR_RETURN(Operand rhs, Expression(kSum));
      if (*kind != sp::Op::kEqual && *kind != sp::Op::kNotEqual) {
        for (const Operand* operand : {&lhs, &rhs}) {
          if (operand->type == StaticType::kString || operand->type == StaticType::kBoolean) {
            return NotOrderable(op, *operand);
          }
        }
      }
      builder_.Simple(*kind);
      return Composite(StaticType::kBoolean, lhs.offset, std::max(lhs.height, rhs.height), lhs.code,
                       op.offset);
    }
    bool negated = false;
    if (Peek().kind == TokenKind::kNot) {
      const TokenKind next = Peek(1).kind;
      if (next != TokenKind::kBetween && next != TokenKind::kIn && next != TokenKind::kLike) {
        return Unexpected("BETWEEN, IN or LIKE after NOT", Peek(1));
      }
      Take();
      negated = true;
    }
    switch (Peek().kind) {
      case TokenKind::kBetween: return Between(std::move(lhs), negated);
      case TokenKind::kIn: return In(std::move(lhs), negated);
      case TokenKind::kLike: return Like(std::move(lhs), negated);
      default: return IsNull(std::move(lhs));
    }
  }

  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Operand> Between(Operand value, bool negated) {
    const Token between = Take();
    GRYPH_RETURN_IF_ERROR(CheckNumeric(value, between));
    GRYPH_RETURN_IF_ERROR(RequireValueAfter(between));
    GRYPH_ASSIGN_OR_RETURN(Operand low, Expression(kSum));
    GRYPH_RETURN_IF_ERROR(CheckNumeric(low, between));
    if (Peek().kind != TokenKind::kAnd) {
      return Unexpected("AND after the lower bound of BETWEEN", Peek());
    }
    const Token op = Take();
    GRYPH_RETURN_IF_ERROR(RequireValueAfter(op));
    GRYPH_ASSIGN_OR_RETURN(Operand high, Expression(kSum));
    GRYPH_RETURN_IF_ERROR(CheckNumeric(high, between));
    builder_.Simple(negated ? sp::Op::kNotBetween : sp::Op::kBetween);
    return Composite(StaticType::kBoolean, value.offset,
                     std::max({value.height, low.height, high.height}), value.code, between.offset);
  }

  // The attribute on the left of IN, LIKE or IS NULL.
  absl::StatusOr<absl::string_view> AttributeOperand(const Operand& lhs,
                                                     absl::string_view op) const {
    if (lhs.is_identifier()) return lhs.name;
    return Error(lhs.offset,
                 absl::StrCat(op, " needs an identifier on its left, found ", WhatIs(lhs)));
  }

  // An attribute-only predicate (IN, LIKE, IS NULL) replaces its attribute's code: the
  // operation names the attribute itself.
  Operand Predicate(const Operand& lhs) {
    Operand out;
    out.type = StaticType::kBoolean;
    out.offset = lhs.offset;
    out.code = lhs.code;
    return out;
  }

  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Operand> In(Operand lhs, bool negated) {
    Take();  // IN
    GRYPH_ASSIGN_OR_RETURN(absl::string_view attribute, AttributeOperand(lhs, "IN"));
    if (Peek().kind != TokenKind::kLeftParen) return Unexpected("'(' after IN", Peek());
    Take();
    std::vector<AttributeValue> values;
    while (true) {
      const size_t first_offset = Peek().offset;
      GRYPH_ASSIGN_OR_RETURN(AttributeValue v, InListLiteral());
      if (!values.empty() && std::holds_alternative<std::string>(v) !=
                                 std::holds_alternative<std::string>(values.front())) {
        return Error(first_offset, "an IN list holds either strings or numbers, not both");
      }
      values.push_back(std::move(v));
      if (Peek().kind == TokenKind::kRightParen) break;
      if (Peek().kind != TokenKind::kComma) return Unexpected("',' or ')' in the IN list", Peek());
      Take();
    }
    Take();  // ')'
    builder_.Truncate(lhs.code);
    builder_.In(negated, attribute, values);
    return Predicate(lhs);
  }

  // A string literal, or a numeric literal with an optional sign.
  absl::StatusOr<AttributeValue> InListLiteral() {
    const TokenKind kind = Peek().kind;
    if (kind == TokenKind::kString) return AttributeValue(std::string(Take().value()));
    bool minus = false;
    if ((kind == TokenKind::kMinus || kind == TokenKind::kPlus) &&
        (Peek(1).kind == TokenKind::kInteger || Peek(1).kind == TokenKind::kDouble)) {
      minus = Take().kind == TokenKind::kMinus;
    }
    if (Peek().kind == TokenKind::kInteger || Peek().kind == TokenKind::kDouble) {
      return NumericLiteral(Take(), minus);
    }
    if (Peek().kind == TokenKind::kNull) return NullMisplaced(Peek());
    return Unexpected("a string or numeric literal in the IN list", Peek());
  }

  absl::Status NullMisplaced(const Token& t) const {
    return Error(t.offset, "NULL may appear only in IS NULL and IS NOT NULL");
  }

  // The value of a numeric literal token, negated when `minus`.
  absl::StatusOr<AttributeValue> NumericLiteral(const Token& t, bool minus) const {
    if (t.kind == TokenKind::kDouble) return AttributeValue(minus ? -t.number : t.number);
    if (t.decimal && t.integer == kTwoTo63) {
      if (minus) return AttributeValue(int64_t{INT64_MIN});
      return Error(t.offset,
                   "integer literal 9223372036854775808 is out of the range of a 64-bit integer "
                   "(only -9223372036854775808 is in range)");
    }
    const AttributeValue v(static_cast<int64_t>(t.integer));
    return minus ? Negate(v) : v;
  }

  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Operand> Like(Operand lhs, bool negated) {
    Take();  // LIKE
    GRYPH_ASSIGN_OR_RETURN(absl::string_view attribute, AttributeOperand(lhs, "LIKE"));
    if (Peek().kind != TokenKind::kString) {
      return Unexpected("a string literal pattern after LIKE", Peek());
    }
    const Token pattern = Take();
    Token escape;
    if (Peek().kind == TokenKind::kEscape) {
      Take();
      const Token& e = Peek();
      if (e.kind != TokenKind::kString) {
        return Unexpected("a one-character string literal after ESCAPE", e);
      }
      if (e.value().empty() || Utf8CharLength(e.value(), 0) != e.value().size()) {
        return Error(e.offset, absl::StrCat("ESCAPE needs exactly one character, found ",
                                            Describe(text_, e)));
      }
      escape = Take();
    }
    absl::StatusOr<LikePattern> compiled = LikePattern::Compile(pattern.value(), escape.value());
    if (!compiled.ok()) return Error(pattern.offset, compiled.status().message());
    builder_.Truncate(lhs.code);
    builder_.Like(negated, attribute, pattern.value(), escape.value(), *std::move(compiled));
    return Predicate(lhs);
  }

  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Operand> IsNull(Operand lhs) {
    Take();  // IS
    GRYPH_ASSIGN_OR_RETURN(absl::string_view attribute, AttributeOperand(lhs, "IS NULL"));
    bool negated = false;
    if (Peek().kind == TokenKind::kNot) {
      Take();
      negated = true;
    }
    if (Peek().kind != TokenKind::kNull) return Unexpected("NULL or NOT NULL after IS", Peek());
    Take();
    builder_.Truncate(lhs.code);
    builder_.IsNull(negated, attribute);
    return Predicate(lhs);
  }

  // NOT x, a signed value, a parenthesized expression, a literal or an identifier. Sets *limit
  // (see Expression) to kNot after NOT.
  absl::StatusOr<Operand> Prefix(int* limit) {
    const Token& t = Peek();
    switch (t.kind) {
      case TokenKind::kNot: *limit = kNot; return Not();
      case TokenKind::kPlus:
      case TokenKind::kMinus: return Sign();
      case TokenKind::kLeftParen: return Parenthesized();
      default: return Leaf();
    }
  }

  // Emits a literal.
  Operand EmitLiteral(AttributeValue v, size_t offset) {
    Operand out;
    out.literal = true;
    out.offset = offset;
    out.code = builder_.size();
    switch (v.index()) {
      case 0:
        out.type = StaticType::kNumeric;
        builder_.Int64(*std::get_if<int64_t>(&v));
        break;
      case 1:
        out.type = StaticType::kNumeric;
        builder_.Double(*std::get_if<double>(&v));
        break;
      case 2:
        out.type = StaticType::kString;
        builder_.String(*std::get_if<std::string>(&v));
        break;
      default:
        out.type = StaticType::kBoolean;
        builder_.Bool(*std::get_if<bool>(&v));
        break;
    }
    if (const int64_t* i = std::get_if<int64_t>(&v)) {
      out.is_int = true;
      out.i = *i;
    } else if (const double* d = std::get_if<double>(&v)) {
      out.d = *d;
    }
    return out;
  }

  // A literal or an identifier.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Operand> Leaf() {
    const size_t offset = Peek().offset;
    switch (Peek().kind) {
      case TokenKind::kIdentifier: {
        Operand out;
        out.offset = offset;
        out.code = builder_.size();
        out.name = Take().view;  // a view into the text
        builder_.Attr(out.name);
        return out;
      }
      case TokenKind::kInteger:
        if (!Peek().decimal || Peek().integer < kTwoTo63) {  // the commonest literal, directly
          Operand out;
          out.type = StaticType::kNumeric;
          out.literal = true;
          out.offset = offset;
          out.code = builder_.size();
          out.is_int = true;
          out.i = static_cast<int64_t>(Take().integer);
          builder_.Int64(out.i);
          return out;
        }
        [[fallthrough]];
      case TokenKind::kDouble: {
        GRYPH_ASSIGN_OR_RETURN(AttributeValue v, NumericLiteral(Take(), /*minus=*/false));
        return EmitLiteral(std::move(v), offset);
      }
      case TokenKind::kString: {
        Operand out;
        out.type = StaticType::kString;
        out.literal = true;
        out.offset = offset;
        out.code = builder_.size();
        builder_.String(Take().value());
        return out;
      }
      case TokenKind::kTrue:
      case TokenKind::kFalse:
        return EmitLiteral(AttributeValue(Take().kind == TokenKind::kTrue), offset);
      case TokenKind::kNull: return NullMisplaced(Peek());
      default: return Unexpected("a value", Peek());
    }
  }

  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Operand> Not() {
    const Token op = Take();
    DepthGuard guard(&depth_);
    if (depth_ > Selector::kMaxDepth) return TooDeep(op.offset);
    GRYPH_RETURN_IF_ERROR(RequireConditionAfter(op));
    GRYPH_ASSIGN_OR_RETURN(Operand operand, Expression(kComparison));
    GRYPH_RETURN_IF_ERROR(CheckCondition(operand, "NOT"));
    builder_.Simple(sp::Op::kNot);
    return Composite(StaticType::kBoolean, op.offset, operand.height, operand.code, op.offset);
  }

  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Operand> Parenthesized() {
    const Token open = Take();
    DepthGuard guard(&depth_);
    if (depth_ > Selector::kMaxDepth) return TooDeep(open.offset);
    if (!CanStartCondition(Peek().kind)) return Unexpected("an expression after '('", Peek());
    GRYPH_ASSIGN_OR_RETURN(Operand inner, Expression(kOr));
    if (Peek().kind != TokenKind::kRightParen) return Unclosed(open);
    Take();
    return inner;
  }

  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status Unclosed(const Token& open) const {
    return Unexpected(absl::StrCat("')' to close the '(' at ", PositionOf(text_, open.offset)),
                      Peek());
  }

  // Unary + or -, which binds tighter than any infix operator.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Operand> Sign() {
    const Token op = Take();
    const bool minus = op.kind == TokenKind::kMinus;
    DepthGuard guard(&depth_);
    if (depth_ > Selector::kMaxDepth) return TooDeep(op.offset);
    GRYPH_RETURN_IF_ERROR(RequireValueAfter(op));
    // A sign directly before a number is part of the literal: this is how -9223372036854775808
    // is written, and it gives the matcher `a > -5` as a comparison with a literal.
    if (Peek().kind == TokenKind::kInteger || Peek().kind == TokenKind::kDouble) {
      GRYPH_ASSIGN_OR_RETURN(AttributeValue v, NumericLiteral(Take(), minus));
      return EmitLiteral(std::move(v), op.offset);
    }
    int unused_limit = kTightest;  // the operand cannot start with NOT (RequireValueAfter)
    GRYPH_ASSIGN_OR_RETURN(Operand operand, Prefix(&unused_limit));
    GRYPH_RETURN_IF_ERROR(CheckNumeric(operand, op, /*unary=*/true));
    if (operand.literal) {  // as in -(5): the literal is the last code emitted, folded
      builder_.Truncate(operand.code);
      return EmitLiteral(minus ? Negate(operand.value()) : operand.value(), op.offset);
    }
    builder_.Simple(minus ? sp::Op::kNegate : sp::Op::kUnaryPlus);
    return Composite(StaticType::kNumeric, op.offset, operand.height, operand.code, op.offset);
  }

  const absl::string_view text_;
  mutable Lexer lexer_;
  mutable Token ahead_[2];  // the lookahead: ahead_[0, buffered_) are read
  mutable size_t buffered_ = 0;
  mutable absl::Status lex_error_;  // the lexer's error, once it failed
  int depth_ = 0;
  sp::ProgramBuilder builder_;
};

}  // namespace

absl::StatusOr<selector_program::ProgramRef> ParseSelector(absl::string_view text,
                                                           const SelectorOptions& options) {
  if (text.size() > options.max_length) {
    // Positioned at the first byte beyond the limit, as any other parse error.
    return SyntaxError(
        text, options.max_length,
        absl::StrCat("the selector has ", text.size(), " bytes, more than the limit of ",
                     options.max_length, " (SelectorOptions::max_length)"));
  }
  Parser parser(text);
  return parser.Run();
}

}  // namespace gryph::selector_ast
