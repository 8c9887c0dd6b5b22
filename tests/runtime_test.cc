#include "gryph/runtime.h"

#include <signal.h>

#include <atomic>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gryph/in_process_channel.h"
#include "gryph/memory_storage.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP1{1};
constexpr PubendId kP2{2};

EventRef Order(int64_t id, int64_t pubend) {
  Event e;
  e.SetInt64("id", id).SetInt64("pubend", pubend).SetPayload("order");
  return MakeEventRef(std::move(e));
}

// Records what a subscriber gets, from the client runtime's thread.
class Recorder : public DurableSubscriber::Handler {
 public:
  void OnEvent(PubendId p, Tick t, const EventRef& e) override {
    absl::MutexLock lock(&mu_);
    const int64_t id = std::get<int64_t>(*e->Find("id"));
    if (t <= last_tick_[p]) errors_.push_back("tick out of order");
    last_tick_[p] = t;
    ids_[p].push_back(id);
    ++count_;
    changed_.SignalAll();
  }
  void OnGap(PubendId, Tick) override {
    absl::MutexLock lock(&mu_);
    errors_.push_back("gap");
  }
  void OnConnected(const CheckpointToken&) override {
    absl::MutexLock lock(&mu_);
    connected_ = true;
    changed_.SignalAll();
  }
  void OnError(const absl::Status& s) override {
    absl::MutexLock lock(&mu_);
    if (!absl::IsUnavailable(s) && !absl::IsFailedPrecondition(s)) errors_.push_back(s.ToString());
  }
  // Waits (up to `timeout`) until `n` events arrived. (A CondVar, not a Condition: only the
  // waiting thread reads the state; tests/tsan_absl_mutex.cc.)
  bool WaitFor(size_t n, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    while (count_ < n) {
      if (changed_.WaitWithDeadline(&mu_, deadline)) return count_ >= n;
    }
    return true;
  }
  bool WaitConnected(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    while (!connected_) {
      if (changed_.WaitWithDeadline(&mu_, deadline)) return connected_;
    }
    return true;
  }
  std::map<PubendId, std::vector<int64_t>> ids() {
    absl::MutexLock lock(&mu_);
    return ids_;
  }
  std::vector<std::string> errors() {
    absl::MutexLock lock(&mu_);
    return errors_;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<PubendId, Tick> last_tick_ ABSL_GUARDED_BY(mu_);
  std::map<PubendId, std::vector<int64_t>> ids_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
  size_t count_ ABSL_GUARDED_BY(mu_) = 0;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
};

// Two "processes" in one: the brokers on one runtime (lane 0), the subscribers on another
// (lane 1), each with its own loop thread.
struct TwoRuntimes {
  TwoRuntimes() : net(2), broker_lane(&net, 0), client_lane(&net, 1) {
    brokers = *Runtime::Create();
    clients = *Runtime::Create();
    brokers->AddSource(&broker_lane);
    clients->AddSource(&client_lane);
    phb_channel = *net.Connect("phb", 0);
    shb_channel = *net.Connect("shb", 0);
    PublisherHostingBrokerOptions po;
    po.pubends = {PubendOptions{kP1}, PubendOptions{kP2}};
    po.downstream = {"shb"};
    phb = *brokers->OpenPublisherHostingBroker(po, &phb_storage, phb_channel.get());
    SubscriberHostingBrokerOptions so;
    so.pubends = {{kP1, "phb"}, {kP2, "phb"}};
    shb = *brokers->OpenSubscriberHostingBroker(so, &shb_storage, shb_channel.get());
  }
  DurableSubscriber* Subscribe(const std::string& name, const std::string& selector,
                               Recorder* recorder) {
    channels.push_back(*net.Connect("app-" + name, 1));
    DurableSubscriberOptions o;
    o.subscription = name;
    o.selector = selector;
    o.broker = "shb";
    auto ds = clients->OpenDurableSubscriber(o, channels.back().get(), recorder);
    REQUIRE_OK(ds);
    return *ds;
  }

  InProcessNetwork net;
  InProcessLane broker_lane;
  InProcessLane client_lane;
  MemoryStorage phb_storage;
  MemoryStorage shb_storage;
  std::unique_ptr<Channel> phb_channel;
  std::unique_ptr<Channel> shb_channel;
  std::vector<std::unique_ptr<Channel>> channels;
  // Declared last: destroyed first, with their nodes, before the channels and storage they use.
  std::unique_ptr<Runtime> clients;
  std::unique_ptr<Runtime> brokers;
  PublisherHostingBroker* phb = nullptr;
  SubscriberHostingBroker* shb = nullptr;
};

TEST_CASE("a runtime drives publishers, brokers and subscribers to exactly-once delivery",
          "[runtime]") {
  TwoRuntimes t;
  Recorder all;
  Recorder one;
  t.Subscribe("all", "", &all);
  t.Subscribe("one", "pubend = 1", &one);
  REQUIRE_OK(t.brokers->Start());
  REQUIRE_OK(t.clients->Start());
  REQUIRE(all.WaitConnected(absl::Seconds(30)));
  REQUIRE(one.WaitConnected(absl::Seconds(30)));
  // Published from this thread, as an application's own threads do.
  constexpr int kEvents = 400;
  std::atomic<int> acked{0};
  for (int i = 0; i < kEvents; ++i) {
    const PubendId p = i % 2 == 0 ? kP1 : kP2;
    t.phb->Publish(p, "app", static_cast<uint64_t>(i + 1), Order(i, p.value),
                   [&acked](absl::StatusOr<Tick> r) {
                     if (r.ok()) acked.fetch_add(1);
                   });
  }
  REQUIRE(all.WaitFor(kEvents, absl::Seconds(60)));
  REQUIRE(one.WaitFor(kEvents / 2, absl::Seconds(60)));
  REQUIRE(acked.load() == kEvents);
  for (Recorder* r : {&all, &one}) {
    CHECK(r->errors().empty());
    for (const auto& [p, ids] : r->ids()) {
      for (size_t i = 1; i < ids.size(); ++i) CHECK(ids[i - 1] < ids[i]);
    }
  }
  // Exactly once: each of pubend 1's events once, in order, and none of pubend 2's.
  auto ids = one.ids();
  CHECK(ids[kP1].size() == kEvents / 2);
  CHECK(ids[kP2].empty());
  CHECK(all.ids()[kP2].size() == kEvents / 2);
  t.clients->Shutdown();
  t.brokers->Shutdown();
}

TEST_CASE("timers run on time while messages keep the loop busy: the PHB reclaims as it publishes",
          "[runtime]") {
  TwoRuntimes t;
  Recorder all;
  t.Subscribe("all", "", &all);
  REQUIRE_OK(t.brokers->Start());
  REQUIRE_OK(t.clients->Start());
  REQUIRE(all.WaitConnected(absl::Seconds(30)));
  // Two seconds of steady publishing: the loop never goes a PHB deadline (10 ms) without a
  // message. The subscriber acknowledges, the SHB releases, and the PHB's timer reclaims.
  constexpr int kEvents = 8000;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kEvents; ++i) {
    t.phb->Publish(kP1, "app", static_cast<uint64_t>(i + 1), Order(i, 1),
                   [](absl::StatusOr<Tick>) {});
    absl::SleepFor(start + absl::Microseconds(250) * (i + 1) - absl::Now());
  }
  size_t held = 0;
  REQUIRE_OK(
      t.phb_storage.Scan("pubend.events", "", "", [&held](absl::string_view, absl::string_view) {
        ++held;
        return true;
      }));
  // Before, the PHB's deadline ("within 10 ms") was read again at every pass and never came:
  // it held every event until publishing stopped.
  INFO(held << " of " << kEvents << " events held at the end of publishing");
  CHECK(held < kEvents / 2);
  REQUIRE(all.WaitFor(kEvents, absl::Seconds(60)));
  t.clients->Shutdown();
  t.brokers->Shutdown();
}

TEST_CASE("an idle runtime sleeps until the next deadline instead of polling", "[runtime]") {
  TwoRuntimes t;
  Recorder r;
  t.Subscribe("s", "", &r);
  REQUIRE_OK(t.brokers->Start());
  REQUIRE_OK(t.clients->Start());
  REQUIRE(r.WaitConnected(absl::Seconds(30)));
  const uint64_t brokers_before = t.brokers->passes();
  const uint64_t clients_before = t.clients->passes();
  absl::SleepFor(absl::Milliseconds(500));
  // Half a second idle: the PHB's heartbeat and timers (at most every 10 ms), the SHB's releases
  // (every 100 ms) and the messages they cause. A loop polling every millisecond would pass
  // 500 times.
  CHECK(t.brokers->passes() - brokers_before < 250);
  // The subscriber acks every 250 ms at most and keeps alive every second.
  CHECK(t.clients->passes() - clients_before < 50);
}

TEST_CASE("shutting a runtime down commits what is pending and answers every publish",
          "[runtime]") {
  InProcessNetwork net;
  InProcessLane lane(&net, 0);
  auto storage_state = MemoryStorage::NewState();
  MemoryStorage storage(storage_state);
  auto channel = *net.Connect("phb");
  auto runtime = *Runtime::Create();
  runtime->AddSource(&lane);
  PublisherHostingBrokerOptions po;
  po.pubends = {PubendOptions{kP1}};
  // A group that closes only at shutdown.
  po.group_commit.max_records = 1'000'000;
  po.group_commit.max_delay = absl::Hours(1);
  PublisherHostingBroker* phb = *runtime->OpenPublisherHostingBroker(po, &storage, channel.get());
  REQUIRE_OK(runtime->Start());
  constexpr int kEvents = 100;
  std::atomic<int> ok{0};
  std::atomic<int> answered{0};
  for (int i = 0; i < kEvents; ++i) {
    phb->Publish(kP1, "", 0, Order(i, 1), [&](absl::StatusOr<Tick> r) {
      if (r.ok()) ok.fetch_add(1);
      answered.fetch_add(1);
    });
  }
  absl::SleepFor(absl::Milliseconds(50));
  CHECK(answered.load() == 0);
  runtime->Shutdown();
  CHECK(answered.load() == kEvents);
  CHECK(ok.load() == kEvents);
  size_t stored = 0;
  REQUIRE_OK(storage.Scan("pubend.events", "", "", [&](absl::string_view, absl::string_view) {
    ++stored;
    return true;
  }));
  CHECK(stored == kEvents);
}

TEST_CASE("a runtime drives a remote publisher: publishes in one, answers from the PHB in another",
          "[runtime]") {
  InProcessNetwork net(2);
  InProcessLane phb_lane(&net, 0);
  InProcessLane pub_lane(&net, 1);
  MemoryStorage storage;
  auto phb_channel = *net.Connect("phb", 0);
  auto pub_channel = *net.Connect("pub-1", 1);
  auto brokers = *Runtime::Create();
  auto publishers = *Runtime::Create();
  brokers->AddSource(&phb_lane);
  publishers->AddSource(&pub_lane);
  PublisherHostingBrokerOptions po;
  po.pubends = {PubendOptions{kP1}};
  REQUIRE_OK(brokers->OpenPublisherHostingBroker(po, &storage, phb_channel.get()).status());
  RemotePublisherOptions ro;
  ro.phb = "phb";
  RemotePublisher* pub = *publishers->OpenRemotePublisher(ro, pub_channel.get());
  REQUIRE_OK(brokers->Start());
  REQUIRE_OK(publishers->Start());
  absl::Mutex mu;
  std::vector<Tick> ticks;
  for (uint64_t seq = 1; seq <= 10; ++seq) {
    absl::Status taken;
    publishers->Call([&] {  // on the loop, which owns the publisher
      taken = pub->Publish(seq, kP1, Order(static_cast<int>(seq), 1), [&](absl::StatusOr<Tick> t) {
        absl::MutexLock lock(&mu);
        ticks.push_back(t.ok() ? *t : 0);
      });
    });
    REQUIRE_OK(taken);
  }
  for (int i = 0; i < 1000; ++i) {
    {
      absl::MutexLock lock(&mu);
      if (ticks.size() == 10) break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  publishers->Shutdown();
  brokers->Shutdown();
  absl::MutexLock lock(&mu);
  REQUIRE(ticks.size() == 10);
  for (size_t i = 0; i < ticks.size(); ++i) {
    CHECK(ticks[i] > 0);
    if (i > 0) CHECK(ticks[i] > ticks[i - 1]);
  }
}

TEST_CASE("a publish made after a runtime shut down is answered, with Aborted", "[runtime]") {
  InProcessNetwork net;
  MemoryStorage storage;
  auto channel = *net.Connect("phb");
  auto runtime = *Runtime::Create();
  PublisherHostingBrokerOptions po;
  po.pubends = {PubendOptions{kP1}};
  PublisherHostingBroker* phb = *runtime->OpenPublisherHostingBroker(po, &storage, channel.get());
  REQUIRE_OK(runtime->Start());
  runtime->Shutdown();
  std::optional<absl::Status> answer;
  phb->Publish(kP1, "", 0, Order(1, 1), [&](absl::StatusOr<Tick> r) { answer = r.status(); });
  runtime.reset();
  REQUIRE(answer.has_value());
  REQUIRE_CODE(*answer, absl::StatusCode::kAborted);
}

TEST_CASE("Post and Call run on the loop thread; Call runs inline when no loop runs", "[runtime]") {
  auto runtime = *Runtime::Create();
  std::thread::id ran_on;
  runtime->Call([&] { ran_on = std::this_thread::get_id(); });
  CHECK(ran_on == std::this_thread::get_id());
  REQUIRE_OK(runtime->Start());
  runtime->Call([&] { ran_on = std::this_thread::get_id(); });
  CHECK(ran_on != std::this_thread::get_id());
  absl::Notification posted;
  runtime->Post([&] { posted.Notify(); });
  CHECK(posted.WaitForNotificationWithTimeout(absl::Seconds(30)));
  REQUIRE_CODE(runtime->Start(), absl::StatusCode::kFailedPrecondition);
  runtime->Shutdown();
  bool after = false;
  runtime->Call([&] { after = true; });  // the loop is over: inline
  CHECK(after);
}

TEST_CASE("SIGTERM shuts down a runtime that asked for it", "[runtime]") {
  auto runtime = *Runtime::Create();
  REQUIRE_OK(runtime->ShutdownOnSignals());
  auto second = *Runtime::Create();
  REQUIRE_CODE(second->ShutdownOnSignals(), absl::StatusCode::kFailedPrecondition);
  std::thread killer([] {
    absl::SleepFor(absl::Milliseconds(50));
    raise(SIGTERM);
  });
  REQUIRE_OK(runtime->Run());  // returns once the signal arrived
  killer.join();
}

}  // namespace
}  // namespace gryph
