// Internal: one copy of the matcher's index. The Matcher keeps two (lib/matcher/matcher.cc):
// readers match against the published one while the owner changes the other.
//
// Layout, from the event inwards:
//
//   any_topic_              the group of subscriptions without a topic filter
//   exact_[topic]           groups of exact topic filters, one hash lookup by the whole topic
//   wildcard trie           filters with '+' or '#': one node per level; a node holds the group of
//                           filters ending there (`here`) and of filters ending with '#' after it
//                           (`rest`); literal children by hash, the '+' child apart
//   Group                   `unindexed` entries (scanned) and a ContentIndex
//   ContentIndex[attr id]   an AttrIndex per attribute some access of the group uses
//   AttrIndex               equality hashes (string, normalized int, other double, bool), the
//                           at-least / at-most ordered sets, interval buckets by width class,
//                           wide intervals, LIKE prefixes by length
//
// Entries are stored by value in vectors (swap-remove, with each entry's position kept in its
// record's Access::pos[copy]) or in B-trees keyed by bound. Adding or removing one entry is O(1)
// amortized (O(log n) in the B-trees) whatever the size of the node or list: nothing copies a
// node's children or a list to change it — vectors only grow and shrink geometrically.
//
// Thread-safety: thread-compatible. The Matcher guarantees that Add and Remove never run while a
// reader is inside this copy; any number of readers may call Match concurrently.

#ifndef GRYPH_LIB_MATCHER_INDEX_H_
#define GRYPH_LIB_MATCHER_INDEX_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "gryph/event.h"
#include "gryph/tick.h"
#include "lib/matcher/plan.h"

namespace gryph::matcher_internal {

// An index entry for the unindexed lists: what a proven match needs without touching the record.
struct Entry {
  Record* rec;
  uint64_t id;
  uint32_t slot;  // index into rec->accesses
  Verify verify;
  bool dedupe;
};

// An entry of the attribute indexes: also carries the record's first check, so that most
// candidates are refused (or proven) without a cache miss on the record.
struct CheckedEntry {
  Record* rec;
  uint64_t id;
  uint32_t slot;
  Verify verify;
  bool dedupe;
  Check first;
};

// A vector of entries with O(1) removal: each entry's position is stored in its record.
template <typename E>
class EntryList {
 public:
  void Add(const E& e, int copy) {
    e.rec->accesses[e.slot].pos[copy] = static_cast<uint32_t>(entries_.size());
    entries_.push_back(e);
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
  const std::vector<E>& entries() const { return entries_; }

 private:
  std::vector<E> entries_;
};

struct BoundEntry {
  double bound;
  CheckedEntry entry;
};
struct ByBound {
  bool operator()(const BoundEntry& a, const BoundEntry& b) const {
    if (a.bound != b.bound) return a.bound < b.bound;
    if (a.entry.rec != b.entry.rec) return a.entry.rec < b.entry.rec;
    return a.entry.slot < b.entry.slot;
  }
};

struct AttrIndex {
  absl::flat_hash_map<std::string, EntryList<CheckedEntry>> strings;
  absl::flat_hash_map<int64_t, EntryList<CheckedEntry>> ints;
  absl::flat_hash_map<double, EntryList<CheckedEntry>> doubles;
  EntryList<CheckedEntry> bools[2];
  absl::btree_set<BoundEntry, ByBound> at_least;  // attr >= bound
  absl::btree_set<BoundEntry, ByBound> at_most;   // attr <= bound
  // Interval buckets by width class, then bucket number.
  absl::btree_map<int32_t, absl::flat_hash_map<int64_t, EntryList<CheckedEntry>>> intervals;
  EntryList<CheckedEntry> wide;
  absl::flat_hash_map<std::string, EntryList<CheckedEntry>> prefixes;
  absl::btree_map<size_t, size_t> prefix_lengths;  // length -> number of prefixes that long
  size_t entries = 0;
};

struct Group {
  EntryList<Entry> unindexed;
  absl::flat_hash_map<uint32_t, std::unique_ptr<AttrIndex>> attrs;  // by attribute id
  size_t size() const { return unindexed.size() + attr_entries; }
  size_t attr_entries = 0;
};

struct TrieNode {
  absl::flat_hash_map<std::string, std::unique_ptr<TrieNode>> children;
  std::unique_ptr<TrieNode> plus;
  std::unique_ptr<Group> here;  // filters whose levels end at this node
  std::unique_ptr<Group> rest;  // filters ending with '#' after this node's levels
  size_t subscriptions = 0;     // in this subtree
};

// Per-thread state of one Match call (reused across calls to avoid allocation).
struct Scratch {
  std::vector<const AttributeValue*> values;  // by attribute id; nullptr between calls
  std::vector<uint32_t> set_ids;              // the ids set in `values` by this call
  std::vector<absl::string_view> levels;      // the event topic's levels
  std::vector<std::pair<const TrieNode*, size_t>> stack;
  absl::flat_hash_set<const Record*> seen;    // dedupe of records reachable several ways
};

class Index {
 public:
  // `copy` (0 or 1) selects the Access::pos slot this copy maintains.
  explicit Index(int copy) : copy_(copy) {}
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  // REQUIRES: no reader is inside this copy. `rec` must outlive its presence here.
  void Add(Record* rec);
  // REQUIRES: no reader is inside this copy; `rec` was added and not removed.
  void Remove(Record* rec);
  // Hints the caches about the structures Add/Remove of `rec` will touch.
  void Prefetch(const Record* rec) const;

  // Calls sink(id) for each matching subscription, each once.
  void Match(const Event& event, Scratch& scratch,
             absl::FunctionRef<void(SubscriberId)> sink) const;

 private:
  struct Name {
    uint32_t id;
    uint32_t refs;
  };
  class Matching;

  Group& GroupFor(const Record* rec);  // creates it
  Group* FindGroup(const Record* rec);
  void DropGroupIfEmpty(const Record* rec);
  void AddToGroup(Group& g, Record* rec, uint32_t slot);
  void RemoveFromGroup(Group& g, Record* rec, uint32_t slot);

  const int copy_;
  absl::flat_hash_map<std::string, Name> names_;  // interned attribute names
  uint32_t id_limit_ = 0;                         // all ids < id_limit_
  Group any_topic_;
  absl::flat_hash_map<std::string, Group> exact_;
  TrieNode wildcards_;
};

}  // namespace gryph::matcher_internal

#endif  // GRYPH_LIB_MATCHER_INDEX_H_
