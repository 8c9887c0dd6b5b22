// The deterministic simulation world for gryph's end-to-end tests: a PHB with its pubends and a
// publishing application, an SHB (or two SHBs "shb-a" and "shb-b", fed directly or through an
// intermediate broker "ib"), and durable subscriber applications that may move between the SHBs,
// all on the Simulator, with seeded faults; and the oracle that checks every subscriber against
// the pubends' logs.

#ifndef GRYPH_TESTS_SIMULATION_WORLD_H_
#define GRYPH_TESTS_SIMULATION_WORLD_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gryph/durable_subscriber.h"
#include "gryph/intermediate_broker.h"
#include "gryph/memory_storage.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/subscriber_hosting_broker.h"
#include "gryph/testing/simulator.h"

namespace gryph::sim {

struct WorldOptions {
  int pubends = 1;
  int subscribers = 6;
  absl::Duration publish_interval = absl::Milliseconds(2);  // per pubend, on average
  absl::Duration max_retain = absl::InfiniteDuration();
  LinkProfile broker_link;  // every link between brokers, both ways
  // Every link between a subscriber and its SHB, both ways (FIFO, as the subscriber's transport
  // must be): a lost Delivery is found by the next one's `previous`, and the subscriber resyncs
  // from its CT — a reconnection, so it is no longer well-behaved (it may get a Gap).
  LinkProfile subscriber_link;
  // Topology. false: PHB -> SHB "shb". true: PHB -> intermediate "ib" -> SHBs "shb-a" and
  // "shb-b"; odd-numbered subscribers connect to shb-a, even-numbered ones to shb-b.
  bool intermediate = false;
  // Without the intermediate: the PHB feeds two SHBs "shb-a" and "shb-b" directly.
  bool two_shbs = false;
  // With the intermediate: each SHB's link carries a D -> S filter made of the selectors of the
  // subscribers that may connect there (those it hosts and, with moves, every moving one).
  bool ib_filters = false;
  // The first this many subscribers are spared every subscriber fault and have clean links
  // (LinkProfile's defaults): unless their SHB crashes they stay well behaved, so the rule that
  // a well-behaved subscriber never gets a Gap is put to the test under early release.
  int steady_subscribers = 0;
  // The brokers commit as in the runtime: on a commit thread (which the world plays on the
  // virtual clock, a drawn fsync time after each group is due), so that rounds go out before
  // they are durable and completions land among the messages. false: inline, as a hand-written
  // loop drives them.
  bool commit_thread = true;
  // The share of the subscribers (not the steady ones) that create their subscription late: at
  // a seeded instant in the first second rather than at the start, so that its creation meets
  // the faults (a broker crash with the creating commit in flight, say).
  double late_subscribers = 0;
  // Faults (each a probability per fault tick of 50 ms while faults are on).
  double subscriber_disconnect = 0;
  double subscriber_old_checkpoint = 0;  // on reconnect, use an older stored CT
  // The share of those disconnections after which the same process connects again (the same
  // DurableSubscriber, its CT and its epoch: an application that paused its subscription); the
  // others reconnect as a restarted application.
  double subscriber_reconnect_in_place = 0;
  double subscriber_crash = 0;
  double shb_crash = 0;
  // The SHB's next commit fails as at a full store (it reads its state again, waits for room).
  double shb_store_full = 0;
  double phb_crash = 0;
  double ib_crash = 0;  // crash and restart the intermediate (it starts empty)
  // With two SHBs: a subscriber moves to the other SHB with its CT (reconnect anywhere), as a
  // plain reconnection of the same process or as its application restarting there. Besides,
  // about a third of the moving subscribers move right after their first Connected, before any
  // delivery.
  double subscriber_move = 0;
};

// Every event the pubends committed (the log), and how far each released.
struct Log {
  std::map<PubendId, std::map<Tick, EventRef>> events;
  std::map<PubendId, Tick> l_prefix;
  // Whether the pubends discard what subscribers have not acknowledged (a finite max_retain).
  // Without, the L prefix grows only over what every subscription acknowledged, so it excuses
  // no Gap: a subscriber's Gap must lie within what it had consumed itself (it came back with an
  // older CT). A broker that released what a subscription still needed shows as a violation.
  bool early_release = false;
  std::vector<std::string> errors;  // a tick logged twice with different events, an undecodable one
};

struct Consumed {
  DeliveryKind kind;
  Tick tick;
  EventRef event;
  // For a Gap: the pubend's committed L prefix and the subscriber's high-water mark when it
  // arrived, whichever is higher (ExactlyOnceChecker::Consumed::excusable_through).
  Tick excusable_through = 0;
};

// A subscriber application's durable state: what it consumed and its CT, committed together
// (the exactly-once pattern), plus snapshots it may fall back to.
struct SubscriberApp {
  std::string name;
  std::string selector;
  std::string broker;             // the SHB it connects to (it changes when the subscriber moves)
  bool move_after_start = false;  // it moves as soon as it has first connected
  bool steady = false;            // spared every subscriber fault (WorldOptions)
  bool started = false;
  CheckpointToken start;
  CheckpointToken ct;
  std::map<PubendId, std::vector<Consumed>> consumed;
  // The highest tick ever consumed per pubend, also across rollbacks to older snapshots: below
  // it, the subscriber acknowledged events it then forgot, and may get a Gap for them (paper §2).
  CheckpointToken high_water;
  std::vector<CheckpointToken> snapshots;
  uint64_t epoch = 0;
  bool want_connected = true;
  bool well_behaved = true;
  std::vector<std::string> errors;
  uint64_t resyncs = 0;      // DurableSubscriber::resyncs of its crashed processes
  const Log* log = nullptr;  // the pubends' log, to judge a Gap when it arrives
};

struct PublisherApp {
  uint64_t next_seq = 1;
  std::map<uint64_t, std::pair<PubendId, EventRef>> unacked;
  uint64_t acked = 0;
  // Every acknowledged publish: its pubend and tick (a retry must get the same one).
  std::map<uint64_t, std::pair<PubendId, Tick>> acked_at;
  std::vector<std::string> errors;
};

class World {
 public:
  World(uint64_t seed, WorldOptions options);

  // Runs faults for `faulty`, then heals everything, stops publishing and lets the system
  // settle for `settle`.
  void Run(absl::Duration faulty, absl::Duration settle);

  // The oracle. Returns the violations found (empty when all is well).
  std::vector<std::string> Check() const;

  Simulator& sim() { return sim_; }
  const Log& log() const { return log_; }
  const std::vector<SubscriberApp>& subscribers() const { return subs_; }
  // The SHB named `name` ("shb", or "shb-a" / "shb-b" with the intermediate), null when down.
  SubscriberHostingBroker* shb(const std::string& name = "shb");
  IntermediateBroker* ib();
  uint64_t events_consumed() const;
  // Gap messages in what the subscriber applications consumed (and kept, across rollbacks).
  uint64_t gaps_consumed() const;
  // Steady subscribers still well behaved at the end of a run in which some pubend released
  // early (its L prefix moved): the cases where the no-Gap rule had something to resist.
  uint64_t well_behaved_through_release() const;
  // Sessions the SHBs resumed with a CT above their durable position: a round sent, then lost in
  // a crash during its commit.
  uint64_t resumed_ahead() const;
  // Slow constream members the SHBs moved to catchup (flow control).
  uint64_t demotions() const;
  // Reconnections of subscribers that found a message of their session missing.
  uint64_t resyncs() const;
  // Subscribers that moved to the other SHB, and of those the moves before any delivery.
  uint64_t moves() const { return moves_; }
  uint64_t early_moves() const { return early_moves_; }

  bool publishing = true;

 private:
  friend class PhbNode;
  friend class ShbNode;
  friend class IbNode;
  friend class SubscriberNode;
  void FaultTick();
  // Moves subscriber `a` to the other SHB: a reconnection of its process (`restart` false) or its
  // application restarting there.
  void Move(SubscriberApp* a, bool restart);
  bool two_shbs() const { return options_.intermediate || options_.two_shbs; }
  // Crashes SHB `shb` now or inside its next commit, and restarts it.
  void CrashShb(const std::string& shb);
  // The broker nodes and the links between them (both ways).
  std::vector<std::string> BrokerNames() const;
  std::vector<std::pair<std::string, std::string>> BrokerLinks() const;
  std::vector<std::string> ShbNames() const;

  WorldOptions options_;
  // The live SHB nodes (they register themselves), for faults injected into them.
  // Declared before sim_, whose nodes unregister on destruction.
  std::map<std::string, class ShbNode*> shb_nodes_;
  uint64_t resumed_ahead_ = 0;  // SubscriberHostingBroker::Stats::resumed_ahead of dead nodes
  uint64_t demotions_ = 0;      // ... and Stats::demotions
  // Declared before sim_ too: subscriber nodes update their app when they are destroyed.
  std::vector<SubscriberApp> subs_;
  Simulator sim_;
  Log log_;
  PublisherApp publisher_;
  std::shared_ptr<MemoryStorage::State> phb_state_ = MemoryStorage::NewState();
  std::map<std::string, std::shared_ptr<MemoryStorage::State>> shb_states_;
  bool faults_on_ = true;
  uint64_t moves_ = 0;
  uint64_t early_moves_ = 0;
  bool shb_crashed_ever_ = false;
  bool ib_crashed_ever_ = false;
};

}  // namespace gryph::sim

#endif  // GRYPH_TESTS_SIMULATION_WORLD_H_
