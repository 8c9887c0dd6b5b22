// Internal: one copy of the matcher's index. The Matcher keeps two (lib/matcher/matcher.cc):
// readers match against the published one while the owner changes the other.
//
// Layout, from the event inwards:
//
//   any_topic_              the group of subscriptions without a topic filter
//   exact_[topic]           groups of exact topic filters: one hash lookup by the whole topic
//   wildcards_ (a trie)     filters with '+' or '#': one node per level; a node holds the group of
//                           filters ending there (`here`) and of filters ending with '#' after it
//                           (`rest`); literal children by hash, the '+' child apart
//   Group                   `unindexed` entries (topic-only subscriptions, reported as found) and
//                           Content: `residual` entries (verified for every event) and, per
//                           attribute, an AttrIndex
//   AttrIndex               equality hashes (string, normalized int, other double, bool), the
//                           at-least / at-most ordered sets, interval buckets by width class,
//                           wide intervals, LIKE prefixes by length
//   RangeIndex              per group, the records filed by all their ranges (kRanges accesses,
//                           lib/matcher/range_index.h): counted down per event, survivors
//                           verified unless proven
//
// Scale: the exact-topic table and the trie's children are NameTables — hash sets of (hash,
// pointer) slots, the nodes carrying their names — so a level a million wide grows by moving
// 16-byte slots (amortized O(1) per insert) and a lookup compares a precomputed hash before the
// name. Entries are stored by value in vectors (swap-remove, each entry's position kept in its
// record's Access::pos[copy]) or in B-trees keyed by bound. Adding or removing one subscription
// costs the same whatever the width of a level or the number of subscribers of a topic: nothing
// copies a node's children or a list to change it.
//
// Matching reads memory, so the attribute indexes keep what it needs compact: entries are split
// into a hot part (id, verification mode, the first two checks: one cache line) and a cold part
// (record, slot) in parallel vectors, and interval buckets keep float bounds beside them.
//
// Thread-safety: thread-compatible. The Matcher guarantees that Add and Remove never run while a
// reader is inside this copy; any number of readers may call Match concurrently.

#ifndef GRYPH_LIB_MATCHER_INDEX_H_
#define GRYPH_LIB_MATCHER_INDEX_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "gryph/event.h"
#include "gryph/tick.h"
#include "lib/matcher/plan.h"
#include "lib/matcher/pool.h"
#include "lib/matcher/range_index.h"

namespace gryph::matcher_internal {

// An entry of a group's topic-only list: the id, reported as found without touching the record.
struct Entry {
  Record* rec;
  uint64_t id;
  uint32_t slot;  // index into rec->accesses
};

// An entry of the attribute indexes, in two parts kept in parallel arrays. The hot part is what
// matching reads — the id and the record's first two checks, so that most candidates are refused
// or proven without touching the record — in exactly one cache line.
struct alignas(64) HotEntry {
  uint64_t id;
  Verify verify;
  bool dedupe;
  uint8_t inline_checks;  // how many of `checks` are set
  Check checks[kInlineChecks];
};
static_assert(sizeof(HotEntry) == 64);

// The cold part: what changes of the index and the rare longer verifications read.
struct ColdEntry {
  Record* rec;
  uint32_t slot;  // index into rec->accesses
};

struct CheckedEntry {
  HotEntry hot;
  ColdEntry cold;
};

// Sets *hot and *cold to the entry of `rec`'s access `slot`.
void SetChecked(Record* rec, uint32_t slot, HotEntry* hot, ColdEntry* cold);

// Checked entries with O(1) removal (positions stored in the records), hot and cold parts in
// parallel vectors.
class CheckedList {
 public:
  void Add(Record* rec, uint32_t slot, int copy) {
    rec->accesses[slot].pos[copy] = static_cast<uint32_t>(hot_.size());
    // Set in place: an entry built on the stack and copied here was read back in wider loads
    // than it was written with, which cannot be forwarded from the stores and so waited for
    // every older store to reach the cache (the copy's first load took a third of a fresh
    // build's time in the lists).
    SetChecked(rec, slot, &hot_.emplace_back(), &cold_.emplace_back());
  }
  void Remove(const Record* rec, uint32_t slot, int copy) {
    const uint32_t i = rec->accesses[slot].pos[copy];
    if (i + 1 != hot_.size()) {
      hot_[i] = hot_.back();
      cold_[i] = cold_.back();
      cold_[i].rec->accesses[cold_[i].slot].pos[copy] = i;
    }
    hot_.pop_back();
    cold_.pop_back();
    if (hot_.capacity() > 16 && hot_.size() < hot_.capacity() / 4) {
      hot_.shrink_to_fit();
      cold_.shrink_to_fit();
    }
  }
  bool empty() const { return hot_.empty(); }
  size_t size() const { return hot_.size(); }
  const std::vector<HotEntry>& hot() const { return hot_; }
  const std::vector<ColdEntry>& cold() const { return cold_; }

 private:
  std::vector<HotEntry> hot_;
  std::vector<ColdEntry> cold_;
};

// A vector of entries with O(1) removal: each entry's position is stored in its record.
template <typename E, typename Vector = std::vector<E>>
class EntryList {
 public:
  void Add(const E& e, int copy) {
    e.rec->accesses[e.slot].pos[copy] = static_cast<uint32_t>(entries_.size());
    // Stored field by field: copying a whole entry built on the stack reads it back in wider
    // loads than it was written with, which cannot be forwarded from the stores and so wait for
    // every older store to reach the cache — among them the first writes to fresh nodes.
    E& added = entries_.emplace_back();
    added = e;
  }
  void Remove(const Record* rec, uint32_t slot, int copy) {
    const uint32_t i = rec->accesses[slot].pos[copy];
    if (i + 1 != entries_.size()) {
      entries_[i] = entries_.back();
      entries_[i].rec->accesses[entries_[i].slot].pos[copy] = i;
    }
    entries_.pop_back();
    // Give memory back once mostly empty; amortized O(1) like the growth.
    if (entries_.capacity() > 16 && entries_.size() < entries_.capacity() / 4) {
      entries_.shrink_to_fit();
    }
  }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  const Vector& entries() const { return entries_; }

 private:
  Vector entries_;
};

// The entries of intervals, with their bounds in a parallel compact array of float pairs: a
// stabbing query scans 8 bytes per interval and reads the full entry only of those that may hold
// the value. The float bounds are widened outwards (lo rounded down, hi up) and the value rounded
// to nearest, so that `lo <= x <= hi` implies the same for the floats: a superset, which the
// entry's checks then settle exactly.
class IntervalList {
 public:
  void Add(Record* rec, uint32_t slot, double lo, double hi, int copy) {
    bounds_.push_back(Bounds{RoundDown(lo), RoundUp(hi)});
    entries_.Add(rec, slot, copy);
  }
  void Remove(const Record* rec, uint32_t slot, int copy) {
    const uint32_t i = rec->accesses[slot].pos[copy];
    bounds_[i] = bounds_.back();  // mirrors the swap-remove of entries_
    bounds_.pop_back();
    if (bounds_.capacity() > 16 && bounds_.size() < bounds_.capacity() / 4) bounds_.shrink_to_fit();
    entries_.Remove(rec, slot, copy);
  }
  bool empty() const { return bounds_.empty(); }
  size_t size() const { return bounds_.size(); }

  // Calls f(hot, cold) for each interval that may hold x (x is not NaN).
  template <typename F>
  void ForEachHolding(double x, F&& f) const {
    const float xf = FloatRounding::Nearest(x);
    const size_t n = bounds_.size();
    // First the indexes of the hits (fetching their entries), then the entries: the misses on
    // scattered entries overlap instead of queuing behind each comparison.
    constexpr size_t kBatch = 32;
    uint32_t hits[kBatch];
    for (size_t start = 0; start < n; start += kBatch) {
      const size_t end = std::min(n, start + kBatch);
      size_t found = 0;
      for (size_t i = start; i < end; ++i) {
        if (bounds_[i].lo <= xf && xf <= bounds_[i].hi) {
          __builtin_prefetch(&entries_.hot()[i]);
          hits[found++] = static_cast<uint32_t>(i);
        }
      }
      for (size_t k = 0; k < found; ++k) f(entries_.hot()[hits[k]], entries_.cold()[hits[k]]);
    }
  }

 private:
  struct Bounds {
    float lo;
    float hi;
  };
  static float RoundDown(double d) { return FloatRounding::Down(d); }
  static float RoundUp(double d) { return FloatRounding::Up(d); }

  std::vector<Bounds> bounds_;
  CheckedList entries_;
};

// A hash table of heap nodes that carry their own name, keyed by name. A slot is the name's hash
// (NameHash) and a pointer: growth moves 16 bytes per node and never touches the nodes, and a
// lookup with a precomputed hash reads a node only when the hashes agree.
template <typename T>
class NameTable {
 public:
  struct Key {
    absl::string_view name;
    size_t hash;
  };

  explicit NameTable(Pool* pool) : pool_(pool) {}
  NameTable(const NameTable&) = delete;
  NameTable& operator=(const NameTable&) = delete;
  ~NameTable() {
    for (const Slot& s : set_) Destroy(s.node);
  }

  T* Find(const Key& k) const {
    auto it = set_.find(k);
    return it == set_.end() ? nullptr : &it->node->value;
  }
  // Creates a missing node's value from `args`.
  template <typename... Args>
  T& FindOrCreate(const Key& k, Args&&... args) {
    // One probe: the node is created only when the name is absent.
    auto it = set_.lazy_emplace(k, [&](const auto& construct) {
      construct(Slot{k.hash, Create(k, std::forward<Args>(args)...)});
    });
    return it->node->value;
  }
  void Erase(const Key& k) {
    auto it = set_.find(k);
    Node* n = it->node;
    set_.erase(it);
    Destroy(n);
  }
  void Prefetch(const Key& k) const { set_.prefetch(k); }
  // Prefetches the node of `k`, if present (probes the table: best once Prefetch(k) is done).
  // Compares hashes only, reading no node: a collision merely prefetches another node.
  void PrefetchNode(const Key& k) const {
    auto it = set_.find(HashOnly{k.hash});
    if (it != set_.end()) {
      // The value may straddle two lines (nodes are 16-byte aligned).
      __builtin_prefetch(it->node);
      __builtin_prefetch(reinterpret_cast<const char*>(it->node) + sizeof(Node) - 1);
    }
  }
  // The node whose name has the hash of `k`, or null; for prefetching only: compares hashes, not
  // names (reads no node), so a collision may yield another node.
  const T* FindByHashForPrefetch(const Key& k) const {
    auto it = set_.find(HashOnly{k.hash});
    return it == set_.end() ? nullptr : &it->node->value;
  }
  bool empty() const { return set_.empty(); }
  size_t size() const { return set_.size(); }

 private:
  struct Node {
    template <typename... Args>
    explicit Node(size_t s, Args&&... args) : size(s), value(std::forward<Args>(args)...) {}
    absl::string_view name() const { return {reinterpret_cast<const char*>(this + 1), size}; }
    const size_t size;
    T value;
  };
  struct Slot {
    size_t hash;
    Node* node;
  };
  struct HashOnly {
    size_t hash;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(const Slot& s) const { return s.hash; }
    size_t operator()(const Key& k) const { return k.hash; }
    size_t operator()(const HashOnly& k) const { return k.hash; }
  };
  struct Eq {
    using is_transparent = void;
    bool operator()(const Slot& a, const Slot& b) const { return a.node == b.node; }
    bool operator()(const Slot& a, const Key& k) const {
      return a.hash == k.hash && a.node->name() == k.name;
    }
    bool operator()(const Key& k, const Slot& a) const { return (*this)(a, k); }
    bool operator()(const Slot& a, const HashOnly& k) const { return a.hash == k.hash; }
    bool operator()(const HashOnly& k, const Slot& a) const { return (*this)(a, k); }
  };

  template <typename... Args>
  Node* Create(const Key& k, Args&&... args) {
    void* mem = pool_->Allocate(sizeof(Node) + k.name.size());
    Node* n = new (mem) Node(k.name.size(), std::forward<Args>(args)...);
    if (!k.name.empty()) std::memcpy(reinterpret_cast<char*>(n + 1), k.name.data(), k.name.size());
    if constexpr (requires(T & v) { v.SetName(absl::string_view()); }) n->value.SetName(n->name());
    return n;
  }
  void Destroy(Node* n) {
    const size_t bytes = sizeof(Node) + n->size;
    n->~Node();
    pool_->Free(n, bytes);
  }

  Pool* pool_;
  absl::flat_hash_set<Slot, Hash, Eq> set_;
};

struct BoundEntry {
  double bound;
  CheckedEntry entry;
};
struct ByBound {
  bool operator()(const BoundEntry& a, const BoundEntry& b) const {
    if (a.bound != b.bound) return a.bound < b.bound;
    if (a.entry.cold.rec != b.entry.cold.rec) return a.entry.cold.rec < b.entry.cold.rec;
    return a.entry.cold.slot < b.entry.cold.slot;
  }
};

struct AttrIndex {
  absl::flat_hash_map<std::string, CheckedList> strings;
  absl::flat_hash_map<int64_t, CheckedList> ints;
  absl::flat_hash_map<double, CheckedList> doubles;
  CheckedList bools[2];
  absl::btree_set<BoundEntry, ByBound> at_least;  // attr >= bound
  absl::btree_set<BoundEntry, ByBound> at_most;   // attr <= bound
  // Interval buckets by width class, then bucket number.
  absl::btree_map<int32_t, absl::flat_hash_map<int64_t, IntervalList>> intervals;
  IntervalList wide;
  absl::flat_hash_map<std::string, CheckedList> prefixes;
  absl::btree_map<size_t, size_t> prefix_lengths;  // length -> entries with a prefix that long
  size_t entries = 0;
};

// What a group holds beyond subscriptions its topic alone proves.
struct Content {
  CheckedList residual;  // no access: verified for every event reaching the group
  absl::flat_hash_map<uint32_t, std::unique_ptr<AttrIndex>> attrs;  // by attribute id
  // kRanges records; empty while none. Shared with the same group of the other copy.
  RangeIndexRef ranges;
  size_t entries = 0;  // in residual, attrs and ranges
};

struct Group {
  // Subscriptions proven by the topic alone (no selector). Most exact topics have one
  // subscriber: its entry lives inside the group.
  EntryList<Entry, absl::InlinedVector<Entry, 1>> unindexed;
  std::unique_ptr<Content> content;  // null while empty
  bool empty() const { return unindexed.empty() && content == nullptr; }
};

struct TrieNode;

// A group of the trie, which knows its node: removing a wildcard filter walks up from it (a
// record's Group* of a wildcard filter points to a TrieGroup).
struct TrieGroup : Group {
  explicit TrieGroup(TrieNode* n) : node(n) {}
  TrieNode* const node;
};

// A level of the wildcard trie. Its groups and '+' child come from the index's pool, like the
// nodes of `children`.
//
// Invariants: every node but the root holds a group or has a child (a node left with neither is
// pruned at once, and so on upwards); `parent` is null only at the root; a node that is its
// parent's `plus` has `is_plus`, any other non-root node is in its parent's `children` under
// `name` (which points to the name stored with it there).
struct TrieNode {
  explicit TrieNode(Pool* p) : children(p), pool(p) {}
  ~TrieNode();
  TrieNode(const TrieNode&) = delete;
  TrieNode& operator=(const TrieNode&) = delete;

  // Called by NameTable with the name it stores for this node.
  void SetName(absl::string_view n) { name = n; }
  bool empty() const {
    return here == nullptr && rest == nullptr && plus == nullptr && children.empty();
  }

  NameTable<TrieNode> children;
  TrieNode* plus = nullptr;
  TrieGroup* here = nullptr;  // filters whose levels end at this node
  TrieGroup* rest = nullptr;  // filters ending with '#' after this node's levels
  TrieNode* parent = nullptr;
  absl::string_view name;  // of a literal level
  bool is_plus = false;
  Pool* const pool;
};

// A wildcard filter's path down the trie, fetched ahead of Index::Add one dependent step at a
// time (Index::StepWalk): each step reads only what the previous one asked the caches for.
struct TrieWalk {
  const Record* rec = nullptr;
  size_t op = 0;                   // the caller's: which change of its batch this walk serves
  const TrieNode* node = nullptr;  // reached so far (null: the filter's levels not yet fetched)
  uint32_t level = 0;              // the next level to look up under `node`
  bool probed = false;             // the lookup of `level` in node->children is on its way
};

// Per-thread state of one Match call (reused across calls to avoid allocation).
struct Scratch {
  std::vector<const AttributeValue*> values;  // by attribute id; nullptr between calls
  std::vector<uint32_t> set_ids;              // the ids set in `values` by this call
  std::vector<absl::string_view> levels;      // the event topic's levels
  std::vector<size_t> level_hashes;
  std::vector<std::pair<const TrieNode*, size_t>> stack;
  absl::flat_hash_set<uint64_t> seen;  // ids of records reachable several ways
  RangeScratch ranges;
};

class Index {
 public:
  // `copy` (0 or 1) selects the Access::pos slot this copy maintains. Nodes come from `pool`,
  // which must outlive the index. `attribute_names` (the owner's, by interned id) names the
  // attributes of every record added and not yet removed; the index reads it only in Add and
  // Remove.
  Index(int copy, Pool* pool, const std::vector<std::string>* attribute_names)
      : copy_(copy),
        pool_(pool),
        attribute_names_(attribute_names),
        exact_(pool),
        wildcards_(pool) {}
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  // REQUIRES: no reader is inside this copy. `rec` must outlive its presence here. The first
  // copy to add a record with a kRanges access files `range_terms` (Compile's) in the range
  // index the two copies share; the second needs none.
  void Add(Record* rec, absl::Span<const RangeTerm> range_terms = {});
  // REQUIRES: no reader is inside this copy; `rec` was added and not removed.
  void Remove(Record* rec);
  // Completes the Adds since the last call: appends the range terms they filed to the range
  // indexes' cells, in one batch per range index (RangeIndex::Flush). REQUIRES: no reader is
  // inside this copy; called before readers may enter it, and before the other copy changes.
  void FlushRanges();
  // Hints the caches about the structures Add (add) or Remove (!add) of `rec` will touch first.
  // REQUIRES: the record's first cache lines are cached or on their way.
  void Prefetch(const Record* rec, bool add) const;
  // Hints the caches about what Add or Remove of `rec` reaches through the structures Prefetch
  // fetched (depth 1: the node of an existing exact-topic group, the last entry of the group a
  // removal swaps out of) or PrefetchDeeper(rec, add, 1) fetched (depth 2: that entry's record).
  // REQUIRES: Prefetch(rec, add), and for depth 2 also depth 1, were called a while ago.
  void PrefetchDeeper(const Record* rec, bool add, int depth) const;
  // Whether Add of `rec` walks the trie (the record is a wildcard filter's): if so, StepWalk can
  // fetch that path ahead of the Add. REQUIRES: the record's first cache lines are cached.
  static bool Walks(const Record* rec) { return rec->placement == Placement::kWildcardTopic; }
  // Advances `walk` (started as TrieWalk{rec}) by one step: fetches the filter's levels, then per
  // level the child's table slot and the child; last the group. Returns false once nothing is
  // left to fetch. Reads only what earlier steps fetched, so consecutive steps of one walk should
  // be apart by about a cache miss's latency of other work.
  bool StepWalk(TrieWalk& walk) const;

  // Calls sink(id) for each matching subscription, each once.
  void Match(const Event& event, Scratch& scratch,
             absl::FunctionRef<void(SubscriberId)> sink) const;

 private:
  class Matching;

  Group& GroupFor(const Record* rec);  // creates it
  void RemoveWildcard(Record* rec);
  TrieGroup* NewTrieGroup(TrieNode* node);
  void AddToGroup(Group& g, Record* rec, uint32_t slot, absl::Span<const RangeTerm> range_terms);
  void RemoveFromGroup(Group& g, Record* rec, uint32_t slot);

  const int copy_;
  Pool* const pool_;
  const std::vector<std::string>* const attribute_names_;
  absl::flat_hash_map<std::string, uint32_t> names_;  // interned attribute names -> ids
  std::vector<uint32_t> name_refs_;                   // by id: records of this copy using it
  uint32_t id_limit_ = 0;                             // all ids < id_limit_
  Group any_topic_;
  NameTable<Group> exact_;
  TrieNode wildcards_;
  size_t wildcard_records_ = 0;         // in the trie
  std::vector<RangeIndex*> unflushed_;  // range indexes this copy filed terms in, since FlushRanges
};

}  // namespace gryph::matcher_internal

#endif  // GRYPH_LIB_MATCHER_INDEX_H_
