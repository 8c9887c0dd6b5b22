// custom_broker: a subscriber hosting broker assembled from gryph's parts — Pubend, ConStream,
// CatchupStream, PFS — driven by a loop of its own. Nothing here uses SubscriberHostingBroker,
// PublisherHostingBroker or the Runtime: this is the shape gryph promises to applications that
// need their own broker, with nothing hidden.
//
// The parts, top to bottom in this file:
//   - the transport: every node has a ZmqChannel (gryph/zmq_channel.h) of its own on loopback TCP;
//     the exchange and the broker listen, the broker dials the exchange and each subscriber dials
//     the broker. One poll loop (Run, at the end) waits on every channel's descriptors and lets
//     each hand its arrived messages to its node.
//   - Exchange: two Pubends on LMDB sharing one GroupCommitter; it publishes the gateway's orders
//     and answers the nacks and release messages its downstream broker sends.
//   - MiniBroker, the custom subscriber hosting broker: per pubend a KnowledgeStream (what came
//     from the exchange, doubling as a small cache of recent events), a ConStream and a PFS; per
//     subscriber catching up, a CatchupStream fed by a PFS::Reader. Each constream step writes
//     the PFS records of its ticks AND the new latestDelivered in ONE storage commit, and only
//     then sends the Events. ConStream::Deliver matches the events (a Matcher of the
//     subscriptions), appends the PFS records and builds the members' messages finished: each
//     stamped through its session's SessionStream, so every delivery names the session's
//     previous one from its pubend (DeliveryMessage::previous) and a subscriber sees a lost one.
//   - four subscriber applications: DurableSubscribers with their own selectors, each on its own
//     connection to the broker.
// While orders flow, one subscriber's process goes away (its channel and its DurableSubscriber
// are destroyed); the broker learns it from the transport (ZeroMQ refuses a send to a peer that
// is no longer connected) and ends the session. The subscriber reconnects later with its CT; the
// broker replays its matches from the PFS (nacking the events that left its cache from the
// exchange) and hands it over to the constream. At the end an ExactlyOnceChecker checks every
// subscriber against what the pubends logged; a violation exits 1.
//
// The channels here speak plain TCP on 127.0.0.1; across hosts, give them CURVE keys
// (ZmqChannelOptions::curve) as gryph-broker does.
//
//   custom_broker [--orders=2000] [--rate=1000] [--seed=1] [--data_dir=DIR]

#include <poll.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gryph/broker/catchup_stream.h"
#include "gryph/broker/con_stream.h"
#include "gryph/broker/knowledge_stream.h"
#include "gryph/broker/matcher.h"
#include "gryph/broker/pfs.h"
#include "gryph/broker/session.h"
#include "gryph/channel.h"
#include "gryph/durable_subscriber.h"
#include "gryph/group_commit.h"
#include "gryph/message.h"
#include "gryph/pubend.h"
#include "gryph/storage.h"
#include "gryph/subscription.h"
#include "gryph/testing/exactly_once_checker.h"
#include "gryph/zmq_channel.h"

ABSL_FLAG(int, orders, 2000, "orders the gateway publishes");
ABSL_FLAG(double, rate, 1000, "orders published per second");
ABSL_FLAG(uint64_t, seed, 1, "seed for the orders");
ABSL_FLAG(std::string, data_dir, "", "where the stores go (kept); default: a temp dir, removed");

namespace {

using namespace gryph;  // NOLINT: an example reads better without the prefix

// Opens a node's channel: listening on a port of 127.0.0.1 the system chooses (unless it only
// dials), dialing `peers` (name, endpoint).
absl::StatusOr<std::unique_ptr<ZmqChannel>> OpenChannel(
    const std::string& name, bool listens,
    const std::vector<std::pair<std::string, std::string>>& peers) {
  ZmqChannelOptions o;
  o.name = name;
  if (listens) o.listen = "tcp://127.0.0.1:*";
  for (const auto& [peer, endpoint] : peers) o.peers.push_back({peer, endpoint, ""});
  o.linger = absl::ZeroDuration();  // what is queued at exit is lost, as in a crash
  return ZmqChannel::Create(std::move(o));
}

// ===== Exchange: the publishing side, from Pubends and a GroupCommitter =====

constexpr PubendId kPubends[] = {PubendId{1}, PubendId{2}};

// Owned by one thread, which calls Publish and OnTimer and pumps the channel.
class Exchange {
 public:
  // Opens the pubends stored in `storage` (recovering them) and registers `downstream` with each.
  // `storage` and `channel` must outlive the exchange.
  static absl::StatusOr<std::unique_ptr<Exchange>> Open(Storage* storage, Channel* channel,
                                                        const std::string& downstream) {
    std::unique_ptr<Exchange> x(new Exchange);
    GroupCommitOptions gc;
    gc.max_records = 256;
    gc.max_delay = absl::Milliseconds(1);
    // After each group commit, every pubend sends what became durable downstream.
    Exchange* self = x.get();
    gc.after_group = [self] {
      for (auto& [id, p] : self->pubends_) p->FlushKnowledge();
    };
    x->committer_ = std::make_unique<GroupCommitter>(storage, gc);
    for (PubendId id : kPubends) {
      absl::StatusOr<std::unique_ptr<Pubend>> p =
          Pubend::Open(PubendOptions{id}, storage, x->committer_.get(), channel);
      if (!p.ok()) return p.status();
      if (absl::Status st = (*p)->AddDownstream(downstream);
          !st.ok() && !absl::IsAlreadyExists(st)) {
        return st;
      }
      x->pubends_[id] = *std::move(p);
    }
    channel->SetReceiver([self](absl::string_view from, Message m) { self->OnMessage(from, m); });
    return x;
  }

  // Logs `order` on the pubend of its account; done(p, tick) runs once it is durable.
  void Publish(uint64_t sequence, EventRef order, absl::Time now,
               std::function<void(PubendId, absl::StatusOr<Tick>)> done) {
    const PubendId p = PubendForKey(std::get<std::string>(*order->Find("account")), kPubends);
    pubends_.at(p)->Publish("gateway", sequence, std::move(order), now,
                            [p, done](absl::StatusOr<Tick> t) { done(p, t); });
  }

  // Commits the pending group when due; heartbeats and release.
  void OnTimer(absl::Time now) {
    (void)committer_->FlushIfDue(now);  // a failure fails the pubends, reported by status()
    for (auto& [id, p] : pubends_) p->OnTimer(now);
  }

  Pubend& pubend(PubendId p) { return *pubends_.at(p); }

 private:
  Exchange() = default;

  // What a downstream broker sends a publisher: nacks and release information.
  void OnMessage(absl::string_view from, const Message& m) {
    if (const auto* nack = std::get_if<CuriosityMessage>(&m)) {
      if (auto it = pubends_.find(nack->pubend); it != pubends_.end()) {
        (void)it->second->HandleCuriosity(from, *nack);  // answers with knowledge messages
      }
    } else if (const auto* release = std::get_if<ReleaseMessage>(&m)) {
      for (const ReleaseEntry& e : release->entries) {
        if (auto it = pubends_.find(e.pubend); it != pubends_.end()) {
          (void)it->second->HandleRelease(from, e, absl::Now());
        }
      }
    }
  }

  // Destroyed pubends first, then the committer (which drops anything uncommitted, as a crash).
  std::unique_ptr<GroupCommitter> committer_;
  std::map<PubendId, std::unique_ptr<Pubend>> pubends_;
};

// ===== MiniBroker: a subscriber hosting broker from ConStream, CatchupStream and PFS =====

// State per pubend p:
//   istream    KnowledgeStream: what arrived from the exchange; it doubles as the cache of recent
//              events, forgotten kEventCacheTicks below latestDelivered unless a catchup needs
//              them (a catchup nacks what was forgotten)
//   constream  ConStream: latestDelivered(p) and its members (connected, not catching up)
//   pfs        PFS: which ticks matched which subscriptions
// State per subscription: its PFS id, selector, session (the peer name of its connection; empty
// while disconnected), epoch, and per pubend released(s,p) and, while catching up, a
// CatchupStream with the PFS::Reader feeding it.
//
// Persistence: latestDelivered(p) and the PFS share one Storage and commit together. The
// subscriptions and released(s,p) are kept in memory only, because this broker never restarts
// with its subscribers; SubscriberHostingBroker stores them as well (docs/format.md).
//
// Owned by one thread, which pumps its channel and calls Flush and OnTimer.
class MiniBroker {
 public:
  struct Stats {
    uint64_t commits = 0;  // constream commits: PFS records with latestDelivered
    uint64_t pfs_records = 0;
    uint64_t events_delivered = 0;
    uint64_t catchups_started = 0;
    uint64_t catchups_completed = 0;
    uint64_t catchup_events = 0;
    uint64_t ticks_nacked = 0;
    uint64_t sessions_gone = 0;  // sessions ended because the transport said the peer was gone
  };

  // Opens the broker's state in `storage` (latestDelivered and the PFS of every pubend), receives
  // from `channel`, and nacks and releases to `upstream`. Both must outlive the broker.
  static absl::StatusOr<std::unique_ptr<MiniBroker>> Open(Storage* storage, Channel* channel,
                                                          std::string upstream) {
    std::unique_ptr<MiniBroker> b(new MiniBroker(storage, channel, std::move(upstream)));
    for (PubendId id : kPubends) {
      PubendState& p = b->pubends_[id];
      p.id = id;
      absl::StatusOr<std::optional<std::string>> row = storage->Get(kDeliveredTable, Key(id));
      if (!row.ok()) return row.status();
      Tick latest_delivered = 0;
      if (*row && !absl::SimpleAtoi(**row, &latest_delivered)) {
        return absl::DataLossError(absl::StrCat("latestDelivered of pubend ", id.value,
                                                " is not a number: ", absl::CHexEscape(**row)));
      }
      p.constream = std::make_unique<ConStream>(id, latest_delivered);
      PfsOptions po;
      po.pubend = id;
      absl::StatusOr<std::unique_ptr<PFS>> pfs = PFS::Open(po, storage);
      if (!pfs.ok()) return pfs.status();
      p.pfs = *std::move(pfs);
    }
    MiniBroker* self = b.get();
    channel->SetReceiver([self](absl::string_view from, Message m) { self->OnMessage(from, m); });
    return b;
  }

  ~MiniBroker() {
    channel_->SetReceiver(nullptr);
    for (auto& [name, s] : subscriptions_) s.positions.clear();  // readers go before their PFS
  }

  // Delivers what the knowledge received since the last call allows: the constreams (one commit
  // for all pubends), then the catchup streams. Call after handing the broker messages.
  void Flush(absl::Time now) {
    if (!dirty_ || !status_.ok()) return;
    dirty_ = false;
    if (absl::Status st = AdvanceConStreams(now); !st.ok()) {
      Fail(st);
      return;
    }
    for (auto& [id, p] : pubends_) {
      StepCatchups(p, now);
      Forget(p);
    }
    EndUnreachableSessions();
  }

  // Periodic work: nacks for holes, Silences, release and PFS chopping. Call every few ms.
  void OnTimer(absl::Time now) {
    if (!status_.ok()) return;
    const bool release_due = now - last_release_ >= absl::Milliseconds(100);
    for (auto& [id, p] : pubends_) {
      // Holes below the highest tick seen (lost knowledge) are nacked. The socket to the
      // exchange loses nothing, so this rarely sends; a catchup's nacks go out as it steps.
      const Tick ld = p.constream->latest_delivered();
      if (p.highest_seen > ld) Nack(p, p.istream.QRanges({ld + 1, p.highest_seen}, 64));
      // Members that matched nothing for a while get a Silence, so that their CT moves.
      for (Channel::Outgoing& o : p.constream->Silences(now, absl::Milliseconds(200))) {
        Send(std::string(o.peer), std::move(o.message));
      }
      if (release_due) Release(p);
    }
    if (release_due) last_release_ = now;
    dirty_ = true;  // catchups may step on without new knowledge (a PFS read, a hand-over)
    Flush(now);
  }

  // The transport said a subscriber is gone (a send to it was refused): its session ends. Run
  // after the steps that send, not inside them, which still hold the session's streams.
  void EndUnreachableSessions() {
    if (unreachable_.empty()) return;
    for (auto& [name, s] : subscriptions_) {
      if (!s.session.empty() && unreachable_.contains(s.session)) {
        EndSession(s);
        ++stats_.sessions_gone;
      }
    }
    unreachable_.clear();
  }

  Tick latest_delivered(PubendId p) const { return pubends_.at(p).constream->latest_delivered(); }
  size_t catching_up() const {
    size_t n = 0;
    for (const auto& [name, s] : subscriptions_) {
      for (const auto& [id, pos] : s.positions) n += pos.catchup != nullptr ? 1 : 0;
    }
    return n;
  }
  const Stats& stats() const { return stats_; }
  // OK, or the storage error that stopped the broker.
  const absl::Status& status() const { return status_; }

 private:
  // The table of latestDelivered(p): 4-byte big-endian pubend -> 8-byte big-endian tick.
  static constexpr absl::string_view kDeliveredTable = "mini.delivered";
  // Events kept in the istream below latestDelivered: 50 ms of pubend time (ticks are µs).
  static constexpr Tick kEventCacheTicks = 50'000;
  // D ticks per constream commit, and PFS matches read per catchup step.
  static constexpr size_t kMaxEventsPerCommit = 1024;
  static constexpr size_t kPfsBatch = 256;

  struct Position {                          // one subscription at one pubend
    Tick created = 0;                        // latestDelivered(p) when the subscription was created
    Tick released = 0;                       // released(s,p): what the subscriber acknowledged
    std::unique_ptr<PFS::Reader> reader;     // while catching up
    std::unique_ptr<CatchupStream> catchup;  // while catching up
    // The live session's messages from this pubend: each names the previous one, by which the
    // subscriber sees that one went missing.
    SessionStream session;
  };
  struct SubscriptionState {
    std::string name;
    SubscriberId id;
    std::string selector;
    std::string topic_filter;
    Subscription subscription;
    uint64_t epoch = 0;
    std::string session;  // the connection's peer name; empty while disconnected
    std::map<PubendId, Position> positions;
  };
  struct PubendState {
    PubendId id;
    KnowledgeStream istream;
    std::unique_ptr<ConStream> constream;
    std::unique_ptr<PFS> pfs;
    Tick highest_seen = 0;
    Tick forgotten = 0;
  };

  MiniBroker(Storage* storage, Channel* channel, std::string upstream)
      : storage_(storage), channel_(channel), upstream_(std::move(upstream)) {}

  // The broker's own rows: keyed by the pubend's number, latestDelivered as decimal text (only
  // looked up, never scanned in order, so no binary key layout is needed).
  static std::string Key(PubendId p) { return absl::StrCat(p.value); }

  void OnMessage(absl::string_view from, const Message& m) {
    if (!status_.ok()) return;
    const std::string peer(from);
    if (const auto* k = std::get_if<KnowledgeMessage>(&m)) {
      OnKnowledge(peer, *k);
    } else if (const auto* c = std::get_if<ConnectMessage>(&m)) {
      OnConnect(peer, *c);
    } else if (const auto* a = std::get_if<AckMessage>(&m)) {
      OnAck(peer, *a);
    } else if (const auto* d = std::get_if<DisconnectMessage>(&m)) {
      auto it = subscriptions_.find(d->subscription);
      if (it != subscriptions_.end() && it->second.session == peer) EndSession(it->second);
    } else if (const auto* u = std::get_if<UnsubscribeMessage>(&m)) {
      SendError(peer, u->subscription, absl::UnimplementedError("this broker keeps subscriptions"));
    }
  }

  // Knowledge only accumulates here; Flush delivers it.
  void OnKnowledge(const std::string& from, const KnowledgeMessage& m) {
    auto it = pubends_.find(m.pubend);
    if (from != upstream_ || it == pubends_.end()) return;
    PubendState& p = it->second;
    for (const KnowledgeSpan& span : m.spans) {
      // Knowledge of released ticks (L) below what we hold, or a duplicate, changes nothing.
      (void)p.istream.Accumulate(span);
      p.highest_seen = std::max(p.highest_seen, span.range.last);
    }
    dirty_ = true;
  }

  // Every round takes what each pubend's doubt horizon allows, matches each event against every
  // subscription, and commits the PFS records and the new latestDelivered values in ONE
  // transaction. Only after that commit do the Events go out: a subscriber's CT is then never
  // ahead of what this broker has durably delivered.
  absl::Status AdvanceConStreams(absl::Time now) {
    for (;;) {
      WriteBatch batch;
      std::vector<std::pair<PubendState*, ConStream::Round>> rounds;
      for (auto& [id, p] : pubends_) {
        const ConStream::Batch step = p.constream->Next(p.istream, kMaxEventsPerCommit);
        if (step.through == p.constream->latest_delivered()) continue;
        // Matched against every subscription, connected or not: the PFS records them all. This
        // broker has no flow control (no bound on unacknowledged Events).
        ConStream::Round round;
        if (absl::Status st =
                p.constream->Deliver(step, matcher_, *p.pfs, &batch, now, UINT64_MAX, &round);
            !st.ok()) {
          return st;
        }
        stats_.pfs_records += round.pfs_records;
        batch.Put(kDeliveredTable, Key(id), absl::StrCat(step.through));
        rounds.emplace_back(&p, std::move(round));
      }
      if (rounds.empty()) return absl::OkStatus();
      if (absl::Status st = storage_->Commit(batch); !st.ok()) return st;
      ++stats_.commits;
      for (auto& [p, round] : rounds) {
        p->pfs->MarkCommitted(p->pfs->last_timestamp());
        for (Channel::Outgoing& o : round.messages) {
          ++stats_.events_delivered;
          Send(std::string(o.peer), std::move(o.message));
        }
      }
    }
  }

  // Steps every catchup stream of pubend p: feeds it the PFS's matches for the window it wants,
  // lets it deliver what the istream knows and nack what it lacks, and hands the subscriber over
  // to the constream once it has delivered through latestDelivered.
  void StepCatchups(PubendState& p, absl::Time now) {
    const Tick ld = p.constream->latest_delivered();
    for (auto& [name, s] : subscriptions_) {
      Position& pos = s.positions.at(p.id);
      if (pos.catchup == nullptr) continue;
      if (pos.catchup->WantedMatches(ld).has_value()) {
        pos.reader->ExtendTo(ld);  // latestDelivered moved on since the reader was made
        PFS::ReadResult r;
        if (absl::Status st = pos.reader->Read(kPfsBatch, &r); !st.ok()) {
          SendError(s.session, name, st);
          EndSession(s);
          continue;
        }
        pos.catchup->AddMatches(r.ticks, r.through, r.lost_through);
      }
      std::vector<DeliveryMessage> out;
      std::vector<TickRange> nacks;
      pos.catchup->Step(p.istream, ld, &out, &nacks);
      for (DeliveryMessage& d : out) {  // stamped through the session by the catchup stream
        stats_.catchup_events += d.kind == DeliveryKind::kEvent ? 1 : 0;
        Send(s.session, std::move(d));
      }
      Nack(p, nacks);
      if (pos.catchup->caught_up(ld)) {
        // The hand-over: the catchup delivered exactly through ld, the constream goes on from ld.
        pos.catchup.reset();
        pos.reader.reset();
        p.constream->Join(s.id, name, s.session, &pos.session, now);
        ++stats_.catchups_completed;
      }
    }
  }

  void Nack(PubendState& p, const std::vector<TickRange>& ranges) {
    if (ranges.empty()) return;
    for (TickRange r : ranges) stats_.ticks_nacked += r.size();
    Send(upstream_, CuriosityMessage{p.id, ranges});
  }

  // The istream keeps kEventCacheTicks of events below latestDelivered, and everything a catchup
  // stream has yet to deliver.
  void Forget(PubendState& p) {
    const Tick ld = p.constream->latest_delivered();
    Tick through = ld > kEventCacheTicks ? ld - kEventCacheTicks : 0;
    for (const auto& [name, s] : subscriptions_) {
      const Position& pos = s.positions.at(p.id);
      if (pos.catchup != nullptr) through = std::min(through, pos.catchup->position());
    }
    if (through > p.forgotten) {
      p.istream.Forget(through);
      p.forgotten = through;
    }
  }

  // Tells the exchange released(p) = min(latestDelivered(p), min_s released(s,p)), so that it can
  // discard what everybody has; chops the PFS up to it, keeping what catchups still read.
  void Release(PubendState& p) {
    const Tick ld = p.constream->latest_delivered();
    Tick released = ld;
    Tick chop = ld;
    for (const auto& [name, s] : subscriptions_) {
      const Position& pos = s.positions.at(p.id);
      released = std::min(released, pos.released);
      if (pos.catchup != nullptr) chop = std::min(chop, pos.catchup->position());
    }
    Send(upstream_, ReleaseMessage{{{p.id, released, ld}}});
    chop = std::min(chop, released);
    if (chop <= p.pfs->chopped_through()) return;
    WriteBatch batch;
    absl::Status st = p.pfs->Chop(chop, &batch);
    if (st.ok()) st = storage_->Commit(batch);
    if (!st.ok()) Fail(st);
  }

  void OnConnect(const std::string& from, const ConnectMessage& m) {
    const absl::Time now = absl::Now();
    // The CT must name pubends this broker serves, and not be ahead of it.
    for (const auto& [id, t] : m.checkpoint.entries()) {
      auto it = pubends_.find(id);
      if (it == pubends_.end() || t > it->second.constream->latest_delivered()) {
        SendError(from, m.subscription,
                  absl::OutOfRangeError(absl::StrCat("checkpoint ", m.checkpoint.ToString(),
                                                     " is not one this broker can resume")));
        return;
      }
    }
    auto it = subscriptions_.find(m.subscription);
    if (it == subscriptions_.end()) {
      // A new durable subscription: registered in every pubend's PFS (one commit); it starts at
      // latestDelivered.
      absl::StatusOr<Subscription> sub = Subscription::Create(m.selector, m.topic_filter);
      if (!sub.ok()) {
        SendError(from, m.subscription, sub.status());
        return;
      }
      SubscriptionState s{m.subscription,
                          SubscriberId{next_id_++},
                          m.selector,
                          m.topic_filter,
                          *std::move(sub),
                          m.epoch,
                          "",
                          {}};
      WriteBatch batch;
      for (auto& [id, p] : pubends_) {
        if (absl::Status st = p.pfs->AddSubscriber(s.id, &batch); !st.ok()) {
          Fail(st);
          return;
        }
        s.positions[id].created = s.positions[id].released = p.constream->latest_delivered();
      }
      if (absl::Status st = storage_->Commit(batch); !st.ok()) {
        Fail(st);
        return;
      }
      if (absl::Status st = matcher_.Add(s.id, s.subscription); !st.ok()) {
        Fail(st);
        return;
      }
      matcher_.Publish();
      it = subscriptions_.emplace(m.subscription, std::move(s)).first;
    } else {
      SubscriptionState& s = it->second;
      if (s.selector != m.selector || s.topic_filter != m.topic_filter) {
        SendError(from, m.subscription,
                  absl::InvalidArgumentError("the subscription exists with another selector"));
        return;
      }
      if (m.epoch < s.epoch) {
        SendError(from, m.subscription, absl::FailedPreconditionError("a newer session exists"));
        return;
      }
      // One live session per subscription: a newer one fences the older.
      if (!s.session.empty()) {
        if (s.session != from) SendError(s.session, m.subscription, absl::AbortedError("fenced"));
        EndSession(s);
      }
      s.epoch = m.epoch;
    }
    SubscriptionState& s = it->second;
    s.session = from;
    CheckpointToken start;
    for (auto& [id, p] : pubends_) {
      Position& pos = s.positions.at(id);
      const Tick ld = p.constream->latest_delivered();
      // A CT without this pubend has consumed nothing of it: start where the subscription did.
      const Tick ct = m.checkpoint.entries().contains(id) ? m.checkpoint.Get(id) : pos.created;
      start.Set(id, ct);
      pos.session.Start(ct);
      if (ct >= ld) {
        p.constream->Join(s.id, s.name, s.session, &pos.session, now, ct);
        continue;
      }
      // Behind latestDelivered: catch up from the PFS. Before the subscription was created here
      // the PFS knows nothing of it; a CT from there on is refiltered (reconnect anywhere).
      const Tick refilter_through = ct < pos.created ? pos.created : 0;
      absl::StatusOr<std::unique_ptr<PFS::Reader>> reader =
          p.pfs->NewReader(s.id, std::max(ct, refilter_through), ld);
      if (!reader.ok()) {
        SendError(from, s.name, reader.status());
        EndSession(s);
        return;
      }
      pos.reader = *std::move(reader);
      pos.catchup = std::make_unique<CatchupStream>(s.name, id, ct, refilter_through,
                                                    s.subscription, &pos.session);
      ++stats_.catchups_started;
    }
    Send(from, ConnectedMessage{s.name, start, s.epoch});
    for (auto& [id, p] : pubends_) StepCatchups(p, now);
  }

  void OnAck(const std::string& from, const AckMessage& m) {
    auto it = subscriptions_.find(m.subscription);
    if (it == subscriptions_.end() || it->second.session != from) {
      // Also what a DurableSubscriber's keepalive hears after its session was lost: reconnect.
      SendError(from, m.subscription, absl::FailedPreconditionError("no session; reconnect"));
      return;
    }
    for (const auto& [id, t] : m.checkpoint.entries()) {
      auto pos = it->second.positions.find(id);
      if (pos == it->second.positions.end() || t > latest_delivered(id)) continue;
      pos->second.released = std::max(pos->second.released, t);
      // Keeps the session's books (its flow-control marks) bounded. The sockets lose nothing,
      // so this broker never resends a last message (SessionStream::ShouldResend).
      (void)pos->second.session.OnAck(t);
    }
  }

  void EndSession(SubscriptionState& s) {
    for (auto& [id, pos] : s.positions) {
      pos.catchup.reset();
      pos.reader.reset();
    }
    for (auto& [id, p] : pubends_) p.constream->Leave(s.name);
    s.session.clear();
  }

  void Send(const std::string& to, Message m) {
    // A message that cannot go out is lost; nacks and reconnections repair it. Unavailable: the
    // peer is not connected (ZeroMQ's ROUTER knows when a connection ends), so a subscriber's
    // session ends with it (EndUnreachableSessions).
    if (to.empty()) return;
    if (absl::IsUnavailable(channel_->Send(to, std::move(m))) && to != upstream_) {
      unreachable_.insert(to);
    }
  }
  void SendError(const std::string& to, const std::string& subscription, const absl::Status& st) {
    Send(to, SessionErrorMessage{subscription, st.code(), std::string(st.message())});
  }

  // A failed commit stops the broker: reopening the storage and the PFS would recover it.
  void Fail(const absl::Status& st) {
    if (status_.ok()) status_ = st;
  }

  Storage* const storage_;
  Channel* const channel_;
  const std::string upstream_;
  absl::flat_hash_set<std::string> unreachable_;  // subscribers' peers a send found gone
  absl::Status status_;
  Stats stats_;
  bool dirty_ = false;  // knowledge arrived since the last Flush
  absl::Time last_release_ = absl::InfinitePast();
  uint64_t next_id_ = 1;
  std::map<PubendId, PubendState> pubends_;
  Matcher matcher_;  // every durable subscription, for the constreams
  // Declared after pubends_, so destroyed before them: readers must go before their PFS.
  std::map<std::string, SubscriptionState, std::less<>> subscriptions_;
};

// ===== The subscriber applications =====

// One application: a DurableSubscriber on its own connection. What it consumes is recorded for
// the checker; its CT is the DurableSubscriber's (the application never crashes here, it only
// loses its connection, so its CT in memory is its stored CT).
struct SubscriberApp : DurableSubscriber::Handler {
  SubscriberApp(std::string n, std::string sel) : name(std::move(n)), selector(std::move(sel)) {}

  void Record(PubendId p, DeliveryKind kind, Tick t, EventRef e) {
    high_water.Set(p, std::max(high_water.Get(p), t));
    consumed[p].push_back({kind, t, std::move(e)});
  }
  void OnEvent(PubendId p, Tick t, const EventRef& e) override {
    Record(p, DeliveryKind::kEvent, t, e);
  }
  void OnSilence(PubendId p, Tick t) override { Record(p, DeliveryKind::kSilence, t, nullptr); }
  void OnGap(PubendId p, Tick t) override { Record(p, DeliveryKind::kGap, t, nullptr); }
  void OnConnected(const CheckpointToken& s) override {
    if (!started) start = s;
    started = true;
  }
  void OnError(const absl::Status& st) override {
    std::printf("  %s: %s\n", name.c_str(), st.ToString().c_str());
  }

  const std::string name;
  const std::string selector;
  const Subscription subscription = *Subscription::Create(selector);  // a valid literal
  std::unique_ptr<ZmqChannel> channel;
  std::unique_ptr<DurableSubscriber> ds;
  bool started = false;
  bool well_behaved = true;  // never went away
  CheckpointToken start;
  CheckpointToken high_water;
  std::map<PubendId, std::vector<ExactlyOnceChecker::Consumed>> consumed;
};

int Run(const std::string& dir) {
  const int total_orders = std::max(1, absl::GetFlag(FLAGS_orders));
  const absl::Duration interval = absl::Seconds(1) / std::max(1.0, absl::GetFlag(FLAGS_rate));
  auto open = [&](const std::string& name) {
    StorageOptions so;
    so.path = dir + "/" + name;
    return OpenLmdbStorage(so);
  };
  absl::StatusOr<std::unique_ptr<Storage>> exchange_storage = open("exchange");
  absl::StatusOr<std::unique_ptr<Storage>> broker_storage = open("broker");
  if (!exchange_storage.ok() || !broker_storage.ok()) return 1;

  // The transport: the exchange listens, the broker listens and dials the exchange.
  absl::StatusOr<std::unique_ptr<ZmqChannel>> exchange_channel = OpenChannel("exchange", true, {});
  if (!exchange_channel.ok()) {
    std::printf("exchange channel: %s\n", exchange_channel.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<ZmqChannel>> broker_channel =
      OpenChannel("broker", true, {{"exchange", (*exchange_channel)->bound_endpoint()}});
  if (!broker_channel.ok()) {
    std::printf("broker channel: %s\n", broker_channel.status().ToString().c_str());
    return 1;
  }
  const std::string broker_endpoint = (*broker_channel)->bound_endpoint();
  absl::StatusOr<std::unique_ptr<Exchange>> exchange =
      Exchange::Open(exchange_storage->get(), exchange_channel->get(), "broker");
  absl::StatusOr<std::unique_ptr<MiniBroker>> broker =
      MiniBroker::Open(broker_storage->get(), broker_channel->get(), "exchange");
  if (!exchange.ok() || !broker.ok()) {
    std::printf("opening failed: %s %s\n", exchange.status().ToString().c_str(),
                broker.status().ToString().c_str());
    return 1;
  }

  // A subscriber application's process: its channel, dialing the broker, and its
  // DurableSubscriber, from `checkpoint` (empty: a new subscription) under `epoch`.
  auto start_app = [&](SubscriberApp& app, const CheckpointToken& checkpoint,
                       uint64_t epoch) -> absl::Status {
    absl::StatusOr<std::unique_ptr<ZmqChannel>> channel =
        OpenChannel(app.name, false, {{"broker", broker_endpoint}});
    if (!channel.ok()) return channel.status();
    DurableSubscriberOptions o;
    o.subscription = app.name;
    o.selector = app.selector;
    o.broker = "broker";
    o.checkpoint = checkpoint;
    o.epoch = epoch;
    o.ack_interval = absl::Milliseconds(50);
    absl::StatusOr<std::unique_ptr<DurableSubscriber>> ds =
        DurableSubscriber::Create(o, channel->get(), &app);
    if (!ds.ok()) return ds.status();
    app.channel = *std::move(channel);
    app.ds = *std::move(ds);
    DurableSubscriber* d = app.ds.get();
    app.channel->SetReceiver([d](absl::string_view from, Message m) { d->HandleMessage(from, m); });
    return app.ds->Connect();
  };
  std::vector<std::unique_ptr<SubscriberApp>> apps;
  for (const char* selector : {"symbol = 'IBM'", "account LIKE 'HF-%' AND quantity >= 1000",
                               "side = 'SELL' AND price_cents < 10000", ""}) {
    auto app = std::make_unique<SubscriberApp>(absl::StrCat("sub-", apps.size()), selector);
    if (absl::Status st = start_app(*app, CheckpointToken(), 1); !st.ok()) {
      std::printf("%s: %s\n", app->name.c_str(), st.ToString().c_str());
      return 1;
    }
    apps.push_back(std::move(app));
  }
  SubscriberApp& roamer = *apps[2];  // the one that goes away and comes back

  std::printf(
      "gryph custom broker: 2 pubends -> MiniBroker -> %zu subscribers, over ZeroMQ on "
      "loopback TCP; %d orders at %.0f/s\n",
      apps.size(), total_orders, absl::GetFlag(FLAGS_rate));
  ExactlyOnceChecker checker;
  for (PubendId p : kPubends) checker.AddPubend(p);
  std::map<std::string, CheckpointToken> last_match;  // per app, per pubend: its last match
  // Every channel of the process; the roamer's is absent while it is away.
  auto channels = [&] {
    std::vector<ZmqChannel*> all = {exchange_channel->get(), broker_channel->get()};
    for (auto& app : apps) {
      if (app->channel != nullptr) all.push_back(app->channel.get());
    }
    return all;
  };

  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  static const char* const kAccounts[] = {"HF-ALPHA", "HF-BETA", "PB-001", "RETAIL-7"};
  static const char* const kSymbols[] = {"IBM", "MSFT", "AAPL", "ORCL"};
  int sent = 0;
  int logged = 0;
  // The gateway starts once every subscription exists: each must get every order it matches.
  absl::Time start = absl::InfiniteFuture();
  const absl::Time deadline = absl::Now() + interval * total_orders + absl::Seconds(60);
  absl::Time last_timer;
  bool dropped = false;
  bool back = false;
  CheckpointToken roamer_ct;
  auto everyone_has_everything = [&] {
    if (logged < total_orders || !back) return false;
    for (auto& app : apps) {
      if (app->ds == nullptr || !(last_match[app->name] <= app->ds->checkpoint())) return false;
    }
    return true;
  };

  while (!everyone_has_everything()) {
    // Wait (at most 1 ms: the gateway publishes on schedule) for any channel's descriptor.
    // ZeroMQ's descriptors signal edges, not levels, so every channel is dispatched below
    // whether or not its descriptor woke the poll.
    std::vector<pollfd> fds;
    for (ZmqChannel* c : channels()) {
      for (int fd : c->WaitFds()) fds.push_back(pollfd{fd, POLLIN, 0});
    }
    (void)poll(fds.data(), fds.size(), 1);
    const absl::Time now = absl::Now();
    if (now > deadline || !(*broker)->status().ok()) {
      std::printf("stopped: %s\n", (*broker)->status().ToString().c_str());
      return 1;
    }
    if (start == absl::InfiniteFuture() &&
        std::all_of(apps.begin(), apps.end(), [](const auto& app) { return app->started; })) {
      start = now;
    }
    // The gateway: orders on schedule; each is logged for the checker once durable.
    while (sent < total_orders && now >= start + interval * sent) {
      ++sent;
      Event order;
      order.SetTopic("orders")
          .SetString("account", kAccounts[rng() % std::size(kAccounts)])
          .SetString("symbol", kSymbols[rng() % std::size(kSymbols)])
          .SetString("side", rng() % 2 ? "BUY" : "SELL")
          .SetInt64("quantity", static_cast<int64_t>(100 * (1 + rng() % 30)))
          .SetInt64("price_cents", static_cast<int64_t>(5000 + rng() % 10000));
      EventRef ref = MakeEventRef(std::move(order));
      (*exchange)->Publish(static_cast<uint64_t>(sent), ref, now,
                           [&, ref](PubendId p, absl::StatusOr<Tick> t) {
                             if (!t.ok()) return;
                             ++logged;
                             checker.Logged(p, *t, ref);
                             for (auto& app : apps) {
                               if (app->subscription.Matches(*ref)) {
                                 last_match[app->name].Set(p, *t);
                               }
                             }
                           });
    }
    // Every channel hands its messages to its node, then the nodes' work.
    for (ZmqChannel* c : channels()) (void)c->Dispatch(4096);
    (*broker)->Flush(now);
    (*exchange)->OnTimer(now);
    if (now - last_timer >= absl::Milliseconds(5)) {
      last_timer = now;
      (*broker)->OnTimer(now);
      for (auto& app : apps) {
        if (app->ds != nullptr) app->ds->OnTimer(now);
      }
    }
    // The roaming subscriber: its process goes away at 30% of the orders (its connection closes
    // with its channel) and starts again at 70%, with the CT it had consumed.
    if (!dropped && sent >= total_orders * 3 / 10) {
      dropped = true;
      roamer.well_behaved = false;
      roamer_ct = roamer.ds->checkpoint();
      roamer.ds.reset();
      roamer.channel.reset();
      std::printf("  %s: goes away at order %d; its CT is %s\n", roamer.name.c_str(), sent,
                  roamer_ct.ToString().c_str());
    }
    if (dropped && !back && sent >= total_orders * 7 / 10) {
      back = true;
      // With its CT, under a newer epoch: the broker catches it up from the PFS.
      if (absl::Status st = start_app(roamer, roamer_ct, 2); !st.ok()) {
        std::printf("%s: %s\n", roamer.name.c_str(), st.ToString().c_str());
        return 1;
      }
      CheckpointToken broker_at;
      for (PubendId p : kPubends) broker_at.Set(p, (*broker)->latest_delivered(p));
      std::printf("  %s: reconnects at order %d with that CT; the broker is at %s\n",
                  roamer.name.c_str(), sent, broker_at.ToString().c_str());
    }
  }

  // The verdict.
  for (PubendId p : kPubends) checker.Released(p, (*exchange)->pubend(p).l_prefix());
  uint64_t all_gaps = 0;
  std::printf("\n  %-6s %-42s %8s %8s\n", "", "selector", "events", "gaps");
  for (auto& app : apps) {
    uint64_t events = 0;
    uint64_t gaps = 0;
    for (const auto& [p, list] : app->consumed) {
      for (const auto& c : list) {
        events += c.kind == DeliveryKind::kEvent ? 1 : 0;
        gaps += c.kind == DeliveryKind::kGap ? 1 : 0;
      }
    }
    all_gaps += gaps;
    std::printf("  %-6s %-42s %8llu %8llu\n", app->name.c_str(),
                app->selector.empty() ? "(everything)" : app->selector.c_str(),
                static_cast<unsigned long long>(events), static_cast<unsigned long long>(gaps));
    checker.AddSubscriber({app->name, app->subscription, app->start, app->high_water,
                           app->well_behaved, app->consumed});
  }
  const MiniBroker::Stats& s = (*broker)->stats();
  std::printf(
      "\n  broker: %llu commits of PFS records with latestDelivered (%llu records); the\n"
      "  constream delivered %llu events; %llu catchup streams (one per pubend) delivered\n"
      "  %llu events, nacked %llu ticks from the exchange, and handed over %llu times; %llu\n"
      "  session(s) ended when the transport refused a send to a subscriber that was gone\n",
      static_cast<unsigned long long>(s.commits), static_cast<unsigned long long>(s.pfs_records),
      static_cast<unsigned long long>(s.events_delivered),
      static_cast<unsigned long long>(s.catchups_started),
      static_cast<unsigned long long>(s.catchup_events),
      static_cast<unsigned long long>(s.ticks_nacked),
      static_cast<unsigned long long>(s.catchups_completed),
      static_cast<unsigned long long>(s.sessions_gone));
  std::vector<std::string> bad = checker.Check();
  if (all_gaps > 0) bad.push_back("a Gap, though nothing was released early");
  if (s.catchups_completed == 0) bad.push_back("no catchup stream handed over to the constream");
  if (s.sessions_gone == 0) bad.push_back("the broker never learned that the roamer was gone");
  for (const auto& app : apps) {
    // Loopback loses nothing while both ends live, so a delivery naming a previous one that never
    // came means the broker's chain of `previous` is wrong.
    if (app->ds->resyncs() > 0) bad.push_back(app->name + " saw a break in its delivery chain");
  }
  if (!bad.empty()) {
    std::printf("\n  exactly-once check: VIOLATED\n");
    for (const std::string& b : bad) std::printf("    %s\n", b.c_str());
    return 1;
  }
  std::printf(
      "\n  exactly-once check: every subscriber got every matching order once, in order,\n"
      "  the roaming one across its catchup and hand-over to the constream\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "A subscriber hosting broker built from gryph's parts, on ZeroMQ channels and a loop of its "
      "own.");
  absl::ParseCommandLine(argc, argv);
  std::string dir = absl::GetFlag(FLAGS_data_dir);
  const bool keep = !dir.empty();
  if (!keep) {
    dir = (std::filesystem::temp_directory_path() / "gryph-custom-broker-XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) return 1;
  }
  const int rc = Run(dir);
  if (!keep) std::filesystem::remove_all(dir);
  return rc;
}
