// Simulator: a deterministic, seeded world of gryph nodes for tests (docs/design.md,
// Architecture, rule 1).
//
// The simulator owns a virtual clock and one event queue. Nodes are the same sans-I/O state
// machines a real runtime drives; here each gets a SimContext: a Channel whose messages travel
// over simulated links (per-link delay, loss, duplication, partitions), timers on the virtual
// clock, and randomness drawn from the simulator's seeded generator. Everything happens in one
// thread, in an order fixed by the seed: the same seed gives the same run, and trace_hash()
// summarizes the run so that a test can prove it.
//
// Crash(name) destroys a node: its memory, timers and in-flight messages to and from it are
// gone. What it had committed to storage survives if its factory keeps the storage outside the
// node (e.g. a memory storage state captured by the factory). Restart(name) builds it again
// with the same factory.
//
// Applications embed the simulator to test their own wiring of gryph under seeded faults; a
// failing run is reproduced from its seed (ReproduceHint()).
//
// Thread-safety: owned by one thread; nodes run on that thread.

#ifndef GRYPH_TESTING_SIMULATOR_H_
#define GRYPH_TESTING_SIMULATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gryph/channel.h"

namespace gryph {

// How one direction of a link between two nodes behaves.
struct LinkProfile {
  absl::Duration min_delay = absl::Milliseconds(1);
  absl::Duration max_delay = absl::Milliseconds(1);  // delays are uniform in [min, max]
  double loss = 0;                                   // probability that a message is dropped
  double duplicate = 0;                              // probability that a message arrives twice
  bool fifo = true;  // when true, a link never reorders its own messages
};

// Base of every simulated node; the simulator owns nodes through it.
class SimNode {
 public:
  virtual ~SimNode() = default;
};

class Simulator;

// What a node sees of the simulated world. Valid while the node is alive.
class SimContext {
 public:
  const std::string& name() const { return name_; }
  Channel& channel() { return *channel_; }
  absl::Time Now() const;
  // Runs `fn` after `delay` of virtual time, unless the node crashes first.
  void After(absl::Duration delay, std::function<void()> fn);
  // A deterministic random number.
  uint64_t Random();

 private:
  friend class Simulator;
  SimContext(Simulator* sim, std::string name, uint64_t incarnation);

  Simulator* sim_;
  std::string name_;
  uint64_t incarnation_;
  std::unique_ptr<Channel> channel_;
};

class Simulator {
 public:
  using NodeFactory = std::function<std::unique_ptr<SimNode>(SimContext&)>;

  struct Stats {
    uint64_t sent = 0;       // messages handed to links
    uint64_t delivered = 0;  // messages handed to receivers
    uint64_t lost = 0;       // dropped by loss, partitions or crashes
    uint64_t duplicated = 0;
    uint64_t crashes = 0;
  };

  // The virtual clock starts at `start`; every link uses `default_link` until SetLink says
  // otherwise.
  explicit Simulator(uint64_t seed, LinkProfile default_link = {},
                     absl::Time start = absl::FromUnixSeconds(1'700'000'000));
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // Adds a node and starts it by calling `factory`. Fails with AlreadyExists for a taken name.
  absl::Status AddNode(absl::string_view name, NodeFactory factory);

  // The live node named `name`, or null when it is down or unknown.
  SimNode* node(absl::string_view name) const;
  template <typename T>
  T* node_as(absl::string_view name) const {
    return dynamic_cast<T*>(node(name));
  }
  bool is_up(absl::string_view name) const { return node(name) != nullptr; }

  // Sets the profile of the link from `from` to `to` (one direction).
  void SetLink(absl::string_view from, absl::string_view to, LinkProfile profile);
  // Cuts both directions between a and b until Heal(a, b); messages on the way are lost.
  void Partition(absl::string_view a, absl::string_view b);
  void Heal(absl::string_view a, absl::string_view b);

  // Destroys the node (see the header comment). No-op when it is already down.
  // REQUIRES: not called from inside the node being crashed.
  void Crash(absl::string_view name);
  // Builds a crashed node again with its factory. No-op when it is up.
  void Restart(absl::string_view name);

  // Runs `fn` (a test's action) at Now() + delay.
  void Schedule(absl::Duration delay, std::function<void()> fn);

  // Runs the next event; false when there is none.
  bool Step();
  // Runs events up to Now() + d and advances the clock to it. Returns the events run.
  uint64_t RunFor(absl::Duration d);
  // Runs until `done()` holds (checked after each event) or `limit` of virtual time passes, or no
  // event is left. Returns done().
  bool RunUntil(const std::function<bool()>& done, absl::Duration limit);

  absl::Time Now() const { return now_; }
  uint64_t seed() const { return seed_; }
  // A hash of every delivery, timer and crash so far, in order: equal for two runs of one seed.
  uint64_t trace_hash() const { return trace_hash_; }
  const Stats& stats() const { return stats_; }
  // A deterministic random number for the test's own decisions.
  uint64_t Random() { return rng_(); }
  // "seed 42: rerun with GRYPH_SEED=42", for failure messages.
  std::string ReproduceHint() const;

 private:
  friend class SimContext;
  class SimChannel;

  struct NodeSlot {
    NodeFactory factory;
    uint64_t incarnation = 0;  // bumped by every crash and restart
    std::unique_ptr<SimContext> context;
    std::unique_ptr<SimNode> node;  // null while down
  };
  struct Pending {
    absl::Time at;
    uint64_t seq;
    std::function<void()> run;
    bool operator>(const Pending& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };

  void Start(const std::string& name, NodeSlot& slot);
  void Push(absl::Time at, std::function<void()> run);
  void Transmit(const std::string& from, uint64_t from_incarnation, absl::string_view to,
                const Message& message);
  void Mix(uint64_t v);
  void Mix(absl::string_view bytes);
  double Uniform01();
  const LinkProfile& Link(const std::string& from, const std::string& to) const;

  const uint64_t seed_;
  const LinkProfile default_link_;
  std::mt19937_64 rng_;
  absl::Time now_;
  uint64_t next_seq_ = 0;
  uint64_t trace_hash_;  // FNV-1a of the trace so far
  Stats stats_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> queue_;
  std::map<std::string, NodeSlot, std::less<>> nodes_;
  std::map<std::pair<std::string, std::string>, LinkProfile> links_;
  std::map<std::pair<std::string, std::string>, absl::Time> link_last_arrival_;
  std::map<std::pair<std::string, std::string>, bool> partitioned_;
};

}  // namespace gryph

#endif  // GRYPH_TESTING_SIMULATOR_H_
