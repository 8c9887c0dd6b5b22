// A matcher: the set of subscriptions of a subscriber hosting broker, indexed so that matching an
// event costs what its *candidate* subscriptions cost, not what all of them do.
//
//   Matcher m;
//   m.Add(SubscriberId{7}, *Subscription::Create("symbol = 'IBM' AND price > 100", "orders/#"));
//   m.Publish();
//   m.Match(event, [&](SubscriberId id) { Deliver(id, event); });
//
// Each subscription (include/gryph/subscription.h) is placed by its topic filter (a hash of exact
// topics, a trie of wildcard filters, or the group of filter-less subscriptions) and, within that
// place, by one "access" condition chosen from its selector: an equality (`a = 'x'`, `a IN (...)`,
// `a LIKE 'exact'`) looked up by hash, a numeric range kept in ordered or bucketed structures, a
// LIKE prefix, or one access per branch of an OR. Candidates found through the index are verified
// against the rest of the selector, so Match's answer is always exactly the set of subscriptions
// whose Subscription::Matches(event) is true. Selectors the index cannot use (`a <> 1`,
// `NOT ...`, arithmetic, ...) are evaluated for every event whose topic reaches their place.
// docs/matcher.md describes the structures.
//
// Snapshots and staleness: the owner's changes (Add, Remove) are batched and become visible
// together at the next publication. Publish() publishes every change made so far; Add and Remove
// call it themselves once MatcherOptions::max_unpublished changes are waiting. So at most
// max_unpublished - 1 changes are ever unpublished when Add or Remove returns, and none after
// Publish returns (TryPublish, which never waits, leaves them unpublished when it returns false).
// A Match call sees exactly the subscriptions of one publication — never part of a batch —
// namely the latest one published when it started, or a later one.
//
// Thread-safety: Match may be called from any number of threads at once, concurrently with each
// other and with the owner's methods; it takes no lock and never waits (it reads one of two index
// copies, announcing itself on a per-thread counter). Add, Remove, Publish, TryPublish, size()
// and the destructor are the owner's: they must not run concurrently with each other (one owner
// thread, or external synchronization), and the destructor must not run concurrently with Match.
// Publish (hence Add and Remove, when they publish) may wait for Match calls that were already
// running at the previous publication to return: the rest of one Match call, sink included —
// longer if that reader's thread is preempted meanwhile. TryPublish never waits.
//
// Cost: the index is kept twice (one copy for readers, one for the owner), and each change is
// applied to both; see docs/matcher.md for the figures. Errors are statuses (AlreadyExists,
// NotFound); running out of memory throws std::bad_alloc, as the standard containers do.

#ifndef GRYPH_BROKER_MATCHER_H_
#define GRYPH_BROKER_MATCHER_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "gryph/event.h"
#include "gryph/subscription.h"
#include "gryph/tick.h"

namespace gryph {

struct MatcherOptions {
  // Add and Remove publish by themselves once this many changes are unpublished (the staleness
  // bound above). 1 publishes every change as it is made; larger values let the owner amortize a
  // publication (a copy swap and the replay of the batch on the second copy) over many changes.
  // 0 is treated as 1.
  size_t max_unpublished = 1024;
};

class Matcher {
 public:
  explicit Matcher(MatcherOptions options = MatcherOptions());
  ~Matcher();

  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  // Adds `subscription` under `id`, visible to Match from the next publication. Fails with
  // AlreadyExists, changing nothing, when `id` is already present (published or not). The
  // matcher keeps what matching needs until Remove: the selector's compiled program (shared with
  // the selector's copies) and the topic filter, not the selector's text.
  // Owner only.
  absl::Status Add(SubscriberId id, Subscription subscription);

  // Removes the subscription of `id`, from the next publication on. Fails with NotFound when
  // `id` is not present. Owner only.
  absl::Status Remove(SubscriberId id);

  // Makes every change made so far visible to the Match calls that start after it returns.
  // May wait for Match calls that started before the previous publication (see above). Owner only.
  void Publish();

  // Publishes as Publish() does and returns true when that needs no waiting; returns false,
  // publishing nothing, while a Match call that started before the previous publication is still
  // running (a reader preempted inside Match can hold it for a scheduling quantum). For an owner
  // that must not block: call it again later, or Publish(). Owner only.
  bool TryPublish();

  // Calls sink(id) once for each subscriber whose subscription matches `event` in the snapshot
  // this call reads, in no particular order (the order follows the index's layout and may change
  // from one publication to the next). Thread-safe, lock-free.
  // REQUIRES: `sink` does not call Add, Remove or Publish on this matcher (Publish could wait for
  // this very call); it may call Match. A long sink delays the owner's next publication.
  void Match(const Event& event, absl::FunctionRef<void(SubscriberId)> sink) const;

  // As above, appending the matching subscribers to *out (which is not cleared first).
  void Match(const Event& event, std::vector<SubscriberId>* out) const;

  // The number of subscriptions, counting unpublished changes. Owner only.
  size_t size() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gryph

#endif  // GRYPH_BROKER_MATCHER_H_
