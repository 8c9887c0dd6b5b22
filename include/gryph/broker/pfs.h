// PFS: the persistent filtering subsystem of a subscriber hosting broker (paper §4.2).
//
// For one pubend, the PFS durably remembers which ticks matched which durable subscribers, so
// that a reconnecting subscriber's catchup stream learns its Q ticks without refiltering the
// events it missed. The constream writes one record per tick that matched at least one
// subscriber: the tick and, for each matching subscriber, the tick of that subscriber's previous
// record (a back-pointer). A catchup stream batch-reads a subscriber's Q ticks in a window by
// following its back-pointers from lastIndex(s); every tick in the window that is not reported Q
// is S for that subscriber. The released prefix of the log is chopped.
//
// Design (docs/format.md ("PFS") has every byte):
//
// * Records are keyed by (pubend, tick): the record index IS the tick. The paper's log volume
//   assigns each record a separate monotonic index; in an ordered key-value store the tick is
//   already a unique, strictly increasing key, so a separate index would only add a counter to
//   persist and a tick -> index mapping to search. With the tick as the index:
//     - a back-pointer names the previous Q tick itself, so a walk learns each Q tick without
//       reading anything else and stops as soon as a pointer falls at or below the window start,
//       the subscriber's registration or the chop point, without touching that record;
//     - chopping "everything up to the released tick" is one DeleteRange on the key range;
//     - lastTimestamp is the last key (plus the chop point when the log was chopped empty), and
//       "tick <= lastTimestamp" detects a replayed write after a crash;
//     - records of several pubends interleave in one table yet stay contiguous per pubend.
//
// * A record holds what the paper's 8 + 16n bytes hold, in fewer bytes. The key is 12 bytes
//   (pubend u32 + tick u64: the paper's 8 bytes of timestamp, plus the pubend). The value is a
//   one-byte header and n pairs (subscriber, tick - previous record tick), sorted by
//   subscriber, each field big-endian and as wide as the record's largest value needs: 1 + 16n
//   bytes at worst, typically 1 + 4n to 1 + 6n (a thousand subscribers need 2-byte ids; the
//   distance to a subscriber's previous match is a few bytes of microseconds). The fields are
//   fixed-width within a record, so a walk finds its subscriber by binary search in place,
//   without decoding the record. Why not the paper's fixed 16 bytes: LMDB splits a 4 KiB page
//   so that two 1.6 KB records (n = 100) fill a page each, so the paper's layout cost 4 KiB of
//   store per record at n = 100 against ~520 bytes for this one, and a batch read, which visits
//   records at random, ran slower for the larger footprint (see docs/format.md ("PFS")).
//
// * lastIndex(s) lives in memory and is checkpointed, not written per record. Every
//   `checkpoint_interval` records (and on Checkpoint(), and before a Chop that would discard
//   records after the checkpoint) the PFS appends to the batch of that record one row per
//   subscriber whose lastIndex changed since the last checkpoint, plus the checkpoint tick. Open
//   reads the subscriber rows (lastIndex as of the checkpoint tick) and scans only the records
//   after the checkpoint tick — at most checkpoint_interval of them — replaying their
//   back-pointers. Because the rows and the records commit in the caller's transactions in order,
//   every committed state satisfies: lastIndex(s) = row(s) updated by the records after the
//   checkpoint tick. So after a crash lastIndex(s) is exactly its value at the last committed
//   record. (Open also checks that each scanned record's back-pointer equals the lastIndex it
//   rebuilt, and reports a mismatch as DataLoss.)
//
// * Subscribers are registered (AddSubscriber) and removed (RemoveSubscriber) through the same
//   batches. The subscriber row holds the registration tick: lastTimestamp when it was added.
//   Every record of the current registration has a tick above it, so a walk stops there and a
//   reused subscriber id never picks up the chain of an earlier registration, before or after a
//   crash (recovery ignores record entries at or below the registration tick).
//
// * Batch reads go through a Reader, a continuation object for one subscriber and one window
//   (from, to]. The back-pointer chain runs backwards, the reader must deliver forwards, and the
//   read buffer is bounded, so the reader walks the chain ONCE into an in-memory list of Q ticks
//   and hands it out in bounded slices; later calls continue from where the last stopped without
//   touching storage again. Memory is bounded too: a walk keeps at most `reader_chunk_ticks`
//   ticks; when the window holds more, it keeps the lowest chunk and a bookmark (the top record)
//   of each chunk above, and re-walks a chunk from its bookmark when the reader reaches it — at
//   most two record lookups per Q tick overall, and none per S tick. ExtendTo(to) appends a
//   later window (new records since the reader was created): its walk starts from lastIndex(s)
//   and stops at the old end, so it costs only the new ticks.
//
// * Many readers at once (every subscriber back after an outage) would each walk its own chain
//   through the same records: a record holding 100 subscribers is then looked up 100 times, at
//   random places of the store. ReadTogether serves them with one forward pass over the records
//   instead, reading each record once and finding each reader's subscriber in it; the readers
//   move on as if they had read, so a later Read continues where the pass stopped.
//
// Writes inside the caller's transaction: Write, AddSubscriber, RemoveSubscriber, Checkpoint and
// Chop append operations to a caller-provided WriteBatch and update the in-memory state AS IF
// THAT BATCH WILL COMMIT. The caller (the SHB's constream) commits the batch itself, together
// with its own state (latestDelivered) — one transaction. Contract:
//   - Commit the batches in the order the PFS appended to them (a GroupCommitter does).
//   - Tell the PFS what committed: MarkCommitted(t) after the commit that holds every PFS
//     operation appended up to the record at tick t. Until then the PFS keeps those records in
//     memory (as encoded: a few bytes per subscriber entry), so reads see them before they
//     reach storage.
//   - If a commit fails (or the process may have lost a batch), destroy the PFS and its readers
//     and Open it again from storage: it recovers exactly the committed state. Do not keep
//     writing into new batches after a failed commit.
// Commit() is a convenience that commits a batch to the PFS's own storage and does the above.
//
// Thread-safety: thread-compatible. A PFS and its Readers form one unit: every call on either
// must be serialized by the caller (the SHB drives them from one thread). Readers see every
// write the moment it is appended to a batch, committed or not (see MarkCommitted). Reads use
// short storage snapshots that are released before each call returns, so the same thread may
// commit between calls (the Storage rule "no Commit while holding a Cursor" holds).
//
// Errors: absl::Status. kNotFound for an unknown subscriber; kInvalidArgument for a malformed
// call (a duplicate subscriber in one write, a window with from > to); kDataLoss when stored PFS
// data does not parse or a back-pointer leads to a missing record; storage failures pass through.
// After a failed Commit() (the convenience) every call fails with kFailedPrecondition: reopen.

#ifndef GRYPH_BROKER_PFS_H_
#define GRYPH_BROKER_PFS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gryph/storage.h"
#include "gryph/tick.h"

namespace gryph {

namespace internal {
class PfsRecordCache;
}  // namespace internal

struct PfsOptions {
  // The pubend whose log stream this PFS holds. Several PFS (one per pubend) share one Storage.
  PubendId pubend;
  // A lastIndex checkpoint is appended to the batch of every checkpoint_interval-th record:
  // recovery scans at most this many records. Larger means fewer checkpoint writes (each writes
  // one 16-byte row per subscriber that matched since the last one). REQUIRES: >= 1.
  size_t checkpoint_interval = 1024;
  // A reader holds at most this many Q ticks in memory (8 bytes each); a window with more is
  // walked in chunks (see the file comment). REQUIRES: >= 1.
  size_t reader_chunk_ticks = size_t{1} << 16;
  // Committed records that ReadTogether read are kept in memory, up to about this many bytes,
  // for the next pass over the same ticks (catchups after an outage ask in groups, each from
  // about where the last one read). 0: none kept.
  size_t read_cache_bytes = size_t{8} << 20;
};

class PFS {
 public:
  // What one Reader::Read call reports, for the ticks in (P, through] where P is the reader's
  // position before the call:
  //   - ticks in (P, lost_through] are unknown: the PFS chopped them (deliver a Gap);
  //   - `ticks` lists, increasing, the Q ticks of the subscriber in (max(P, lost_through),
  //     through];
  //   - every other tick of (P, through] is S for the subscriber.
  // Afterwards the reader's position is `through`.
  struct ReadResult {
    Tick lost_through = 0;  // 0 when nothing was lost (P >= the chop point)
    std::vector<Tick> ticks;
    Tick through = 0;
  };

  // A batch read of one subscriber's Q ticks over a window (from, to], continued over as many
  // calls as the caller's buffer needs, and extensible as the caller's window end moves.
  //
  // Created by PFS::NewReader. The reader reads the PFS's current state at each call: writes
  // appended after it was created are visible (ExtendTo reaches them), a Chop reaching into the
  // unread part of the window is reported as lost_through in the next Read, and removing the
  // subscriber makes the next Read fail with kNotFound.
  //
  // REQUIRES: the window end is never beyond the tick through which the caller has written to
  // the PFS (the constream's latestDelivered): the PFS cannot tell a tick that matched nobody
  // from one not written yet, and reports both as S.
  //
  // Thread-safety: as the PFS (one unit with it). Must be destroyed before its PFS.
  class Reader {
   public:
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;
    ~Reader();

    // Reads up to max_ticks Q ticks after the current position into *result (cleared first;
    // its vector's capacity is reused) and advances the position to result->through, which is
    // the window end unless the buffer filled first. A read at the window end returns no ticks
    // and through = end().
    // Fails with kNotFound if the subscriber was removed (or re-added) since the reader was
    // created, kDataLoss for damaged records, or a storage error; the position is then
    // unchanged. REQUIRES: max_ticks >= 1.
    absl::Status Read(size_t max_ticks, ReadResult* result);

    // Moves the window end to `to` (the caller's latestDelivered advanced). A `to` at or below
    // end() changes nothing. The new part is walked on demand, from lastIndex(s) down to the old
    // end.
    void ExtendTo(Tick to);

    SubscriberId subscriber() const { return subscriber_; }
    // Every tick at or below position() has been reported.
    Tick position() const { return position_; }
    Tick end() const { return end_; }
    // Whether the whole window has been reported (position() == end()).
    bool done() const { return position_ >= end_; }

   private:
    friend class PFS;
    // A part of the chain still to walk: the Q ticks in (lo, hi], found by walking back from
    // `start` (a record holding the subscriber), or from lastIndex(s) at walk time when start is
    // 0.
    struct Segment {
      Tick lo;
      Tick hi;
      Tick start;
    };

    Reader(PFS* pfs, SubscriberId s, uint64_t incarnation, Tick from, Tick to);
    // Walks the front segment into ticks_.
    absl::Status WalkNext();
    // Moves the position to `through` (> position_), dropping what was walked or is still to
    // walk at or below it (ReadTogether has reported it).
    void SkipTo(Tick through);
    // kNotFound if the subscriber was removed (or re-added) since the reader was created.
    absl::Status CheckRegistered() const;

    PFS* const pfs_;
    const SubscriberId subscriber_;
    const uint64_t incarnation_;  // of the registration the reader belongs to
    Tick position_;
    Tick end_;
    std::vector<Tick> ticks_;      // walked, not yet returned; decreasing (next at the back)
    std::deque<Segment> pending_;  // not yet walked, increasing and disjoint, all above ticks_
  };

  // Opens the PFS of options.pubend in `storage`, recovering lastTimestamp, the chop point, the
  // subscribers and their lastIndex from the checkpoint plus the records after it (a fresh PFS
  // starts empty). `storage` must outlive the PFS. Fails with kInvalidArgument for bad options,
  // kDataLoss when stored PFS data is damaged or inconsistent, or the storage's error.
  static absl::StatusOr<std::unique_ptr<PFS>> Open(const PfsOptions& options, Storage* storage);

  PFS(const PFS&) = delete;
  PFS& operator=(const PFS&) = delete;
  ~PFS();

  // ---- Writes: each appends to *batch and updates the in-memory state as if it commits. -------
  // On error nothing is appended and nothing changes. REQUIRES: batch != nullptr.

  // Registers subscriber s with lastIndex(s) = 0 (no record yet) and registration tick
  // lastTimestamp: ticks at or below it are S for s. Fails with kAlreadyExists if registered.
  absl::Status AddSubscriber(SubscriberId s, WriteBatch* batch);
  // Unregisters s: its lastIndex is dropped and its back-pointers are never followed again (its
  // entries stay in old records until they are chopped). Fails with kNotFound if unknown.
  absl::Status RemoveSubscriber(SubscriberId s, WriteBatch* batch);

  // Records that tick t is Q for `subscribers` (in any order) and S for every other subscriber.
  //   - t <= last_timestamp(): a no-op returning OK (a replay after a crash).
  //   - empty `subscribers`: a no-op returning OK (no record for a tick that matched nobody).
  //   - otherwise appends the record of t (holding each subscriber's previous record tick),
  //     sets lastIndex(s) = t for each and last_timestamp() = t; every checkpoint_interval-th
  //     record also appends a checkpoint.
  // Fails with kNotFound if a subscriber is not registered, kInvalidArgument for a duplicate.
  absl::Status Write(Tick t, absl::Span<const SubscriberId> subscribers, WriteBatch* batch);

  // Appends a checkpoint of every lastIndex changed since the last one (nothing if nothing
  // changed), bounding the recovery scan to the records written after it.
  absl::Status Checkpoint(WriteBatch* batch);

  // Discards every record at or below `through` (the released point): ticks at or below it
  // become unknown to readers (lost_through). Raises last_timestamp() to `through` if below, so
  // later writes at or below it are no-ops. A `through` at or below chopped_through() is a no-op.
  absl::Status Chop(Tick through, WriteBatch* batch);

  // Tells the PFS that every batch holding its operations up to the record at tick `through`
  // has committed; the PFS stops keeping those records in memory. REQUIRES: it is true — a
  // record claimed committed but absent from storage reads as kDataLoss.
  void MarkCommitted(Tick through);

  // Convenience: commits `batch` to the PFS's storage; on OK marks everything written so far
  // committed. On error the PFS is failed (every later call returns kFailedPrecondition): reopen
  // it. Must not be mixed with batches committed by the caller that are still pending.
  absl::Status Commit(const WriteBatch& batch);

  // ---- Reads ----------------------------------------------------------------------------------

  // A reader of subscriber s's Q ticks in (from, to]. Fails with kNotFound if s is not
  // registered, kInvalidArgument if from > to. Nothing is read until Reader::Read.
  absl::StatusOr<std::unique_ptr<Reader>> NewReader(SubscriberId s, Tick from, Tick to);

  // Reads for several readers at once, in ONE forward pass over the records from the lowest
  // reader position on, at most max_records records and, beyond the first, at most max_bytes of
  // their encoded size (records of many subscribers are large): each record is read once for all of
  // them instead of once per reader that walks through it. This pays when the readers' windows
  // overlap and their subscribers match densely (many subscribers catching up after an outage); a
  // single reader of a sparse subscriber is cheaper with Reader::Read, which touches only its own
  // records.
  //
  // (*results)[i] (resized to readers.size()) is what readers[i]->Read would have reported for
  // the part of its window the pass covered, and the reader moves past it as if it had read it:
  // through is where the pass stopped (after its last record when a bound ran out, else the
  // reader's end), or the reader's position unchanged when the pass stopped below it (then ticks
  // is empty and lost_through 0). A reader already done reports through = end().
  // Fails with kNotFound if a reader's subscriber was removed since it was created, kDataLoss
  // for a damaged record, or a storage error; no reader moves then. REQUIRES: the readers are
  // distinct readers of this PFS; max_records >= 1.
  absl::Status ReadTogether(absl::Span<Reader* const> readers, size_t max_records,
                            std::vector<ReadResult>* results, size_t max_bytes = SIZE_MAX);

  // ---- State ----------------------------------------------------------------------------------

  const PfsOptions& options() const { return options_; }
  // The tick of the last record written (or the chop point, if higher); 0 for an empty PFS.
  Tick last_timestamp() const { return last_tick_; }
  // Every record at or below this tick has been chopped (0: none).
  Tick chopped_through() const { return chopped_; }
  // lastIndex(s): the tick of s's last record, 0 if none since it was registered; nullopt if s
  // is not registered. (The record may have been chopped since.)
  std::optional<Tick> last_index(SubscriberId s) const;
  // The registered subscribers, in no particular order.
  std::vector<SubscriberId> subscribers() const;
  size_t subscriber_count() const { return subs_.size(); }
  // How many records Open scanned after the checkpoint (bounded by checkpoint_interval).
  size_t recovered_tail_records() const { return recovered_tail_records_; }
  // OK, or the error that failed the PFS (see Commit).
  absl::Status status() const { return status_; }

 private:
  struct Sub {
    Tick added_at = 0;    // registration tick: the subscriber's records are all above it
    Tick last_index = 0;  // lastIndex(s); 0 = no record since registration
    uint64_t incarnation = 0;
    bool dirty = false;  // last_index changed since the last checkpoint
  };

  PFS(const PfsOptions& options, Storage* storage);
  absl::Status Recover();
  absl::Status CheckUsable() const;
  void AppendCheckpoint(WriteBatch* batch);
  // The value of the record at tick t (in memory if not committed yet, else in storage through
  // *cursor, created on first use). The view is valid until the cursor moves or the PFS changes.
  // kDataLoss if there is no such record.
  absl::StatusOr<absl::string_view> LookupRecord(Tick t, std::unique_ptr<Cursor>* cursor);
  // The value of the i-th record of unsettled_ticks_.
  absl::string_view UnsettledRecord(size_t i) const;
  // The back-pointer of subscriber s in the record of tick t (value `record`); kDataLoss if the
  // record is malformed or does not hold s.
  static absl::StatusOr<Tick> FindPrev(absl::string_view record, Tick t, SubscriberId s);
  const Sub* FindSub(SubscriberId s) const;
  // Calls visit(t, value) for the committed records in (from, to], in tick order, until it
  // returns false: from the read cache where it holds them, else from storage (filling the
  // cache). REQUIRES: to <= committed_.
  absl::Status ScanCommitted(Tick from, Tick to,
                             absl::FunctionRef<bool(Tick, absl::string_view)> visit);

  // Constant after construction.
  const PfsOptions options_;
  Storage* const storage_;
  const std::string records_begin_;  // first key of this pubend's records
  const std::string records_end_;    // first key after them ("" = unbounded)

  absl::Status status_;
  Tick last_tick_ = 0;        // lastTimestamp
  Tick chopped_ = 0;          // chop point
  Tick checkpoint_tick_ = 0;  // the last checkpoint covers every record at or below it
  size_t records_since_checkpoint_ = 0;
  size_t recovered_tail_records_ = 0;
  uint64_t next_incarnation_ = 1;
  absl::flat_hash_map<uint64_t, Sub> subs_;
  std::vector<uint64_t> dirty_;  // subscribers with dirty set (may hold stale ids)
  std::unique_ptr<internal::PfsRecordCache> cache_;  // committed records read lately

  // Records appended but not known committed (tick > committed_), in tick order: their ticks,
  // offsets into unsettled_bytes_ and values back to back. Entries before unsettled_begin_ are
  // dead (committed) and compacted away lazily.
  Tick committed_ = 0;
  std::vector<Tick> unsettled_ticks_;
  std::vector<size_t> unsettled_offsets_;
  std::string unsettled_bytes_;
  size_t unsettled_begin_ = 0;

  // Scratch for Write, kept to avoid an allocation per record.
  std::vector<std::pair<uint64_t, Sub*>> scratch_subs_;
  std::string scratch_value_;
  std::string scratch_key_;
};

}  // namespace gryph

#endif  // GRYPH_BROKER_PFS_H_
