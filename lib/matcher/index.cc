#include "lib/matcher/index.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/types/span.h"

namespace gryph::matcher_internal {

void SetChecked(Record* rec, uint32_t slot, HotEntry* hot, ColdEntry* cold) {
  const std::vector<Check>& checks = rec->BranchChecks(rec->accesses[slot].branch);
  hot->id = rec->id.value;
  hot->verify = VerifyOf(checks);
  hot->dedupe = rec->dedupe;
  hot->inline_checks = 0;
  for (size_t i = 0; i < kInlineChecks && i < checks.size(); ++i) {
    hot->checks[hot->inline_checks++] = checks[i];
  }
  cold->rec = rec;
  cold->slot = slot;
}

namespace {

CheckedEntry MakeChecked(Record* rec, uint32_t slot) {
  CheckedEntry e{};
  SetChecked(rec, slot, &e.hot, &e.cold);
  return e;
}

// A B-tree key for a bound entry (compares bound, record, slot only).
BoundEntry BoundKey(double bound, Record* rec, uint32_t slot) {
  BoundEntry k{bound, {}};
  k.entry.cold = ColdEntry{rec, slot};
  return k;
}

// Removes (rec, slot) from map[key]'s list, erasing the list once empty.
template <typename Map, typename Key>
void RemoveKeyed(Map& map, const Key& key, const Record* rec, uint32_t slot, int copy) {
  auto it = map.find(key);
  it->second.Remove(rec, slot, copy);
  if (it->second.empty()) map.erase(it);
}

// Splits `topic` into its levels ("" is one empty level).
void SplitLevels(absl::string_view topic, std::vector<absl::string_view>* levels) {
  levels->clear();
  size_t begin = 0;
  while (true) {
    const size_t end = topic.find('/', begin);
    if (end == absl::string_view::npos) {
      levels->push_back(topic.substr(begin));
      return;
    }
    levels->push_back(topic.substr(begin, end - begin));
    begin = end + 1;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Changes

TrieNode::~TrieNode() {
  auto free_group = [this](TrieGroup* g) {
    if (g == nullptr) return;
    g->~TrieGroup();
    pool->Free(g, sizeof(TrieGroup));
  };
  free_group(here);
  free_group(rest);
  if (plus != nullptr) {
    plus->~TrieNode();
    pool->Free(plus, sizeof(TrieNode));
  }
}

TrieGroup* Index::NewTrieGroup(TrieNode* node) {
  return new (pool_->Allocate(sizeof(TrieGroup))) TrieGroup(node);
}

Group& Index::GroupFor(const Record* rec) {
  switch (rec->placement) {
    case Placement::kAnyTopic: return any_topic_;
    case Placement::kExactTopic: return exact_.FindOrCreate({rec->topic(), rec->topic_hash()});
    case Placement::kWildcardTopic: break;
  }
  TrieNode* node = &wildcards_;
  for (const std::string& level : rec->topic_filter()->levels()) {
    if (level == "#") {
      if (node->rest == nullptr) node->rest = NewTrieGroup(node);
      return *node->rest;
    }
    TrieNode* next;
    if (level == "+") {
      if (node->plus == nullptr) {
        node->plus = new (pool_->Allocate(sizeof(TrieNode))) TrieNode(pool_);
        node->plus->parent = node;
        node->plus->is_plus = true;
      }
      next = node->plus;
    } else {
      next = &node->children.FindOrCreate({level, NameHash(level)}, pool_);
      next->parent = node;  // (already so unless just created)
    }
    node = next;
  }
  if (node->here == nullptr) node->here = NewTrieGroup(node);
  return *node->here;
}

// Removes a wildcard record from its group, found through the record, and prunes upwards from
// the group's node through the parent pointers: the group once empty, then each node left with
// neither group nor child. No lookup by level unless a literal node is pruned.
void Index::RemoveWildcard(Record* rec) {
  Group* g = rec->group[copy_];
  for (uint32_t slot = 0; slot < rec->accesses.size(); ++slot) RemoveFromGroup(*g, rec, slot);
  wildcard_records_--;
  if (!g->empty()) return;
  TrieGroup* tg = static_cast<TrieGroup*>(g);
  TrieNode* node = tg->node;
  (node->here == tg ? node->here : node->rest) = nullptr;
  tg->~TrieGroup();
  pool_->Free(tg, sizeof(TrieGroup));
  while (node->parent != nullptr && node->empty()) {
    TrieNode* parent = node->parent;
    if (node->is_plus) {
      node->~TrieNode();
      pool_->Free(node, sizeof(TrieNode));
      parent->plus = nullptr;
    } else {
      parent->children.Erase({node->name, NameHash(node->name)});
    }
    node = parent;
  }
}

void Index::AddToGroup(Group& g, Record* rec, uint32_t slot,
                       absl::Span<const RangeTerm> range_terms) {
  const Access& a = rec->accesses[slot];
  if (a.kind == Access::Kind::kUnindexed && rec->verify == Verify::kProven) {
    g.unindexed.Add(Entry{rec, rec->id.value, slot}, copy_);
    return;
  }
  if (g.content == nullptr) g.content = std::make_unique<Content>();
  if (a.kind == Access::Kind::kUnindexed) {
    g.content->residual.Add(rec, slot, copy_);
    g.content->entries++;
    return;
  }
  if (a.kind == Access::Kind::kRanges) {
    // The first copy to apply the add files the terms, in its group's range index (a new one
    // if it has none); the second finds them through the access. Both copies apply the same
    // changes in the same order, so their groups hold the same range index at each change.
    Access& ra = rec->accesses[slot];
    if (ra.range_index == nullptr) {
      if (g.content->ranges.get() == nullptr) g.content->ranges.reset(new RangeIndex);
      ra.range_index = g.content->ranges.get();
      if (!ra.range_index->unflushed()) unflushed_.push_back(ra.range_index);
      ra.pos[0] = ra.pos[1] = ra.range_index->File(copy_, range_terms);
      ra.range_index->Ref();  // the record's, until both copies have removed it
    } else if (g.content->ranges.get() == nullptr) {
      g.content->ranges.reset(ra.range_index);
    }
    ra.range_index->Enter(copy_, ra.pos[copy_], rec);
    g.content->entries++;
    return;
  }
  std::unique_ptr<AttrIndex>& slot_index = g.content->attrs[a.attr];
  if (slot_index == nullptr) slot_index = std::make_unique<AttrIndex>();
  AttrIndex& ai = *slot_index;
  ai.entries++;
  g.content->entries++;
  switch (a.kind) {
    case Access::Kind::kEqString:
      ai.strings.try_emplace(a.str).first->second.Add(rec, slot, copy_);
      break;
    case Access::Kind::kEqInt: ai.ints[a.key.i].Add(rec, slot, copy_); break;
    case Access::Kind::kEqDouble: ai.doubles[a.key.d].Add(rec, slot, copy_); break;
    case Access::Kind::kEqBool: ai.bools[a.key.b ? 1 : 0].Add(rec, slot, copy_); break;
    case Access::Kind::kAtLeast:
      ai.at_least.insert(BoundEntry{a.key.d, MakeChecked(rec, slot)});
      break;
    case Access::Kind::kAtMost:
      ai.at_most.insert(BoundEntry{a.key.d, MakeChecked(rec, slot)});
      break;
    case Access::Kind::kInterval:
      ai.intervals[a.width_class][a.key.i].Add(rec, slot, a.bounds.lo, a.bounds.hi, copy_);
      break;
    case Access::Kind::kWide: ai.wide.Add(rec, slot, a.bounds.lo, a.bounds.hi, copy_); break;
    case Access::Kind::kPrefix:
      ai.prefixes.try_emplace(a.str).first->second.Add(rec, slot, copy_);
      ai.prefix_lengths[a.str.size()]++;
      break;
    case Access::Kind::kRanges:
    case Access::Kind::kUnindexed: break;
  }
}

void Index::RemoveFromGroup(Group& g, Record* rec, uint32_t slot) {
  const Access& a = rec->accesses[slot];
  if (a.kind == Access::Kind::kUnindexed && rec->verify == Verify::kProven) {
    g.unindexed.Remove(rec, slot, copy_);
    return;
  }
  if (a.kind == Access::Kind::kUnindexed) {
    g.content->residual.Remove(rec, slot, copy_);
    if (--g.content->entries == 0) g.content.reset();
    return;
  }
  if (a.kind == Access::Kind::kRanges) {
    Access& ra = rec->accesses[slot];
    if (ra.range_index->Leave(copy_, ra.pos[copy_])) {
      ra.range_index->Unref();  // the record's (never the last: this copy's group holds it)
      ra.range_index = nullptr;
    }
    if (g.content->ranges->empty(copy_)) g.content->ranges.reset();
    if (--g.content->entries == 0) g.content.reset();
    return;
  }
  auto ait = g.content->attrs.find(a.attr);
  AttrIndex& ai = *ait->second;
  switch (a.kind) {
    case Access::Kind::kEqString: RemoveKeyed(ai.strings, a.str, rec, slot, copy_); break;
    case Access::Kind::kEqInt: RemoveKeyed(ai.ints, a.key.i, rec, slot, copy_); break;
    case Access::Kind::kEqDouble: RemoveKeyed(ai.doubles, a.key.d, rec, slot, copy_); break;
    case Access::Kind::kEqBool: ai.bools[a.key.b ? 1 : 0].Remove(rec, slot, copy_); break;
    case Access::Kind::kAtLeast:
    case Access::Kind::kAtMost: {
      (a.kind == Access::Kind::kAtLeast ? ai.at_least : ai.at_most)
          .erase(BoundKey(a.key.d, rec, slot));
      break;
    }
    case Access::Kind::kInterval: {
      auto cit = ai.intervals.find(a.width_class);
      RemoveKeyed(cit->second, a.key.i, rec, slot, copy_);
      if (cit->second.empty()) ai.intervals.erase(cit);
      break;
    }
    case Access::Kind::kWide: ai.wide.Remove(rec, slot, copy_); break;
    case Access::Kind::kPrefix: {
      RemoveKeyed(ai.prefixes, a.str, rec, slot, copy_);
      auto lit = ai.prefix_lengths.find(a.str.size());
      if (--lit->second == 0) ai.prefix_lengths.erase(lit);
      break;
    }
    case Access::Kind::kRanges:
    case Access::Kind::kUnindexed: break;
  }
  if (--ai.entries == 0) g.content->attrs.erase(ait);
  if (--g.content->entries == 0) g.content.reset();
}

void Index::Add(Record* rec, absl::Span<const RangeTerm> range_terms) {
  // Counted by id, so that only a name's first user and last user hash it (the owner frees an id
  // only once its last record is destroyed, after both copies removed it).
  rec->ForEachAttribute([this](uint32_t id) {
    if (id >= name_refs_.size()) name_refs_.resize(id + 1, 0);
    if (name_refs_[id]++ == 0) names_.emplace((*attribute_names_)[id], id);
    id_limit_ = std::max(id_limit_, id + 1);
  });
  Group& g = GroupFor(rec);
  rec->group[copy_] = &g;
  if (rec->placement == Placement::kWildcardTopic) wildcard_records_++;
  for (uint32_t slot = 0; slot < rec->accesses.size(); ++slot) {
    AddToGroup(g, rec, slot, range_terms);
  }
}

void Index::FlushRanges() {
  for (RangeIndex* ri : unflushed_) ri->Flush(copy_);
  unflushed_.clear();
}

void Index::Remove(Record* rec) {
  switch (rec->placement) {
    case Placement::kAnyTopic:
      for (uint32_t slot = 0; slot < rec->accesses.size(); ++slot) {
        RemoveFromGroup(any_topic_, rec, slot);
      }
      break;
    case Placement::kExactTopic: {
      Group* g = rec->group[copy_];
      for (uint32_t slot = 0; slot < rec->accesses.size(); ++slot) RemoveFromGroup(*g, rec, slot);
      if (g->empty()) exact_.Erase({rec->topic(), rec->topic_hash()});
      break;
    }
    case Placement::kWildcardTopic: RemoveWildcard(rec); break;
  }
  rec->ForEachAttribute([this](uint32_t id) {
    if (--name_refs_[id] == 0) names_.erase((*attribute_names_)[id]);
  });
}

void Index::Prefetch(const Record* rec, bool add) const {
  if (!add) __builtin_prefetch(rec->group[copy_]);
  if (rec->placement == Placement::kExactTopic) {
    const absl::string_view topic = rec->topic();
    exact_.Prefetch({topic, rec->topic_hash()});
    __builtin_prefetch(topic.data());  // compared with (or copied into) the group's node
  }
}

void Index::PrefetchDeeper(const Record* rec, bool add, int depth) const {
  if (add) {
    if (depth == 1 && rec->placement == Placement::kExactTopic) {
      exact_.PrefetchNode({rec->topic(), rec->topic_hash()});
    }
    return;
  }
  // A swap-remove from a shared group rewrites the position kept in the moved entry's record:
  // first the group's last entry (its own line when the group has several), then its record.
  // (No group yet when the batch also adds the record, further back.)
  const Group* g = rec->group[copy_];
  if (g == nullptr) return;
  const auto& entries = g->unindexed.entries();
  if (entries.size() <= 1) return;
  if (depth == 1) {
    __builtin_prefetch(&entries.back(), 1);
  } else {
    __builtin_prefetch(entries.back().rec, 1);
  }
}

bool Index::StepWalk(TrieWalk& w) const {
  const absl::Span<const std::string> levels = w.rec->topic_filter()->levels();
  if (w.node == nullptr) {
    // The levels' array is a block of its own; the short levels' bytes are inside it.
    __builtin_prefetch(levels.data());
    __builtin_prefetch(reinterpret_cast<const char*>(levels.data() + levels.size()) - 1);
    w.node = &wildcards_;
    return true;
  }
  const TrieNode* node = w.node;
  if (w.level == levels.size()) {
    if (node->here != nullptr) __builtin_prefetch(node->here);
    return false;
  }
  const std::string& level = levels[w.level];
  const TrieNode* next;
  if (level == "#") {
    if (node->rest != nullptr) __builtin_prefetch(node->rest);
    return false;
  } else if (level == "+") {
    next = node->plus;
  } else {
    const NameTable<TrieNode>::Key key{level, NameHash(level)};
    if (!w.probed) {
      node->children.Prefetch(key);
      w.probed = true;
      return true;
    }
    next = node->children.FindByHashForPrefetch(key);
  }
  if (next == nullptr) return false;  // Add creates the rest of the path: nothing to fetch
  // A node spans two lines (pool blocks are 16-byte aligned).
  __builtin_prefetch(next);
  __builtin_prefetch(reinterpret_cast<const char*>(next) + sizeof(TrieNode) - 1);
  w.node = next;
  w.level++;
  w.probed = false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Matching

class Index::Matching {
 public:
  static constexpr size_t kPrefetchEntries = 4;

  Matching(const Index& index, const Event& event, Scratch& scratch,
           absl::FunctionRef<void(SubscriberId)> sink)
      : index_(index), event_(event), s_(scratch), sink_(sink) {}

  ~Matching() {
    for (uint32_t id : s_.set_ids) s_.values[id] = nullptr;
    s_.set_ids.clear();
    if (used_seen_) s_.seen.clear();
  }

  void MatchGroup(const Group& g) {
    for (const Entry& e : g.unindexed.entries()) sink_(SubscriberId{e.id});
    if (g.content == nullptr) return;
    Resolve();
    EmitAll(g.content->residual);
    for (const auto& [id, ai] : g.content->attrs) {
      const AttributeValue* v = s_.values[id];
      if (v != nullptr) MatchAttr(*ai, *v);
    }
    if (g.content->ranges.get() != nullptr) MatchRanges(*g.content->ranges);
  }

  void MatchWildcards(const TrieNode& root) {
    SplitLevels(event_.topic(), &s_.levels);
    const size_t n = s_.levels.size();
    s_.level_hashes.clear();
    for (absl::string_view level : s_.levels) s_.level_hashes.push_back(NameHash(level));
    s_.stack.clear();
    s_.stack.emplace_back(&root, 0);
    while (!s_.stack.empty()) {
      const auto [node, i] = s_.stack.back();
      s_.stack.pop_back();
      if (node->rest != nullptr) MatchGroup(*node->rest);
      if (i == n) {
        if (node->here != nullptr) MatchGroup(*node->here);
        continue;
      }
      if (node->plus != nullptr) s_.stack.emplace_back(node->plus, i + 1);
      if (!node->children.empty()) {
        if (const TrieNode* child = node->children.Find({s_.levels[i], s_.level_hashes[i]})) {
          s_.stack.emplace_back(child, i + 1);
        }
      }
    }
  }

 private:
  AttrValues values() const { return s_.values.data(); }

  void Resolve() {
    if (resolved_) return;
    resolved_ = true;
    if (s_.values.size() < index_.id_limit_) s_.values.resize(index_.id_limit_, nullptr);
    for (const Attribute& a : event_.attributes()) {
      auto it = index_.names_.find(a.name);
      if (it != index_.names_.end()) {
        s_.values[it->second] = &a.value;
        s_.set_ids.push_back(it->second);
      }
    }
  }

  // `cold` is read only for records with more than the inline checks.
  // A record reachable several ways (dedupe) may be refused through one access and accepted
  // through another: it is remembered once emitted.
  void Emit(const HotEntry& e, const ColdEntry& cold) {
    if (e.dedupe && used_seen_ && s_.seen.contains(e.id)) return;
    for (uint8_t i = 0; i < e.inline_checks; ++i) {
      if (!e.checks[i].Holds(values(), event_)) return;
    }
    if (e.verify == Verify::kMoreChecks &&
        !cold.rec->ChecksHold(cold.rec->accesses[cold.slot].branch, kInlineChecks, values(),
                              event_)) {
      return;
    }
    if (e.dedupe) {
      used_seen_ = true;
      s_.seen.insert(e.id);
    }
    sink_(SubscriberId{e.id});
  }

  // Survivors of the range index are reported as they are when proven (ranges_proven and exact
  // event values), else when their terms hold compared exactly (ranges_proven: the selector is
  // its terms) or all their checks do. Their records are scattered: each is fetched a few survivors
  // ahead.
  void MatchRanges(const RangeIndex& ri) {
    const int copy = index_.copy_;
    const bool exact = ri.Match(copy, values(), s_.ranges);
    const std::vector<uint32_t>& survivors = s_.ranges.survivors;
    const size_t n = survivors.size();
    constexpr size_t kAhead = 8;
    for (size_t i = 0; i < std::min(n, kAhead); ++i) {
      __builtin_prefetch(ri.owner(copy, survivors[i]));
    }
    for (size_t i = 0; i < n; ++i) {
      if (i + kAhead < n) __builtin_prefetch(ri.owner(copy, survivors[i + kAhead]));
      const Record* rec = ri.owner(copy, survivors[i]);
      if (rec->ranges_proven ? exact || rec->TermsHold(values())
                             : rec->ChecksHold(0, 0, values(), event_)) {
        sink_(rec->id);
      }
    }
  }

  void EmitAll(const CheckedList& list) {
    const std::vector<HotEntry>& hot = list.hot();
    const size_t n = hot.size();
    for (size_t i = 0; i < n; ++i) {
      // Entries are one cache line each: ask for a few lines ahead of the one being verified.
      if (i + kPrefetchEntries < n) __builtin_prefetch(&hot[i + kPrefetchEntries]);
      Emit(hot[i], list.cold()[i]);
    }
  }

  template <typename Map, typename Key>
  void EmitKey(const Map& map, const Key& key) {
    if (map.empty()) return;
    auto it = map.find(key);
    if (it != map.end()) EmitAll(it->second);
  }

  void MatchAttr(const AttrIndex& ai, const AttributeValue& v) {
    switch (v.index()) {
      case 2: {
        const absl::string_view s = *std::get_if<std::string>(&v);
        EmitKey(ai.strings, s);
        for (const auto& [length, count] : ai.prefix_lengths) {
          if (length > s.size()) break;
          EmitKey(ai.prefixes, s.substr(0, length));
        }
        return;
      }
      case 3: EmitAll(ai.bools[*std::get_if<bool>(&v) ? 1 : 0]); return;
      default: break;
    }
    Access::Kind kind;
    Scalar key;
    if (!NumericKey(v, &kind, &key)) return;  // NaN: no comparison is TRUE
    if (kind == Access::Kind::kEqInt) {
      EmitKey(ai.ints, key.i);
    } else {
      EmitKey(ai.doubles, key.d);
    }
    const double x = RangeValue(v);
    for (auto it = ai.at_least.begin(); it != ai.at_least.end() && it->bound <= x; ++it) {
      Emit(it->entry.hot, it->entry.cold);
    }
    if (!ai.at_most.empty()) {
      for (auto it = ai.at_most.lower_bound(BoundKey(x, nullptr, 0)); it != ai.at_most.end();
           ++it) {
        Emit(it->entry.hot, it->entry.cold);
      }
    }
    auto emit = [this](const HotEntry& e, const ColdEntry& cold) { Emit(e, cold); };
    for (const auto& [width_class, buckets] : ai.intervals) {
      int64_t b;
      if (!ValueBucket(x, width_class, &b)) continue;
      for (int k = 0; k < kBucketsToScan; ++k) {
        auto it = buckets.find(b - k);
        if (it != buckets.end()) it->second.ForEachHolding(x, emit);
      }
    }
    ai.wide.ForEachHolding(x, emit);
  }

  const Index& index_;
  const Event& event_;
  Scratch& s_;
  absl::FunctionRef<void(SubscriberId)> sink_;
  bool resolved_ = false;
  bool used_seen_ = false;
};

void Index::Match(const Event& event, Scratch& scratch,
                  absl::FunctionRef<void(SubscriberId)> sink) const {
  Matching m(*this, event, scratch, sink);
  m.MatchGroup(any_topic_);
  if (!exact_.empty()) {
    if (const Group* g = exact_.Find({event.topic(), NameHash(event.topic())})) m.MatchGroup(*g);
  }
  if (wildcard_records_ > 0) m.MatchWildcards(wildcards_);
}

}  // namespace gryph::matcher_internal
