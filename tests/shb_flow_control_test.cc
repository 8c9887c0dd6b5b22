// The subscriber hosting broker's protection of its subscribers' links: a consumer that does not
// acknowledge is demoted to an ack-paced catchup and comes back, and a delivery the channel
// refuses ends the session rather than leaving a hole in the subscriber's FIFO.

#include <string>
#include <vector>

#include "gryph/durable_subscriber.h"
#include "gryph/in_process_channel.h"
#include "gryph/memory_storage.h"
#include "gryph/subscriber_hosting_broker.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kPubend{1};

struct Recorder : DurableSubscriber::Handler {
  void OnEvent(PubendId, Tick t, const EventRef&) override { events.push_back(t); }
  void OnGap(PubendId, Tick t) override { gaps.push_back(t); }
  void OnError(const absl::Status& st) override { errors.push_back(st); }
  std::vector<Tick> events;
  std::vector<Tick> gaps;
  std::vector<absl::Status> errors;
};

// Passes everything through to an endpoint, except that it refuses (Unavailable) every message
// to `refused` while `refusing` is set.
class RefusingChannel : public Channel {
 public:
  explicit RefusingChannel(Channel* inner) : inner_(inner) {}
  const std::string& name() const override { return inner_->name(); }
  absl::Status Send(absl::string_view peer, Message message) override {
    if (refusing && peer == refused) return absl::UnavailableError("link down");
    return inner_->Send(peer, std::move(message));
  }
  void SetReceiver(Receiver receiver) override { inner_->SetReceiver(std::move(receiver)); }
  std::string refused;
  bool refusing = false;

 private:
  Channel* const inner_;
};

// A PHB stand-in, an SHB on memory storage, and one durable subscriber whose acks the test
// controls (its timer runs only when the test says).
struct Fixture {
  explicit Fixture(uint64_t max_unacked) {
    upstream = *net.Connect("phb");
    shb_endpoint = *net.Connect("shb");
    shb_channel = std::make_unique<RefusingChannel>(shb_endpoint.get());
    SubscriberHostingBrokerOptions o;
    o.pubends.push_back({kPubend, "phb"});
    o.max_unacked_events = max_unacked;
    o.clock = [this] { return now; };
    shb = *SubscriberHostingBroker::Open(std::move(o), &storage, shb_channel.get());
    client = *net.Connect("client");
    DurableSubscriberOptions d;
    d.subscription = "audit";
    d.selector = "qty > 10";
    d.broker = "shb";
    d.ack_interval = absl::Milliseconds(1);
    subscriber = *DurableSubscriber::Create(d, client.get(), &recorder);
    client->SetReceiver(
        [this](absl::string_view from, Message m) { subscriber->HandleMessage(from, m); });
    REQUIRE_OK(subscriber->Connect());
    Pump();
    REQUIRE(subscriber->connected());
  }

  // Knowledge for (last_, through]: a matching event at each tick of `events`, S elsewhere.
  void Publish(Tick through, const std::vector<Tick>& events) {
    KnowledgeMessage k{kPubend, {}};
    Tick from = last_ + 1;
    for (Tick t : events) {
      if (t > from) k.spans.push_back(KnowledgeSpan::Silence({from, t - 1}));
      Event e;
      e.SetInt64("qty", 100);
      k.spans.push_back(KnowledgeSpan::Data(t, MakeEventRef(std::move(e))));
      from = t + 1;
    }
    if (through >= from) k.spans.push_back(KnowledgeSpan::Silence({from, through}));
    last_ = through;
    REQUIRE_OK(upstream->Send("shb", std::move(k)));
    Pump();
  }

  void Pump() {
    while (net.DeliverAll() > 0) shb->Flush();
  }

  // The subscriber acks what it consumed.
  void Ack() {
    now += absl::Seconds(2);
    subscriber->OnTimer(now);
    Pump();
  }

  absl::Time now = absl::FromUnixSeconds(1'000'000);
  InProcessNetwork net;
  MemoryStorage storage;
  std::unique_ptr<Channel> upstream;
  std::unique_ptr<Channel> shb_endpoint;
  std::unique_ptr<RefusingChannel> shb_channel;
  std::unique_ptr<SubscriberHostingBroker> shb;
  std::unique_ptr<Channel> client;
  Recorder recorder;
  std::unique_ptr<DurableSubscriber> subscriber;
  Tick last_ = 0;
};

std::vector<Tick> Range(Tick first, Tick last, Tick step) {
  std::vector<Tick> out;
  for (Tick t = first; t <= last; t += step) out.push_back(t);
  return out;
}

TEST_CASE("a consumer that does not ack is demoted, paced by its acks, and rejoins",
          "[shb][flow]") {
  Fixture f(/*max_unacked=*/5);
  const Tick start = f.shb->latest_delivered(kPubend);
  f.last_ = start;
  // One round of 8 Events: all sent (the bound is checked per round), then the member is
  // demoted, 8 unacknowledged > 5.
  f.Publish(start + 100, Range(start + 10, start + 80, 10));
  REQUIRE(f.recorder.events.size() == 8);
  REQUIRE(f.shb->stats().demotions == 1);
  REQUIRE(f.shb->catching_up() == 1);
  // Without acks nothing more reaches it, though the broker moves on.
  f.Publish(start + 200, Range(start + 110, start + 150, 10));
  REQUIRE(f.recorder.events.size() == 8);
  REQUIRE(f.shb->latest_delivered(kPubend) == start + 200);
  // Its ack lets the catchup send what it missed, from the PFS and the cache, then hand over.
  f.Ack();
  REQUIRE(f.recorder.events.size() == 13);
  REQUIRE(f.shb->catching_up() == 0);
  REQUIRE(f.shb->stats().catchups_completed == 1);
  // Back in the constream: live events again.
  f.Publish(start + 300, {start + 250});
  std::vector<Tick> expected = Range(start + 10, start + 80, 10);
  for (Tick t : Range(start + 110, start + 150, 10)) expected.push_back(t);
  expected.push_back(start + 250);
  REQUIRE(f.recorder.events == expected);
  REQUIRE(f.recorder.gaps.empty());
  REQUIRE(f.subscriber->duplicates_dropped() == 0);
}

TEST_CASE("a consumer that acks in time is never demoted", "[shb][flow]") {
  Fixture f(/*max_unacked=*/5);
  const Tick start = f.shb->latest_delivered(kPubend);
  f.last_ = start;
  for (Tick round = 0; round < 10; ++round) {
    const Tick base = start + round * 100;
    f.Publish(base + 100, Range(base + 10, base + 40, 10));  // 4 per round, under the bound
    f.Ack();
  }
  REQUIRE(f.recorder.events.size() == 40);
  REQUIRE(f.shb->stats().demotions == 0);
}

TEST_CASE("a delivery the channel refuses ends the session; the CT brings it back whole",
          "[shb][flow]") {
  Fixture f(/*max_unacked=*/1000);
  const Tick start = f.shb->latest_delivered(kPubend);
  f.last_ = start;
  f.Publish(start + 100, {start + 10});
  REQUIRE(f.recorder.events.size() == 1);
  // The link to the subscriber is down for one round: that Event is refused, the session ends.
  f.shb_channel->refused = "client";
  f.shb_channel->refusing = true;
  f.Publish(start + 200, {start + 110});
  f.shb_channel->refusing = false;
  // Later Events are not sent on the broken session (they would claim there was nothing
  // between).
  f.Publish(start + 300, {start + 210});
  REQUIRE(f.recorder.events == std::vector<Tick>{start + 10});
  REQUIRE(f.shb->catching_up() == 0);
  // The subscriber reconnects with its CT and gets exactly what it missed, in order.
  REQUIRE_OK(f.subscriber->Connect());
  f.Pump();
  REQUIRE(f.recorder.events == std::vector<Tick>{start + 10, start + 110, start + 210});
  REQUIRE(f.shb->stats().catchups_completed == 1);
}

}  // namespace
}  // namespace gryph
