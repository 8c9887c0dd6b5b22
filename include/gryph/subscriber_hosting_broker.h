// SubscriberHostingBroker (SHB): where durable subscribers connect (paper §4).
//
// Per pubend it keeps an istream (the knowledge received from upstream, which doubles as the
// cache of recent events), a ConStream for the connected subscribers that are not catching up,
// one CatchupStream per reconnected subscriber that is behind, a CuriosityStream consolidating
// their nacks upstream, and a PFS recording which subscribers every event matched.
//
// Sessions: a subscriber connects with its subscription (name, selector, topic filter), its CT
// and an epoch. A new subscription starts at CT = latestDelivered and is served by the constream;
// a known one whose CT(s,p) is below latestDelivered(p) catches up from the PFS first. One live
// session per subscription: a connection with an epoch at or above the subscription's takes over
// and fences the older session; a lower epoch is refused (kAborted). A CT that is ahead of this
// broker is refused with a clear error, as is one that names a pubend this broker does not serve
// for a subscription it never hosted (a hosted subscription's CT may name a pubend removed since:
// that name is ignored; docs/format.md, "CheckpointToken"); a CT below what the subscriber
// acknowledged is accepted, with Gaps where the PFS no longer knows (paper §2). A subscriber
// presenting a subscription this broker never hosted, with a CT, is served by refiltering the
// events it missed (reconnect anywhere).
//
// Each delivery names the tick of the session's previous one from the same pubend (the session's
// start CT for the first), so a subscriber finds a lost one and reconnects from its CT. An ack
// below the session's last delivery that has not moved since the previous ack, with nothing sent
// in between, gets that last delivery again (it may have been the one lost; an ack that moved
// comes from a subscriber still working through what is on its way); if it was an Event no
// longer cached, the session ends with Unavailable instead, and the subscriber resumes from its
// CT.
//
// Slow consumers: a session may have at most max_unacked_events Event messages of a pubend sent
// and not acknowledged. A constream member that passes the bound is demoted to catchup — its
// session goes on, fed from the PFS — and the catchup stream only sends while the session is
// under the bound, so a consumer that stalls costs a bounded amount of memory in the channel and
// never holds the constream back. It rejoins the constream when it has caught up.
//
// Nacks: the constream nacks what is Q below the highest tick seen, a catchup the matches it
// lacks (a window at a time); the curiosity stream consolidates them, and they are sent again
// every renack_interval until answered. An answer that stopped short (upstream bounds the bytes
// of one answer) names what it left, and that is asked for in the next Flush, not at the next
// renack: each nack's rest follows its answer, within what the nackers asked for, and a
// duplicate or late answer asks for nothing (CuriosityStream::FollowUp).
//
// Acks move released(s,p); the broker sends released(p) = min(latestDelivered(p),
// min_s released(s,p)) and latestDelivered(p) upstream periodically, and chops the PFS up to
// released(p).
//
// Persistence (docs/format.md, "Subscriber hosting broker"): subscriptions, latestDelivered(p),
// released(s,p) and the PFS, in one Storage. latestDelivered(p) commits in the same transaction
// as the PFS records of the ticks it covers. As in the paper (§4.1), delivery to a subscriber is
// complete when its message is sent, and delivery to the PFS when it is durable: the constream
// sends a round's events while that round's commit is still running, so the fsync is off the
// delivery path. A broker that crashed after sending restarts with latestDelivered below what
// its subscribers consumed; it re-derives those ticks from upstream (the pubend keeps them:
// upstream only ever hears the committed latestDelivered) and a subscriber presenting a CT in
// that span is accepted and resumes exactly after it. What bounds the span is the delivery
// lease, persisted with latestDelivered: the broker never sends beyond a lease that has
// committed, and accepts a CT up to the recovered lease — beyond it a CT is "ahead of this
// broker" and refused.
//
// Commits run inline (in Flush and OnTimer, the default) or on a commit thread of the broker's
// own (commit_thread, what the runtime sets and the simulator plays on its virtual clock), in
// both cases through one GroupCommitter so that they commit in the order they were made. With
// commit_thread no handler waits for a commit. A Connect that creates a subscription is answered
// by the first Flush after the subscription's row is durable (the matcher and the PFS have it
// from the Connect on, so its catchup from its start serves what matched meanwhile): a subscriber
// told Connected earlier would hold a CT for a subscription a crash could take away, and the
// restarted broker, not knowing it, would release upstream what that CT still needs. A Connect
// to an existing subscription is answered at once (it writes a row only to raise the epoch; a
// crash that loses that brings back the older epoch, which the subscriber's outranks).
//
// A full store (a commit fails with kResourceExhausted: the map at max_map_bytes less its
// reserve, or the disk full) does not stop the broker. Its state in memory has run ahead of the
// failed commit, so it ends every session (kUnavailable, "reconnect"), reads its state from
// storage again as a restart would, and waits for room: its constreams hold still (knowledge
// above latestDelivered is dropped, to be nacked later) and new subscriptions are refused with
// kUnavailable (a durable subscriber retries), while sessions, catchups, acks, releases upstream
// and PFS chops go on, committing from the store's reserve (StorageOptions::reserve_bytes).
// When each subscription was last heard carries over (subscription_expiry counts on). The wait
// lasts full_store_wait, doubled while one full store follows another, and ends then if a chop
// or a deletion has committed meanwhile, otherwise after twice as long (a disk an operator
// cleared). waiting_for_room() and Stats::full_store_reopens say so.
//
// Thread-safety: owned by one thread, which delivers its channel's messages and calls Flush and
// OnTimer. With commit_thread, the commit thread only reports completions, which that thread
// picks up in its next Flush or OnTimer (on_commit tells it when).

#ifndef GRYPH_SUBSCRIBER_HOSTING_BROKER_H_
#define GRYPH_SUBSCRIBER_HOSTING_BROKER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gryph/broker/catchup_stream.h"
#include "gryph/channel.h"
#include "gryph/group_commit.h"
#include "gryph/latency_histogram.h"
#include "gryph/log.h"
#include "gryph/selector.h"
#include "gryph/storage.h"

namespace gryph {

struct SubscriberHostingBrokerOptions {
  struct Upstream {
    PubendId pubend;
    std::string node;  // where knowledge comes from, and nacks and releases go
  };
  std::vector<Upstream> pubends;  // at least one; distinct pubends

  // Q ticks below the highest tick seen are nacked on the first timer at least this old.
  absl::Duration nack_delay = absl::Milliseconds(20);
  // Outstanding nacks are sent again after this.
  absl::Duration renack_interval = absl::Milliseconds(200);
  // released(p) and latestDelivered(p) go upstream this often.
  absl::Duration release_interval = absl::Milliseconds(100);
  // A member of the constream that got no message for this long gets a Silence.
  absl::Duration silence_interval = absl::Seconds(1);
  // D ticks per constream round (one PFS batch).
  size_t max_batch_events = 4096;
  // How far (in ticks, i.e. microseconds of pubend time) beyond the knowledge it has seen the
  // broker may send before that is durable; see the file comment. Larger tolerates longer commit
  // stalls without holding deliveries back; it is also the tolerance for a CT ahead of a
  // restarted broker.
  Tick delivery_lease_ticks = 1'000'000;
  // Commit on a background thread instead of inline. `on_commit` (optional) is called from that
  // thread after each commit: wake the broker's thread so that it calls Flush().
  bool commit_thread = false;
  std::function<void()> on_commit;
  // With commit_thread: start no thread and let the owner play it, calling
  // committer().FlushIfDue(now) whenever that thread would commit. The simulator does, at virtual
  // instants it draws, so that it runs the runtime's commit path deterministically. Everything
  // else is as with the thread (on_commit runs inside the owner's call).
  bool simulated_commit_thread = false;
  // With commit_thread: rounds gather for this long into one commit. Deliveries never wait for
  // it (within the lease), so a longer interval only trades a longer tail of PFS records held in
  // memory (and a later release upstream) for fewer fsyncs, which leaves the disk to others (a
  // PHB on the same machine).
  absl::Duration commit_interval = absl::Milliseconds(5);
  // Events kept in the istream below latestDelivered, for catchup streams (in ticks, i.e.
  // microseconds of pubend time). Older events are nacked again when a catchup needs them.
  Tick event_cache_ticks = 10'000'000;
  CatchupStreamOptions catchup;
  // Catchup messages one Flush sends per pubend, at most (give or take one step of a catchup
  // stream, catchup.max_deliveries_per_step); the next Flush goes on from the catchup where this
  // one stopped, so that Flushes go round them. A burst of reconnections (every subscriber back
  // after an outage) then costs each Flush a bounded time, and acks, knowledge and the constream
  // are not held back behind it: smaller favours the caught-up subscribers' latency, larger the
  // catchups' throughput.
  size_t max_catchup_messages_per_flush = 4096;
  // The time one Flush gives the catchups of all pubends together, on the broker's clock (the
  // pubends take turns); checked before each shared PFS read and each catchup's step, so a
  // Flush overruns it by at most one of those. Each pubend a Flush reaches steps one catchup
  // at least, even with the slice already spent (by a long shared read, or a preempted
  // thread): catchups move on however loaded the machine. Then the loop delivers what arrived
  // meanwhile to the caught-up subscribers before the catchups go on: while catchups run flat out,
  // this bounds what they add to a caught-up subscriber's latency, at little cost to their own
  // throughput. (On a simulator's clock, which stands still within a Flush, only the message
  // budget above applies.)
  absl::Duration catchup_slice = absl::Microseconds(500);
  // While caught-up subscribers are connected here, the catchups take at most this share of the
  // broker's time: a slice that ran out is followed by a rest of its length times (1/share - 1),
  // in which the loop serves the rest (or sleeps). On a machine whose cores the catchups would
  // fill (their consumers run there too), this is what keeps the caught-up subscribers' latency
  // near its normal during a burst of reconnections; it slows the catchups down by as much.
  // 1 (the default): no rest. With no caught-up subscriber connected, catchups never rest. A
  // share below 1 slows every catchup while anyone is live: after an outage of the whole
  // broker, the first subscriber back slows all the others (shb_all_catchup: about 2.5 times
  // at 0.5). In (0, 1].
  double catchup_share = 1.0;
  // Event messages of one pubend a session may have outstanding (sent, not acknowledged); see
  // the file comment. It must exceed what a healthy subscriber receives between two acks.
  uint64_t max_unacked_events = 50'000;
  // A session from which nothing (an ack, a keepalive) arrived for this long is ended, with an
  // Unavailable error in case its subscriber is still there: a crashed subscriber, or one that
  // moved to another broker, must not hold the event cache and the PFS. Keep it well above the
  // subscribers' keepalive_interval (and their connect_retry_interval). A broker whose timer
  // stalled for half of it first counts every session as heard (its acks may be waiting).
  absl::Duration session_timeout = absl::Seconds(30);
  size_t pfs_checkpoint_interval = 1024;
  // Per pubend: PFS records recently read for catchups are kept in memory up to about this many
  // bytes, so that catchups reading the same records in turn (after an outage) read storage
  // once (PfsOptions::read_cache_bytes). 0: none kept.
  size_t pfs_read_cache_bytes = size_t{8} << 20;
  // Threads Open recovers on: at 2 or more, a second thread opens the PFS, reads the positions
  // and shares the selectors' parse while the caller's reads the subscriptions and builds the
  // matcher (Recovery says how the time went); at 1, the caller's thread alone. What is
  // recovered is the same either way. At least 1; above 2 acts as 2.
  size_t recovery_threads = 2;
  // A subscription whose subscriber has not been connected for this long is deleted, as an
  // administrator's DeleteSubscription would (Pulsar's subscription expiration, Kafka's offset
  // retention): without it, a subscriber that never returns holds the pubends' logs for ever.
  // Counted from its last ack, keepalive or connection, or from the broker's Open, whichever is
  // latest (when it was last heard is not stored). If the subscriber does come back, its CT is
  // one this broker never hosted: it is served by refiltering from upstream, and whatever
  // upstream has released meanwhile arrives as a Gap, never as a silent hole. Infinite (the
  // default): never.
  absl::Duration subscription_expiry = absl::InfiniteDuration();
  // After a full store (see the file comment), the constreams hold still for at least this long,
  // doubled (up to 64 times) while one full store follows another; a commit that freed space
  // meanwhile ends the wait then, otherwise it ends after twice as long.
  absl::Duration full_store_wait = absl::Seconds(1);
  // Where the broker reports what its operator must know (log.h): its stop and why, a damaged
  // PFS record ending a catchup, fenced and timed-out sessions, each Gap and to whom, expired and
  // deleted subscriptions. Empty: nothing.
  LogSink log = nullptr;
  // How a new subscription's selector is parsed: a Connect whose selector is longer than
  // selector.max_length is answered with an InvalidArgument error. Subscriptions already stored
  // are parsed on Open without the length limit (they were accepted when made).
  SelectorOptions selector;
  // The time source; absl::Now when empty.
  std::function<absl::Time()> clock;
};

// One durable subscription as its broker sees it: what an operator pages on (how far behind its
// subscriber is, whether it is there).
struct SubscriptionStatus {
  enum class State {
    kDisconnected,
    kConnected,   // in the constream at every pubend: it gets each event as it arrives
    kCatchingUp,  // connected, fed from the PFS at some pubend (reconnected behind, or demoted)
  };
  struct AtPubend {
    PubendId pubend;
    Tick released = 0;          // released(s,p): what its subscriber acknowledged
    Tick latest_delivered = 0;  // latestDelivered(p) of the broker
    // latest_delivered - released: the span it has not acknowledged (it may hold no match). For
    // the events, BacklogEvents.
    Tick backlog_ticks = 0;
    Tick sent_through = 0;  // the live session's last message from p; 0 without a session
    // Event messages the live session was sent and has not acknowledged, counted by the rounds
    // they went out in (an ack counts a round once it covers all of it).
    uint64_t unacked_events = 0;
    bool catching_up = false;
  };
  std::string name;
  std::string selector;
  std::string topic_filter;
  State state = State::kDisconnected;
  std::string session;  // the connected peer's name; empty when disconnected
  uint64_t epoch = 0;
  // Its last ack, keepalive or connection (or the broker's Open, when none since).
  absl::Time last_heard = absl::InfinitePast();
  std::vector<AtPubend> pubends;
};

class SubscriberHostingBroker {
 public:
  struct Stats {
    uint64_t events_delivered = 0;  // Event messages sent to subscribers
    uint64_t catchups_started = 0;
    uint64_t catchups_completed = 0;
    uint64_t gaps_delivered = 0;
    uint64_t nacks_sent = 0;
    uint64_t nacks_followed_up = 0;  // of them, sent at once after an answer that stopped short
    uint64_t pfs_records = 0;
    uint64_t commits = 0;  // storage transactions submitted
    // Sessions whose CT was above the constream's position: sent before a crash, not durable.
    uint64_t resumed_ahead = 0;
    uint64_t demotions = 0;        // slow constream members moved to catchup
    uint64_t resent = 0;           // last messages resent to a subscriber whose ack lacked them
    uint64_t stale_knowledge = 0;  // knowledge for ticks already L here
    uint64_t conflicting_knowledge = 0;  // should stay 0
    uint64_t subscriptions_deleted = 0;  // by DeleteSubscription
    uint64_t subscriptions_expired = 0;  // by subscription_expiry
    uint64_t full_store_reopens = 0;     // state read again after a commit found the store full
    // A send of Events to a session -> the ack that covers it (one sample per send; the
    // broker's clock). What an operator watches for subscribers falling behind.
    LatencyHistogram deliver_to_ack;
  };

  // What the last Open spent recovering, step by step (wall time of each step on the thread that
  // ran it: with recovery_threads > 1, steps run side by side and add up to more than `total`).
  // Open also logs it, at kInfo, in one line: what an operator reads to learn why a restart was
  // slow.
  struct Recovery {
    absl::Duration total;           // all of the recovery
    absl::Duration pfs;             // the PFS of every pubend: lastIndex and the records' tail
    absl::Duration subscriptions;   // reading the subscription rows
    absl::Duration selectors;       // parsing their selectors and topic filters (beyond the rows
                                    // and the PFS, with which it shares the threads), and filing
                                    // the subscriptions
    absl::Duration positions;       // reading released(s,p) and created(s,p)
    absl::Duration matcher;         // filing every subscription in the matcher
    size_t subscription_count = 0;  // subscriptions recovered
  };

  // Opens the broker's state in `storage` (recovering subscriptions, latestDelivered, released
  // and the PFS) and sets itself as `channel`'s receiver. Every session starts disconnected.
  // `storage` and `channel` must outlive the broker. InvalidArgument, naming the option: no
  // pubend, an empty upstream node, a count option below its least value (1;
  // catchup.max_buffered_matches 2), which would stall streams, an interval that is not
  // positive (nack_delay and commit_interval: negative), a delivery lease of 0,
  // simulated_commit_thread without commit_thread.
  static absl::StatusOr<std::unique_ptr<SubscriberHostingBroker>> Open(
      SubscriberHostingBrokerOptions options, Storage* storage, Channel* channel);
  virtual ~SubscriberHostingBroker() = default;

  // Handles one message (the channel receiver calls this). Knowledge is only accumulated here;
  // Flush() delivers it.
  virtual void HandleMessage(absl::string_view from, const Message& message) = 0;
  // Picks up finished commits, then delivers what the knowledge received allows: constreams (one
  // storage transaction per round for all pubends), then catchup streams, at most
  // max_catchup_messages_per_flush catchup messages per pubend. Call it after handing the broker
  // a batch of messages, and after on_commit; OnTimer calls it too. Returns true when catchups
  // have more to send already: call it again before waiting for messages.
  virtual bool Flush() = 0;
  // Nacks, releases, Silence and persistence of acks. Call it when NextDeadline says (or every
  // few milliseconds).
  virtual void OnTimer(absl::Time now) = 0;
  // When OnTimer should next run at the latest: the next release, renack or nack due (missing
  // ticks are nacked within 2 * nack_delay of being seen, a millisecond at least), and at least
  // every session_timeout / 4. Silences and session timeouts are checked at every OnTimer, so at
  // least every release_interval. Flush's work (messages, commits) is not included: call Flush
  // for those.
  virtual absl::Time NextDeadline(absl::Time now) const = 0;

  // latestDelivered(p): sent to every non-catchup subscriber and durable in the PFS.
  virtual Tick latest_delivered(PubendId p) const = 0;
  virtual size_t subscription_count() const = 0;
  virtual size_t catching_up() const = 0;
  virtual const Stats& stats() const = 0;
  virtual const Recovery& recovery() const = 0;

  // Administration (on the broker's thread, like everything else here).
  // Every durable subscription, by name.
  virtual std::vector<SubscriptionStatus> Subscriptions() const = 0;
  // One subscription; NotFound when there is none of that name.
  virtual absl::StatusOr<SubscriptionStatus> FindSubscription(absl::string_view name) const = 0;
  // Events matching subscription `name` at pubend `p` that its subscriber has not acknowledged:
  // the PFS records in (released(s,p), latestDelivered(p)], read from storage (a cost in
  // proportion to them; a range the PFS chopped counts as none). NotFound for an unknown
  // subscription or pubend; the read's error for damaged records.
  virtual absl::StatusOr<uint64_t> BacklogEvents(absl::string_view name, PubendId p) = 0;
  // Deletes a durable subscription from the broker's side, as its own Unsubscribe would: its
  // session (if any) ends with NotFound, its PFS entries and rows go, and its acknowledgements
  // no longer hold releases upstream. NotFound when there is none of that name;
  // FailedPrecondition on a stopped broker.
  virtual absl::Status DeleteSubscription(absl::string_view name) = 0;

  // OK, or the storage error that stopped the broker (reopen it). A full store does not stop it
  // (see the file comment): status stays OK.
  virtual const absl::Status& status() const = 0;
  // Whether the broker is waiting for room in a full store: its constreams hold still.
  virtual bool waiting_for_room() const = 0;
  // The committer of the broker's rounds, for an owner that plays the commit thread
  // (simulated_commit_thread). Anyone else leaves it alone.
  virtual GroupCommitter& committer() = 0;

 protected:
  SubscriberHostingBroker() = default;
};

}  // namespace gryph

#endif  // GRYPH_SUBSCRIBER_HOSTING_BROKER_H_
