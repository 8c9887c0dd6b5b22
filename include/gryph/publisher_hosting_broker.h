// PublisherHostingBroker (PHB): the pubends of one process, sharing one storage and one group
// commit, wired to a Channel.
//
// The PHB routes each publish to a pubend the application names — explicitly, by key
// (PubendForKey: one key always on one pubend, hence in order), or by publisher — and dispatches
// what arrives on its channel: nacks and release messages go to the pubends they name, and a
// Publish message from a publisher in another process is published (Publish, or PublishByKey for
// pubend 0) and answered with a Published message to its sender, once the outcome is known. After
// every group commit it sends each pubend's new knowledge downstream.
//
// Trust: the publisher of a Publish message is the name it arrived under on the channel, never a
// name it claims, so (that name, sequence) is its idempotency key. Where the channel
// authenticates names (ZmqChannel with CURVE and each allowed key bound to its name) no peer can
// publish or retry as another; over a channel that does not, any peer that reaches the PHB can
// publish under any name. An in-process publisher using a peer's name shares that peer's
// sequences. The PHB does not choose who may publish: admit publishers with the channel.
//
// Driving it:
//   - threaded (options.commit_thread, the default): a background thread commits groups; the
//     application calls OnTimer(now) every few milliseconds for heartbeats and early release;
//   - manual, for a hand-written loop: call OnTimer(now) whenever time passes; it also commits
//     the group when due (NextDeadline() says when);
//   - threaded with the thread played by the owner (simulated_commit_thread), for the
//     deterministic simulator: as threaded, but the owner calls committer().FlushIfDue(now) at
//     the virtual instants the thread would commit.
//
// Thread-safety: thread-safe. Messages arrive on whatever thread drives the channel. The PHB
// sends on the channel from that thread and from the commit thread (knowledge, Published
// answers), so the channel's Send must take calls from both, as InProcessNetwork's and
// ZmqChannel's do.

#ifndef GRYPH_PUBLISHER_HOSTING_BROKER_H_
#define GRYPH_PUBLISHER_HOSTING_BROKER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gryph/channel.h"
#include "gryph/group_commit.h"
#include "gryph/latency_histogram.h"
#include "gryph/log.h"
#include "gryph/pubend.h"
#include "gryph/storage.h"

namespace gryph {

struct PublisherHostingBrokerOptions {
  std::vector<PubendOptions> pubends;  // at least one; distinct ids
  // Downstream nodes registered with every pubend at open (already registered ones are kept).
  std::vector<std::string> downstream;
  // Group commit: N records or T since the first, whichever first. The clock is filled in.
  GroupCommitOptions group_commit;
  // Commit groups on a background thread (see the header comment).
  bool commit_thread = true;
  // With commit_thread: start no thread and let the owner play it, calling
  // committer().FlushIfDue(now) whenever that thread would commit (the simulator does, at virtual
  // instants it draws, so that it runs the runtime's commit path deterministically). OnTimer then
  // commits nothing, as with the thread.
  bool simulated_commit_thread = false;
  // Given to every pubend whose PubendOptions::log is empty (log.h).
  LogSink log = nullptr;
  // The time source for nacks and release messages; absl::Now when empty.
  std::function<absl::Time()> clock;
};

class PublisherHostingBroker {
 public:
  // Opens every pubend on `storage` (recovering them) and sets itself as `channel`'s receiver.
  // `storage` and `channel` must outlive the broker. InvalidArgument, naming the option, for no
  // pubend, repeated ids, group_commit.max_records 0, a negative group_commit.max_delay, an
  // empty downstream name or simulated_commit_thread without commit_thread; otherwise the
  // pubends' errors (Pubend::Open).
  static absl::StatusOr<std::unique_ptr<PublisherHostingBroker>> Open(
      PublisherHostingBrokerOptions options, Storage* storage, Channel* channel);
  // With commit_thread, commits what is pending first (every `done` runs with its tick).
  // Driven manually, commits nothing more (call Flush first for that): the `done` of every
  // publish still pending runs with Aborted, so that no publisher waits for an answer that never
  // comes.
  virtual ~PublisherHostingBroker() = default;

  // Publishes to pubend `p` (Pubend::Publish: `done` runs on the commit thread, with the
  // event's tick once durable; see there for the retry window of `sequence` and why `done` must
  // not take a lock held around Publish). NotFound through `done` for an unknown pubend.
  virtual void Publish(PubendId p, absl::string_view publisher, uint64_t sequence, EventRef event,
                       Pubend::PublishDone done) = 0;
  // Publishes to PubendForKey(key, pubend_ids()) and returns that pubend: the ticks `done`
  // reports are that pubend's, and a retry after a crash must name the same key (or that pubend)
  // to be recognised. The choice depends only on the key and the broker's pubend ids.
  virtual PubendId PublishByKey(absl::string_view key, absl::string_view publisher,
                                uint64_t sequence, EventRef event, Pubend::PublishDone done) = 0;

  // Handles one message from the channel (the receiver calls this). Errors (an unknown sender's
  // release, a nack for an unknown pubend) are returned; nothing changes for them.
  // A PublishMessage is published with publisher = `from` and answered with a PublishedMessage
  // sent to `from`: at once when known without a commit (NotFound for an unknown pubend,
  // InvalidArgument for a null event, Pubend::Publish's refusals, a retry's logged tick), else
  // from the thread that commits, once the commit holding the event is durable or failed (or with
  // Aborted by the destructor). HandleMessage itself returns the first two refusals, which change
  // nothing stored, and OK for the others: their outcome is the answer's. Every retry is answered.
  // Other kinds (the ones a PHB does not take) are InvalidArgument.
  virtual absl::Status HandleMessage(absl::string_view from, const Message& message) = 0;

  // Heartbeats, early release and, in manual mode, the group commit when due.
  virtual void OnTimer(absl::Time now) = 0;
  // When OnTimer should next run at the latest, in manual mode.
  virtual absl::Time NextDeadline(absl::Time now) const = 0;
  // Commits what is pending now (manual mode; harmless otherwise).
  virtual absl::Status Flush() = 0;

  // The pubend `p`, or null. Valid as long as the broker.
  virtual Pubend* pubend(PubendId p) const = 0;
  virtual const std::vector<PubendId>& pubend_ids() const = 0;
  virtual GroupCommitter& committer() = 0;

  struct Stats {
    uint64_t publishes = 0;  // publishes answered (durable, refused or failed)
    uint64_t failed = 0;     // of them, answered with an error
    // Publish call -> `done` with the durable tick (the broker's clock), for those logged.
    LatencyHistogram publish_to_durable;
  };
  // A snapshot; thread-safe (publishes are answered on the commit thread).
  virtual Stats stats() const = 0;
  // What Open spent recovering, summed over the pubends (total: all of Open's recovery). Open
  // also logs it, at kInfo, in one line.
  virtual const PubendRecovery& recovery() const = 0;

 protected:
  PublisherHostingBroker() = default;
};

}  // namespace gryph

#endif  // GRYPH_PUBLISHER_HOSTING_BROKER_H_
