// Internal: the subscriber hosting broker's state and its parts (the public contract is
// include/gryph/subscriber_hosting_broker.h, which the file comment there explains).

#ifndef GRYPH_LIB_SHB_SUBSCRIBER_HOSTING_BROKER_IMPL_H_
#define GRYPH_LIB_SHB_SUBSCRIBER_HOSTING_BROKER_IMPL_H_

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "gryph/broker/catchup_stream.h"
#include "gryph/broker/con_stream.h"
#include "gryph/broker/curiosity_stream.h"
#include "gryph/broker/knowledge_stream.h"
#include "gryph/broker/matcher.h"
#include "gryph/broker/pfs.h"
#include "gryph/broker/session.h"
#include "gryph/group_commit.h"
#include "gryph/subscriber_hosting_broker.h"
#include "gryph/subscription.h"
#include "lib/shb/shb_keys.h"

namespace gryph::internal {

class SubscriberHostingBrokerImpl final : public SubscriberHostingBroker {
 public:
  SubscriberHostingBrokerImpl(SubscriberHostingBrokerOptions options, Storage* storage,
                              Channel* channel);
  ~SubscriberHostingBrokerImpl() override;

  // Reads the stored state (SubscriberHostingBroker::Open).
  absl::Status Recover();
  // Starts the commit thread (with commit_thread). The broker does not set itself as the
  // channel's receiver: its owner (ShbHost) passes the messages on.
  void Start();
  // Before Recover: the broker starts waiting for room in a full store (the file comment of
  // gryph/subscriber_hosting_broker.h) for at least `least`.
  void WaitForRoom(absl::Duration least);
  // Whether a commit failed for want of room: the broker stopped, and its state is to be read
  // again (ShbHost).
  bool store_full() const { return store_full_; }
  // Stops the broker with `st` (its status), ending every session.
  void Stop(const absl::Status& st) { Fail(st); }
  // Continues the counters of the broker this one replaces.
  void AdoptStats(const Stats& stats) { stats_ = stats; }
  // When each subscription was last heard (its last ack, keepalive or connection), by name; and,
  // after Recover, the same of the broker this one replaces (Recover counts from the open), so
  // that subscription_expiry counts on across a reopen.
  std::vector<std::pair<std::string, absl::Time>> LastHeard() const;
  void AdoptLastHeard(const std::vector<std::pair<std::string, absl::Time>>& heard);

  void HandleMessage(absl::string_view from, const Message& message) override;
  bool Flush() override;
  void OnTimer(absl::Time now) override;
  absl::Time NextDeadline(absl::Time now) const override;
  Tick latest_delivered(PubendId p) const override;
  size_t subscription_count() const override { return subscriptions_.size(); }
  size_t catching_up() const override;
  const Stats& stats() const override { return stats_; }
  const Recovery& recovery() const override { return recovery_; }
  const absl::Status& status() const override { return status_; }
  bool waiting_for_room() const override { return waiting_; }
  GroupCommitter& committer() override { return *committer_; }
  std::vector<SubscriptionStatus> Subscriptions() const override;
  absl::StatusOr<SubscriptionStatus> FindSubscription(absl::string_view name) const override;
  absl::StatusOr<uint64_t> BacklogEvents(absl::string_view name, PubendId p) override;
  absl::Status DeleteSubscription(absl::string_view name) override;

 private:
  // One subscription at one pubend. What is stored is here; what its sessions and catchups use
  // is allocated at its first use (a subscriber that stays away since the broker started costs
  // 24 bytes per pubend, where the whole took a 192-byte map node), and kept: the streams hold
  // pointers to its session.
  struct Position {
    Tick created = 0;   // latestDelivered(p) when the subscription was created here
    Tick released = 0;  // released(s,p)
    struct Live {
      std::unique_ptr<CatchupStream> catchup;
      std::unique_ptr<PFS::Reader> reader;
      bool member = false;    // in the constream (connected, not catching up)
      Tick resume_after = 0;  // a member's CT when it was ahead of the constream (after a crash)
      SessionStream session;  // the live session's messages from this pubend
    };
    Live& live() {
      if (live_ == nullptr) live_ = std::make_unique<Live>();
      return *live_;
    }
    // Null until first used.
    const Live* live_if_any() const { return live_.get(); }

   private:
    std::unique_ptr<Live> live_;
  };
  // A subscription's positions, by pubend: a few, inline and sorted (a map node each cost 80
  // bytes and an allocation, 4 per subscription with 4 pubends). Adding one moves the others:
  // it happens only while a subscription is made or the broker opens, and nothing holds a
  // Position& across it (what the streams point to is in Position::Live, which stays put).
  class PositionTable {
   public:
    using Entry = std::pair<PubendId, Position>;

    // The position at `p`, added (zeroed) when absent.
    Position& operator[](PubendId p) {
      Entry* e = LowerBound(p);
      if (e != end() && e->first == p) return e->second;
      return entries_.insert(entries_.begin() + (e - begin()), Entry{p, Position()})->second;
    }
    // REQUIRES: present (the broker keeps a position at every pubend it serves).
    Position& at(PubendId p) {
      Entry* e = find(p);
      if (e == end()) std::abort();
      return e->second;
    }
    const Position& at(PubendId p) const { return const_cast<PositionTable*>(this)->at(p); }
    Entry* find(PubendId p) {
      Entry* e = LowerBound(p);
      return e != end() && e->first == p ? e : end();
    }
    const Entry* find(PubendId p) const { return const_cast<PositionTable*>(this)->find(p); }
    bool contains(PubendId p) const { return find(p) != end(); }
    void clear() { entries_.clear(); }
    Entry* begin() { return entries_.data(); }
    Entry* end() { return entries_.data() + entries_.size(); }
    const Entry* begin() const { return entries_.data(); }
    const Entry* end() const { return entries_.data() + entries_.size(); }

   private:
    Entry* LowerBound(PubendId p) {
      return std::lower_bound(begin(), end(), p,
                              [](const Entry& e, PubendId q) { return e.first < q; });
    }
    absl::InlinedVector<Entry, 4> entries_;
  };
  struct SubscriptionState {
    SubscriberId id;
    std::string name;
    Subscription subscription;  // its texts are the stored ones (SelectorText, FilterText)
    uint64_t epoch = 0;
    std::string session;  // the connected peer; empty when disconnected
    PositionTable positions;
    absl::Time last_heard = absl::InfinitePast();  // the session's connection or its last ack
    // Set while the commit that creates the subscription is not yet durable: the Connect that
    // waits for it (the latest, with its sender). Connected goes out only then: a subscriber
    // told earlier would hold a CT for a subscription that a crash can take away, and the
    // restarted broker, not knowing it, would release upstream what that CT still needs.
    // (Behind a pointer: most subscriptions never wait, and a million of them would each carry
    // an empty ConnectMessage.)
    std::unique_ptr<std::pair<std::string, ConnectMessage>> awaiting_creation = nullptr;

    absl::string_view SelectorText() const { return subscription.selector().text(); }
    absl::string_view FilterText() const {
      const TopicFilter* f = subscription.topic_filter();
      return f == nullptr ? absl::string_view() : absl::string_view(f->text());
    }
    // Its shb.subscriptions row (lib/shb/shb_keys.h), with the selector's program.
    std::string EncodeRow() const {
      const std::string program = subscription.selector().EncodeProgram();
      return internal::EncodeSubscriptionRow(
          {id.value, epoch, SelectorText(), FilterText(), program});
    }
  };
  struct PubendState {
    PubendId id;
    std::string upstream;
    KnowledgeStream istream;
    CuriosityStream curiosity;
    std::unique_ptr<ConStream> constream;
    std::unique_ptr<PFS> pfs;
    Tick highest_seen = 0;
    Tick forgotten = 0;
    Tick committed = 0;        // latestDelivered(p): the constream position that is durable
    Tick lease = 0;            // the delivery lease that is durable
    Tick lease_submitted = 0;  // the highest lease handed to a commit
    Tick recovered_lease = 0;  // the lease at Open: CTs up to it are not ahead of this broker
    absl::Time last_renack = absl::InfinitePast();
    absl::Time q_seen_since = absl::InfiniteFuture();
    // What answers to nacks left unanswered since the last Flush (KnowledgeMessage::unanswered):
    // Flush asks for it again.
    std::vector<TickRange> unanswered;
    // The subscriptions with a catchup stream here, by name (the order catchups step in): a
    // Flush costs what the catchups need, not a pass over every subscription.
    absl::btree_map<absl::string_view, SubscriptionState*> catchups;
    // Where the next Flush's catchups start: the first one the last Flush's budget left out.
    // Flushes go round the catchups, so that a burst of them shares the broker fairly.
    std::string catchup_resume;
  };

  absl::Time Now() const { return options_.clock(); }

  void OnKnowledge(absl::string_view from, const KnowledgeMessage& m);
  void OnConnect(absl::string_view from, const ConnectMessage& m);
  void OnAck(absl::string_view from, const AckMessage& m);
  void OnDisconnect(absl::string_view from, const std::string& subscription);
  void OnUnsubscribe(absl::string_view from, const std::string& subscription);
  // Deletes the subscription: its PFS entries, rows and matcher entry (its session has ended).
  void Delete(std::map<std::string, SubscriptionState, std::less<>>::iterator it);
  SubscriptionStatus StatusOf(const SubscriptionState& s) const;

  // Advances every constream as far as knowledge allows, one commit per round for all pubends.
  absl::Status AdvanceConStreams();
  // Sends the round's messages of `p` (round_) and adds the members it left over the
  // flow-control bound to `slow`.
  void SendRound(PubendState& p, std::vector<std::pair<SubscriptionState*, PubendState*>>& slow);
  // Drops cached events of `p` that no catchup needs, beyond the cache window.
  void Forget(PubendState& p);
  // Nacks again what answers left unanswered (p.unanswered) and is still outstanding.
  void AskForTheRest(PubendState& p);
  // Steps the catchup streams of `p` in rounds, each with one shared PFS read for the streams
  // that need matches (see max_catchup_messages_per_flush and catchup_slice); returns whether
  // they may have more to send now. Sets *sliced when it stopped because the Flush's catchup
  // slice (until catchup_until_) was spent.
  bool StepCatchups(PubendState& p, bool* sliced);
  // Whether any constream has a member: a caught-up subscriber connected here.
  bool LiveMembers() const;
  // Moves a constream member whose consumer fell behind to a catchup stream.
  void Demote(SubscriptionState& s, PubendState& p, Position& pos);
  // Gives `s` a catchup stream at `p` from `from` (refiltering through `refilter_through`),
  // reading the PFS with `reader`; EndCatchup drops it (the hand-over, or the session's end).
  void StartCatchup(SubscriptionState& s, PubendState& p, Position& pos,
                    std::unique_ptr<PFS::Reader> reader, Tick from, Tick refilter_through);
  static void EndCatchup(SubscriptionState& s, PubendState& p, Position& pos);
  // Sends the session's last message from `p` again.
  void Resend(SubscriptionState& s, PubendState& p, Position& pos);
  void Nack(PubendState& p, const std::string& requester, const std::vector<TickRange>& ranges);
  void EndSession(SubscriptionState& s);
  void SendError(absl::string_view to, const std::string& subscription, const absl::Status& st);
  void Send(absl::string_view to, Message m);
  // One pubend's part of a commit: the constream position and lease it makes durable, and the
  // PFS records it holds (through pfs_through).
  struct Advance {
    PubendState* pubend;
    Tick through;
    Tick lease;
    Tick pfs_through;
  };
  // Hands `batch` (plus pending ack rows) to the committer; `advances` take effect when it has
  // committed. Inline mode commits before returning.
  void Submit(WriteBatch batch, std::vector<Advance> advances);
  // Submits `batch` and waits until it (and everything before it) has committed; a failure
  // stops the broker.
  absl::Status CommitNow(WriteBatch batch);
  // Applies finished commits; a failed one stops the broker.
  void ProcessCommits();
  // The highest tick a CT or an ack of `p` may name.
  Tick AcceptableTick(const PubendState& p) const {
    return std::max(p.constream->latest_delivered(), p.recovered_lease);
  }
  void PutPosition(const SubscriptionState& s, PubendId p, WriteBatch& batch) const;
  void Fail(const absl::Status& st);
  // Reports through options_.log (nothing without one).
  void Log(LogLevel level, std::string message) const {
    if (options_.log) options_.log(LogRecord{level, "shb", std::move(message)});
  }
  // Reports a Gap sent to `subscription`.
  void LogGap(absl::string_view subscription, PubendId p, Tick t) const;
  // Ends the wait for room (`why` says what ended it).
  void StopWaiting(absl::string_view why);

  const SubscriberHostingBrokerOptions options_;
  Storage* const storage_;
  Channel* const channel_;
  absl::Status status_;
  Stats stats_;
  Recovery recovery_;
  uint64_t next_id_ = 1;
  std::map<PubendId, PubendState> pubends_;
  // The pubend whose catchups step first in the next Flush: the one after the pubend whose
  // catchups the last slice cut short, so that the slice goes round the pubends.
  PubendId catchup_turn_{0};
  absl::Time catchup_until_;  // the current Flush's catchups stop at this instant
  // While a slice's rest (catchup_share) lasts, Flush steps no catchup.
  absl::Time catchup_rest_until_ = absl::InfinitePast();
  // std::map: by_id_ and in-flight deliveries point into it, and its nodes do not move.
  std::map<std::string, SubscriptionState, std::less<>> subscriptions_;
  absl::flat_hash_map<uint64_t, SubscriptionState*> by_id_;
  Matcher matcher_;  // every durable subscription, for the constreams' matching
  absl::flat_hash_map<uint64_t, std::string> names_;  // subscriber id -> subscription name
  absl::btree_map<std::string, std::vector<PubendId>> dirty_released_;
  absl::Time last_release_ = absl::InfinitePast();
  absl::Time last_timer_ = absl::InfinitePast();  // the `now` of the previous OnTimer
  bool dirty_ = false;  // knowledge arrived (or a commit finished) since the last Flush
  // Waiting for room in a full store (WaitForRoom): no constream round, only batches that free
  // space or keep it. Once one that frees space has committed (room_made_), room_least_ ends the
  // wait; room_probe_ ends it anyway.
  bool waiting_ = false;
  bool room_made_ = false;
  absl::Time room_least_ = absl::InfinitePast();
  absl::Time room_probe_ = absl::InfinitePast();
  bool store_full_ = false;  // a commit failed with kResourceExhausted
  // A constream round of one pubend (AdvanceConStreams, SendRound); kept from round to round for
  // its buffer.
  ConStream::Round round_;

  // Commits submitted and not yet applied, in submission order.
  struct InFlight {
    uint64_t seq;
    std::vector<Advance> advances;
    std::vector<SubscriberId> created;  // the new subscriptions it makes durable
    bool frees = false;                 // it chops the PFS or deletes subscriptions
  };
  std::deque<InFlight> in_flight_;
  uint64_t next_seq_ = 1;
  // New subscriptions that the next Submit creates (its InFlight::created).
  std::vector<SubscriberId> creating_;
  // Whether the next Submit frees space (its InFlight::frees).
  bool freeing_ = false;
  // Connects whose subscription became durable, handled by the next Flush (not inside the
  // commit's processing, which may run in the middle of another handler).
  std::vector<std::pair<std::string, ConnectMessage>> ready_connects_;
  // Filled by the committer's callbacks (on the commit thread with commit_thread).
  absl::Mutex finished_mu_;
  std::vector<std::pair<uint64_t, absl::Status>> finished_ ABSL_GUARDED_BY(finished_mu_);
  // Declared last: destroyed (after Stop) before what its callbacks touch.
  std::unique_ptr<GroupCommitter> committer_;
};

}  // namespace gryph::internal

#endif  // GRYPH_LIB_SHB_SUBSCRIBER_HOSTING_BROKER_IMPL_H_
