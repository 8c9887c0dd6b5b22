#include "lib/matcher/plan.h"

#include "absl/hash/hash.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "lib/selector/evaluator.h"
#include "lib/selector/like_pattern.h"
#include "lib/selector/numeric.h"

namespace gryph::matcher_internal {

namespace sa = selector_ast;

namespace {

// `v` (an event value) against a numeric literal: false when v is not a number or is NaN, which
// makes every comparison with it not TRUE.
inline bool CompareNumeric(const AttributeValue& v, Tag tag, Scalar lit, int* cmp) {
  switch (v.index()) {
    case 0: {
      const int64_t x = *std::get_if<int64_t>(&v);
      *cmp = tag == Tag::kInt ? sa::CompareInt64(x, lit.i) : sa::CompareInt64Double(x, lit.d);
      return true;
    }
    case 1: {
      const double x = *std::get_if<double>(&v);
      if (std::isnan(x)) return false;
      *cmp = tag == Tag::kInt ? -sa::CompareInt64Double(lit.i, x) : sa::CompareDouble(x, lit.d);
      return true;
    }
    default:
      return false;
  }
}

// Same-typed equality of a non-numeric literal: nullopt when the types differ (FALSE for both
// = and <>).
inline std::optional<bool> EqualNonNumeric(const AttributeValue& v, const Check& c) {
  if (c.lo_tag == Tag::kString) {
    const auto* s = std::get_if<std::string>(&v);
    if (s == nullptr) return std::nullopt;
    return *s == *static_cast<const std::string*>(c.ptr);
  }
  const auto* b = std::get_if<bool>(&v);
  if (b == nullptr) return std::nullopt;
  return *b == c.lo.b;
}

}  // namespace

bool Check::Holds(AttrValues values, const Event& event) const {
  switch (kind) {
    case Kind::kEqual:
    case Kind::kNotEqual: {
      const AttributeValue* v = values[attr];
      if (v == nullptr) return false;
      if (lo_tag == Tag::kInt || lo_tag == Tag::kDouble) {
        int cmp;
        if (!CompareNumeric(*v, lo_tag, lo, &cmp)) return false;
        return (cmp == 0) == (kind == Kind::kEqual);
      }
      const std::optional<bool> eq = EqualNonNumeric(*v, *this);
      return eq.has_value() && *eq == (kind == Kind::kEqual);
    }
    case Kind::kRange: {
      const AttributeValue* v = values[attr];
      if (v == nullptr) return false;
      int cmp;
      if (lo_tag != Tag::kNone) {
        if (!CompareNumeric(*v, lo_tag, lo, &cmp)) return false;
        if (cmp < 0 || (cmp == 0 && (flags & kLowInclusive) == 0)) return false;
      }
      if (hi_tag != Tag::kNone) {
        if (!CompareNumeric(*v, hi_tag, hi, &cmp)) return false;
        if (cmp > 0 || (cmp == 0 && (flags & kHighInclusive) == 0)) return false;
      }
      return true;
    }
    case Kind::kIn: {
      const AttributeValue* v = values[attr];
      if (v == nullptr) return false;
      const auto& in = *static_cast<const sa::InNode*>(ptr);
      bool found;
      switch (v->index()) {
        case 0:
          if (!in.numeric) return false;
          found = in.ContainsInt64(*std::get_if<int64_t>(v));
          break;
        case 1: {
          const double d = *std::get_if<double>(v);
          if (!in.numeric || std::isnan(d)) return false;
          found = in.ContainsDouble(d);
          break;
        }
        case 2:
          if (in.numeric) return false;
          found = in.ContainsString(*std::get_if<std::string>(v));
          break;
        default:
          return false;  // a boolean is in no list, nor outside one
      }
      return found != in.negated;
    }
    case Kind::kLike: {
      const AttributeValue* v = values[attr];
      if (v == nullptr) return false;
      const auto* s = std::get_if<std::string>(v);
      if (s == nullptr) return false;
      const auto& like = *static_cast<const sa::LikeNode*>(ptr);
      return like.compiled_pattern.Matches(*s) != like.negated;
    }
    case Kind::kIsNull:
      return values[attr] == nullptr;
    case Kind::kIsNotNull:
      return values[attr] != nullptr;
    case Kind::kGeneric:
      return sa::EvaluateCondition(*static_cast<const sa::Node*>(ptr), event) == Truth::kTrue;
  }
  return false;
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
  *bucket = static_cast<int64_t>(std::floor(std::ldexp(lo, -e)));
  return true;
}

bool ValueBucket(double v, int32_t width_class, int64_t* bucket) {
  const double q = std::ldexp(v, -width_class);
  // A stored interval has |lo / 2^e| < 2^41 and width < 2^e, so a value inside one has
  // |v / 2^e| < 2^41 + 1; anything larger (or NaN) is in none.
  if (!(std::fabs(q) < 0x1p61)) return false;
  *bucket = static_cast<int64_t>(std::floor(q));
  return true;
}

namespace {

// A candidate access: the index slots it needs and what it proves.
struct Choice {
  int64_t cost = std::numeric_limits<int64_t>::max();
  absl::InlinedVector<Access, 1> accesses;
  // The conjunct (index into the conjunct list) an exact access proves, or -1.
  int proves = -1;
  bool dedupe = false;
  bool valid() const { return !accesses.empty(); }
};

constexpr int64_t kCostOrOverhead = 2;
constexpr size_t kMaxKeys = 64;      // more values than this: not worth the index entries
constexpr size_t kMaxBranches = 16;  // OR branches indexed one by one at most

int CheckCost(Check::Kind k) {
  switch (k) {
    case Check::Kind::kEqual: return 0;
    case Check::Kind::kIn: return 1;
    case Check::Kind::kIsNull:
    case Check::Kind::kIsNotNull: return 2;
    case Check::Kind::kRange: return 3;
    case Check::Kind::kNotEqual: return 4;
    case Check::Kind::kLike: return 5;
    case Check::Kind::kGeneric: return 6;
  }
  return 6;
}

void SetLiteral(const AttributeValue& v, Tag* tag, Scalar* s, const void** ptr) {
  switch (v.index()) {
    case 0: *tag = Tag::kInt; s->i = *std::get_if<int64_t>(&v); break;
    case 1: *tag = Tag::kDouble; s->d = *std::get_if<double>(&v); break;
    case 2: *tag = Tag::kString; *ptr = std::get_if<std::string>(&v); break;
    default: *tag = Tag::kBool; s->b = *std::get_if<bool>(&v); break;
  }
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
  Compiler(Record* rec, InternFn intern, const AccessStats& stats)
      : rec_(rec), intern_(intern), stats_(stats) {}

  void Run(const sa::Node* root) {
    const std::vector<const sa::Node*> conjuncts = sa::Conjuncts(root);
    std::vector<Check> checks;
    checks.reserve(conjuncts.size());
    for (const sa::Node* c : conjuncts) checks.push_back(CompileCheck(*c));

    Choice best = BestAccess(conjuncts, /*allow_or=*/true);
    if (!best.valid()) {
      best.accesses.push_back(Access{});  // unindexed: every check stays
      best.proves = -1;
    }
    rec_->accesses = std::move(best.accesses);
    rec_->dedupe = best.dedupe;
    for (size_t i = 0; i < checks.size(); ++i) {
      if (static_cast<int>(i) != best.proves) rec_->checks.push_back(checks[i]);
    }
    std::stable_sort(rec_->checks.begin(), rec_->checks.end(), [](const Check& a, const Check& b) {
      return CheckCost(a.kind) < CheckCost(b.kind);
    });
    if (rec_->checks.empty()) {
      rec_->verify = Verify::kProven;
    } else if (rec_->checks.size() == 1) {
      rec_->verify = Verify::kFirstCheck;
    } else {
      rec_->verify = Verify::kAllChecks;
    }
  }

 private:
  uint32_t Id(absl::string_view name) {
    for (const auto& [n, id] : rec_->attributes) {
      if (n == name) return id;
    }
    const uint32_t id = intern_(name);
    rec_->attributes.emplace_back(name, id);
    return id;
  }

  Check CompileCheck(const sa::Node& c) {
    Check k;
    if (const std::optional<sa::IndexableConjunct> ix = sa::AsIndexable(c)) {
      k.attr = Id(ix->attribute);
      switch (ix->kind) {
        case sa::IndexableConjunct::Kind::kEqual:
          k.kind = Check::Kind::kEqual;
          SetLiteral(*ix->values[0], &k.lo_tag, &k.lo, &k.ptr);
          return k;
        case sa::IndexableConjunct::Kind::kIn:
          k.kind = Check::Kind::kIn;
          k.ptr = c.As<sa::InNode>();
          return k;
        case sa::IndexableConjunct::Kind::kRange:
          k.kind = Check::Kind::kRange;
          if (ix->lower != nullptr) {
            SetLiteral(*ix->lower, &k.lo_tag, &k.lo, &k.ptr);
            if (ix->lower_inclusive) k.flags |= Check::kLowInclusive;
          }
          if (ix->upper != nullptr) {
            SetLiteral(*ix->upper, &k.hi_tag, &k.hi, &k.ptr);
            if (ix->upper_inclusive) k.flags |= Check::kHighInclusive;
          }
          k.ptr = nullptr;  // numeric literals only: nothing to point at
          return k;
      }
    }
    if (const auto* b = c.As<sa::BinaryNode>(); b != nullptr && b->kind() == sa::NodeKind::kNotEqual) {
      const auto* id = b->lhs->As<sa::IdentifierNode>();
      const auto* lit = b->rhs->As<sa::LiteralNode>();
      if (id == nullptr || lit == nullptr) {
        id = b->rhs->As<sa::IdentifierNode>();
        lit = b->lhs->As<sa::LiteralNode>();
      }
      if (id != nullptr && lit != nullptr) {
        k.kind = Check::Kind::kNotEqual;
        k.attr = Id(id->name);
        SetLiteral(lit->value, &k.lo_tag, &k.lo, &k.ptr);
        return k;
      }
    }
    if (const auto* like = c.As<sa::LikeNode>()) {
      k.kind = Check::Kind::kLike;
      k.attr = Id(like->attribute);
      k.ptr = like;
      return k;
    }
    if (const auto* n = c.As<sa::IsNullNode>()) {
      k.kind = n->negated ? Check::Kind::kIsNotNull : Check::Kind::kIsNull;
      k.attr = Id(n->attribute);
      return k;
    }
    k.kind = Check::Kind::kGeneric;
    k.ptr = &c;
    return k;
  }

  // Equality accesses for `values` of `attribute`, duplicates (5 and 5.0) merged.
  bool AddKeys(absl::string_view attribute, const std::vector<const AttributeValue*>& values,
               Choice* out) {
    const uint32_t attr = Id(attribute);
    for (const AttributeValue* v : values) {
      Access a;
      a.attr = attr;
      switch (v->index()) {
        case 2:
          a.kind = Access::Kind::kEqString;
          a.str = *std::get_if<std::string>(v);
          break;
        case 3:
          a.kind = Access::Kind::kEqBool;
          a.key.b = *std::get_if<bool>(v);
          break;
        default:
          if (!NumericKey(*v, &a.kind, &a.key)) continue;  // NaN literals do not exist; be safe
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

  // The best single access among `conjuncts` (an OR among them counts only when allow_or).
  Choice BestAccess(const std::vector<const sa::Node*>& conjuncts, bool allow_or) {
    Choice best;
    auto consider = [&best](Choice c) {
      if (c.valid() && c.cost < best.cost) best = std::move(c);
    };
    // Numeric ranges merged per attribute: [max of lows, min of highs], rounded, inclusive.
    struct Range {
      absl::string_view attribute;
      double lo = -std::numeric_limits<double>::infinity();
      double hi = std::numeric_limits<double>::infinity();
      bool has_lo = false;
      bool has_hi = false;
    };
    absl::InlinedVector<Range, 2> ranges;
    for (size_t i = 0; i < conjuncts.size(); ++i) {
      const sa::Node& c = *conjuncts[i];
      if (const std::optional<sa::IndexableConjunct> ix = sa::AsIndexable(c)) {
        if (ix->kind == sa::IndexableConjunct::Kind::kRange) {
          auto it = std::find_if(ranges.begin(), ranges.end(),
                                 [&](const Range& r) { return r.attribute == ix->attribute; });
          if (it == ranges.end()) {
            ranges.push_back(Range{ix->attribute});
            it = ranges.end() - 1;
          }
          if (ix->lower != nullptr) {
            it->lo = std::max(it->lo, RangeValue(*ix->lower));
            it->has_lo = true;
          }
          if (ix->upper != nullptr) {
            it->hi = std::min(it->hi, RangeValue(*ix->upper));
            it->has_hi = true;
          }
          continue;
        }
        Choice eq;
        if (AddKeys(ix->attribute, ix->values, &eq)) {
          eq.proves = static_cast<int>(i);
          consider(std::move(eq));
        }
        continue;
      }
      if (const auto* like = c.As<sa::LikeNode>(); like != nullptr && !like->negated) {
        const sa::LikePattern& p = like->compiled_pattern;
        Choice ch;
        Access a;
        a.attr = Id(like->attribute);
        a.str = p.literal_prefix();
        if (p.is_exact()) {
          a.kind = Access::Kind::kEqString;  // LIKE without wildcards is string equality
          ch.proves = static_cast<int>(i);
        } else if (!a.str.empty()) {
          a.kind = Access::Kind::kPrefix;
        } else {
          continue;
        }
        ch.cost = stats_.Cost(a);
        ch.accesses.push_back(a);
        consider(std::move(ch));
        continue;
      }
      if (allow_or && c.kind() == sa::NodeKind::kOr) consider(OrAccess(c, static_cast<int>(i)));
    }
    for (const Range& r : ranges) {
      Choice ch;
      Access a;
      a.attr = Id(r.attribute);
      if (r.has_lo && r.has_hi) {
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
  Choice OrAccess(const sa::Node& node, int index) {
    std::vector<const sa::Node*> branches;
    std::vector<const sa::Node*> stack = {&node};
    while (!stack.empty()) {
      const sa::Node* n = stack.back();
      stack.pop_back();
      if (n->kind() == sa::NodeKind::kOr) {
        const auto& ops = n->As<sa::LogicalNode>()->operands;
        for (auto it = ops.rbegin(); it != ops.rend(); ++it) stack.push_back(it->get());
      } else {
        branches.push_back(n);
      }
      if (branches.size() > kMaxBranches) return Choice();
    }
    Choice out;
    out.cost = kCostOrOverhead;
    bool all_lone_equalities = true;
    for (const sa::Node* b : branches) {
      const std::vector<const sa::Node*> conjuncts = sa::Conjuncts(b);
      Choice c = BestAccess(conjuncts, /*allow_or=*/false);
      if (!c.valid()) return Choice();
      if (conjuncts.size() != 1 || c.proves != 0) all_lone_equalities = false;
      out.cost += c.cost;
      for (const Access& a : c.accesses) {
        if (std::none_of(out.accesses.begin(), out.accesses.end(),
                         [&](const Access& x) { return SameKey(a, x); })) {
          out.accesses.push_back(a);
        }
      }
      if (out.accesses.size() > kMaxKeys) return Choice();
    }
    const uint32_t attr = out.accesses.front().attr;
    const bool one_attribute_equalities =
        std::all_of(out.accesses.begin(), out.accesses.end(),
                    [&](const Access& a) { return IsEquality(a.kind) && a.attr == attr; });
    out.dedupe = !one_attribute_equalities;
    out.proves = one_attribute_equalities && all_lone_equalities ? index : -1;
    return out;
  }

  Record* rec_;
  InternFn intern_;
  const AccessStats& stats_;
};

}  // namespace

int64_t AccessStats::Cost(const Access& a) const {
  // Fixed parts rank the kinds when nothing is known: an equality key selects one value, a
  // prefix several, an interval a stretch, a one-sided range typically half of all values.
  constexpr int64_t kPrefix = 4, kInterval = 16, kOneSided = 64;
  auto it = attributes_.find(a.attr);
  const PerAttribute* p = it == attributes_.end() ? nullptr : &it->second;
  auto count = [](const auto& map, const auto& key) -> int64_t {
    auto i = map.find(key);
    return i == map.end() ? 0 : i->second;
  };
  switch (a.kind) {
    case Access::Kind::kEqString: return 1 + (p ? count(p->strings, a.str) : 0);
    case Access::Kind::kEqInt: return 1 + (p ? count(p->ints, a.key.i) : 0);
    case Access::Kind::kEqDouble: return 1 + (p ? count(p->doubles, a.key.d) : 0);
    case Access::Kind::kEqBool: return 1 + (p ? p->bools[a.key.b ? 1 : 0] : 0);
    case Access::Kind::kPrefix: return kPrefix + (p ? p->prefixes / 16 : 0);
    case Access::Kind::kInterval:
    case Access::Kind::kWide: return kInterval + (p ? p->intervals / 32 : 0);
    case Access::Kind::kAtLeast:
    case Access::Kind::kAtMost: return kOneSided + (p ? p->one_sided / 4 : 0);
    case Access::Kind::kUnindexed: break;
  }
  return std::numeric_limits<int32_t>::max();
}

void AccessStats::Count(const Record& rec, int delta) {
  for (const Access& a : rec.accesses) {
    if (a.kind == Access::Kind::kUnindexed) continue;
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
      case Access::Kind::kPrefix: p.prefixes += delta; break;
      case Access::Kind::kInterval:
      case Access::Kind::kWide: p.intervals += delta; break;
      case Access::Kind::kAtLeast:
      case Access::Kind::kAtMost: p.one_sided += delta; break;
      case Access::Kind::kUnindexed: break;
    }
    if ((p.total += delta) == 0) attributes_.erase(a.attr);
  }
}

void DestroyRecord(Record* rec, Pool& pool) {
  rec->~Record();
  pool.Free(rec, sizeof(Record));
}

Record* Compile(SubscriberId id, Subscription subscription, InternFn intern,
                const AccessStats& stats, Pool& pool) {
  Record* rec = new (pool.Allocate(sizeof(Record))) Record(id, std::move(subscription));
  const TopicFilter* filter = rec->subscription.topic_filter();
  if (filter == nullptr) {
    rec->placement = Placement::kAnyTopic;
  } else {
    rec->placement = filter->has_wildcards() ? Placement::kWildcardTopic : Placement::kExactTopic;
    rec->topic = filter->text();
    rec->topic_hash = NameHash(rec->topic);
  }
  const Selector& selector = rec->subscription.selector();
  if (selector.matches_everything()) {
    rec->accesses.push_back(Access{});
    rec->verify = Verify::kProven;
    return rec;
  }
  Compiler(rec, intern, stats).Run(selector.ast()->root());
  return rec;
}

}  // namespace gryph::matcher_internal
