#include "gryph/testing/simulator.h"

#include <vector>

#include "tests/test_util.h"

namespace gryph {
namespace {

// Sends tick n to "sink" every millisecond, n = 1, 2, ...; `sent` survives crashes like durable
// state would.
class Ticker : public SimNode {
 public:
  Ticker(SimContext& ctx, uint64_t* sent) : ctx_(ctx), sent_(sent) { Arm(); }

 private:
  void Arm() {
    ctx_.After(absl::Milliseconds(1), [this] {
      ++*sent_;
      (void)ctx_.channel().Send("sink", CuriosityMessage{PubendId{1}, {{*sent_, *sent_}}});
      Arm();
    });
  }
  SimContext& ctx_;
  uint64_t* sent_;
};

class Sink : public SimNode {
 public:
  explicit Sink(SimContext& ctx) {
    ctx.channel().SetReceiver([this](absl::string_view, Message m) {
      got.push_back(std::get<CuriosityMessage>(m).ranges[0].first);
    });
  }
  std::vector<Tick> got;
};

struct World {
  explicit World(uint64_t seed, LinkProfile link = {}) : sim(seed, link) {
    REQUIRE_OK(sim.AddNode("sink", [](SimContext& ctx) { return std::make_unique<Sink>(ctx); }));
    REQUIRE_OK(sim.AddNode(
        "ticker", [this](SimContext& ctx) { return std::make_unique<Ticker>(ctx, &sent); }));
  }
  std::vector<Tick>& got() { return sim.node_as<Sink>("sink")->got; }

  Simulator sim;
  uint64_t sent = 0;
};

LinkProfile Lossy() {
  LinkProfile l;
  l.min_delay = absl::Microseconds(100);
  l.max_delay = absl::Milliseconds(5);
  l.loss = 0.2;
  l.duplicate = 0.1;
  l.fifo = false;
  return l;
}

TEST_CASE("one seed gives one trace; another seed another", "[simulator]") {
  auto run = [](uint64_t seed) {
    World w(seed, Lossy());
    w.sim.RunFor(absl::Seconds(1));
    return std::make_pair(w.sim.trace_hash(), w.got());
  };
  const auto first = run(7);
  const auto again = run(7);
  const auto other = run(8);
  REQUIRE(first.first == again.first);
  REQUIRE(first.second == again.second);
  REQUIRE(first.first != other.first);
}

TEST_CASE("links lose, duplicate and reorder as configured", "[simulator]") {
  World w(1, Lossy());
  w.sim.RunFor(absl::Seconds(2));
  const auto& s = w.sim.stats();
  REQUIRE(w.sent >= 1999);
  REQUIRE(s.lost > w.sent / 10);
  REQUIRE(s.duplicated > w.sent / 20);
  REQUIRE(s.delivered == w.got().size());
  REQUIRE_FALSE(std::is_sorted(w.got().begin(), w.got().end()));
}

TEST_CASE("a FIFO link keeps its order despite jitter", "[simulator]") {
  LinkProfile l = Lossy();
  l.loss = 0;
  l.duplicate = 0;
  l.fifo = true;
  World w(2, l);
  w.sim.RunFor(absl::Seconds(1));
  REQUIRE(w.got().size() > 900);
  REQUIRE(std::is_sorted(w.got().begin(), w.got().end()));
}

TEST_CASE("a crash drops memory, timers and messages in flight; a restart rebuilds",
          "[simulator]") {
  LinkProfile slow;
  slow.min_delay = slow.max_delay = absl::Milliseconds(10);
  World w(3, slow);
  w.sim.RunFor(absl::Milliseconds(100));
  REQUIRE(w.got().size() == 90);  // ticks 1..90 arrived; 91..100 are on the way
  w.sim.Crash("sink");
  REQUIRE_FALSE(w.sim.is_up("sink"));
  REQUIRE(w.sim.node_as<Sink>("sink") == nullptr);
  w.sim.RunFor(absl::Milliseconds(50));
  w.sim.Restart("sink");
  REQUIRE(w.got().empty());  // memory is gone
  w.sim.RunFor(absl::Milliseconds(100));
  // Everything sent before the restart was lost with the old connection.
  REQUIRE(w.got().front() > 150);
  REQUIRE(w.sim.stats().crashes == 1);

  const uint64_t sent = w.sent;
  w.sim.Crash("ticker");
  w.sim.RunFor(absl::Milliseconds(100));
  REQUIRE(w.sent == sent);  // its timers died with it
  w.sim.Restart("ticker");
  w.sim.RunFor(absl::Milliseconds(100));
  REQUIRE(w.sent == sent + 100);  // the captured state survived the crash
}

TEST_CASE("a partition cuts a link until healed", "[simulator]") {
  World w(4);
  w.sim.RunFor(absl::Milliseconds(10));
  const size_t before = w.got().size();
  w.sim.Partition("ticker", "sink");
  w.sim.RunFor(absl::Milliseconds(50));
  REQUIRE(w.got().size() == before);
  w.sim.Heal("ticker", "sink");
  w.sim.RunFor(absl::Milliseconds(50));
  REQUIRE(w.got().size() > before + 40);
}

TEST_CASE("RunUntil stops when the condition holds", "[simulator]") {
  World w(5);
  REQUIRE(w.sim.RunUntil([&] { return w.got().size() >= 10; }, absl::Seconds(1)));
  REQUIRE(w.got().size() == 10);
  REQUIRE_FALSE(w.sim.RunUntil([] { return false; }, absl::Milliseconds(5)));
  REQUIRE_CODE(w.sim.AddNode("sink", nullptr), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace gryph
