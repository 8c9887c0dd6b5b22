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
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gryph/channel.h"
#include "gryph/event.h"
#include "gryph/group_commit.h"
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
  // it left unanswered (KnowledgeMessage::unanswered), and the nacker asks for it again. A node back from a long outage nacks
  // the whole span it missed at once: this bounds what the answer holds in memory.
  uint64_t max_nack_answer_bytes = uint64_t{64} << 20;
  // When the stream is idle this long, OnTimer announces silence up to now (so that downstream
  // nodes advance, and learn of anything they missed before a restart).
  absl::Duration heartbeat = absl::Milliseconds(100);
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

  // Opens the pubend options.id stored in `storage`, recovering T(p), the L prefix, the release
  // table and the publisher sequences (a fresh pubend starts empty). `storage`, `committer` (which
  // must commit to `storage`) and `channel` must outlive the pubend. Fails with InvalidArgument,
  // naming the option, for a negative max_retain, a heartbeat that is not positive and finite or
  // a message or answer bound of 0; with the storage's status; or DataLoss when stored pubend
  // state does not parse.
  static absl::StatusOr<std::unique_ptr<Pubend>> Open(const PubendOptions& options,
                                                      Storage* storage, GroupCommitter* committer,
                                                      Channel* channel);
  ~Pubend();

  // Logs `event` at a new tick and calls done(tick) once the commit holding it is durable, or
  // done(error) if it failed. With sequence > 0, a retry of one of the publisher's recent
  // sequences gets the original tick instead (see the header comment). Fails (through done) with
  // InvalidArgument for a null event, a publisher name over kMaxPublisherNameBytes or a sequence
  // below the publisher's latest that is not a retry, AlreadyExists for a retry older than the
  // window, and the pubend's failure status. None of these changes anything stored, nor the
  // other publishes of the group.
  // The retry window: a publisher that crashed with publishes unacknowledged may retry the
  // latest kSequenceWindow sequences it sent; so it must not have more than that many
  // outstanding, or an older one could be logged twice under a new sequence.
  // `done` never runs inside Publish: it runs on the thread that commits (the PHB's commit
  // thread, or whoever calls OnTimer/Flush in manual mode) while the committer completes the
  // group, and Publish needs the committer too. So `done` must not wait for a lock that the
  // application holds around its Publish calls: each would wait for the other. Hand the result
  // to another thread, or keep such a lock out of `done`.
  void Publish(absl::string_view publisher, uint64_t sequence, EventRef event, absl::Time now,
               PublishDone done);

  // Registers a downstream node: it receives the knowledge stream and takes part in release.
  // It starts with released = latestDelivered = the current L prefix. AlreadyExists if known.
  absl::Status AddDownstream(absl::string_view node);
  // Unregisters a node; its release hold goes away. NotFound if unknown.
  absl::Status RemoveDownstream(absl::string_view node);

  // A nack from `from` (any node may nack): answered with knowledge for every tick of the ranges
  // up to T(p), in messages of bounded size. InvalidArgument for a message of another pubend.
  absl::Status HandleCuriosity(absl::string_view from, const CuriosityMessage& nack);
  // Release information from a registered downstream node. Values only move forward (an older
  // message changes nothing). NotFound for an unknown node, InvalidArgument for
  // latest_delivered beyond T(p) or another pubend's entry.
  absl::Status HandleRelease(absl::string_view from, const ReleaseEntry& entry, absl::Time now);

  // Periodic work: early release by time, and a silence heartbeat when idle. Call at least every
  // options.heartbeat.
  void OnTimer(absl::Time now);

  // Sends the knowledge committed since the last send (called after each group commit).
  void FlushKnowledge();

  PubendId id() const { return options_.id; }
  // T(p) as committed: every tick at or below is durably D, S or L.
  Tick committed_tick() const;
  // The highest tick such that every tick at or below is L.
  Tick l_prefix() const;
  // Tr(p), Td(p): minimum released / latestDelivered over registered nodes (0 with none).
  Tick released_min() const;
  Tick delivered_min() const;
  std::vector<std::string> downstream() const;
  // OK, or the error that failed the pubend.
  absl::Status status() const;
  // Rows of the log found damaged (they fail the storage's checksum, or do not decode) since
  // open, and the first such damage (kDataLoss naming the row; OK when none). A damaged event is
  // never sent: nacks are answered L from the good row before it to the good row after it (its
  // key may be what was damaged), so subscribers that may have matched it get a Gap and the
  // stream goes on; the pubend's status stays OK. VerifyStorage lists every damaged row.
  uint64_t damaged_events() const;
  absl::Status damage() const;

 private:
  struct Downstream {
    Tick released = 0;
    Tick latest_delivered = 0;
  };
  struct SequenceEntry {
    uint64_t sequence;
    Tick tick;
  };
  struct Publisher {
    std::deque<SequenceEntry> committed;  // the latest kSequenceWindow, increasing
    uint64_t last_sequence = 0;           // the latest accepted (committed or not)
    uint64_t stored_rows = 0;             // its sequence rows in storage, at most (trimmed)
    // Sequences accepted but not committed yet, with the retries waiting for the commit.
    struct Pending {
      Tick tick = 0;
      std::vector<PublishDone> waiters;
    };
    absl::btree_map<uint64_t, Pending> pending;
  };

  Pubend(const PubendOptions& options, Storage* storage, GroupCommitter* committer,
         Channel* channel);
  absl::Status Recover();
  Tick NowTick(absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Publishes that commit together: the first opened a submission to the committer, the others
  // joined it (GroupCommitter::JoinPending), so the commit thread takes the lock once for all.
  struct Published {
    Tick tick;
    EventRef event;
    std::string publisher;
    uint64_t sequence;
    PublishDone done;
  };
  struct CommitBatch {
    std::vector<Published> events;  // guarded by the pubend's mu_
  };
  void OnCommitted(CommitBatch& batch, absl::Status status);
  // Deletes the stored sequence rows of `name` below its committed window.
  void TrimPublisherLocked(const std::string& name, Publisher& pub)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Submits a commit that is not a publish (no records). It closes the open batch first, so
  // that no later publish joins a group ahead of it: the pubend's commits stay in tick order.
  void SubmitOtherLocked(WriteBatch batch, GroupCommitter::Done done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fail(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the release condition at `now`; submits the reclaiming commit when L advances.
  void MaybeRelease(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes the next chunk of events below the L prefix.
  void ReclaimSome() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistDownstream(const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes again the downstream rows a full store refused (downstream_dirty_).
  void PersistDirtyDownstream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendLocked(KnowledgeMessage message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushKnowledgeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends knowledge for `range` read from the log to *out, split into bounded messages; ticks
  // at or below `lost` are L. Events take their encoded size from *budget; once it is spent (and
  // something was answered) the knowledge stops before the next event, whose tick is the result;
  // 0 when the whole range was answered. Reads storage without holding mu_.
  // Damaged rows are not served: the ticks between the good rows around one are answered L, and
  // its key is appended to *damaged with the reason.
  absl::StatusOr<Tick> ReadKnowledge(TickRange range, Tick lost, uint64_t* budget,
                                     std::vector<KnowledgeMessage>* out,
                                     std::vector<std::pair<std::string, absl::Status>>* damaged)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const PubendOptions options_;
  Storage* const storage_;
  GroupCommitter* const committer_;
  Channel* const channel_;

  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  Tick assigned_ ABSL_GUARDED_BY(mu_) = 0;    // the highest tick handed out or announced
  Tick committed_ ABSL_GUARDED_BY(mu_) = 0;   // T(p), durable
  Tick l_prefix_ ABSL_GUARDED_BY(mu_) = 0;    // durable L prefix
  Tick releasing_ ABSL_GUARDED_BY(mu_) = 0;   // L prefix being committed (>= l_prefix_)
  Tick reclaimed_ ABSL_GUARDED_BY(mu_) = 0;   // events at or below are deleted
  bool reclaiming_ ABSL_GUARDED_BY(mu_) = false;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0; // publishes and heartbeats not yet committed
  absl::Time last_activity_ ABSL_GUARDED_BY(mu_);
  std::vector<KnowledgeSpan> unsent_ ABSL_GUARDED_BY(mu_);  // committed, in tick order
  // The batch later publishes may join (null: none; any other submission of this pubend closes
  // it, so that nothing commits out of tick order), and its committer group.
  std::shared_ptr<CommitBatch> open_batch_ ABSL_GUARDED_BY(mu_);
  uint64_t open_group_ ABSL_GUARDED_BY(mu_) = 0;
  absl::btree_map<std::string, Downstream> downstream_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Publisher> publishers_ ABSL_GUARDED_BY(mu_);
  absl::btree_set<std::string> damaged_events_ ABSL_GUARDED_BY(mu_);  // their row keys
  // Downstream rows a full store refused: all are written again (and the removed nodes' rows
  // deleted again) at the next timer.
  bool downstream_dirty_ ABSL_GUARDED_BY(mu_) = false;
  absl::btree_set<std::string> removed_unpersisted_ ABSL_GUARDED_BY(mu_);
  absl::Status damage_ ABSL_GUARDED_BY(mu_);
};

// The pubend for `key` among `pubends`, by a hash that is stable across processes and restarts
// (so that one key always lands on one pubend, and its events stay in order).
// REQUIRES: !pubends.empty().
PubendId PubendForKey(absl::string_view key, absl::Span<const PubendId> pubends);

}  // namespace gryph

#endif  // GRYPH_PUBEND_H_
