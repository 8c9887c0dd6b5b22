// Reconnect anywhere, end to end through the public API: a publisher hosting broker with two
// pubends feeding two subscriber hosting brokers, and durable subscribers that move between them
// with the CT their application stored.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gryph/durable_subscriber.h"
#include "gryph/testing/topology.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP1{1};
constexpr PubendId kP2{2};

// The application: what it consumed, and its CT, stored together (here: kept in memory across
// the DurableSubscriber objects that play its successive processes).
struct App : DurableSubscriber::Handler {
  std::map<PubendId, std::vector<std::string>> got;  // "E12", "G30", per pubend
  CheckpointToken stored;
  std::vector<absl::Status> errors;
  int connected = 0;
  const DurableSubscriber* ds = nullptr;

  void OnEvent(PubendId p, Tick t, const EventRef&) override { Record(p, "E", t); }
  void OnSilence(PubendId p, Tick t) override { stored.Set(p, t); }
  void OnGap(PubendId p, Tick t) override { Record(p, "G", t); }
  void OnConnected(const CheckpointToken&) override {
    ++connected;
    stored = ds->checkpoint();  // a new subscription's start names every pubend: keep it
  }
  void OnError(const absl::Status& st) override { errors.push_back(st); }

  size_t events() const {
    size_t n = 0;
    for (const auto& [p, list] : got) {
      for (const std::string& s : list) n += s[0] == 'E' ? 1 : 0;
    }
    return n;
  }

 private:
  void Record(PubendId p, const char* kind, Tick t) {
    got[p].push_back(kind + std::to_string(t));
    stored.Set(p, t);
  }
};

// The topology (gryph/testing/topology.h): a PHB with two pubends feeding shb-a and shb-b, and
// the applications' processes.
class TwoShbs {
 public:
  TwoShbs() {
    TopologyOptions o;
    o.pubends = {kP1, kP2};
    o.shbs = {"shb-a", "shb-b"};
    o.pubend_options = [](PubendOptions& p) { p.heartbeat = absl::Milliseconds(5); };
    o.shb_options = [](SubscriberHostingBrokerOptions& so) {
      so.silence_interval = absl::Milliseconds(50);
    };
    auto t = Topology::Create(std::move(o));
    REQUIRE_OK(t);
    t_ = *std::move(t);
  }

  // A process of `app`'s application, with the CT it stored and a fresh endpoint.
  DurableSubscriber& StartSubscriber(App& app, const std::string& broker, uint64_t epoch) {
    DurableSubscriberOptions o;
    o.subscription = "orders";
    o.selector = "color = 'red'";
    o.broker = broker;
    o.checkpoint = app.stored;
    o.epoch = epoch;
    o.ack_interval = absl::Milliseconds(10);
    // OnConnected, in a later Run, reads the subscriber's CT through app.ds.
    absl::StatusOr<DurableSubscriber*> ds = t_->StartSubscriber(std::move(o), &app);
    REQUIRE_OK(ds);
    app.ds = *ds;
    return **ds;
  }
  // The process crashes: it sends nothing more and hears nothing more.
  void Crash(DurableSubscriber& ds) { t_->Crash(&ds); }

  void Publish(PubendId p, const std::string& color) {
    Event e;
    e.SetString("color", color).SetInt64("seq", static_cast<int64_t>(seq_));
    t_->Publish(p, "gateway", seq_++, MakeEventRef(std::move(e)));
  }

  // `ms` milliseconds of every node's loop.
  void Run(int ms) { t_->Run(absl::Milliseconds(ms)); }

  SubscriberHostingBroker& shb(const std::string& name) { return t_->shb(name); }

 private:
  std::unique_ptr<Topology> t_;
  uint64_t seq_ = 1;
};

TEST_CASE("a subscriber that moves before any delivery gets everything after its start CT",
          "[reconnect_anywhere]") {
  // Subscribed at shb-a before shb-a heard from either pubend: the start is {p1:0, p2:0}. The
  // application crashes before anything arrives and comes back at shb-b with that CT.
  TwoShbs w;
  App app;
  DurableSubscriber& first = w.StartSubscriber(app, "shb-a", 1);
  w.Run(5);
  REQUIRE(app.connected == 1);
  REQUIRE(app.stored.Names(kP1));
  REQUIRE(app.stored.Names(kP2));
  REQUIRE(app.stored.Get(kP1) == 0);
  w.Crash(first);
  for (int i = 0; i < 10; ++i) w.Publish(i % 2 ? kP1 : kP2, "red");
  w.Publish(kP1, "blue");
  w.Run(100);
  w.StartSubscriber(app, "shb-b", 2);
  w.Run(300);
  REQUIRE(app.errors.empty());
  REQUIRE(app.connected == 2);
  REQUIRE(app.events() == 10);
  REQUIRE(app.got[kP1].size() == 5);
  REQUIRE(app.got[kP2].size() == 5);
}

TEST_CASE("a subscriber moved with ConnectTo goes on exactly where it stood",
          "[reconnect_anywhere]") {
  TwoShbs w;
  App app;
  DurableSubscriber& ds = w.StartSubscriber(app, "shb-a", 1);
  w.Run(20);
  for (int i = 0; i < 6; ++i) w.Publish(kP1, "red");
  w.Run(100);
  REQUIRE(app.events() == 6);
  REQUIRE_OK(ds.ConnectTo("shb-b"));
  for (int i = 0; i < 4; ++i) w.Publish(i % 2 ? kP1 : kP2, "red");
  w.Run(300);
  REQUIRE(ds.broker() == "shb-b");
  REQUIRE(app.errors.empty());
  REQUIRE(app.events() == 10);
  // And back home: shb-a still hosts it, and catches it up from its PFS.
  REQUIRE_OK(ds.ConnectTo("shb-a"));
  w.Publish(kP2, "red");
  w.Run(300);
  REQUIRE(app.errors.empty());
  REQUIRE(app.events() == 11);
}

TEST_CASE("a CT that does not name every pubend of a broker that never hosted it is refused",
          "[reconnect_anywhere]") {
  TwoShbs w;
  App app;
  // A CT from an older writer, which left pubends at tick 0 out: it cannot say where the
  // subscriber stands on pubend 2, so shb-b must not guess.
  app.stored.Set(kP1, 1);
  w.Run(20);
  DurableSubscriber& ds = w.StartSubscriber(app, "shb-b", 1);
  w.Run(20);
  REQUIRE(app.connected == 0);
  REQUIRE(app.errors.size() == 1);
  REQUIRE(absl::IsInvalidArgument(app.errors[0]));
  REQUIRE_FALSE(ds.connected());
  REQUIRE(w.shb("shb-b").subscription_count() == 0);
  // No reconnection loop: the application must act.
  w.Run(500);
  REQUIRE(app.errors.size() == 1);
}

TEST_CASE("a CT that names no pubend is a new subscription wherever it connects",
          "[reconnect_anywhere]") {
  TwoShbs w;
  App app;
  w.Publish(kP1, "red");
  w.Run(100);
  w.StartSubscriber(app, "shb-b", 1);
  w.Run(20);
  REQUIRE(app.connected == 1);
  REQUIRE(app.events() == 0);  // it starts where shb-b is
  REQUIRE(app.stored.Get(kP1) > 0);
  w.Publish(kP1, "red");
  w.Run(100);
  REQUIRE(app.events() == 1);
}

}  // namespace
}  // namespace gryph
