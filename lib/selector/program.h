// Internal: the compiled form of a selector — one flat program that Selector::Evaluate runs and
// the matcher keeps, and whose bytes are the selector's persisted encoding.
//
// A program is postorder bytecode: each operation follows its operands, and evaluation is one
// forward pass over a stack of values. Operands (attribute names, literals, IN lists, LIKE
// patterns) are inline in the code, so a program is one contiguous byte string with no pointers;
// the only per-program state beside the code is the compiled LIKE patterns (LikePattern), built
// from the pattern text when the program is made (by compiling a parsed tree or by Decode).
//
// Operations (one opcode byte, then its operands; integers little-endian, `name` and `bytes`
// are a varint length then that many bytes):
//
//   kAttr name                       push the event's attribute `name` (NULL when absent)
//   kSmallInt varint | kInt32 i32 | kInt64 i64
//                                    push an int64 literal: kSmallInt (zigzag: 0, -1, 1, -2 as
//                                    0, 1, 2, 3) for a magnitude below 2^27, else kInt32 when it
//                                    fits 32 bits
//   kDouble f64                      push a finite double literal
//   kString bytes                    push a string literal
//   kTrue | kFalse                   push a boolean literal
//   kNegate kUnaryPlus kNot          1 operand
//   kAdd kSubtract kMultiply kDivide, kEqual kNotEqual kLess kLessEqual kGreater kGreaterEqual
//                                    2 operands
//   kBetween | kNotBetween           3 operands: value, low, high
//   kIn | kNotIn name u8:numeric varint:n u32:size values [sorted]
//                                    push `name [NOT] IN (values)`: n >= 1 string literals
//                                    (bytes each) or numeric literals (u8 tag 0 = int64, 1 =
//                                    double, then 8 bytes each), as written, `size` bytes; when n >
//                                    kSortedInThreshold, then u32 offsets of the values (from
//                                    the first value) in ascending order (strings by bytes,
//                                    numbers by exact value, ties by offset), for binary search
//   kLike | kNotLike name u16:index bytes:pattern bytes:escape
//                                    push `name [NOT] LIKE pattern [ESCAPE escape]`; `index` is
//                                    the LIKE's ordinal in the program (its compiled pattern)
//   kIsNull | kIsNotNull name        push `name IS [NOT] NULL`
//   kAndFirst varint:skip  c2 kAndMore varint:skip ... cn kAndLast varint:n
//                                    the conjunction of n >= 2 operands, left to right: after
//                                    the first operand (kAndFirst) and after combining each
//                                    further one (kAndMore), a FALSE so far jumps `skip` bytes
//                                    past the op, to just after kAndLast; kAndLast combines the
//                                    last one. kOrFirst, kOrMore, kOrLast: the same with OR
//                                    jumping on TRUE.
//
// Invariants (established by Compile and checked by Validate, which Decode runs):
//   - The code is a sequence of whole operations; every operand is in bounds; the operations
//     form one expression tree (no stack underflow, one value at the end), whose height is at
//     most Selector::kMaxDepth and whose value stack stays within kMaxStack.
//   - Static typing as the parser enforces it (lib/selector/parser.cc): arithmetic and BETWEEN
//     operands are numeric or attributes; NOT/AND/OR operands and the root are conditions or
//     attributes; < <= > >= have no string or boolean operand.
//   - Every AND/OR jump lands just past the kAndLast/kOrLast of its own group, and the groups
//     nest as the tree does; double literals are finite; IN lists are nonempty and all strings or
//     all numbers, their sorted offsets a permutation in order; LIKE patterns compile.
//
// Thread-safety: a Program is immutable after construction and thread-safe; it is reference
// counted (ProgramRef), so copies of a Selector and the matcher share one.

#ifndef GRYPH_LIB_SELECTOR_PROGRAM_H_
#define GRYPH_LIB_SELECTOR_PROGRAM_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/event.h"
#include "gryph/selector.h"
#include "lib/selector/like_pattern.h"

namespace gryph::selector_program {

using selector_ast::LikePattern;

// DO NOT CHANGE the values: stored on disk (Selector::Encode).
enum class Op : uint8_t {
  kAttr = 1,
  kInt32 = 2,
  kInt64 = 3,
  kDouble = 4,
  kString = 5,
  kTrue = 6,
  kFalse = 7,
  kNegate = 8,
  kUnaryPlus = 9,
  kNot = 10,
  kAdd = 11,
  kSubtract = 12,
  kMultiply = 13,
  kDivide = 14,
  kEqual = 15,
  kNotEqual = 16,
  kLess = 17,
  kLessEqual = 18,
  kGreater = 19,
  kGreaterEqual = 20,
  kBetween = 21,
  kNotBetween = 22,
  kIn = 23,
  kNotIn = 24,
  kLike = 25,
  kNotLike = 26,
  kIsNull = 27,
  kIsNotNull = 28,
  kAndFirst = 29,
  kAndMore = 30,
  kAndLast = 31,
  kOrFirst = 32,
  kOrMore = 33,
  kOrLast = 34,
  kSmallInt = 35,
};

// IN lists longer than this carry a sorted index (binary search); shorter ones are scanned.
inline constexpr uint32_t kSortedInThreshold = 16;
// The deepest value stack a program may need (Validate refuses more); evaluation keeps this many
// values on the thread's stack.
inline constexpr size_t kMaxStack = 3 * Selector::kMaxDepth + 8;

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

// A literal as a program holds it: strings are views into the program.
struct Literal {
  enum class Type : uint8_t { kInt64, kDouble, kString, kBool };
  Type type = Type::kInt64;
  int64_t i = 0;
  double d = 0;
  bool b = false;
  absl::string_view s;
  const uint8_t* encoded = nullptr;  // kString: its varint length, then its bytes (BytesAt)

  bool is_numeric() const { return type == Type::kInt64 || type == Type::kDouble; }
  AttributeValue ToValue() const;
};
bool operator==(const Literal& a, const AttributeValue& b);

// The bytes at `p`: a varint length, then that many bytes. REQUIRES: p is in a valid program.
inline absl::string_view BytesAt(const uint8_t* p) {
  uint32_t n = 0;
  for (int shift = 0;; shift += 7) {
    const uint8_t b = *p++;
    n |= static_cast<uint32_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) break;
  }
  return absl::string_view(reinterpret_cast<const char*>(p), n);
}

class Program;

// A counted reference to a Program (null: no program). Copying increments the count.
class ProgramRef {
 public:
  ProgramRef() = default;
  explicit ProgramRef(const Program* p);  // takes a new reference
  ProgramRef(const ProgramRef& o);
  ProgramRef(ProgramRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  ProgramRef& operator=(ProgramRef o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~ProgramRef();

  // A new reference to `p` (which someone else holds a reference to), or null.
  static ProgramRef Share(const Program* p);
  // Gives up the reference without dropping it: the caller now holds it.
  const Program* release() { return std::exchange(p_, nullptr); }

  const Program* get() const { return p_; }
  const Program* operator->() const { return p_; }
  const Program& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  const Program* p_ = nullptr;
};

// Appends operations; Finish() makes the Program. Used by the parser, which emits the program
// as it parses: an operator after its operands.
class ProgramBuilder {
 public:
  void Reserve(size_t bytes) { code_.reserve(bytes); }
  // Bytes of code so far; Truncate drops what follows `size` (the parser replaces the attribute
  // it read by the IN, LIKE or IS NULL that names it, and folds a sign into a literal).
  size_t size() const { return code_.size(); }
  void Truncate(size_t size) { code_.resize(size); }

  void Attr(absl::string_view name);
  void Int64(int64_t v);
  void Double(double v);
  void String(absl::string_view v);
  void Bool(bool v);
  void Simple(Op op);  // the operators without operands
  void In(bool negated, absl::string_view name, const std::vector<AttributeValue>& values);
  void Like(bool negated, absl::string_view name, absl::string_view pattern,
            absl::string_view escape, LikePattern compiled);
  void IsNull(bool negated, absl::string_view name);
  // A logical group: Begin after the first operand, Next after each later one but the last,
  // End after the last. Groups nest: End closes the latest group begun. Returns the group's
  // handle for Next and End.
  size_t LogicalBegin(bool is_or);
  void LogicalNext(size_t group);
  void LogicalEnd(size_t group);

  // The program for what was appended. The parser's output meets the invariants by
  // construction, so it is not checked again (the tests and the fuzzer check it through
  // Decode), except in debug builds.
  absl::StatusOr<ProgramRef> Finish();

 private:
  struct Group {
    bool is_or;
    uint32_t count;
    size_t patches;  // where its skips start in patches_
  };
  void Varint(uint32_t v);
  void Bytes(absl::string_view bytes);
  void U32(uint32_t v);
  void U64(uint64_t v);

  std::string code_;
  absl::InlinedVector<Group, 4> groups_;
  absl::InlinedVector<size_t, 16> patches_;  // skips to fill in, of the open groups
  std::vector<LikePattern> likes_;
};

// A tree view of a program, for the matcher's planner and for rendering: the nodes in postorder,
// each with its operands and the code range of its subtree (which Program::EvaluateRange runs).
// Built by one pass over the code; valid while the program lives.
struct ViewNode {
  enum class Kind : uint8_t {
    kLiteral,
    kIdentifier,
    kNegate,
    kUnaryPlus,
    kNot,
    kAdd,
    kSubtract,
    kMultiply,
    kDivide,
    kEqual,
    kNotEqual,
    kLess,
    kLessEqual,
    kGreater,
    kGreaterEqual,
    kAnd,
    kOr,
    kBetween,
    kIn,
    kLike,
    kIsNull,
  };
  Kind kind = Kind::kLiteral;
  bool negated = false;   // NOT BETWEEN, NOT IN, NOT LIKE, IS NOT NULL
  uint32_t begin = 0;     // the subtree's code: [begin, end)
  uint32_t end = 0;       // the op's own bytes are [op, end)
  uint32_t op = 0;        // where the node's own operation starts
  uint32_t children = 0;  // operands: View::child(*this, k) for k < child_count
  uint32_t child_count = 0;
  absl::string_view name;             // kIdentifier, kIn, kLike, kIsNull: the attribute
  Literal literal;                    // kLiteral
  const LikePattern* like = nullptr;  // kLike
};

// Nodes of a view: conjuncts or branches (most selectors have a handful, held inline).
using ViewNodes = absl::InlinedVector<const ViewNode*, 8>;

class View {
 public:
  explicit View(const Program& program);
  View() = default;
  // Rebuilds the view for `program`, reusing the memory.
  void Reset(const Program& program);

  const ViewNode* root() const { return nodes_.empty() ? nullptr : &nodes_.back(); }
  const ViewNode& child(const ViewNode& n, size_t k) const {
    return nodes_[child_index_[n.children + k]];
  }
  const Program& program() const { return *program_; }

  // The conditions whose conjunction is `n` (nested ANDs flattened, left to right; {n} when n is
  // no AND). Empty for a null n.
  ViewNodes Conjuncts(const ViewNode* n) const;
  // The branches of the OR `n`, nested ORs flattened.
  ViewNodes OrBranches(const ViewNode& n) const;
  // A fully parenthesized rendering (Selector::DebugString).
  std::string ToString(const ViewNode& n) const;

 private:
  const Program* program_ = nullptr;
  std::vector<ViewNode> nodes_;
  std::vector<uint32_t> child_index_;
  std::vector<uint32_t> stack_;  // Reset's, kept to reuse its memory
};

// A conjunct a predicate index can serve (see the matcher's plan.h for how it is used). The
// index must apply the selector's typing rules: a string literal matches only string attributes;
// numeric literals match int64 and double attributes by exact value, never NaN; a boolean
// literal matches only booleans. Pointers point into the view.
struct IndexableConjunct {
  enum class Kind {
    kEqual,  // attribute = values[0]            (any literal type)
    kIn,     // attribute IN (values...)         (strings, or numbers)
    kRange,  // lower <(=) attribute <(=) upper  (numeric literals; either bound may be absent)
  };
  Kind kind;
  absl::string_view attribute;
  std::vector<Literal> values;     // kEqual (one), kIn (as written)
  const Literal* lower = nullptr;  // kRange
  bool lower_inclusive = false;
  const Literal* upper = nullptr;  // kRange
  bool upper_inclusive = false;
};

// Recognizes `attr = lit`, `lit = attr`, `attr IN (...)`, `attr op lit` / `lit op attr` for op in
// < <= > >=, and `attr BETWEEN lit AND lit` with numeric literals. nullopt for anything else.
std::optional<IndexableConjunct> AsIndexable(const View& view, const ViewNode& conjunct);

// The values of an IN operation as written. REQUIRES: `op` points at a kIn or kNotIn.
std::vector<Literal> InValues(const uint8_t* op);

class Program {
 public:
  // Checks `code` (the invariants above) and makes a program of it. Fails with DataLoss naming
  // what is wrong; never reads outside `code`.
  static absl::StatusOr<ProgramRef> Make(absl::string_view code);

  // Evaluates the program against `event`. Does not allocate.
  Truth Evaluate(const Event& event) const { return EvaluateRange(0, size_, event); }
  // Evaluates the subtree whose code is [begin, end) (a ViewNode's range) as a condition.
  Truth EvaluateRange(uint32_t begin, uint32_t end, const Event& event) const;

  // The truth of the IN operation at `op` (NOT IN included) for the attribute value `v`
  // (nullptr: absent). REQUIRES: op points at a kIn/kNotIn of a valid program.
  static Truth In(const uint8_t* op, const AttributeValue* v);

  absl::string_view code() const { return {reinterpret_cast<const char*>(data()), size_}; }
  // The code follows this object, in the same allocation.
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(this + 1); }
  uint32_t size() const { return size_; }
  const LikePattern& like(size_t i) const { return (*likes_)[i]; }
  // Heap bytes the program holds (itself, its code and its LIKE patterns' objects).
  size_t bytes() const;

 private:
  friend class ProgramRef;
  Program() = default;
  ~Program();
  friend class ProgramBuilder;
  // Checks `code`; appends each LIKE's compiled pattern to *likes.
  static absl::Status Validate(absl::string_view code, std::vector<LikePattern>* likes);
  // The program of `code`, unchecked. REQUIRES: code meets the invariants; likes compiled.
  static ProgramRef Build(absl::string_view code, std::vector<LikePattern> likes);

  mutable std::atomic<uint32_t> refs_{1};
  uint32_t size_ = 0;
  std::vector<LikePattern>* likes_ = nullptr;  // null without LIKE
};
static_assert(sizeof(Program) == 16);

}  // namespace gryph::selector_program

#endif  // GRYPH_LIB_SELECTOR_PROGRAM_H_
