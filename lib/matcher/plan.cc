#include "lib/matcher/plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/hash/hash.h"
#include "lib/selector/like_pattern.h"
#include "lib/selector/numeric.h"
#include "lib/selector/program.h"

namespace gryph::matcher_internal {

namespace sa = selector_ast;
namespace sp = selector_program;
using selector_program::And;
using selector_program::Not;
using selector_program::Or;

namespace {

Truth FromBool(bool b) { return b ? Truth::kTrue : Truth::kFalse; }

// `v` (an event value) against a numeric literal: -1, 0 or 1, or nullopt when v is NaN (UNKNOWN)
// or not a number (FALSE, reported through *mismatch).
inline std::optional<int> CompareNumeric(const AttributeValue& v, Tag tag, Scalar lit,
                                         bool* mismatch) {
  switch (v.index()) {
    case 0: {
      const int64_t x = *std::get_if<int64_t>(&v);
      return tag == Tag::kInt ? sa::CompareInt64(x, lit.i) : sa::CompareInt64Double(x, lit.d);
    }
    case 1: {
      const double x = *std::get_if<double>(&v);
      if (std::isnan(x)) return std::nullopt;
      return tag == Tag::kInt ? -sa::CompareInt64Double(lit.i, x) : sa::CompareDouble(x, lit.d);
    }
    default: *mismatch = true; return std::nullopt;
  }
}

// Same-typed equality with a string or boolean literal; nullopt when the types differ.
inline std::optional<bool> EqualNonNumeric(const AttributeValue& v, const Check& c) {
  if (c.lo_tag() == Tag::kString) {
    const auto* s = std::get_if<std::string>(&v);
    if (s == nullptr) return std::nullopt;
    if (c.flags != Check::kLongString) {  // the whole literal is in lo
      return s->size() == c.flags && (c.flags == 0 || std::memcmp(s->data(), &c.lo, c.flags) == 0);
    }
    if (s->size() < sizeof(c.lo) || std::memcmp(s->data(), &c.lo, sizeof(c.lo)) != 0) return false;
    return *s == sp::BytesAt(static_cast<const uint8_t*>(c.ptr));
  }
  const auto* b = std::get_if<bool>(&v);
  if (b == nullptr) return std::nullopt;
  return *b == c.lo.b;
}

}  // namespace

// Each case follows the program's evaluation (lib/selector/program.cc): a missing attribute is
// UNKNOWN, NaN in a comparison is UNKNOWN, and unlike types compare FALSE.
Truth Check::Evaluate(AttrValues values, const Event& event) const {
  switch (kind) {
    case Kind::kEqual:
    case Kind::kNotEqual: {
      const AttributeValue* v = values[attr];
      if (v == nullptr) return Truth::kUnknown;
      bool equal;
      if (lo_tag() == Tag::kInt || lo_tag() == Tag::kDouble) {
        bool mismatch = false;
        const std::optional<int> cmp = CompareNumeric(*v, lo_tag(), lo, &mismatch);
        if (!cmp.has_value()) return mismatch ? Truth::kFalse : Truth::kUnknown;
        equal = *cmp == 0;
      } else {
        const std::optional<bool> eq = EqualNonNumeric(*v, *this);
        if (!eq.has_value()) return Truth::kFalse;
        equal = *eq;
      }
      return FromBool(equal == (kind == Kind::kEqual));
    }
    case Kind::kRange: {
      const AttributeValue* v = values[attr];
      if (v == nullptr) return Truth::kUnknown;
      bool mismatch = false;
      Truth t = Truth::kTrue;
      if (lo_tag() != Tag::kNone) {
        const std::optional<int> cmp = CompareNumeric(*v, lo_tag(), lo, &mismatch);
        if (mismatch) return Truth::kFalse;
        t = !cmp.has_value() ? Truth::kUnknown
                             : FromBool(*cmp > 0 || (*cmp == 0 && (flags & kLowInclusive) != 0));
      }
      if (hi_tag() != Tag::kNone) {
        const std::optional<int> cmp = CompareNumeric(*v, hi_tag(), hi, &mismatch);
        if (mismatch) return Truth::kFalse;
        t = And(t, !cmp.has_value()
                       ? Truth::kUnknown
                       : FromBool(*cmp < 0 || (*cmp == 0 && (flags & kHighInclusive) != 0)));
      }
      return t;
    }
    case Kind::kIn: return sp::Program::In(static_cast<const uint8_t*>(ptr), values[attr]);
    case Kind::kLike: {
      const AttributeValue* v = values[attr];
      if (v == nullptr) return Truth::kUnknown;
      const auto* s = std::get_if<std::string>(v);
      if (s == nullptr) return Truth::kFalse;
      const auto& like = *static_cast<const sa::LikePattern*>(ptr);
      return FromBool(like.Matches(*s) != ((flags & kNotLike) != 0));
    }
    case Kind::kIsNull: return FromBool(values[attr] == nullptr);
    case Kind::kIsNotNull: return FromBool(values[attr] != nullptr);
    case Kind::kIsTrue: {
      const AttributeValue* v = values[attr];
      const bool* b = v == nullptr ? nullptr : std::get_if<bool>(v);
      return b == nullptr ? Truth::kUnknown : FromBool(*b);
    }
    case Kind::kOr: {
      // Branches back to back, each closed by a kBranchEnd.
      const Check* c = static_cast<const Check*>(ptr);
      const Check* const end = c + lo.i;
      Truth result = Truth::kFalse;
      Truth branch = Truth::kTrue;
      for (; c != end; ++c) {
        if (c->kind == Kind::kBranchEnd) {
          result = Or(result, branch);
          if (result == Truth::kTrue) return result;
          branch = Truth::kTrue;
        } else if (branch != Truth::kFalse) {
          branch = And(branch, c->Truth3(values, event));
        }
      }
      return result;
    }
    case Kind::kBranchEnd: break;
    case Kind::kInShort:
    case Kind::kNotInShort: {
      const AttributeValue* v = values[attr];
      if (v == nullptr) return Truth::kUnknown;
      bool found = false;
      if (lo_tag() == Tag::kString) {
        const auto* str = std::get_if<std::string>(v);
        if (str == nullptr) return Truth::kFalse;  // a string list holds no number or boolean
        auto same = [&](Scalar packed, size_t len) {
          return str->size() == len && (len == 0 || std::memcmp(str->data(), &packed, len) == 0);
        };
        found = same(lo, flags & 0xF) || (hi_tag() == Tag::kString && same(hi, flags >> 4));
      } else {
        if (v->index() > 1) return Truth::kFalse;  // a number list holds no string or boolean
        bool mismatch = false;
        const std::optional<int> c1 = CompareNumeric(*v, lo_tag(), lo, &mismatch);
        if (!c1.has_value()) return Truth::kUnknown;  // NaN
        found = *c1 == 0;
        if (!found && hi_tag() != Tag::kNone)
          found = *CompareNumeric(*v, hi_tag(), hi, &mismatch) == 0;
      }
      return FromBool(found != (kind == Kind::kNotInShort));
    }
    case Kind::kGeneric:
      return static_cast<const sp::Program*>(ptr)->EvaluateRange(
          static_cast<uint32_t>(lo.i), static_cast<uint32_t>(static_cast<uint64_t>(lo.i) >> 32),
          event);
  }
  return Truth::kUnknown;
}

Truth Check::Truth3(AttrValues values, const Event& event) const {
  const Truth t = Evaluate(values, event);
  return negated ? Not(t) : t;
}

Verify VerifyOf(const std::vector<Check>& checks) {
  if (checks.empty()) return Verify::kProven;
  return checks.size() <= kInlineChecks ? Verify::kInline : Verify::kMoreChecks;
}

size_t NameHash(absl::string_view name) { return absl::Hash<absl::string_view>()(name); }

bool NumericKey(const AttributeValue& v, Access::Kind* kind, Scalar* key) {
  if (const auto* i = std::get_if<int64_t>(&v)) {
    *kind = Access::Kind::kEqInt;
    key->i = *i;
    return true;
  }
  const double d = *std::get_if<double>(&v);
  if (std::isnan(d)) return false;
  if (d >= -0x1p63 && d < 0x1p63 && d == std::trunc(d)) {
    *kind = Access::Kind::kEqInt;
    key->i = static_cast<int64_t>(d);
    return true;
  }
  *kind = Access::Kind::kEqDouble;
  key->d = d;
  return true;
}

bool NumericKey(const sp::Literal& v, Access::Kind* kind, Scalar* key) {
  if (v.type == sp::Literal::Type::kInt64) return NumericKey(AttributeValue(v.i), kind, key);
  return NumericKey(AttributeValue(v.d), kind, key);
}

bool IntervalBucket(double lo, double hi, int32_t* width_class, int64_t* bucket) {
  const double w = hi - lo;
  if (!(w >= 0 && w < std::numeric_limits<double>::infinity())) return false;
  // hi - lo < 2^e; a rounded difference below 2^e means the exact one is too (2^e is a double).
  int e = w > 0 ? std::ilogb(w) + 1 : -1100;
  const double m = std::max(std::fabs(lo), std::fabs(hi));
  // Buckets finer than 2^-40 of the magnitude are pointless, and |lo / 2^e| < 2^41 keeps the
  // bucket number an int64.
  e = std::max(e, m > 0 ? std::ilogb(m) - 40 : -1000);
  *width_class = e;
  *bucket = static_cast<int64_t>(std::floor(std::ldexp(lo, kBucketShift - e)));
  return true;
}

bool ValueBucket(double v, int32_t width_class, int64_t* bucket) {
  const double q = std::ldexp(v, kBucketShift - width_class);
  // A stored interval has |lo / 2^e| < 2^41, so |lo| in bucket units is below 2^42, and a value
  // inside one is less than kBucketsToScan units further; anything larger (or NaN) is in none.
  if (!(std::fabs(q) < 0x1p61)) return false;
  *bucket = static_cast<int64_t>(std::floor(q));
  return true;
}

namespace {

// A candidate access: the index slots it needs and what it proves.
struct Choice {
  // A branch of an OR access: its conjuncts, and the one its exact access proves (or -1).
  struct Branch {
    sp::ViewNodes conjuncts;
    int proves = -1;
  };
  double cost = std::numeric_limits<double>::infinity();
  absl::InlinedVector<Access, 1> accesses;  // Access::branch indexes `branches` (or is 0)
  // A plain access: the conjunct (index into the conjunct list) it proves exactly, or -1.
  int proves = -1;
  // An OR access: the OR's index in the conjunct list, and its branches.
  int or_conjunct = -1;
  std::vector<Branch> branches;
  bool dedupe = false;
  bool valid() const { return !accesses.empty(); }
};

constexpr double kCostOrOverhead = 1;
constexpr size_t kMaxKeys = 64;      // more values than this: not worth the index entries
constexpr size_t kMaxBranches = 16;  // OR branches indexed one by one at most
// The range index is for ranges none of which is selective: each holds for at least this share
// of its attribute's span. Below it, one of them as the access brings in few enough candidates.
// (A candidate verified costs tens of nanoseconds, a range term in the range index one byte
// decrement of a nanosecond or two per event that satisfies it: for 2 to 5 ranges the two meet
// at about 2-3% per range.)
constexpr double kSelectiveRange = 0.03;
// An equality, prefix or OR access this cheap (expected candidates) is kept over the range index.
constexpr double kRangeIndexCost = 1000;

// Whether the literal `v` is exactly a float (so the range index compares it exactly).
bool ExactFloat(const sp::Literal& v) {
  double d;
  if (v.type == sp::Literal::Type::kInt64) {
    d = static_cast<double>(v.i);
    if (!(d < 0x1p63 && static_cast<int64_t>(d) == v.i)) return false;
  } else {
    d = v.d;
  }
  return static_cast<double>(FloatRounding::Nearest(d)) == d;
}

bool IsRangeAccess(Access::Kind k) {
  return k == Access::Kind::kInterval || k == Access::Kind::kWide || k == Access::Kind::kAtLeast ||
         k == Access::Kind::kAtMost;
}

int CheckCost(Check::Kind k) {
  switch (k) {
    case Check::Kind::kEqual: return 0;
    case Check::Kind::kIn: return 1;
    case Check::Kind::kIsNull:
    case Check::Kind::kIsNotNull:
    case Check::Kind::kIsTrue: return 2;
    case Check::Kind::kRange: return 3;
    case Check::Kind::kNotEqual: return 4;
    case Check::Kind::kLike: return 5;
    case Check::Kind::kInShort:
    case Check::Kind::kNotInShort: return 1;
    case Check::Kind::kOr: return 6;
    case Check::Kind::kBranchEnd:
    case Check::Kind::kGeneric: return 7;
  }
  return 6;
}

// Sets a numeric literal; returns its tag.
Tag SetNumber(const sp::Literal& v, Scalar* s) {
  if (v.type == sp::Literal::Type::kInt64) {
    s->i = v.i;
    return Tag::kInt;
  }
  s->d = v.d;
  return Tag::kDouble;
}

// Sets the literal of an = or <> check.
void SetLiteral(const sp::Literal& v, Check* k) {
  switch (v.type) {
    case sp::Literal::Type::kInt64:
    case sp::Literal::Type::kDouble: k->set_lo_tag(SetNumber(v, &k->lo)); break;
    case sp::Literal::Type::kString: {
      const absl::string_view str = v.s;
      k->set_lo_tag(Tag::kString);
      k->ptr = v.encoded;
      k->lo.i = 0;
      std::memcpy(&k->lo, str.data(), std::min<size_t>(str.size(), sizeof(k->lo)));
      k->flags =
          str.size() <= sizeof(k->lo) ? static_cast<uint8_t>(str.size()) : Check::kLongString;
      break;
    }
    default:
      k->set_lo_tag(Tag::kBool);
      k->lo.b = v.b;
      break;
  }
}

// Compiles `attr [NOT] IN (...)` with at most two values — strings of at most 8 bytes, or
// numbers — into a check that reads no tree memory. The caller set k->attr.
bool ShortIn(const std::vector<sp::Literal>& values, bool negated, Check* k) {
  if (values.empty() || values.size() > 2) return false;
  Scalar packed[2] = {{0}, {0}};
  Tag tags[2] = {Tag::kNone, Tag::kNone};
  uint8_t lengths[2] = {0, 0};
  for (size_t i = 0; i < values.size(); ++i) {
    const sp::Literal& v = values[i];
    if (v.type == sp::Literal::Type::kString) {
      if (v.s.size() > sizeof(Scalar)) return false;
      std::memcpy(&packed[i], v.s.data(), v.s.size());
      lengths[i] = static_cast<uint8_t>(v.s.size());
      tags[i] = Tag::kString;
    } else {
      tags[i] = SetNumber(v, &packed[i]);
    }
  }
  k->kind = negated ? Check::Kind::kNotInShort : Check::Kind::kInShort;
  k->lo = packed[0];
  k->hi = packed[1];
  k->set_lo_tag(tags[0]);
  k->set_hi_tag(tags[1]);
  k->flags = static_cast<uint8_t>(lengths[0] | (lengths[1] << 4));
  return true;
}

bool SameKey(const Access& a, const Access& b) {
  if (a.kind != b.kind || a.attr != b.attr) return false;
  switch (a.kind) {
    case Access::Kind::kEqString: return a.str == b.str;
    case Access::Kind::kEqInt: return a.key.i == b.key.i;
    case Access::Kind::kEqDouble: return a.key.d == b.key.d;
    case Access::Kind::kEqBool: return a.key.b == b.key.b;
    default: return false;
  }
}

bool IsEquality(Access::Kind k) {
  return k == Access::Kind::kEqString || k == Access::Kind::kEqInt ||
         k == Access::Kind::kEqDouble || k == Access::Kind::kEqBool;
}

class Compiler {
 public:
  Compiler(Record* rec, InternFn intern, const AccessStats& stats, const sp::View& view)
      : rec_(rec), intern_(intern), stats_(stats), view_(view) {}

  void Run(const sp::ViewNode* root, std::vector<RangeTerm>* range_terms) {
    const sp::ViewNodes conjuncts = view_.Conjuncts(root);
    const Ranges ranges = CollectRanges(conjuncts);
    size_t in_ranges = 0;
    for (const Range& r : ranges) in_ranges += static_cast<size_t>(r.conjuncts);
    Choice best;
    if (in_ranges == conjuncts.size()) {
      // Only ranges: the single accesses BestAccess would weigh are ranges too, which the range
      // index beats whenever it applies, so it is tried first.
      best = RangeIndexAccess(conjuncts, ranges, Choice());
      if (!best.valid()) best = BestAccess(conjuncts, ranges, /*allow_or=*/true);
    } else {
      best = BestAccess(conjuncts, ranges, /*allow_or=*/true);
      Choice all = RangeIndexAccess(conjuncts, ranges, best);
      if (all.valid()) best = std::move(all);
    }
    if (!best.valid()) best.accesses.push_back(Access{});  // unindexed: every check stays
    rec_->accesses = std::move(best.accesses);
    rec_->dedupe = best.dedupe;
    if (rec_->ranges_proven) {
      // No check list: the range terms are the selector, and the program verifies them.
    } else if (best.branches.empty()) {
      checks_.push_back(CompileAllBut(conjuncts, best.proves));
    } else {
      // Each branch is verified by its own conjuncts and the selector's other conjuncts: the
      // selector is TRUE exactly when, for some branch, all of these are.
      for (const Choice::Branch& b : best.branches) {
        std::vector<Check> checks = CompileAllBut(b.conjuncts, b.proves);
        for (Check& c : CompileAllBut(conjuncts, best.or_conjunct)) checks.push_back(c);
        SortChecks(checks);
        checks_.push_back(std::move(checks));
      }
    }
    range_terms->insert(range_terms->end(), terms_.begin(), terms_.end());
    // Only lists with a check in them need to be kept (BranchChecks gives an empty list else).
    const bool any = !disjunctions_.empty() ||
                     std::any_of(checks_.begin(), checks_.end(),
                                 [](const std::vector<Check>& l) { return !l.empty(); });
    if (any) {
      lists_ = std::make_unique<CheckLists>();
      lists_->checks = std::move(checks_);
      lists_->disjunctions = std::move(disjunctions_);  // the inner arrays stay put
    }
    rec_->verify = lists_ != nullptr && !lists_->checks.empty() ? VerifyOf(lists_->checks[0])
                                                                : Verify::kProven;
  }

  // The record's check lists (null without checks), now the caller's.
  std::unique_ptr<CheckLists> TakeLists() { return std::move(lists_); }

  // The ids of the attributes the record uses.
  absl::Span<const uint32_t> attributes() const { return attributes_; }
  // A ranges_proven record's terms.
  absl::Span<const RangeTerm> terms() const { return terms_; }

 private:
  // Checks for conjuncts[i] for every i but `skip`, most selective first.
  std::vector<Check> CompileAllBut(const sp::ViewNodes& conjuncts, int skip) {
    std::vector<Check> checks;
    for (size_t i = 0; i < conjuncts.size(); ++i) {
      if (static_cast<int>(i) != skip) checks.push_back(CompileCheck(*conjuncts[i]));
    }
    SortChecks(checks);
    return checks;
  }

  // A stable insertion sort: the lists are a handful of checks (and std::stable_sort's buffer
  // trips clang's ASan with libstdc++ 12).
  static void SortChecks(std::vector<Check>& checks) {
    for (size_t i = 1; i < checks.size(); ++i) {
      for (size_t j = i; j > 0 && CheckCost(checks[j].kind) < CheckCost(checks[j - 1].kind); --j) {
        std::swap(checks[j], checks[j - 1]);
      }
    }
  }

  uint32_t Id(absl::string_view name) {
    for (const auto& [n, id] : names_) {
      if (n == name) return id;
    }
    const uint32_t id = intern_(name);
    names_.emplace_back(name, id);
    attributes_.push_back(id);
    return id;
  }

  // A check for `conjunct`: NOTs are peeled into `negated` when what they wrap is a simple
  // condition; anything else is evaluated whole by the evaluator.
  Check CompileCheck(const sp::ViewNode& conjunct) {
    bool negated = false;
    const sp::ViewNode* inner = &conjunct;
    while (inner->kind == sp::ViewNode::Kind::kNot) {
      negated = !negated;
      inner = &view_.child(*inner, 0);
    }
    Check k = CompileSimple(*inner);
    if (k.kind == Check::Kind::kGeneric) {
      Generic(conjunct, &k);
      return k;
    }
    k.negated = negated;
    return k;
  }

  // Evaluated by the program, over the code of `c`.
  void Generic(const sp::ViewNode& c, Check* k) const {
    k->kind = Check::Kind::kGeneric;
    k->ptr = &view_.program();
    k->lo.i = static_cast<int64_t>(uint64_t{c.begin} | uint64_t{c.end} << 32);
  }

  const void* InOp(const sp::ViewNode& c) const { return view_.program().data() + c.op; }

  Check CompileSimple(const sp::ViewNode& c) {
    using K = sp::ViewNode::Kind;
    Check k;
    if (const std::optional<sp::IndexableConjunct> ix = sp::AsIndexable(view_, c)) {
      k.attr = Id(ix->attribute);
      switch (ix->kind) {
        case sp::IndexableConjunct::Kind::kEqual:
          k.kind = Check::Kind::kEqual;
          SetLiteral(ix->values[0], &k);
          return k;
        case sp::IndexableConjunct::Kind::kIn:
          if (!ShortIn(ix->values, c.negated, &k)) {
            k.kind = Check::Kind::kIn;
            k.ptr = InOp(c);
          }
          return k;
        case sp::IndexableConjunct::Kind::kRange:
          k.kind = Check::Kind::kRange;
          k.hi.i = 0;
          if (ix->lower != nullptr) {
            k.set_lo_tag(SetNumber(*ix->lower, &k.lo));
            if (ix->lower_inclusive) k.flags |= Check::kLowInclusive;
          }
          if (ix->upper != nullptr) {
            k.set_hi_tag(SetNumber(*ix->upper, &k.hi));
            if (ix->upper_inclusive) k.flags |= Check::kHighInclusive;
          }
          return k;
      }
    }
    if (c.kind == K::kNotEqual) {
      const sp::ViewNode* id = &view_.child(c, 0);
      const sp::ViewNode* lit = &view_.child(c, 1);
      if (id->kind != K::kIdentifier || lit->kind != K::kLiteral) std::swap(id, lit);
      if (id->kind == K::kIdentifier && lit->kind == K::kLiteral) {
        k.kind = Check::Kind::kNotEqual;
        k.attr = Id(id->name);
        SetLiteral(lit->literal, &k);
        return k;
      }
    }
    if (c.kind == K::kIn && c.negated) {  // NOT IN
      k.attr = Id(c.name);
      if (!ShortIn(sp::InValues(view_.program().data() + c.op), true, &k)) {
        k.kind = Check::Kind::kIn;
        k.ptr = InOp(c);
      }
      return k;
    }
    if (c.kind == K::kLike) {
      k.kind = Check::Kind::kLike;
      k.attr = Id(c.name);
      k.ptr = c.like;
      if (c.negated) k.flags = Check::kNotLike;
      return k;
    }
    if (c.kind == K::kIsNull) {
      k.kind = c.negated ? Check::Kind::kIsNotNull : Check::Kind::kIsNull;
      k.attr = Id(c.name);
      return k;
    }
    if (c.kind == K::kIdentifier) {
      k.kind = Check::Kind::kIsTrue;
      k.attr = Id(c.name);
      return k;
    }
    if (c.kind == K::kOr) {
      // Nested ORs flatten into one disjunction; each branch is compiled like a selector, its
      // checks followed by a kBranchEnd, all in one array.
      std::vector<Check> checks;
      for (const sp::ViewNode* n : view_.OrBranches(c)) {
        for (const sp::ViewNode* conjunct : view_.Conjuncts(n)) {
          checks.push_back(CompileCheck(*conjunct));
        }
        Check end;
        end.kind = Check::Kind::kBranchEnd;
        checks.push_back(end);
      }
      k.kind = Check::Kind::kOr;
      k.lo.i = static_cast<int64_t>(checks.size());
      disjunctions_.push_back(std::move(checks));
      k.ptr = disjunctions_.back().data();  // stays put when the outer vector grows or moves
      return k;
    }
    Generic(c, &k);
    return k;
  }

  // Equality accesses for `values` of `attribute`, duplicates (5 and 5.0) merged.
  bool AddKeys(absl::string_view attribute, const std::vector<sp::Literal>& values, Choice* out) {
    const uint32_t attr = Id(attribute);
    for (const sp::Literal& v : values) {
      Access a;
      a.attr = attr;
      switch (v.type) {
        case sp::Literal::Type::kString:
          a.kind = Access::Kind::kEqString;
          a.str = v.s;
          break;
        case sp::Literal::Type::kBool:
          a.kind = Access::Kind::kEqBool;
          a.key.b = v.b;
          break;
        default:
          if (!NumericKey(v, &a.kind, &a.key)) continue;  // NaN literals do not exist; be safe
      }
      if (std::none_of(out->accesses.begin(), out->accesses.end(),
                       [&](const Access& b) { return SameKey(a, b); })) {
        out->accesses.push_back(a);
      }
    }
    if (out->accesses.size() > kMaxKeys) return false;
    out->cost = 0;
    for (const Access& a : out->accesses) out->cost += stats_.Cost(a);
    return true;
  }

  // Numeric ranges merged per attribute: [max of lows, min of highs], rounded, inclusive.
  struct Range {
    absl::string_view attribute;
    double lo = -std::numeric_limits<double>::infinity();
    double hi = std::numeric_limits<double>::infinity();
    bool has_lo = false;
    bool has_hi = false;
    int conjuncts = 0;  // merged into this range
    bool exact = true;  // every bound inclusive and exactly a float
  };
  using Ranges = absl::InlinedVector<Range, 5>;

  Ranges CollectRanges(const sp::ViewNodes& conjuncts) const {
    Ranges ranges;
    for (const sp::ViewNode* c : conjuncts) {
      const std::optional<sp::IndexableConjunct> ix = sp::AsIndexable(view_, *c);
      if (!ix.has_value() || ix->kind != sp::IndexableConjunct::Kind::kRange) continue;
      auto it = std::find_if(ranges.begin(), ranges.end(),
                             [&](const Range& r) { return r.attribute == ix->attribute; });
      if (it == ranges.end()) {
        ranges.push_back(Range{ix->attribute});
        it = ranges.end() - 1;
      }
      it->conjuncts++;
      if (ix->lower != nullptr) {
        it->lo = std::max(it->lo, RangeValue(*ix->lower));
        it->has_lo = true;
        it->exact = it->exact && ix->lower_inclusive && ExactFloat(*ix->lower);
      }
      if (ix->upper != nullptr) {
        it->hi = std::min(it->hi, RangeValue(*ix->upper));
        it->has_hi = true;
        it->exact = it->exact && ix->upper_inclusive && ExactFloat(*ix->upper);
      }
    }
    return ranges;
  }

  // The range index, when `conjuncts` hold at least two ranges (on distinct attributes), none of
  // them selective, and `best` is no cheap equality, prefix or OR access. Sets the record's
  // range terms and ranges_proven when chosen.
  Choice RangeIndexAccess(const sp::ViewNodes& conjuncts, const Ranges& ranges,
                          const Choice& best) {
    if (ranges.size() < 2) return Choice();
    const bool single_range = best.valid() && best.branches.empty() && best.accesses.size() == 1 &&
                              IsRangeAccess(best.accesses[0].kind);
    if (best.valid() && !single_range && best.cost < kRangeIndexCost) return Choice();
    for (const Range& r : ranges) {
      if (stats_.Selectivity(Id(r.attribute), r.lo, r.hi) < kSelectiveRange) return Choice();
    }
    absl::InlinedVector<RangeTerm, RangeIndex::kMaxTerms> terms;
    bool proven = ranges.size() <= RangeIndex::kMaxTerms;
    size_t merged = 0;
    for (const Range& r : ranges) {
      merged += static_cast<size_t>(r.conjuncts);
      proven = proven && r.exact && r.conjuncts == 1;
      if (terms.size() == RangeIndex::kMaxTerms) continue;  // the rest stay checks only
      terms.push_back(RangeTerm{Id(r.attribute),
                                r.has_lo ? FloatRounding::Down(r.lo) : -FloatRounding::kInf,
                                r.has_hi ? FloatRounding::Up(r.hi) : FloatRounding::kInf});
    }
    rec_->ranges_proven = proven && merged == conjuncts.size();
    terms_.assign(terms.begin(), terms.end());
    Choice ch;
    Access a;
    a.kind = Access::Kind::kRanges;
    a.attr = terms.front().attr;
    a.range_index = nullptr;
    ch.accesses.push_back(a);
    ch.cost = 0;
    return ch;
  }

  // The best single access among `conjuncts` (an OR among them counts only when allow_or), whose
  // ranges are `ranges` (CollectRanges).
  Choice BestAccess(const sp::ViewNodes& conjuncts, const Ranges& ranges, bool allow_or) {
    Choice best;
    auto consider = [&best](Choice c) {
      if (c.valid() && c.cost < best.cost) best = std::move(c);
    };
    for (size_t i = 0; i < conjuncts.size(); ++i) {
      const sp::ViewNode& c = *conjuncts[i];
      if (const std::optional<sp::IndexableConjunct> ix = sp::AsIndexable(view_, c)) {
        if (ix->kind == sp::IndexableConjunct::Kind::kRange) continue;  // in `ranges`
        Choice eq;
        if (AddKeys(ix->attribute, ix->values, &eq)) {
          eq.proves = static_cast<int>(i);
          consider(std::move(eq));
        }
        continue;
      }
      if (c.kind == sp::ViewNode::Kind::kLike && !c.negated) {
        const sa::LikePattern& p = *c.like;
        Choice ch;
        Access a;
        a.attr = Id(c.name);
        a.str = p.literal_prefix();
        if (p.is_exact()) {
          a.kind = Access::Kind::kEqString;  // LIKE without wildcards is string equality
          ch.proves = static_cast<int>(i);
        } else if (!a.str.empty()) {
          a.kind = Access::Kind::kPrefix;
          if (p.is_prefix()) ch.proves = static_cast<int>(i);  // 'abc%': exactly a prefix
        } else {
          continue;
        }
        ch.cost = stats_.Cost(a);
        ch.accesses.push_back(a);
        consider(std::move(ch));
        continue;
      }
      if (allow_or && c.kind == sp::ViewNode::Kind::kOr) {
        consider(OrAccess(c, static_cast<int>(i)));
      }
    }
    for (const Range& r : ranges) {
      Choice ch;
      Access a;
      a.attr = Id(r.attribute);
      if (r.has_lo && r.has_hi) {
        a.bounds = Access::Bounds{r.lo, r.hi};
        if (IntervalBucket(r.lo, r.hi, &a.width_class, &a.key.i)) {
          a.kind = Access::Kind::kInterval;
        } else {
          a.kind = Access::Kind::kWide;  // also an empty interval: found, then refused by checks
        }
      } else {
        a.kind = r.has_lo ? Access::Kind::kAtLeast : Access::Kind::kAtMost;
        a.key.d = r.has_lo ? r.lo : r.hi;
      }
      ch.cost = stats_.Cost(a);
      ch.accesses.push_back(a);
      consider(std::move(ch));
    }
    return best;
  }

  // An access per branch of the OR `node` (nested ORs flattened), or nothing when a branch has
  // none. Branches that are all equalities on one attribute need no dedupe (an event value hits
  // one key), and prove the OR when each branch is a lone equality.
  Choice OrAccess(const sp::ViewNode& node, int index) {
    const sp::ViewNodes branches = view_.OrBranches(node);
    if (branches.size() > kMaxBranches) return Choice();
    Choice out;
    out.cost = kCostOrOverhead;
    out.or_conjunct = index;
    for (const sp::ViewNode* b : branches) {
      Choice::Branch branch{view_.Conjuncts(b), -1};
      Choice c = BestAccess(branch.conjuncts, CollectRanges(branch.conjuncts), /*allow_or=*/false);
      if (!c.valid()) return Choice();
      branch.proves = c.proves;
      out.cost += c.cost;
      for (Access a : c.accesses) {
        a.branch = static_cast<uint16_t>(out.branches.size());
        out.accesses.push_back(a);
      }
      out.branches.push_back(std::move(branch));
      if (out.accesses.size() > kMaxKeys) return Choice();
    }
    // An event reaches the record once per access it hits; only distinct equality keys of one
    // attribute are exclusive (an event value hits one of them).
    const uint32_t attr = out.accesses.front().attr;
    bool exclusive = true;
    for (size_t i = 0; i < out.accesses.size() && exclusive; ++i) {
      const Access& a = out.accesses[i];
      exclusive = IsEquality(a.kind) && a.attr == attr;
      for (size_t j = 0; j < i && exclusive; ++j) exclusive = !SameKey(a, out.accesses[j]);
    }
    out.dedupe = !exclusive;
    return out;
  }

  Record* rec_;
  InternFn intern_;
  const AccessStats& stats_;
  const sp::View& view_;
  // What the record's CheckLists will hold.
  std::vector<std::vector<Check>> checks_;
  std::vector<std::vector<Check>> disjunctions_;
  std::unique_ptr<CheckLists> lists_;
  absl::InlinedVector<RangeTerm, RangeIndex::kMaxTerms> terms_;
  absl::InlinedVector<std::pair<absl::string_view, uint32_t>, 8> names_;
  absl::InlinedVector<uint32_t, 8> attributes_;
};

}  // namespace

double AccessStats::Cost(const Access& a) const {
  constexpr double kEq = 1, kPrefix = 2, kInterval = 4, kOneSided = 8;
  auto it = attributes_.find(a.attr);
  const PerAttribute* p = it == attributes_.end() ? nullptr : &it->second;
  auto count = [](const auto& map, const auto& key) -> double {
    auto i = map.find(key);
    return i == map.end() ? 0 : static_cast<double>(i->second);
  };
  auto share = [](size_t n) { return 1.0 / static_cast<double>(std::max<size_t>(1, n)); };
  switch (a.kind) {
    case Access::Kind::kEqString:
      return kEq + (p ? count(p->strings, a.str) * share(p->keys()) : 0);
    case Access::Kind::kEqInt: return kEq + (p ? count(p->ints, a.key.i) * share(p->keys()) : 0);
    case Access::Kind::kEqDouble:
      return kEq + (p ? count(p->doubles, a.key.d) * share(p->keys()) : 0);
    case Access::Kind::kEqBool:
      return kEq + (p ? static_cast<double>(p->bools[a.key.b ? 1 : 0]) * share(p->keys()) : 0);
    case Access::Kind::kPrefix:
      return kPrefix + (p ? count(p->prefixes, a.str) * share(p->prefixes.size()) : 0);
    case Access::Kind::kInterval: {
      if (p == nullptr) return kInterval;
      auto c = p->intervals.find(a.width_class);
      if (c == p->intervals.end()) return kInterval;
      // An event scans kBucketsToScan neighbouring buckets of each class.
      return kInterval +
             kBucketsToScan * count(c->second.buckets, a.key.i) * share(c->second.buckets.size());
    }
    case Access::Kind::kWide: return kInterval + (p ? static_cast<double>(p->wide) : 0);
    case Access::Kind::kAtLeast:
    case Access::Kind::kAtMost: return kOneSided + (p ? static_cast<double>(p->one_sided) / 2 : 0);
    case Access::Kind::kRanges: return 0;  // chosen by its own rule (RangeIndexAccess)
    case Access::Kind::kUnindexed: break;
  }
  return std::numeric_limits<double>::infinity();
}

void AccessStats::Extend(uint32_t attr, double v) {
  if (!std::isfinite(v)) return;
  Span& s = spans_[attr];
  s.lo = std::min(s.lo, v);
  s.hi = std::max(s.hi, v);
}

double AccessStats::Selectivity(uint32_t attr, double lo, double hi) const {
  // The span seen so far, widened by this range's own finite bounds: a range outside what was
  // seen is judged by how far apart they lie, not as holding nothing.
  Span s;
  if (auto it = spans_.find(attr); it != spans_.end()) s = it->second;
  for (double v : {lo, hi}) {
    if (std::isfinite(v)) {
      s.lo = std::min(s.lo, v);
      s.hi = std::max(s.hi, v);
    }
  }
  const double span = s.hi - s.lo;
  if (!(span > 0) || !std::isfinite(span)) return 1;
  const double held = std::min(hi, s.hi) - std::max(lo, s.lo);
  return std::clamp(held / span, 0.0, 1.0);
}

void AccessStats::Count(const Record& rec, int delta, absl::Span<const RangeTerm> range_terms) {
  for (const Access& a : rec.accesses) {
    if (a.kind == Access::Kind::kUnindexed) continue;
    if (delta > 0) {  // the spans only grow
      switch (a.kind) {
        case Access::Kind::kInterval:
        case Access::Kind::kWide:
          Extend(a.attr, a.bounds.lo);
          Extend(a.attr, a.bounds.hi);
          break;
        case Access::Kind::kAtLeast:
        case Access::Kind::kAtMost: Extend(a.attr, a.key.d); break;
        case Access::Kind::kRanges:
          for (const RangeTerm& t : range_terms) {
            Extend(t.attr, t.lo);
            Extend(t.attr, t.hi);
          }
          break;
        default: break;
      }
    }
    if (a.kind == Access::Kind::kRanges) continue;  // no per-attribute count
    PerAttribute& p = attributes_[a.attr];
    auto bump = [delta](auto& map, const auto& key) {
      auto [i, inserted] = map.try_emplace(key, 0);
      if ((i->second += delta) == 0) map.erase(i);
    };
    switch (a.kind) {
      case Access::Kind::kEqString: bump(p.strings, a.str); break;
      case Access::Kind::kEqInt: bump(p.ints, a.key.i); break;
      case Access::Kind::kEqDouble: bump(p.doubles, a.key.d); break;
      case Access::Kind::kEqBool: p.bools[a.key.b ? 1 : 0] += delta; break;
      case Access::Kind::kPrefix: bump(p.prefixes, a.str); break;
      case Access::Kind::kInterval: {
        IntervalClass& c = p.intervals[a.width_class];
        bump(c.buckets, a.key.i);
        if (c.buckets.empty()) p.intervals.erase(a.width_class);
        break;
      }
      case Access::Kind::kWide: p.wide += delta; break;
      case Access::Kind::kAtLeast:
      case Access::Kind::kAtMost: p.one_sided += delta; break;
      case Access::Kind::kRanges:
      case Access::Kind::kUnindexed: break;
    }
    if ((p.total += delta) == 0) attributes_.erase(a.attr);
  }
}

bool Record::TermsHold(AttrValues values) const {
  for (const RangeTerm& t : terms()) {
    const AttributeValue* v = values[t.attr];
    if (v == nullptr) return false;
    if (const int64_t* i = std::get_if<int64_t>(v)) {
      if (sa::CompareInt64Double(*i, t.lo) < 0 || sa::CompareInt64Double(*i, t.hi) > 0) {
        return false;
      }
    } else if (const double* d = std::get_if<double>(v)) {
      if (!(*d >= t.lo && *d <= t.hi)) return false;  // NaN: UNKNOWN, not TRUE
    } else {
      return false;  // a string or a boolean: FALSE
    }
  }
  return true;
}

void DestroyRecord(Record* rec, Pool& pool) {
  // A record destroyed before both index copies removed it still holds its range index.
  for (Access& a : rec->accesses) {
    if (a.kind == Access::Kind::kRanges && a.range_index != nullptr && a.range_index->Unref()) {
      delete a.range_index;
    }
  }
  const size_t bytes = rec->BlockBytes();
  delete rec->lists();
  if (const TopicFilter* filter = rec->topic_filter()) filter->~TopicFilter();
  rec->~Record();
  pool.Free(rec, bytes);
}

Record* Compile(SubscriberId id, Subscription subscription, InternFn intern,
                const AccessStats& stats, Pool& pool, sp::View* view,
                std::vector<RangeTerm>* range_terms) {
  std::optional<TopicFilter>& filter = SubscriptionParts::topic_filter(subscription);
  const Placement placement = !filter.has_value()       ? Placement::kAnyTopic
                              : filter->has_wildcards() ? Placement::kWildcardTopic
                                                        : Placement::kExactTopic;
  // Places a record made like `plan` in a block sized for its tail, with the topic filter.
  auto place = [&](Record&& plan) {
    plan.placement = placement;
    char* block = static_cast<char*>(pool.Allocate(plan.BlockBytes()));
    Record* rec = new (block) Record(std::move(plan));
    if (filter.has_value()) {
      char* tail = const_cast<char*>(rec->tail());
      const size_t hash = NameHash(filter->text());
      std::memcpy(tail, &hash, sizeof(hash));
      new (tail + sizeof(size_t)) TopicFilter(*std::move(filter));
    }
    return rec;
  };
  const sp::Program* program = SubscriptionParts::selector(subscription).program();
  if (program == nullptr) {  // matches everything its topic filter lets through
    Record plan(id);
    plan.accesses.push_back(Access{});
    plan.verify = Verify::kProven;
    return place(std::move(plan));
  }
  // The record is planned first, then placed in a block sized for its tail.
  Record plan(id);
  plan.program = sp::ProgramRef::Share(program);
  view->Reset(*plan.program);
  Compiler compiler(&plan, intern, stats, *view);
  compiler.Run(view->root(), range_terms);
  std::unique_ptr<CheckLists> lists = compiler.TakeLists();
  plan.has_lists = lists != nullptr;
  const absl::Span<const RangeTerm> terms = compiler.terms();
  const absl::Span<const uint32_t> attributes = compiler.attributes();
  if (plan.ranges_proven) plan.program = sp::ProgramRef();  // its terms say all
  plan.attribute_count =
      static_cast<uint32_t>(plan.ranges_proven ? terms.size() : attributes.size()) & 0x7FFFFFFF;
  Record* rec = place(std::move(plan));
  char* p = const_cast<char*>(rec->tail()) +
            (rec->placement == Placement::kAnyTopic ? 0 : sizeof(size_t) + sizeof(TopicFilter));
  if (lists != nullptr) {
    CheckLists* owned = lists.release();
    std::memcpy(p, &owned, sizeof(owned));
  }
  char* items = const_cast<char*>(rec->items());
  if (rec->ranges_proven) {
    std::memcpy(items, terms.data(), terms.size() * sizeof(RangeTerm));
  } else if (!attributes.empty()) {
    std::memcpy(items, attributes.data(), attributes.size() * sizeof(uint32_t));
  }
  return rec;
}

}  // namespace gryph::matcher_internal
