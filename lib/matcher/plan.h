// Internal: how the matcher indexes one subscription — its Record.
//
// Compile() turns a Subscription into a Record: where its topic filter places it (no filter, an
// exact topic, a wildcard filter), the "accesses" under which the index files it, and the
// "checks" that a candidate found through those accesses must still pass.
//
// A selector is TRUE exactly when each of its top-level conjuncts (selector_ast::Conjuncts) is
// TRUE, so the matcher picks one conjunct as the access — the one AccessStats expects to bring in
// fewest candidates per event — and verifies the others:
//
//   access                          from                                 lookup
//   equality key (one per value)    a = lit, a IN (...), a LIKE 'exact'  hash of a normalized key
//   interval [lo, hi]               ranges and BETWEEN on one attribute  width-class buckets
//   at-least lo / at-most hi        one-sided ranges                     ordered set of bounds
//   LIKE prefix                     a LIKE 'abc%...'                     hash of each prefix length
//   one of the above per branch     an OR whose every branch has one     several lookups, deduped
//   the range index (every range)   >= 2 unselective numeric ranges on   counting per attribute
//                                   distinct attributes (lib/matcher/range_index.h)
//   unindexed                       anything else, or an empty selector  scanned per event
//
// The range index is chosen over the single access when a selector constrains at least two
// attributes by numeric ranges, none of which is selective (each holds for at least
// kSelectiveRange of its attribute's observed span of bounds, AccessStats::Selectivity), and no
// equality, prefix or OR access is cheap (cost below kRangeIndexCost): filed under one of those
// ranges it would be a candidate for a large share of the events, while the range index costs
// it about one byte decrement per range an event satisfies.
//
// Equality keys and pure LIKE prefixes ('abc%') are exact: a hit proves the conjunct, which is
// then not checked again. Ranges are kept as doubles rounded to nearest (the same rounding for
// bounds and event values, which keeps `<=`), inclusive: a superset, so the range conjunct stays
// among the checks. An OR access gives each branch its own check list — the branch's other
// conjuncts and the selector's other conjuncts — since the selector is TRUE exactly when all of
// those are, for some branch whose access found the record. The final answer for every candidate
// is therefore exactly Subscription::Matches.
//
// The record keeps the selector's compiled program (lib/selector/program.h), not its text or a
// tree: the planner reads the program through a selector_program::View, and checks point into
// the program. Checks apply the program's three-valued rules for the simple conditions —
// comparisons with a literal, IN, LIKE, IS NULL, a boolean attribute, NOT over any of these, and
// ORs of them — reading attribute values through interned attribute ids; IN lists, LIKE patterns
// and anything else are evaluated by the program itself (Program::In, LikePattern, and
// Program::EvaluateRange over the conjunct's code), so the semantics live there once. A record
// proven by its range terms (ranges_proven: the selector is a conjunction of inclusive ranges on
// distinct attributes, bounds exactly floats) keeps those terms instead — three numbers each, the
// whole of what the selector says — and compares event values with them exactly
// (lib/selector/numeric.h, the evaluator's rule for numbers).
//
// Invariants of a Record:
//   - `accesses` is never empty; all accesses of a record live in the same topic group.
//   - For each access and each index copy c, `pos[c]` is where that copy keeps the entry of that
//     access (meaningful only in position-tracked lists; written by the copy's writer only).
//   - lists()->checks[a.branch] exists for every access a, except that a record with an empty
//     selector, or a ranges_proven one (whose range terms are exactly its selector), has no
//     lists (BranchChecks gives an empty list).
//   - `dedupe` is set when one event may reach the record through more than one access.
//   - The record holds a reference to its program, so every pointer into the program (string
//     literals, IN operations, LIKE patterns, generic conditions) lives as long as the record;
//     kOr checks point into lists()->disjunctions, which is never changed after Compile.
//   - The ids of its attributes stay interned (the matcher's name table) until the record is
//     destroyed, so that both index copies can name them when they add and remove it.

#ifndef GRYPH_LIB_MATCHER_PLAN_H_
#define GRYPH_LIB_MATCHER_PLAN_H_

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gryph/event.h"
#include "gryph/selector.h"
#include "gryph/subscription.h"
#include "gryph/tick.h"
#include "lib/matcher/pool.h"
#include "lib/matcher/range_index.h"
#include "lib/selector/program.h"

namespace gryph::matcher_internal {

// Attribute values of the event being matched, by interned attribute id (nullptr: absent).
using AttrValues = const AttributeValue* const*;

// The type of a literal kept inline in a Check or an Access.
enum class Tag : uint8_t { kNone, kInt, kDouble, kString, kBool };

union Scalar {
  int64_t i;
  double d;
  bool b;
};

// One conjunct to verify: 24 bytes, so that index entries carry two inline. A check evaluates its
// condition with the evaluator's three-valued rules and holds when the result is TRUE — or FALSE
// when `negated`: `NOT (a = 1)`, `NOT a`, `NOT (a IN (...))` are checks too, and differ from
// `a <> 1` or `a NOT IN (...)` exactly where three-valued logic says they do.
struct Check {
  enum class Kind : uint8_t {
    kEqual,     // attr = lit: a number in lo (lo_tag), a bool in lo.b, or a string (see below)
    kNotEqual,  // attr <> lit (same representation)
    kRange,     // lo <(=) attr <(=) hi; tag kNone for an absent bound
    kIn,        // ptr: the program's IN operation (NOT IN too)
    kLike,      // ptr: the LikePattern; flags kNotLike for NOT LIKE
    kIsNull,    // attr IS NULL
    kIsNotNull,
    kIsTrue,   // attr used as a condition: TRUE for boolean true, UNKNOWN unless boolean
    kInShort,  // attr IN (v1[, v2]): values in lo and hi (tags; string lengths in flags' nibbles)
    kNotInShort,
    kOr,  // ptr: lo.i checks, branches each closed by kBranchEnd (owned by the record)
    kBranchEnd,
    kGeneric,  // ptr: the Program; lo.i: the condition's code, begin | end << 32
  };
  // Range flags.
  static constexpr uint8_t kLowInclusive = 1;
  static constexpr uint8_t kHighInclusive = 2;
  // A string literal is `ptr` (its varint length and bytes in the program, BytesAt); its first 8
  // bytes are also packed in lo, and `flags` is its length when at most 8 (then the comparison
  // reads no other memory), else kLongString.
  static constexpr uint8_t kLongString = 0xFF;
  // kLike flags.
  static constexpr uint8_t kNotLike = 1;

  Kind kind = Kind::kGeneric;
  uint8_t tags = 0;  // lo_tag() | hi_tag() << 4
  uint8_t flags = 0;
  bool negated = false;
  uint32_t attr = 0;
  Scalar lo{0};
  union {
    Scalar hi;                  // kRange, kInShort
    const void* ptr = nullptr;  // strings, kIn, kLike, kOr, kGeneric
  };

  Tag lo_tag() const { return static_cast<Tag>(tags & 0xF); }
  Tag hi_tag() const { return static_cast<Tag>(tags >> 4); }
  void set_lo_tag(Tag t) { tags = static_cast<uint8_t>((tags & 0xF0) | static_cast<uint8_t>(t)); }
  void set_hi_tag(Tag t) {
    tags = static_cast<uint8_t>((tags & 0x0F) | (static_cast<uint8_t>(t) << 4));
  }

  // The truth of the condition, before `negated`.
  Truth Evaluate(AttrValues values, const Event& event) const;
  // The truth of the conjunct (negation applied).
  Truth Truth3(AttrValues values, const Event& event) const;
  // Whether the check holds (the conjunct is TRUE).
  bool Holds(AttrValues values, const Event& event) const {
    // Inline fast path for the commonest verification: a range over a number of the literals'
    // own type (no NaN possible for int64; a NaN double fails both comparisons, as it must).
    if (kind == Kind::kRange && !negated) {
      const AttributeValue* v = values[attr];
      if (v == nullptr) return false;
      if (v->index() == 1 && (tags & 0x0F) != static_cast<uint8_t>(Tag::kInt) &&
          (tags >> 4) != static_cast<uint8_t>(Tag::kInt)) {
        const double x = *std::get_if<double>(v);
        if (lo_tag() != Tag::kNone && !((flags & kLowInclusive) ? x >= lo.d : x > lo.d))
          return false;
        if (hi_tag() != Tag::kNone && !((flags & kHighInclusive) ? x <= hi.d : x < hi.d)) {
          return false;
        }
        return true;  // a NaN failed the bound's comparison (there is at least one bound)
      }
      if (v->index() == 0 && (tags & 0x0F) != static_cast<uint8_t>(Tag::kDouble) &&
          (tags >> 4) != static_cast<uint8_t>(Tag::kDouble)) {
        const int64_t x = *std::get_if<int64_t>(v);
        if (lo_tag() != Tag::kNone && !((flags & kLowInclusive) ? x >= lo.i : x > lo.i))
          return false;
        return hi_tag() == Tag::kNone || ((flags & kHighInclusive) ? x <= hi.i : x < hi.i);
      }
    }
    return Evaluate(values, event) == (negated ? Truth::kFalse : Truth::kTrue);
  }
};

static_assert(sizeof(Check) == 24);

// Where a subscription's topic filter puts it.
enum class Placement : uint8_t { kAnyTopic, kExactTopic, kWildcardTopic };

// One way the index finds a record.
struct Access {
  // Where each index copy keeps the entry of this access (meaningful only in position-tracked
  // lists; written by that copy's writer only). First, so that it shares the record's first
  // cache lines.
  uint32_t pos[2] = {0, 0};
  enum class Kind : uint8_t {
    kUnindexed,  // the group's scanned list
    kEqString,   // key: str
    kEqInt,      // key: i (every integral numeric in int64 range)
    kEqDouble,   // key: d (other numerics)
    kEqBool,     // key: b
    kAtLeast,    // attr >= key.d
    kAtMost,     // attr <= key.d
    kInterval,   // [lo, hi] in bucket key.i of width class `width_class`
    kWide,       // [lo, hi] that no bucket holds: scanned when the attribute is numeric
    kPrefix,     // string attribute starting with str
    kRanges,     // the group's range index, by every range term (pos: slot)
  };
  Kind kind = Kind::kUnindexed;
  uint16_t branch = 0;  // which of the record's check lists verifies what this access finds
  int32_t width_class = 0;
  uint32_t attr = 0;
  Scalar key{0};
  struct Bounds {
    double lo;
    double hi;
  };
  union {
    absl::string_view str{};  // kEqString, kPrefix: points into the record's program
    Bounds bounds;            // kInterval, kWide: the rounded bounds
    // kRanges: the range index holding the record's terms, shared by both index copies (null
    // until the first copy files them; pos[0] == pos[1] is their slot).
    RangeIndex* range_index;
  };
};
static_assert(sizeof(Access) == 48);

// How a candidate is verified.
enum class Verify : uint8_t {
  kProven,      // the access proves the whole subscription (topic and selector)
  kInline,      // checks (one or two) all kept inline in attribute-index entries
  kMoreChecks,  // checks[0..1] inline, then checks[2..] from the record
};
inline constexpr size_t kInlineChecks = 2;

Verify VerifyOf(const std::vector<Check>& checks);

struct Group;  // lib/matcher/index.h

// A record's check lists (kept apart: a record proven by its range terms, or with an empty
// selector, has none).
struct CheckLists {
  // Check lists, most selective first: checks[a.branch] verifies what access a finds. One list
  // unless the access is an OR, with a list per branch.
  std::vector<std::vector<Check>> checks;
  // What kOr checks point to: an OR compiled so that verifying it reads one array of the
  // record's own rather than walking the selector.
  std::vector<std::vector<Check>> disjunctions;
};

// Fields are ordered so that what changes of the index read comes first. A record lives in one
// pool block with its tail (Compile), which holds only what the record has:
//
//   Record | with a topic filter: its hash (kExactTopic's key in the exact-topic table), then the
//            TopicFilter (at fixed offsets: the index reads them for every change)
//          | with checks: the CheckLists' pointer (owned)
//          | attribute ids (uint32_t each), or a ranges_proven record's RangeTerms
struct Record {
  explicit Record(SubscriberId i) : id(i) {}
  SubscriberId id;
  Placement placement = Placement::kAnyTopic;
  Verify verify = Verify::kProven;  // of the first check list
  bool dedupe = false;
  // A kRanges record whose selector is exactly its range terms, each one inclusive range with
  // bounds exactly floats: a survivor of the range index is a match when the event's values were
  // exact floats too (RangeIndex::Match), with no check to run; else TermsHold decides. It keeps
  // its terms in its tail, which name its attributes, and no program.
  bool ranges_proven = false;
  // The distinct attributes its checks and accesses use (ids in the matcher's name table): in
  // the tail, as ids, or as the terms of a ranges_proven record. (A selector of 2^31 distinct
  // attributes would take gigabytes of text to parse.)
  uint32_t attribute_count : 31 = 0;
  uint32_t has_lists : 1 = 0;  // the tail starts with CheckLists*
  // The group holding the record's entries in each index copy (set by that copy's Add).
  Group* group[2] = {nullptr, nullptr};
  absl::InlinedVector<Access, 1> accesses;
  // The compiled selector, which the checks point into: null when it matches everything, and for
  // a ranges_proven record (its terms say all).
  selector_program::ProgramRef program;

  // The topic filter, or null without one (kAnyTopic).
  const TopicFilter* topic_filter() const {
    return placement == Placement::kAnyTopic
               ? nullptr
               : reinterpret_cast<const TopicFilter*>(tail() + sizeof(size_t));
  }
  // The topic filter's text; empty without one.
  absl::string_view topic() const {
    const TopicFilter* f = topic_filter();
    return f == nullptr ? absl::string_view() : absl::string_view(f->text());
  }
  // NameHash(topic()). REQUIRES: a topic filter.
  size_t topic_hash() const {
    size_t h;
    std::memcpy(&h, tail(), sizeof(h));
    return h;
  }
  // The check lists; null without checks.
  CheckLists* lists() const {
    if (!has_lists) return nullptr;
    CheckLists* l;
    std::memcpy(&l, tail() + TopicBytes(), sizeof(l));
    return l;
  }
  // The checks of `branch`; none for an empty selector.
  const std::vector<Check>& BranchChecks(size_t branch) const {
    static const std::vector<Check> kNone;
    const CheckLists* l = lists();
    return l != nullptr && branch < l->checks.size() ? l->checks[branch] : kNone;
  }
  // Calls f(id) for each attribute the record uses.
  template <typename F>
  void ForEachAttribute(F f) const {
    if (ranges_proven) {
      for (const RangeTerm& t : terms()) f(t.attr);
    } else {
      const char* p = items();
      const uint32_t n = attribute_count;
      for (uint32_t i = 0; i < n; ++i, p += sizeof(uint32_t)) {
        uint32_t attr;
        std::memcpy(&attr, p, sizeof(attr));
        f(attr);
      }
    }
  }
  // A ranges_proven record's terms.
  absl::Span<const RangeTerm> terms() const {
    return {ranges_proven ? reinterpret_cast<const RangeTerm*>(items()) : nullptr,
            ranges_proven ? static_cast<size_t>(attribute_count) : size_t{0}};
  }
  // Whether every term of a ranges_proven record holds for `values`, compared exactly.
  bool TermsHold(AttrValues values) const;
  // Whether BranchChecks(branch)[from..] all hold.
  bool ChecksHold(size_t branch, size_t from, AttrValues values, const Event& event) const {
    const std::vector<Check>& list = BranchChecks(branch);
    for (size_t i = from; i < list.size(); ++i) {
      if (!list[i].Holds(values, event)) return false;
    }
    return true;
  }
  // The bytes of the record's block, tail included.
  size_t BlockBytes() const {
    return sizeof(Record) + TopicBytes() + (has_lists ? sizeof(CheckLists*) : 0) +
           size_t{attribute_count} * (ranges_proven ? sizeof(RangeTerm) : sizeof(uint32_t));
  }

  // Where the tail's ids or terms start.
  const char* items() const {
    return tail() + TopicBytes() + (has_lists ? sizeof(CheckLists*) : 0);
  }
  // Where the tail starts.
  const char* tail() const { return reinterpret_cast<const char*>(this + 1); }

 private:
  size_t TopicBytes() const {
    return placement == Placement::kAnyTopic ? 0 : sizeof(size_t) + sizeof(TopicFilter);
  }
};
static_assert(sizeof(Record) == 96 && alignof(TopicFilter) <= 8 && sizeof(TopicFilter) % 8 == 0 &&
              alignof(RangeTerm) <= 4);

// Takes a Subscription apart (its friend), so that a record keeps only what it needs.
struct SubscriptionParts {
  static const Selector& selector(const Subscription& s) { return s.selector_; }
  static std::optional<TopicFilter>& topic_filter(Subscription& s) { return s.topic_filter_; }
};

// The hash the index's name tables use for topics and topic levels.
size_t NameHash(absl::string_view name);

// Interns an attribute name, returning its id; called once per distinct name of a record.
using InternFn = absl::FunctionRef<uint32_t(absl::string_view)>;

// The owner's statistics for choosing accesses: how many live records are filed under each
// equality key, and under each kind of range or prefix access per attribute. Cost() estimates how
// many candidates an event brings in through an access, so each record goes where it adds least
// work: `side = 'buy' AND symbol = 'IBM'` is filed under 'IBM' once 'buy' is crowded, whatever
// the order of the conjuncts. Owner only (not shared with readers).
class AccessStats {
 public:
  // Expected candidates per event from the structure `a` would join — the records there times
  // the chance that an event looks there — plus a fixed part that ranks the kinds while nothing
  // is known (an equality key selects one value, a prefix several, an interval a stretch, a
  // one-sided range typically half of all values). Values are assumed uniform over the keys,
  // prefixes and buckets in use.
  double Cost(const Access& a) const;
  // Counts (delta +1) or uncounts (-1) the accesses of `rec`; counting a kRanges access extends
  // the spans by its `range_terms` (from Compile).
  void Count(const Record& rec, int delta, absl::Span<const RangeTerm> range_terms = {});
  // The share of an attribute's values a range [lo, hi] (infinite for a missing bound) is
  // expected to hold: its part of the span between the lowest and highest finite range bound
  // filed on that attribute so far (1 while that span is unknown or empty). The span only grows.
  double Selectivity(uint32_t attr, double lo, double hi) const;

 private:
  struct IntervalClass {
    absl::flat_hash_map<int64_t, int64_t> buckets;  // bucket -> records
  };
  struct PerAttribute {
    absl::flat_hash_map<std::string, int64_t> strings;
    absl::flat_hash_map<int64_t, int64_t> ints;
    absl::flat_hash_map<double, int64_t> doubles;
    int64_t bools[2] = {0, 0};
    absl::flat_hash_map<std::string, int64_t> prefixes;
    absl::flat_hash_map<int32_t, IntervalClass> intervals;  // by width class
    int64_t wide = 0;
    int64_t one_sided = 0;
    int64_t total = 0;
    // Distinct equality keys in use: an event carries one of them.
    size_t keys() const {
      return strings.size() + ints.size() + doubles.size() + (bools[0] > 0) + (bools[1] > 0);
    }
  };
  absl::flat_hash_map<uint32_t, PerAttribute> attributes_;
  struct Span {
    double lo = std::numeric_limits<double>::infinity();
    double hi = -std::numeric_limits<double>::infinity();
  };
  absl::flat_hash_map<uint32_t, Span> spans_;  // by attribute: range bounds seen
  void Extend(uint32_t attr, double v);
};

// Builds the record for `subscription` in memory from `pool`; DestroyRecord frees it. `view` is
// scratch memory for the planner (the owner's, reused from one call to the next). A record with
// a kRanges access appends its range terms (one per attribute, the ranges on it merged) to
// `range_terms`, for AccessStats::Count and the range index's File; the record keeps none.
Record* Compile(SubscriberId id, Subscription subscription, InternFn intern,
                const AccessStats& stats, Pool& pool, selector_program::View* view,
                std::vector<RangeTerm>* range_terms);
void DestroyRecord(Record* rec, Pool& pool);

// Normalized equality keys: numbers equal by exact value get the same key (5 and 5.0 are int 5;
// 0.5 stays a double). Returns false for NaN (equal to nothing).
bool NumericKey(const AttributeValue& v, Access::Kind* kind, Scalar* key);
bool NumericKey(const selector_program::Literal& v, Access::Kind* kind, Scalar* key);

// Rounds a numeric value to the double the range indexes order it by. REQUIRES: v is numeric.
inline double RangeValue(const AttributeValue& v) {
  return v.index() == 0 ? static_cast<double>(*std::get_if<int64_t>(&v)) : *std::get_if<double>(&v);
}
inline double RangeValue(const selector_program::Literal& v) {
  return v.type == selector_program::Literal::Type::kInt64 ? static_cast<double>(v.i) : v.d;
}

// Interval buckets: an interval [lo, hi] (rounded, lo <= hi, finite width) has width class e with
// hi - lo < 2^e and lives in bucket floor(lo / u), for a bucket unit u = 2^(e - kBucketShift);
// since v - lo < 2^e = 2^kBucketShift units, a value v can only be inside intervals of buckets
// floor(v / u) - k for k in [0, kBucketsToScan). Smaller units scan fewer intervals that miss v,
// for more lookups: half-width units scan 1.5 widths of interval starts rather than 2. e is kept
// high enough that |lo / 2^e| < 2^41. Returns false when the interval fits no bucket (infinite
// width).
inline constexpr int kBucketShift = 1;
inline constexpr int kBucketsToScan = (1 << kBucketShift) + 1;
bool IntervalBucket(double lo, double hi, int32_t* width_class, int64_t* bucket);
// The bucket of value v in class e, or false when no interval of that class can hold v.
bool ValueBucket(double v, int32_t width_class, int64_t* bucket);

}  // namespace gryph::matcher_internal

#endif  // GRYPH_LIB_MATCHER_PLAN_H_
