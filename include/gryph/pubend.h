// Pubend: one persistent, ordered event stream at a publisher hosting broker (paper §2–§3).
//
// A pubend assigns each published event a tick, logs the event once in storage, and acknowledges
// the publisher only after the group commit that holds the event is durable. It then sends the
// committed stream downstream as knowledge: D ticks with their events and S ranges between them.
// It answers nacks from its log (D, S or L), in bounded messages. It keeps the release table of
// its registered downstream nodes and turns an increasing prefix of its ticks into L by the
// paper's condition, reclaiming the storage of released events:
//
//   tick t becomes L  iff  t <= Tr(p)  or  (t <= Td(p) and T(p) - t > maxRetain(p))
//
// where Tr(p) and Td(p) are the minimum released and latestDelivered over all registered
// downstream nodes, and T(p) the pubend's current time. With no registered node nothing is
// released.
//
// Ticks are microseconds since the Unix epoch of the time passed to Publish, raised to one past
// the previous tick when events come faster: strictly increasing, never repeating, and never going
// back across restarts (recovery starts above every tick the pubend committed or announced).
//
// Idempotent publishing: a publish carries (publisher, sequence). Sequences of one publisher must
// increase (gaps are allowed); sequence 0 opts out. A retry of the publisher's latest
// kSequenceWindow sequences returns the original tick and logs nothing, also after a restart and
// while the original is still being committed; an older retry fails with AlreadyExists.
//
// Released events are deleted in chunks of kReclaimChunk per OnTimer once the L prefix moved;
// the L prefix itself is durable at once, and nothing at or below it is ever served as D again.
//
// Persistence (docs/format.md, "Pubend"): tables pubend.events, pubend.meta, pubend.downstream and
// pubend.publishers in the shared storage; several pubends share one storage and one
// GroupCommitter (one fsync for all).
//
// Failure: a failed commit fails the pubend for good (status()): the failed publishes and every
// later one get the error, and nothing that was not committed is acknowledged or sent downstream.
// Reopen the storage and the pubend to continue; what was acknowledged is still there. A full
// store (kResourceExhausted) is the exception: the publishes of that commit (and those submitted
// with them) fail with it, their sequences may be retried, and the pubend goes on — its release
// and reclaim commit from the storage's reserve (StorageOptions::reserve_bytes), so releasing
// what downstream acknowledged (or maxRetain) makes room and publishing resumes.
//
// Thread-safety: thread-safe. Publish may be called from any thread; acknowledgements and
// knowledge sends happen on the thread that runs the GroupCommitter's commits. Callbacks must not
// call back into the pubend's blocking methods.

#ifndef GRYPH_PUBEND_H_
#define GRYPH_PUBEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gryph/channel.h"
#include "gryph/event.h"
#include "gryph/group_commit.h"
#include "gryph/log.h"
#include "gryph/message.h"
#include "gryph/storage.h"
#include "gryph/tick.h"

namespace gryph {

struct PubendOptions {
  PubendId id;
  // maxRetain(p), in ticks (microseconds): how long a tick is kept for disconnected subscribers
  // once every connected one has it. InfiniteDuration() disables early release.
  absl::Duration max_retain = absl::InfiniteDuration();
  // A knowledge message (stream or nack answer) carries at most this many spans and about this
  // many bytes of events; longer answers are split.
  size_t max_spans_per_message = 1024;
  size_t max_bytes_per_message = size_t{1} << 20;
  // One nack is answered with at most about this many bytes of logged events (their encoded
  // size), shared equally among its ranges; each range's part may pass its share by one event,
  // so that every range with a share makes progress. The last message of the answer names what
  // it left unanswered (KnowledgeMessage::unanswered), and the nacker asks for it again. A node
  // back from a long outage nacks the whole span it missed at once: this bounds what the answer
  // holds in memory.
  uint64_t max_nack_answer_bytes = uint64_t{64} << 20;
  // When the stream is idle this long, OnTimer announces silence up to now (so that downstream
  // nodes advance, and learn of anything they missed before a restart).
  absl::Duration heartbeat = absl::Milliseconds(100);
  // Where the pubend reports what its operator must know (log.h): its failure, each damaged log
  // row it finds, and early release beginning to discard what downstream has not acknowledged
  // (max_retain: subscribers will get Gaps). Called with the pubend's lock held, possibly on the
  // commit thread. Empty: nothing (a PublisherHostingBroker gives its pubends its own `log`).
  LogSink log = nullptr;
};

// What opening a pubend spent recovering, step by step (wall time). A PHB sums its pubends'. The
// publisher sequences (the retry window of each publisher) are not read at open but at each
// publisher's first publish since: a bounded read of its own rows.
struct PubendRecovery {
  absl::Duration total;       // all of the recovery
  absl::Duration log;         // T(p) and the L prefix: the announced tick and the last event
  absl::Duration downstream;  // the release table (released, latestDelivered per node)

  PubendRecovery& operator+=(const PubendRecovery& other) {
    total += other.total;
    log += other.log;
    downstream += other.downstream;
    return *this;
  }
};

class Pubend {
 public:
  // How many of a publisher's latest sequences are remembered for retries.
  static constexpr size_t kSequenceWindow = 16;
  // The longest publisher name, in bytes (it is part of a storage key).
  static constexpr size_t kMaxPublisherNameBytes = 256;
  // Released events are deleted at most this many per commit (OnTimer), after the L prefix moved.
  static constexpr size_t kReclaimChunk = 4096;

  using PublishDone = absl::AnyInvocable<void(absl::StatusOr<Tick>) &&>;

  // Opens the pubend options.id stored in `storage`, recovering T(p), the L prefix and the release
  // table (a fresh pubend starts empty); a publisher's sequences are read at its first publish.
  // `storage`, `committer` (which must commit to `storage`) and `channel` must outlive the
  // pubend. Fails with InvalidArgument,
  // naming the option, for a negative max_retain, a heartbeat that is not positive and finite or
  // a message or answer bound of 0; with the storage's status; or DataLoss when stored pubend
  // state does not parse.
  static absl::StatusOr<std::unique_ptr<Pubend>> Open(const PubendOptions& options,
                                                      Storage* storage, GroupCommitter* committer,
                                                      Channel* channel);
  virtual ~Pubend() = default;

  // Logs `event` at a new tick and calls done(tick) once the commit holding it is durable, or
  // done(error) if it failed. With sequence > 0, a retry of one of the publisher's recent
  // sequences gets the original tick instead (see the header comment). Fails (through done) with
  // InvalidArgument for a null event, a publisher name over kMaxPublisherNameBytes or a sequence
  // below the publisher's latest that is not a retry, AlreadyExists for a retry older than the
  // window, DataLoss when the publisher's stored sequences are damaged or a damaged row follows
  // them (read at its first publish since the open: a bounded read, under the pubend's lock;
  // docs/format.md), and the pubend's failure
  // status. None of these changes anything stored, nor the other publishes of the group.
  // The retry window: a publisher that crashed with publishes unacknowledged may retry the
  // latest kSequenceWindow sequences it sent; so it must not have more than that many
  // outstanding, or an older one could be logged twice under a new sequence.
  // `done` never runs inside Publish: it runs on the thread that commits (the PHB's commit
  // thread, or whoever calls OnTimer/Flush in manual mode) while the committer completes the
  // group, and Publish needs the committer too. So `done` must not wait for a lock that the
  // application holds around its Publish calls: each would wait for the other. Hand the result
  // to another thread, or keep such a lock out of `done`.
  virtual void Publish(absl::string_view publisher, uint64_t sequence, EventRef event,
                       absl::Time now, PublishDone done) = 0;

  // Registers a downstream node: it receives the knowledge stream and takes part in release.
  // It starts with released = latestDelivered = the current L prefix. AlreadyExists if known.
  virtual absl::Status AddDownstream(absl::string_view node) = 0;
  // Unregisters a node; its release hold goes away. NotFound if unknown.
  virtual absl::Status RemoveDownstream(absl::string_view node) = 0;

  // A nack from `from` (any node may nack): answered with knowledge for every tick of the ranges
  // up to T(p), in messages of bounded size. InvalidArgument for a message of another pubend.
  virtual absl::Status HandleCuriosity(absl::string_view from, const CuriosityMessage& nack) = 0;
  // Release information from a registered downstream node. Values only move forward (an older
  // message changes nothing). NotFound for an unknown node, InvalidArgument for
  // latest_delivered beyond T(p) or another pubend's entry.
  virtual absl::Status HandleRelease(absl::string_view from, const ReleaseEntry& entry,
                                     absl::Time now) = 0;

  // Periodic work: early release by time, and a silence heartbeat when idle. Call at least every
  // options.heartbeat.
  virtual void OnTimer(absl::Time now) = 0;

  // Sends the knowledge committed since the last send (called after each group commit).
  virtual void FlushKnowledge() = 0;

  virtual PubendId id() const = 0;
  // T(p) as committed: every tick at or below is durably D, S or L.
  virtual Tick committed_tick() const = 0;
  // The highest tick such that every tick at or below is L.
  virtual Tick l_prefix() const = 0;
  // Tr(p), Td(p): minimum released / latestDelivered over registered nodes (0 with none).
  virtual Tick released_min() const = 0;
  virtual Tick delivered_min() const = 0;
  virtual std::vector<std::string> downstream() const = 0;
  // OK, or the error that failed the pubend.
  virtual absl::Status status() const = 0;
  // Rows of the log found damaged (they fail the storage's checksum, or do not decode) since
  // open, and the first such damage (kDataLoss naming the row; OK when none). A damaged event is
  // never sent: nacks are answered L from the good row before it to the good row after it (its
  // key may be what was damaged), so subscribers that may have matched it get a Gap and the
  // stream goes on; the pubend's status stays OK. VerifyStorage lists every damaged row.
  virtual uint64_t damaged_events() const = 0;
  // Nacks answered (HandleCuriosity that sent its answer), and the events those answers carried.
  virtual uint64_t nacks_answered() const = 0;
  virtual uint64_t nack_events_sent() const = 0;
  virtual absl::Status damage() const = 0;
  // What Open spent recovering this pubend.
  virtual const PubendRecovery& recovery() const = 0;

 protected:
  Pubend() = default;
};

// The pubend for `key` among `pubends`, by a hash that is stable across processes and restarts
// (so that one key always lands on one pubend, and its events stay in order).
// REQUIRES: !pubends.empty().
PubendId PubendForKey(absl::string_view key, absl::Span<const PubendId> pubends);

}  // namespace gryph

#endif  // GRYPH_PUBEND_H_
