#include "gryph/remote_publisher.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gryph/in_process_channel.h"
#include "gryph/memory_storage.h"
#include "gryph/publisher_hosting_broker.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP{1};
const absl::Duration kResend = absl::Milliseconds(100);

EventRef Order(int64_t id) {
  Event e;
  e.SetInt64("id", id);
  return MakeEventRef(std::move(e));
}

// A link that loses what it is told to: the next `drop_sends` messages sent, and the next
// `drop_answers` messages arriving.
class LossyChannel : public Channel {
 public:
  explicit LossyChannel(std::unique_ptr<Channel> inner) : inner_(std::move(inner)) {}
  const std::string& name() const override { return inner_->name(); }
  absl::Status Send(absl::string_view peer, Message message) override {
    if (drop_sends > 0) {
      --drop_sends;
      return absl::OkStatus();  // lost on the way: the sender cannot tell
    }
    return inner_->Send(peer, std::move(message));
  }
  void SetReceiver(Receiver receiver) override {
    inner_->SetReceiver([this, receiver = std::move(receiver)](absl::string_view from, Message m) {
      if (drop_answers > 0) {
        --drop_answers;
        return;
      }
      receiver(from, std::move(m));
    });
  }
  int drop_sends = 0;
  int drop_answers = 0;

 private:
  std::unique_ptr<Channel> inner_;
};

// A PHB with one pubend, driven by hand over a memory storage that survives Restart(), and a
// RemotePublisher named "gateway" that reaches it over a lossy link.
struct World {
  World() {
    link = std::make_unique<LossyChannel>(*net.Connect("gateway"));
    RemotePublisherOptions o;
    o.phb = "phb";
    o.resend_interval = kResend;
    auto created = RemotePublisher::Create(o, link.get());
    REQUIRE_OK(created);
    publisher = *std::move(created);
    link->SetReceiver(
        [this](absl::string_view from, Message m) { publisher->HandleMessage(from, m); });
    OpenPhb();
  }
  void OpenPhb() {
    storage = std::make_unique<MemoryStorage>(state);
    phb_channel = *net.Connect("phb");
    PublisherHostingBrokerOptions o;
    o.pubends = {PubendOptions{kP}};
    o.commit_thread = false;
    o.clock = [this] { return now; };
    auto opened = PublisherHostingBroker::Open(o, storage.get(), phb_channel.get());
    REQUIRE_OK(opened);
    phb = *std::move(opened);
  }
  // The PHB closes (answering what it holds uncommitted with Aborted) and opens again on what it
  // committed.
  void RestartPhb() {
    phb.reset();
    phb_channel.reset();
    storage.reset();
    OpenPhb();
  }
  // Messages travel, the PHB commits, and the answers travel.
  void Settle() {
    net.DeliverAll();
    REQUIRE_OK(phb->Flush());
    net.DeliverAll();
  }
  // Time passes: the publisher's timer runs (resending what is due), then Settle.
  void Advance(absl::Duration d) {
    now += d;
    publisher->OnTimer(now);
    Settle();
  }
  // Publishes and returns a slot that `done` fills.
  std::shared_ptr<std::optional<absl::StatusOr<Tick>>> Publish(uint64_t sequence, EventRef e) {
    auto slot = std::make_shared<std::optional<absl::StatusOr<Tick>>>();
    REQUIRE_OK(publisher->Publish(sequence, kP, std::move(e), [slot](absl::StatusOr<Tick> r) {
      REQUIRE_FALSE(slot->has_value());  // once
      *slot = std::move(r);
    }));
    return slot;
  }
  size_t StoredEvents() {
    size_t n = 0;
    REQUIRE_OK(storage->Scan("pubend.events", "", "", [&](absl::string_view, absl::string_view) {
      ++n;
      return true;
    }));
    return n;
  }

  absl::Time now = absl::FromUnixMicros(1'000'000);
  InProcessNetwork net;
  std::shared_ptr<MemoryStorage::State> state = MemoryStorage::NewState();
  std::unique_ptr<MemoryStorage> storage;
  std::unique_ptr<Channel> phb_channel;
  std::unique_ptr<PublisherHostingBroker> phb;
  std::unique_ptr<LossyChannel> link;
  std::unique_ptr<RemotePublisher> publisher;
};

TEST_CASE("a remote publish runs its done once with the tick, and duplicate answers are ignored",
          "[remote_publisher]") {
  World w;
  auto slot = w.Publish(1, Order(1));
  w.net.DeliverAll();
  REQUIRE_FALSE(slot->has_value());  // not before the commit
  REQUIRE(w.publisher->outstanding() == 1);
  w.Settle();
  REQUIRE(slot->has_value());
  REQUIRE_OK(**slot);
  REQUIRE(***slot == w.phb->pubend(kP)->committed_tick());
  REQUIRE(w.publisher->outstanding() == 0);
  // The answer again (the PHB answers every retry), and one from a stranger: nothing happens.
  w.publisher->HandleMessage("phb", PublishedMessage{1, kP, Tick{***slot}});
  w.publisher->HandleMessage("phb", PublishedMessage{1, kP, absl::NotFoundError("late")});
  REQUIRE(w.publisher->ignored_answers() == 2);
  auto second = w.Publish(2, Order(2));
  w.publisher->HandleMessage("mallory", PublishedMessage{2, kP, Tick{5}});
  REQUIRE_FALSE(second->has_value());
  w.Settle();
  REQUIRE(***second > ***slot);
  REQUIRE(w.StoredEvents() == 2);
  REQUIRE(w.publisher->resends() == 0);
}

TEST_CASE("a lost publish is sent again after the resend interval and logged once",
          "[remote_publisher]") {
  World w;
  w.link->drop_sends = 1;
  auto slot = w.Publish(1, Order(1));
  w.Settle();
  REQUIRE(w.StoredEvents() == 0);
  REQUIRE(w.publisher->NextDeadline(w.now) == w.now);  // waits for OnTimer to stamp it
  w.Advance(absl::ZeroDuration());
  REQUIRE(w.publisher->NextDeadline(w.now) == w.now + kResend);
  w.Advance(kResend - absl::Milliseconds(1));
  REQUIRE(w.publisher->resends() == 0);
  w.Advance(absl::Milliseconds(1));
  REQUIRE(w.publisher->resends() == 1);
  REQUIRE(slot->has_value());
  REQUIRE_OK(**slot);
  REQUIRE(w.StoredEvents() == 1);
  REQUIRE(w.publisher->NextDeadline(w.now) == absl::InfiniteFuture());
}

TEST_CASE("a lost answer is asked again, and the resend gets the logged tick",
          "[remote_publisher]") {
  World w;
  w.link->drop_answers = 1;
  auto slot = w.Publish(1, Order(1));
  w.Settle();
  REQUIRE(w.StoredEvents() == 1);
  REQUIRE_FALSE(slot->has_value());
  const Tick logged = w.phb->pubend(kP)->committed_tick();
  w.Advance(absl::ZeroDuration());
  w.Advance(kResend);
  REQUIRE(slot->has_value());
  REQUIRE_OK(**slot);
  REQUIRE(***slot == logged);
  REQUIRE(w.StoredEvents() == 1);
}

TEST_CASE("across a PHB restart, a resend is answered at its logged tick or logged once",
          "[remote_publisher]") {
  World w;
  // Logged, and the PHB goes before its answer reaches the publisher.
  w.link->drop_answers = 1;
  auto logged = w.Publish(1, Order(1));
  w.Settle();
  const Tick tick = w.phb->pubend(kP)->committed_tick();
  // Taken by the PHB, not committed when it closes: answered Aborted, which keeps it.
  auto pending = w.Publish(2, Order(2));
  w.net.DeliverAll();
  w.RestartPhb();
  w.net.DeliverAll();
  REQUIRE_FALSE(pending->has_value());
  REQUIRE_CODE(w.publisher->last_error(), absl::StatusCode::kAborted);
  REQUIRE(w.publisher->outstanding() == 2);
  REQUIRE(w.StoredEvents() == 1);
  // On request, both go again: the first is recognised, the second logged now.
  w.publisher->Resend();
  w.Settle();
  REQUIRE(logged->has_value());
  REQUIRE_OK(**logged);
  REQUIRE(***logged == tick);
  REQUIRE(pending->has_value());
  REQUIRE_OK(**pending);
  REQUIRE(***pending > tick);
  REQUIRE(w.StoredEvents() == 2);
  REQUIRE(w.publisher->outstanding() == 0);
}

TEST_CASE("a publish lost while a later one was logged is refused on resend, as never logged",
          "[remote_publisher]") {
  World w;
  w.link->drop_sends = 1;
  auto lost = w.Publish(1, Order(1));
  auto later = w.Publish(2, Order(2));
  w.Settle();
  REQUIRE_OK(**later);
  w.Advance(absl::ZeroDuration());
  w.Advance(kResend);
  // The pubend cannot log 1 after 2 (a publisher's sequences increase), and knows it never
  // logged it: the event is the caller's to publish again under a new sequence.
  REQUIRE(lost->has_value());
  REQUIRE_CODE(**lost, absl::StatusCode::kInvalidArgument);
  auto again = w.Publish(3, Order(1));
  w.Settle();
  REQUIRE_OK(**again);
  REQUIRE(w.StoredEvents() == 2);
}

TEST_CASE("a final refusal ends the publish; a transient one keeps it", "[remote_publisher]") {
  World w;
  std::optional<absl::StatusOr<Tick>> result;
  REQUIRE_OK(w.publisher->Publish(1, PubendId{9}, Order(1),
                                  [&](absl::StatusOr<Tick> r) { result = std::move(r); }));
  w.Settle();
  REQUIRE(result.has_value());
  REQUIRE_CODE(*result, absl::StatusCode::kNotFound);
  REQUIRE(w.publisher->outstanding() == 0);
  auto full = w.Publish(2, Order(2));
  w.publisher->HandleMessage("phb", PublishedMessage{2, kP, absl::ResourceExhaustedError("full")});
  REQUIRE_FALSE(full->has_value());
  REQUIRE_CODE(w.publisher->last_error(), absl::StatusCode::kResourceExhausted);
  w.Settle();  // the real answer
  REQUIRE_OK(**full);
}

TEST_CASE("a publish by key goes where the PHB puts the key", "[remote_publisher]") {
  World w;
  std::optional<absl::StatusOr<Tick>> result;
  REQUIRE_OK(w.publisher->PublishByKey(1, "IBM", Order(1),
                                       [&](absl::StatusOr<Tick> r) { result = std::move(r); }));
  w.Settle();
  REQUIRE(result.has_value());
  REQUIRE_OK(*result);
  REQUIRE(**result == w.phb->pubend(kP)->committed_tick());
}

TEST_CASE("publishes beyond the retry window, or malformed, are refused and send nothing",
          "[remote_publisher]") {
  World w;
  std::vector<std::shared_ptr<std::optional<absl::StatusOr<Tick>>>> slots;
  for (uint64_t s = 10; s < 10 + Pubend::kSequenceWindow; ++s) {
    slots.push_back(w.Publish(s, Order(static_cast<int64_t>(s))));
  }
  const size_t queued = w.net.pending();
  auto ignore = [](absl::StatusOr<Tick>) {};
  REQUIRE_CODE(w.publisher->Publish(10 + Pubend::kSequenceWindow, kP, Order(0), ignore),
               absl::StatusCode::kResourceExhausted);
  REQUIRE_CODE(w.publisher->Publish(0, kP, Order(0), ignore), absl::StatusCode::kInvalidArgument);
  REQUIRE_CODE(w.publisher->Publish(25, kP, Order(0), ignore),
               absl::StatusCode::kInvalidArgument);  // not above the last, 25
  REQUIRE_CODE(w.publisher->Publish(100, kP, nullptr, ignore), absl::StatusCode::kInvalidArgument);
  REQUIRE_CODE(w.publisher->Publish(100, PubendId{0}, Order(0), ignore),
               absl::StatusCode::kInvalidArgument);
  REQUIRE(w.net.pending() == queued);
  REQUIRE(w.publisher->outstanding() == Pubend::kSequenceWindow);
  w.Settle();
  for (const auto& slot : slots) REQUIRE_OK(**slot);
  // Answered: the window moves.
  REQUIRE_OK(w.publisher->Publish(10 + Pubend::kSequenceWindow, kP, Order(0), ignore));
}

TEST_CASE("absurd remote publisher options are InvalidArgument, naming the option",
          "[remote_publisher]") {
  InProcessNetwork net;
  auto channel = *net.Connect("gateway");
  RemotePublisherOptions o;
  REQUIRE_CODE(RemotePublisher::Create(o, channel.get()), absl::StatusCode::kInvalidArgument);
  o.phb = "phb";
  REQUIRE_OK(RemotePublisher::Create(o, channel.get()));
  REQUIRE_CODE(RemotePublisher::Create(o, nullptr), absl::StatusCode::kInvalidArgument);
  for (absl::Duration d : {absl::ZeroDuration(), -absl::Seconds(1), absl::InfiniteDuration()}) {
    o.resend_interval = d;
    absl::StatusOr<std::unique_ptr<RemotePublisher>> p = RemotePublisher::Create(o, channel.get());
    REQUIRE_CODE(p, absl::StatusCode::kInvalidArgument);
    REQUIRE_THAT(std::string(p.status().message()), Catch::Contains("resend_interval"));
  }
}

}  // namespace
}  // namespace gryph
