// Internal: a pubend's state (the public contract is include/gryph/pubend.h).

#ifndef GRYPH_LIB_PUBEND_PUBEND_IMPL_H_
#define GRYPH_LIB_PUBEND_PUBEND_IMPL_H_

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gryph/pubend.h"

namespace gryph::internal {

class PubendImpl final : public Pubend {
 public:
  PubendImpl(const PubendOptions& options, Storage* storage, GroupCommitter* committer,
             Channel* channel);
  ~PubendImpl() override;

  // Reads the stored state (Pubend::Open).
  absl::Status Recover();

  void Publish(absl::string_view publisher, uint64_t sequence, EventRef event, absl::Time now,
               PublishDone done) override;
  absl::Status AddDownstream(absl::string_view node) override;
  absl::Status RemoveDownstream(absl::string_view node) override;
  absl::Status HandleCuriosity(absl::string_view from, const CuriosityMessage& nack) override;
  absl::Status HandleRelease(absl::string_view from, const ReleaseEntry& entry,
                             absl::Time now) override;
  void OnTimer(absl::Time now) override;
  void FlushKnowledge() override;
  PubendId id() const override { return options_.id; }
  Tick committed_tick() const override;
  Tick l_prefix() const override;
  Tick released_min() const override;
  Tick delivered_min() const override;
  std::vector<std::string> downstream() const override;
  absl::Status status() const override;
  uint64_t damaged_events() const override;
  uint64_t nacks_answered() const override {
    return nacks_answered_.load(std::memory_order_relaxed);
  }
  uint64_t nack_events_sent() const override {
    return nack_events_sent_.load(std::memory_order_relaxed);
  }
  absl::Status damage() const override;
  const PubendRecovery& recovery() const override { return recovery_; }

 private:
  struct Downstream {
    Tick released = 0;
    Tick latest_delivered = 0;
  };
  struct SequenceEntry {
    uint64_t sequence;
    Tick tick;
  };
  // A publisher's latest kSequenceWindow committed sequences, oldest first: a ring held inline,
  // so that a table of 10^5 publishers costs no allocation per publisher.
  class SequenceWindow {
   public:
    // Appends `e` (its sequence above every held one), dropping the oldest when full.
    void Push(SequenceEntry e) {
      if (size_ == kSequenceWindow) {
        entries_[head_] = e;
        head_ = (head_ + 1) % kSequenceWindow;
      } else {
        entries_[(head_ + size_++) % kSequenceWindow] = e;
      }
    }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    const SequenceEntry& front() const { return entries_[head_]; }
    const SequenceEntry& back() const { return entries_[(head_ + size_ - 1) % kSequenceWindow]; }
    // The entry of `sequence`, or null.
    const SequenceEntry* Find(uint64_t sequence) const {
      for (size_t i = 0; i < size_; ++i) {
        const SequenceEntry& e = entries_[(head_ + i) % kSequenceWindow];
        if (e.sequence == sequence) return &e;
      }
      return nullptr;
    }

   private:
    std::array<SequenceEntry, kSequenceWindow> entries_;
    size_t head_ = 0;
    size_t size_ = 0;
  };
  struct Publisher {
    SequenceWindow committed;    // the latest kSequenceWindow, increasing
    uint64_t last_sequence = 0;  // the latest accepted (committed or not)
    uint64_t stored_rows = 0;    // its sequence rows in storage, at most (trimmed)
    // Sequences accepted but not committed yet, with the retries waiting for the commit.
    struct Pending {
      Tick tick = 0;
      std::vector<PublishDone> waiters;
    };
    absl::btree_map<uint64_t, Pending> pending;
  };

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
  // The stored sequences of publisher `name` (its rows in pubend.publishers), or DataLoss for a
  // damaged row.
  absl::StatusOr<Publisher> LoadPublisherLocked(absl::string_view name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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

  // Reports through options_.log (nothing without one).
  void Log(LogLevel level, std::string message) const {
    if (options_.log) options_.log(LogRecord{level, node_name_, std::move(message)});
  }

  // Constant after construction.
  const PubendOptions options_;
  const std::string node_name_ = absl::StrCat("pubend ", options_.id.value);
  Storage* const storage_;
  GroupCommitter* const committer_;
  Channel* const channel_;

  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  Tick assigned_ ABSL_GUARDED_BY(mu_) = 0;   // the highest tick handed out or announced
  Tick committed_ ABSL_GUARDED_BY(mu_) = 0;  // T(p), durable
  Tick l_prefix_ ABSL_GUARDED_BY(mu_) = 0;   // durable L prefix
  Tick releasing_ ABSL_GUARDED_BY(mu_) = 0;  // L prefix being committed (>= l_prefix_)
  Tick reclaimed_ ABSL_GUARDED_BY(mu_) = 0;  // events at or below are deleted
  bool reclaiming_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> nacks_answered_{0};
  std::atomic<uint64_t> nack_events_sent_{0};
  // Early release is discarding what downstream has not acknowledged (reported when it begins).
  bool releasing_unacknowledged_ ABSL_GUARDED_BY(mu_) = false;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // publishes and heartbeats not yet committed
  absl::Time last_activity_ ABSL_GUARDED_BY(mu_);
  std::vector<KnowledgeSpan> unsent_ ABSL_GUARDED_BY(mu_);  // committed, in tick order
  // The batch later publishes may join (null: none; any other submission of this pubend closes
  // it, so that nothing commits out of tick order), and its committer group.
  std::shared_ptr<CommitBatch> open_batch_ ABSL_GUARDED_BY(mu_);
  uint64_t open_group_ ABSL_GUARDED_BY(mu_) = 0;
  absl::btree_map<std::string, Downstream> downstream_ ABSL_GUARDED_BY(mu_);
  // Nodes, not slots: a Publisher is some 300 bytes, which a growing table would move.
  absl::node_hash_map<std::string, Publisher> publishers_ ABSL_GUARDED_BY(mu_);
  absl::btree_set<std::string> damaged_events_ ABSL_GUARDED_BY(mu_);  // their row keys
  // Downstream rows a full store refused: all are written again (and the removed nodes' rows
  // deleted again) at the next timer.
  bool downstream_dirty_ ABSL_GUARDED_BY(mu_) = false;
  absl::btree_set<std::string> removed_unpersisted_ ABSL_GUARDED_BY(mu_);
  absl::Status damage_ ABSL_GUARDED_BY(mu_);
  PubendRecovery recovery_;  // written once, by Recover, before the pubend is shared
};

}  // namespace gryph::internal

#endif  // GRYPH_LIB_PUBEND_PUBEND_IMPL_H_
