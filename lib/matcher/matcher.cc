// The Matcher: two copies of the index (lib/matcher/index.h) in a left-right arrangement.
//
// Readers match against copies_[current_]; the owner changes only the other copy, which no reader
// uses, so neither side ever sees the other's half-done work and readers need no lock:
//
//   Add/Remove   compile or find the Record, append the change to pending_ (neither copy has it)
//   Publish      1. catch up: the non-current copy lacks lagging_ (the previous batch); wait until
//                   no reader is left in it (readers that began before the previous swap), then
//                   apply lagging_ to it — now both copies are equal (TryPublish gives up here
//                   instead of waiting);
//                2. apply pending_ to the non-current copy and make it current (one atomic store);
//                   pending_ becomes lagging_;
//                3. catch up at once if no reader is in the old copy (no waiting), else later.
//
// Each change is applied twice, in batches (so the hash lookups of a batch can be prefetched),
// and no structure is ever copied: the cost of a change does not depend on the size of what it
// changes. A Record removed by lagging_ is freed when the second copy applies the removal: by then
// it is in neither copy and no reader can hold it (readers of the current copy never saw it there;
// readers of the other have drained).
//
// Reader announcement: each thread owns (by hash) one of kSlots cache-line-sized slots with a
// counter per copy. A reader increments active[i] for the copy i it read from current_, then
// re-reads current_; if it changed, it backs off and retries. All of these are seq_cst, and so is
// the owner's store to current_ followed by its loads of the counters: in the single total order,
// either the reader's re-read comes before the owner's store (so the owner's later load sees the
// increment and waits for it) or it sees the new value (and the reader never touches copy i).
// The owner's load that sees 0 acquires the reader's release decrement, so the reader's reads
// happen before the owner's next writes to that copy.

#include "gryph/broker/matcher.h"

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lib/matcher/index.h"
#include "lib/matcher/plan.h"

namespace gryph {

namespace mi = matcher_internal;

namespace {

constexpr uint32_t kSlots = 64;

struct alignas(64) ReaderSlot {
  std::atomic<uint64_t> active[2] = {0, 0};
};

uint32_t ThisThreadSlot() {
  static std::atomic<uint32_t> next{0};
  thread_local const uint32_t slot = next.fetch_add(1, std::memory_order_relaxed) % kSlots;
  return slot;
}

// Per-thread scratch for Match, one per nesting level (a sink may call Match again).
class ScratchLease {
 public:
  ScratchLease() {
    Pool& p = pool();
    if (p.depth == p.scratch.size()) p.scratch.push_back(std::make_unique<mi::Scratch>());
    scratch_ = p.scratch[p.depth++].get();
  }
  ~ScratchLease() { pool().depth--; }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  mi::Scratch& get() { return *scratch_; }

 private:
  struct Pool {
    std::vector<std::unique_ptr<mi::Scratch>> scratch;
    size_t depth = 0;
  };
  static Pool& pool() {
    thread_local Pool p;
    return p;
  }
  mi::Scratch* scratch_;
};

}  // namespace

class Matcher::Impl {
 public:
  explicit Impl(MatcherOptions options) : options_(options) {
    if (options_.max_unpublished == 0) options_.max_unpublished = 1;
  }

  ~Impl() {
    for (auto& [id, ref] : records_) mi::DestroyRecord(ref.rec(), pool_);
    for (const Op& op : pending_) {
      if (!op.add) mi::DestroyRecord(op.rec, pool_);
    }
    for (const Op& op : lagging_) {
      if (!op.add) mi::DestroyRecord(op.rec, pool_);
    }
  }

  absl::Status Add(SubscriberId id, Subscription subscription) {
    // The id's slot is a cache miss in a table of millions, and so may be the parsed selector
    // and the topic filter's text: ask for them first, so that they arrive together while the
    // record is compiled (undone below in the rare case of a duplicate).
    records_.prefetch(id);
    __builtin_prefetch(subscription.selector().program());
    if (const TopicFilter* f = subscription.topic_filter()) __builtin_prefetch(f->text().data());
    const size_t first_term = pending_terms_.size();
    mi::Record* rec = mi::Compile(
        id, std::move(subscription), [this](absl::string_view name) { return Intern(name); },
        stats_, pool_, &view_, &pending_terms_);
    auto [it, inserted] = records_.try_emplace(id, RecordRef(rec));
    if (!inserted) {
      DestroyRecord(rec);
      pending_terms_.resize(first_term);
      return absl::AlreadyExistsError(
          absl::StrCat("subscriber ", id.value, " already has a subscription in the matcher"));
    }
    const auto terms = static_cast<uint32_t>(pending_terms_.size() - first_term);
    stats_.Count(*rec, +1, absl::MakeConstSpan(pending_terms_).subspan(first_term, terms));
    pending_.push_back(Op{rec, true, static_cast<uint32_t>(first_term), terms});
    if (pending_.size() >= options_.max_unpublished) Publish();
    return absl::OkStatus();
  }

  absl::Status Remove(SubscriberId id) {
    auto it = records_.find(id);
    if (it == records_.end()) {
      return absl::NotFoundError(
          absl::StrCat("subscriber ", id.value, " has no subscription in the matcher"));
    }
    const RecordRef ref = it->second;
    records_.erase(it);
    mi::Record* rec = ref.rec();
    // A plain record has nothing to uncount: it stays out of the cache until Apply. Its
    // attributes' ids stay interned until it is destroyed (both copies name them).
    if (!ref.plain()) stats_.Count(*rec, -1);
    pending_.push_back(Op{rec, false, 0, 0});
    if (pending_.size() >= options_.max_unpublished) Publish();
    return absl::OkStatus();
  }

  void Publish() {
    CatchUp(/*wait=*/true);
    PublishPending();
  }

  bool TryPublish() {
    if (!CatchUp(/*wait=*/false)) return false;
    PublishPending();
    return true;
  }

  void Match(const Event& event, absl::FunctionRef<void(SubscriberId)> sink) const {
    ReaderSlot& slot = slots_[ThisThreadSlot()];
    int i;
    while (true) {
      i = current_.load(std::memory_order_seq_cst);
      slot.active[i].fetch_add(1, std::memory_order_seq_cst);
      if (current_.load(std::memory_order_seq_cst) == i) break;
      slot.active[i].fetch_sub(1, std::memory_order_release);  // swapped meanwhile: retry
    }
    struct Leave {
      std::atomic<uint64_t>& counter;
      ~Leave() { counter.fetch_sub(1, std::memory_order_release); }
    } leave{slot.active[i]};
    ScratchLease scratch;
    copies_[i].Match(event, scratch.get(), sink);
  }

  size_t size() const { return records_.size(); }

 private:
  struct Op {
    mi::Record* rec;
    bool add;
    // An add's range terms (Compile's), in pending_terms_ until the first copy has filed them.
    uint32_t first_term;
    uint32_t terms;
  };
  // A record, marked `plain` when it has no attributes and no access that AccessStats counts
  // (topic-only subscriptions): removing it needs no look at the record until it is applied.
  class RecordRef {
   public:
    explicit RecordRef(mi::Record* rec)
        : bits_(reinterpret_cast<uintptr_t>(rec) | (IsPlain(*rec) ? 1 : 0)) {}
    mi::Record* rec() const { return reinterpret_cast<mi::Record*>(bits_ & ~uintptr_t{1}); }
    bool plain() const { return (bits_ & 1) != 0; }

   private:
    static bool IsPlain(const mi::Record& rec) {
      if (rec.attribute_count != 0) return false;
      for (const mi::Access& a : rec.accesses) {
        if (a.kind != mi::Access::Kind::kUnindexed) return false;
      }
      return true;
    }
    static_assert(alignof(mi::Record) >= 2);  // and pool blocks are 16-byte aligned
    uintptr_t bits_;
  };
  struct Name {
    uint32_t id;
    uint32_t refs;
  };

  uint32_t Intern(absl::string_view name) {
    auto [it, inserted] = names_.try_emplace(name, Name{0, 0});
    if (inserted) {
      if (free_ids_.empty()) {
        it->second.id = next_id_++;
        attribute_names_.emplace_back();
      } else {
        it->second.id = free_ids_.back();
        free_ids_.pop_back();
      }
      attribute_names_[it->second.id] = std::string(name);
    }
    it->second.refs++;
    return it->second.id;
  }

  // Releases the ids of `rec`'s attributes and frees it. REQUIRES: in neither index copy.
  void DestroyRecord(mi::Record* rec) {
    rec->ForEachAttribute([this](uint32_t id) {
      std::string& name = attribute_names_[id];
      auto it = names_.find(name);
      if (--it->second.refs == 0) {
        free_ids_.push_back(id);
        names_.erase(it);
        std::string().swap(name);
      }
    });
    mi::DestroyRecord(rec, pool_);
  }

  // Applies `ops` in order to `copy`; the second application of a batch frees removed records.
  // The batch is known in advance, so its cache misses overlap, in a pipeline: the record
  // 4 * kStage changes ahead is fetched (its first lines); once cached, what its change probes
  // first (the hash slot of its topic, or its group) 3 * kStage ahead; then what those point to
  // (an existing group's node, the entry a removal moves), and that entry's record. A wildcard
  // filter's add walks the trie, one dependent lookup per level: that path is fetched by a walk
  // that starts 3 * kStage changes ahead and takes one step per change applied meanwhile (walks
  // hold trie nodes, so the removal of a wildcard filter, which may free some, ends them all).
  void Apply(const std::vector<Op>& ops, mi::Index& copy, bool second) {
    constexpr size_t kStage = 4;
    constexpr size_t kWalkAhead = 3 * kStage;
    const size_t n = ops.size();
    auto fetch_record = [&](size_t i) {
      const char* p = reinterpret_cast<const char*>(ops[i].rec);
      __builtin_prefetch(p);
      __builtin_prefetch(p + 64);
      __builtin_prefetch(p + 128);
    };
    auto stage = [&](size_t i, size_t s) {
      switch (s) {
        case 4: fetch_record(i); break;
        case 3: copy.Prefetch(ops[i].rec, ops[i].add); break;
        case 2: copy.PrefetchDeeper(ops[i].rec, ops[i].add, 1); break;
        case 1: copy.PrefetchDeeper(ops[i].rec, ops[i].add, 2); break;
      }
    };
    auto start_walk = [&](size_t i) {
      if (ops[i].add && mi::Index::Walks(ops[i].rec)) walks_.push_back(mi::TrieWalk{ops[i].rec, i});
    };
    walks_.clear();
    for (size_t s = 4; s >= 1; --s) {
      for (size_t i = 0; i < std::min(s * kStage, n); ++i) stage(i, s);
    }
    for (size_t i = 0; i < std::min(kWalkAhead, n); ++i) start_walk(i);
    for (size_t i = 0; i < n; ++i) {
      for (size_t s = 4; s >= 1; --s) {
        if (i + s * kStage < n) stage(i + s * kStage, s);
      }
      if (i + kWalkAhead < n) start_walk(i + kWalkAhead);
      for (size_t k = 0; k < walks_.size();) {
        if (walks_[k].op > i && copy.StepWalk(walks_[k])) {
          ++k;
        } else {  // done, or its change is being applied now
          walks_[k] = walks_.back();
          walks_.pop_back();
        }
      }
      const Op& op = ops[i];
      if (op.add) {
        copy.Add(op.rec,
                 second ? absl::Span<const mi::RangeTerm>()
                        : absl::MakeConstSpan(pending_terms_).subspan(op.first_term, op.terms));
      } else {
        // Removing a wildcard filter may prune trie nodes that walks have reached: drop them.
        if (mi::Index::Walks(op.rec)) walks_.clear();
        copy.Remove(op.rec);
        if (second) DestroyRecord(op.rec);
      }
    }
    copy.FlushRanges();
  }

  bool Drained(int copy) const {
    for (const ReaderSlot& s : slots_) {
      if (s.active[copy].load(std::memory_order_seq_cst) != 0) return false;
    }
    return true;
  }

  // Brings the non-current copy up to date with lagging_, waiting for its readers to leave if
  // `wait`. Returns whether it is up to date.
  bool CatchUp(bool wait) {
    if (lagging_.empty()) return true;
    const int old = 1 - current_.load(std::memory_order_relaxed);
    for (int spins = 0; !Drained(old); ++spins) {
      if (!wait) return false;
      if (spins > 16) std::this_thread::yield();
    }
    Apply(lagging_, copies_[old], /*second=*/true);
    lagging_.clear();
    return true;
  }

  // REQUIRES: the non-current copy is up to date (CatchUp returned true).
  void PublishPending() {
    if (pending_.empty()) return;
    const int next = 1 - current_.load(std::memory_order_relaxed);
    Apply(pending_, copies_[next], /*second=*/false);
    pending_terms_.clear();  // filed
    current_.store(next, std::memory_order_seq_cst);
    lagging_.swap(pending_);
    pending_.clear();
    CatchUp(/*wait=*/false);  // at once if no reader is left in the old copy
  }

  MatcherOptions options_;

  // The owner's state.
  mi::Pool pool_;                // records and index nodes; declared first, destroyed last
  selector_program::View view_;  // the planner's scratch (owner only)
  // Owned; the latest state.
  absl::flat_hash_map<SubscriberId, RecordRef> records_;
  absl::flat_hash_map<std::string, Name> names_;  // interned attribute names
  std::vector<std::string> attribute_names_;      // by id (empty when free)
  std::vector<uint32_t> free_ids_;
  uint32_t next_id_ = 0;
  mi::AccessStats stats_;
  std::vector<Op> pending_;                   // in neither copy yet
  std::vector<mi::RangeTerm> pending_terms_;  // of pending_ adds
  std::vector<Op> lagging_;                   // in copies_[current_] only
  std::vector<mi::TrieWalk> walks_;           // Apply's, kept to reuse its memory

  // Shared with readers: copies_[current_] is read-only while current.
  mi::Index copies_[2] = {mi::Index(0, &pool_, &attribute_names_),
                          mi::Index(1, &pool_, &attribute_names_)};
  std::atomic<int> current_{0};
  mutable ReaderSlot slots_[kSlots];
};

Matcher::Matcher(MatcherOptions options) : impl_(std::make_unique<Impl>(options)) {}

Matcher::~Matcher() = default;

absl::Status Matcher::Add(SubscriberId id, Subscription subscription) {
  return impl_->Add(id, std::move(subscription));
}

absl::Status Matcher::Remove(SubscriberId id) { return impl_->Remove(id); }

void Matcher::Publish() { impl_->Publish(); }

bool Matcher::TryPublish() { return impl_->TryPublish(); }

void Matcher::Match(const Event& event, absl::FunctionRef<void(SubscriberId)> sink) const {
  impl_->Match(event, sink);
}

void Matcher::Match(const Event& event, std::vector<SubscriberId>* out) const {
  impl_->Match(event, [out](SubscriberId id) { out->push_back(id); });
}

size_t Matcher::size() const { return impl_->size(); }

}  // namespace gryph
