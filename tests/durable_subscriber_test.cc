#include "gryph/durable_subscriber.h"

#include <functional>
#include <string>
#include <vector>

#include "gryph/in_process_channel.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP{1};
constexpr PubendId kQ{2};
const absl::Time kT0 = absl::FromUnixSeconds(2'000'000);

using Strings = std::vector<std::string>;

CheckpointToken Ct(std::initializer_list<std::pair<PubendId, Tick>> entries) {
  CheckpointToken ct;
  for (const auto& [p, t] : entries) ct.Set(p, t);
  return ct;
}

EventRef Colored(absl::string_view color) {
  Event e;
  e.SetString("color", color);
  return MakeEventRef(std::move(e));
}

// Records what the subscriber hands the application, with the CT it had during each call.
class Recorder : public DurableSubscriber::Handler {
 public:
  void OnEvent(PubendId p, Tick t, const EventRef& event) override {
    CHECK(event != nullptr);
    Add("E", p, t);
  }
  void OnSilence(PubendId p, Tick t) override { Add("S", p, t); }
  void OnGap(PubendId p, Tick t) override { Add("G", p, t); }
  void OnConnected(const CheckpointToken& start) override { connected.push_back(start); }
  void OnError(const absl::Status& status) override { errors.push_back(status); }

  const DurableSubscriber* subscriber = nullptr;
  Strings log;                       // "E1:12" = Event of pubend 1 at tick 12
  std::vector<Tick> ct_during_call;  // CT(p) while the handler ran
  std::vector<CheckpointToken> connected;
  std::vector<absl::Status> errors;

 private:
  void Add(const char* kind, PubendId p, Tick t) {
    log.push_back(kind + std::to_string(p.value) + ":" + std::to_string(t));
    ct_during_call.push_back(subscriber->checkpoint().Get(p));
  }
};

// A DurableSubscriber on endpoint "sub" of a network whose endpoint "shb" plays the broker: the
// test feeds the subscriber messages "from" it and reads what the subscriber sent it.
class SubscriberTest {
 public:
  explicit SubscriberTest(CheckpointToken checkpoint = {}, bool ack_stored_only = false,
                          bool auto_reconnect = true) {
    shb_ = *net_.Connect("shb");
    other_ = *net_.Connect("other");
    sub_ = *net_.Connect("sub");
    shb_->SetReceiver([this](absl::string_view from, Message m) {
      CHECK(from == "sub");
      sent_.push_back(std::move(m));
    });
    DurableSubscriberOptions o;
    o.subscription = "s";
    o.selector = "color = 'red'";
    o.broker = "shb";
    o.checkpoint = std::move(checkpoint);
    o.epoch = 3;
    o.ack_interval = absl::Milliseconds(250);
    o.keepalive_interval = absl::Seconds(1);
    o.ack_stored_only = ack_stored_only;
    o.auto_reconnect = auto_reconnect;
    auto ds = DurableSubscriber::Create(std::move(o), sub_.get(), &rec);
    REQUIRE_OK(ds);
    ds_ = *std::move(ds);
    rec.subscriber = ds_.get();
  }

  DurableSubscriber& ds() { return *ds_; }
  void FromBroker(const Message& m) { ds_->HandleMessage("shb", m); }
  // The broker's answer to a connection request (sent first, unseen by Sent(), if none is
  // outstanding).
  void Connected(const CheckpointToken& start) {
    if (!ds_->connecting()) {
      REQUIRE_OK(ds_->Connect());
      net_.DeliverAll();
      REQUIRE(std::holds_alternative<ConnectMessage>(sent_.back()));
      sent_.pop_back();
    }
    FromBroker(ConnectedMessage{"s", start, 3});
  }
  void Deliver(PubendId p, DeliveryKind kind, Tick t, EventRef e = nullptr, Tick previous = 0) {
    FromBroker(DeliveryMessage{"s", p, kind, t, std::move(e), previous});
  }
  // The broker's endpoint goes: sends to it fail (Unavailable).
  void LoseBroker() { shb_.reset(); }
  // What the subscriber sent the broker since the last call.
  std::vector<Message> Sent() {
    net_.DeliverAll();
    std::vector<Message> out;
    out.swap(sent_);
    return out;
  }

  Recorder rec;

 private:
  InProcessNetwork net_;
  std::unique_ptr<Channel> shb_;
  std::unique_ptr<Channel> other_;
  std::unique_ptr<Channel> sub_;
  std::vector<Message> sent_;
  std::unique_ptr<DurableSubscriber> ds_;
};

TEST_CASE(
    "durable subscriber: the next deadline is the next ack or keepalive, also after an ack "
    "it could not send",
    "[subscriber]") {
  SubscriberTest t;
  t.Connected(Ct({{kP, 0}}));
  absl::Time now = kT0;
  CHECK(t.ds().NextDeadline(now) == now);  // the first ack is due
  t.ds().OnTimer(now);
  CHECK(t.ds().NextDeadline(now) == now + absl::Seconds(1));  // the keepalive
  t.Deliver(kP, DeliveryKind::kEvent, 5, Colored("red"));
  CHECK(t.ds().NextDeadline(now) == now + absl::Milliseconds(250));  // an ack of tick 5
  t.LoseBroker();
  now += absl::Milliseconds(250);
  t.ds().OnTimer(now);  // the ack cannot be sent
  // Tried again an ack_interval later, not at once: a loop driven by the deadline would spin.
  CHECK(t.ds().NextDeadline(now) == now + absl::Milliseconds(250));
}

TEST_CASE("durable subscriber rejects a bad selector or topic filter", "[subscriber]") {
  InProcessNetwork net;
  auto ch = net.Connect("sub");
  REQUIRE_OK(ch);
  Recorder rec;
  DurableSubscriberOptions o;
  o.subscription = "s";
  o.broker = "shb";
  o.selector = "color = ";
  REQUIRE_CODE(DurableSubscriber::Create(o, ch->get(), &rec), absl::StatusCode::kInvalidArgument);
  o.selector = "";
  o.topic_filter = "a/#/b";
  REQUIRE_CODE(DurableSubscriber::Create(o, ch->get(), &rec), absl::StatusCode::kInvalidArgument);
}

TEST_CASE("durable subscriber rejects absurd options, naming the option", "[subscriber]") {
  InProcessNetwork net;
  auto ch = net.Connect("sub");
  REQUIRE_OK(ch);
  Recorder rec;
  const std::vector<std::pair<std::string, std::function<void(DurableSubscriberOptions&)>>> cases =
      {{"subscription", [](DurableSubscriberOptions& o) { o.subscription = ""; }},
       {"subscription",
        [](DurableSubscriberOptions& o) { o.subscription = std::string(257, 's'); }},
       {"broker", [](DurableSubscriberOptions& o) { o.broker = ""; }},
       {"ack_interval", [](DurableSubscriberOptions& o) { o.ack_interval = absl::ZeroDuration(); }},
       {"keepalive_interval",
        [](DurableSubscriberOptions& o) { o.keepalive_interval = -absl::Seconds(1); }},
       {"connect_retry_interval",
        [](DurableSubscriberOptions& o) { o.connect_retry_interval = absl::ZeroDuration(); }},
       {"reconnect_interval",
        [](DurableSubscriberOptions& o) { o.reconnect_interval = absl::ZeroDuration(); }}};
  DurableSubscriberOptions base;
  base.subscription = "s";
  base.broker = "shb";
  testing::RequireEachOptionRefused(base, cases, [&](const DurableSubscriberOptions& o) {
    return DurableSubscriber::Create(o, ch->get(), &rec).status();
  });
  DurableSubscriberOptions o;
  o.subscription = std::string(kMaxSubscriptionNameBytes, 's');
  o.broker = "shb";
  REQUIRE_OK(DurableSubscriber::Create(o, ch->get(), &rec));
  REQUIRE_CODE(DurableSubscriber::Create(o, nullptr, &rec), absl::StatusCode::kInvalidArgument);
  REQUIRE_CODE(DurableSubscriber::Create(o, ch->get(), nullptr),
               absl::StatusCode::kInvalidArgument);
}

TEST_CASE("durable subscriber connects with its CT, selector and epoch", "[subscriber]") {
  SubscriberTest t(Ct({{kP, 5}}));
  REQUIRE_OK(t.ds().Connect());
  REQUIRE_FALSE(t.ds().connected());  // until the broker accepts
  const std::vector<Message> sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::get<ConnectMessage>(sent[0]) ==
          ConnectMessage{"s", "color = 'red'", "", Ct({{kP, 5}}), 3, true});
  t.Connected(Ct({{kP, 5}}));
  REQUIRE(t.ds().connected());
  REQUIRE(t.rec.connected == std::vector<CheckpointToken>{Ct({{kP, 5}})});
  REQUIRE(t.ds().checkpoint() == Ct({{kP, 5}}));
}

TEST_CASE("a new subscription takes its start from the broker", "[subscriber]") {
  SubscriberTest t;  // no stored CT
  REQUIRE(t.ds().checkpoint().empty());
  t.Connected(Ct({{kP, 100}, {kQ, 40}}));
  REQUIRE(t.ds().checkpoint() == Ct({{kP, 100}, {kQ, 40}}));
  // Delivery resumes after the start: a message at it is a duplicate.
  t.Deliver(kP, DeliveryKind::kSilence, 100);
  REQUIRE(t.ds().duplicates_dropped() == 1);
  REQUIRE(t.rec.log.empty());
}

TEST_CASE("a stored CT is kept; the start only fills pubends it does not name", "[subscriber]") {
  SubscriberTest t(Ct({{kP, 5}}));
  t.Connected(Ct({{kP, 5}, {kQ, 40}}));
  REQUIRE(t.ds().checkpoint() == Ct({{kP, 5}, {kQ, 40}}));
}

TEST_CASE("a start at tick 0 is kept in the CT, which then names that pubend", "[subscriber]") {
  // A subscription created before its broker heard from a pubend starts there at 0: the CT must
  // say so, or another broker would take it for one that never covered the pubend.
  SubscriberTest t;
  t.Connected(Ct({{kP, 0}, {kQ, 40}}));
  REQUIRE(t.ds().checkpoint().Names(kP));
  REQUIRE(t.ds().checkpoint() == Ct({{kP, 0}, {kQ, 40}}));
  // And a stored CT naming a pubend at 0 keeps it there, whatever the start says.
  SubscriberTest u(Ct({{kP, 0}}));
  u.Connected(Ct({{kP, 70}}));
  REQUIRE(u.ds().checkpoint() == Ct({{kP, 0}}));
}

TEST_CASE("durable subscriber drops messages at or below its CT", "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}));
  t.Connected(Ct({{kP, 10}}));
  t.Deliver(kP, DeliveryKind::kEvent, 10, Colored("red"));
  t.Deliver(kP, DeliveryKind::kSilence, 8);
  t.Deliver(kP, DeliveryKind::kGap, 9);
  REQUIRE(t.ds().duplicates_dropped() == 3);
  t.Deliver(kP, DeliveryKind::kEvent, 12, Colored("red"));
  t.Deliver(kP, DeliveryKind::kEvent, 12, Colored("red"));  // a resend
  REQUIRE(t.ds().duplicates_dropped() == 4);
  REQUIRE(t.rec.log == Strings{"E1:12"});
  REQUIRE(t.ds().checkpoint() == Ct({{kP, 12}}));
  REQUIRE(t.rec.errors.empty());
}

TEST_CASE("durable subscriber moves its CT after each message, per pubend", "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}));
  t.Connected(Ct({{kP, 10}}));
  t.Deliver(kP, DeliveryKind::kEvent, 12, Colored("red"));
  t.Deliver(kQ, DeliveryKind::kEvent, 3, Colored("red"));
  t.Deliver(kP, DeliveryKind::kSilence, 15);
  t.Deliver(kP, DeliveryKind::kGap, 20);
  t.Deliver(kQ, DeliveryKind::kSilence, 4);
  REQUIRE(t.rec.log == Strings{"E1:12", "E2:3", "S1:15", "G1:20", "S2:4"});
  // The handler runs with the previous CT: the CT moves only after it returns.
  REQUIRE(t.rec.ct_during_call == std::vector<Tick>{10, 0, 12, 15, 3});
  REQUIRE(t.ds().checkpoint() == Ct({{kP, 20}, {kQ, 4}}));
  t.Deliver(kP, DeliveryKind::kEvent, 18, Colored("red"));  // below CT(p) = 20
  REQUIRE(t.ds().duplicates_dropped() == 1);
  REQUIRE(t.rec.log.size() == 5);
}

TEST_CASE("an Event that does not match the selector is an error, not a delivery", "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}));
  t.Connected(Ct({{kP, 10}}));
  t.Deliver(kP, DeliveryKind::kEvent, 11, Colored("blue"));
  t.Deliver(kP, DeliveryKind::kEvent, 12, nullptr);  // an Event without its event
  REQUIRE(t.rec.log.empty());
  REQUIRE(t.rec.errors.size() == 2);
  REQUIRE(absl::IsDataLoss(t.rec.errors[0]));
  REQUIRE(absl::IsDataLoss(t.rec.errors[1]));
  REQUIRE(t.ds().checkpoint() == Ct({{kP, 10}}));  // not consumed
  REQUIRE(t.ds().duplicates_dropped() == 0);
  t.Deliver(kP, DeliveryKind::kEvent, 13, Colored("red"));
  REQUIRE(t.rec.log == Strings{"E1:13"});
  REQUIRE(t.ds().checkpoint() == Ct({{kP, 13}}));
}

TEST_CASE("durable subscriber ignores other peers, other subscriptions and other epochs",
          "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}));
  // Not connected yet: deliveries are ignored (and are not duplicates).
  t.Deliver(kP, DeliveryKind::kEvent, 11, Colored("red"));
  // Another subscription's or another epoch's acceptance does not connect us.
  t.FromBroker(ConnectedMessage{"other", Ct({{kP, 10}}), 3});
  t.FromBroker(ConnectedMessage{"s", Ct({{kP, 10}}), 2});
  // Nor does one from a peer that is not our broker.
  t.ds().HandleMessage("other", ConnectedMessage{"s", Ct({{kP, 10}}), 3});
  REQUIRE_FALSE(t.ds().connected());
  REQUIRE(t.rec.connected.empty());

  t.Connected(Ct({{kP, 10}}));
  REQUIRE(t.ds().connected());
  t.FromBroker(DeliveryMessage{"other", kP, DeliveryKind::kEvent, 12, Colored("red")});
  t.ds().HandleMessage("other", DeliveryMessage{"s", kP, DeliveryKind::kEvent, 12, Colored("red")});
  t.FromBroker(SessionErrorMessage{"other", absl::StatusCode::kAborted, "not ours"});
  t.ds().HandleMessage("other",
                       SessionErrorMessage{"s", absl::StatusCode::kAborted, "not our broker"});
  // Nor kinds a subscriber does not take.
  t.FromBroker(PublishedMessage{1, kP, absl::AbortedError("not ours")});
  t.FromBroker(PublishMessage{1, kP, "", Colored("red")});
  REQUIRE(t.ds().connected());
  REQUIRE(t.rec.log.empty());
  REQUIRE(t.rec.errors.empty());
  REQUIRE(t.ds().duplicates_dropped() == 0);
  REQUIRE(t.ds().checkpoint() == Ct({{kP, 10}}));

  t.Deliver(kP, DeliveryKind::kEvent, 12, Colored("red"));
  REQUIRE(t.rec.log == Strings{"E1:12"});
}

TEST_CASE("a session error from the broker disconnects the subscriber", "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}));
  t.Connected(Ct({{kP, 10}}));
  t.FromBroker(SessionErrorMessage{"s", absl::StatusCode::kAborted, "fenced"});
  REQUIRE_FALSE(t.ds().connected());
  REQUIRE(t.rec.errors.size() == 1);
  REQUIRE(t.rec.errors[0] == absl::AbortedError("fenced"));
  t.Deliver(kP, DeliveryKind::kEvent, 11, Colored("red"));  // after the session ended
  REQUIRE(t.rec.log.empty());
  t.ds().OnTimer(kT0);  // no acks without a session
  REQUIRE(t.Sent().empty());
}

TEST_CASE("durable subscriber acks every ack_interval and keeps alive", "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}));
  t.ds().OnTimer(kT0);  // not connected: nothing
  REQUIRE(t.Sent().empty());
  t.Connected(Ct({{kP, 10}}));
  // The first timer of a session sends the CT at once.
  t.ds().OnTimer(kT0);
  std::vector<Message> sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::get<AckMessage>(sent[0]) == AckMessage{"s", Ct({{kP, 10}})});

  t.Deliver(kP, DeliveryKind::kEvent, 12, Colored("red"));
  t.ds().OnTimer(kT0 + absl::Milliseconds(249));
  REQUIRE(t.Sent().empty());
  t.ds().OnTimer(kT0 + absl::Milliseconds(250));
  sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::get<AckMessage>(sent[0]) == AckMessage{"s", Ct({{kP, 12}})});
  // Nothing new: no ack until the keepalive is due.
  t.ds().OnTimer(kT0 + absl::Milliseconds(500));
  t.ds().OnTimer(kT0 + absl::Milliseconds(1249));
  REQUIRE(t.Sent().empty());
  t.ds().OnTimer(kT0 + absl::Milliseconds(1250));
  sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::get<AckMessage>(sent[0]) == AckMessage{"s", Ct({{kP, 12}})});
}

TEST_CASE("with ack_stored_only, acks carry only what the application stored", "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}), /*ack_stored_only=*/true);
  t.Connected(Ct({{kP, 10}, {kQ, 40}}));  // kQ is new: it starts where the broker is
  t.ds().OnTimer(kT0);
  std::vector<Message> sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::get<AckMessage>(sent[0]) == AckMessage{"s", Ct({{kP, 10}, {kQ, 40}})});
  t.Deliver(kP, DeliveryKind::kEvent, 12, Colored("red"), 10);
  t.Deliver(kP, DeliveryKind::kEvent, 14, Colored("red"), 12);
  REQUIRE(t.ds().checkpoint() == Ct({{kP, 14}, {kQ, 40}}));
  // Handled but not stored: nothing to ack, only the keepalive of the stored CT.
  t.ds().OnTimer(kT0 + absl::Milliseconds(500));
  REQUIRE(t.Sent().empty());
  t.ds().OnTimer(kT0 + absl::Seconds(1));
  sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::get<AckMessage>(sent[0]) == AckMessage{"s", Ct({{kP, 10}, {kQ, 40}})});
  // A CT the subscriber never had cannot have been stored.
  REQUIRE_CODE(t.ds().Stored(Ct({{kP, 16}, {kQ, 40}})), absl::StatusCode::kInvalidArgument);
  REQUIRE_OK(t.ds().Stored(Ct({{kP, 12}, {kQ, 40}})));
  t.ds().OnTimer(kT0 + absl::Milliseconds(1250));
  sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::get<AckMessage>(sent[0]) == AckMessage{"s", Ct({{kP, 12}, {kQ, 40}})});
  // The final ack of a disconnection is the stored CT too.
  REQUIRE_OK(t.ds().Stored(Ct({{kP, 14}, {kQ, 40}})));
  REQUIRE_OK(t.ds().Disconnect());
  sent = t.Sent();
  REQUIRE(sent.size() == 2);
  REQUIRE(std::get<AckMessage>(sent[0]) == AckMessage{"s", Ct({{kP, 14}, {kQ, 40}})});
  REQUIRE(std::holds_alternative<DisconnectMessage>(sent[1]));
}

TEST_CASE("disconnect sends the final ack first; unsubscribe asks to delete", "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}));
  REQUIRE_OK(t.ds().Disconnect());  // not connected: nothing to say
  REQUIRE(t.Sent().empty());
  t.Connected(Ct({{kP, 10}}));
  t.Deliver(kP, DeliveryKind::kEvent, 12, Colored("red"));
  REQUIRE_OK(t.ds().Disconnect());
  REQUIRE_FALSE(t.ds().connected());
  std::vector<Message> sent = t.Sent();
  REQUIRE(sent.size() == 2);
  REQUIRE(std::get<AckMessage>(sent[0]) == AckMessage{"s", Ct({{kP, 12}})});
  REQUIRE(std::get<DisconnectMessage>(sent[1]) == DisconnectMessage{"s"});
  // The CT survives the session: the next Connect resumes from it.
  REQUIRE_OK(t.ds().Connect());
  sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::get<ConnectMessage>(sent[0]).checkpoint == Ct({{kP, 12}}));
  REQUIRE_OK(t.ds().Unsubscribe());
  sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::get<UnsubscribeMessage>(sent[0]) == UnsubscribeMessage{"s"});
}

TEST_CASE("a disconnect while connecting withdraws the request and ignores its late answer",
          "[subscriber]") {
  const bool unsubscribe = GENERATE(false, true);
  INFO("withdrawn by Unsubscribe (else Disconnect): " << unsubscribe);
  SubscriberTest t(Ct({{kP, 10}}));
  REQUIRE_OK(t.ds().Connect());
  REQUIRE_OK(unsubscribe ? t.ds().Unsubscribe() : t.ds().Disconnect());
  REQUIRE_FALSE(t.ds().connecting());
  std::vector<Message> sent = t.Sent();
  REQUIRE(sent.size() == 2);
  REQUIRE(std::holds_alternative<ConnectMessage>(sent[0]));
  if (unsubscribe) {
    REQUIRE(std::get<UnsubscribeMessage>(sent[1]) == UnsubscribeMessage{"s"});
  } else {
    REQUIRE(std::get<DisconnectMessage>(sent[1]) == DisconnectMessage{"s"});
  }
  // The broker answered the request before it got the withdrawal.
  t.FromBroker(ConnectedMessage{"s", Ct({{kP, 10}}), 3});
  t.Deliver(kP, DeliveryKind::kEvent, 12, Colored("red"), 10);
  REQUIRE_FALSE(t.ds().connected());
  REQUIRE(t.rec.connected.empty());
  REQUIRE(t.rec.log.empty());
  t.ds().OnTimer(kT0);
  t.ds().OnTimer(kT0 + absl::Seconds(30));
  REQUIRE(t.Sent().empty());  // no ack, no keepalive, no retried request
}

TEST_CASE("a message after one lost in transit makes the subscriber resume from its CT",
          "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}));
  REQUIRE_OK(t.ds().Connect());
  t.Sent();
  t.Connected(Ct({{kP, 10}}));
  t.Deliver(kP, DeliveryKind::kEvent, 12, Colored("red"), 10);
  // Pubend 2's chain is its own: 0 claims nothing about what came before.
  t.Deliver(kQ, DeliveryKind::kSilence, 7, nullptr, 0);
  // The session's message covering (12, 15] never arrived.
  t.Deliver(kP, DeliveryKind::kEvent, 20, Colored("red"), 15);
  REQUIRE(t.rec.log == Strings{"E1:12", "S2:7"});
  REQUIRE(t.ds().resyncs() == 1);
  REQUIRE_FALSE(t.ds().connected());
  std::vector<Message> sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::get<ConnectMessage>(sent[0]).checkpoint == Ct({{kP, 12}, {kQ, 7}}));
  // The rest of the old session is not taken; the new one resumes after the CT.
  t.Deliver(kP, DeliveryKind::kSilence, 30, nullptr, 20);
  REQUIRE(t.rec.log.size() == 2);
  t.Connected(Ct({{kP, 12}, {kQ, 7}}));
  t.Deliver(kP, DeliveryKind::kEvent, 15, Colored("red"), 12);
  t.Deliver(kP, DeliveryKind::kEvent, 20, Colored("red"), 15);
  // A message that covers more than the CT needs (a resend from an earlier session) is fine.
  t.Deliver(kP, DeliveryKind::kSilence, 31, nullptr, 12);
  REQUIRE(t.rec.log == Strings{"E1:12", "S2:7", "E1:15", "E1:20", "S1:31"});
  REQUIRE(t.ds().resyncs() == 1);
  REQUIRE(t.ds().checkpoint() == Ct({{kP, 31}, {kQ, 7}}));
}

TEST_CASE("an unanswered connection request is sent again", "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}));
  REQUIRE_OK(t.ds().Connect());
  REQUIRE(t.Sent().size() == 1);
  t.ds().OnTimer(kT0);  // starts the wait
  t.ds().OnTimer(kT0 + absl::Milliseconds(9999));
  REQUIRE(t.Sent().empty());
  t.ds().OnTimer(kT0 + absl::Seconds(10));
  std::vector<Message> sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::get<ConnectMessage>(sent[0]).checkpoint == Ct({{kP, 10}}));
  t.ds().OnTimer(kT0 + absl::Milliseconds(19999));
  REQUIRE(t.Sent().empty());
  t.ds().OnTimer(kT0 + absl::Seconds(20));
  REQUIRE(t.Sent().size() == 1);
  // Answered: only acks and keepalives from now on.
  t.Connected(Ct({{kP, 10}}));
  t.ds().OnTimer(kT0 + absl::Seconds(21));
  sent = t.Sent();
  REQUIRE(sent.size() == 1);
  REQUIRE(std::holds_alternative<AckMessage>(sent[0]));
  // A session error ends the attempts too: the application decides what comes next.
  REQUIRE_OK(t.ds().Connect());
  t.Sent();
  t.FromBroker(SessionErrorMessage{"s", absl::StatusCode::kAborted, "fenced"});
  t.ds().OnTimer(kT0 + absl::Seconds(40));
  t.ds().OnTimer(kT0 + absl::Seconds(60));
  REQUIRE(t.Sent().empty());
}

TEST_CASE("the subscriber reconnects by itself after the errors that always call for it",
          "[subscriber]") {
  for (absl::StatusCode code : {absl::StatusCode::kFailedPrecondition,
                                absl::StatusCode::kUnavailable, absl::StatusCode::kOutOfRange}) {
    INFO(absl::StatusCodeToString(code));
    SubscriberTest t(Ct({{kP, 10}}));
    t.Connected(Ct({{kP, 10}}));
    t.Deliver(kP, DeliveryKind::kEvent, 12, Colored("red"), 10);
    t.Sent();
    t.FromBroker(SessionErrorMessage{"s", code, "reconnect"});
    REQUIRE(t.rec.errors.size() == 1);  // the application still hears of it
    REQUIRE_FALSE(t.ds().connected());
    t.ds().OnTimer(kT0);  // the wait starts
    t.ds().OnTimer(kT0 + absl::Milliseconds(199));
    REQUIRE(t.Sent().empty());
    t.ds().OnTimer(kT0 + absl::Milliseconds(200));
    std::vector<Message> sent = t.Sent();
    REQUIRE(sent.size() == 1);
    // From the CT of the moment.
    REQUIRE(std::get<ConnectMessage>(sent[0]).checkpoint == Ct({{kP, 12}}));
    REQUIRE(t.ds().reconnects() == 1);
    REQUIRE(t.ds().connecting());
    // Refused again: the wait doubles (a broker that stays stopped or behind is not flooded).
    t.FromBroker(SessionErrorMessage{"s", code, "reconnect"});
    t.ds().OnTimer(kT0 + absl::Seconds(1));
    t.ds().OnTimer(kT0 + absl::Seconds(1) + absl::Milliseconds(399));
    REQUIRE(t.Sent().empty());
    t.ds().OnTimer(kT0 + absl::Seconds(1) + absl::Milliseconds(400));
    REQUIRE(t.Sent().size() == 1);
    REQUIRE(t.ds().reconnects() == 2);
  }
}

TEST_CASE("the subscriber does not reconnect when fenced, refused, or told to stop",
          "[subscriber]") {
  for (absl::StatusCode code : {absl::StatusCode::kAborted, absl::StatusCode::kInvalidArgument,
                                absl::StatusCode::kNotFound, absl::StatusCode::kDataLoss}) {
    INFO(absl::StatusCodeToString(code));
    SubscriberTest t(Ct({{kP, 10}}));
    t.Connected(Ct({{kP, 10}}));
    t.Sent();
    REQUIRE(t.ds().stopped().ok());
    t.FromBroker(SessionErrorMessage{"s", code, "no"});
    for (int i = 0; i < 5; ++i) t.ds().OnTimer(kT0 + absl::Seconds(i));
    REQUIRE(t.Sent().empty());
    REQUIRE(t.ds().reconnects() == 0);
    // It says why it gave up, until the application connects again.
    REQUIRE(t.ds().stopped() == absl::Status(code, "no"));
    REQUIRE_OK(t.ds().Connect());
    REQUIRE(t.ds().stopped().ok());
  }
  // After Disconnect the application wants no connection: a late error changes nothing.
  SubscriberTest t(Ct({{kP, 10}}));
  t.Connected(Ct({{kP, 10}}));
  REQUIRE_OK(t.ds().Disconnect());
  t.Sent();
  t.FromBroker(SessionErrorMessage{"s", absl::StatusCode::kFailedPrecondition, "no session"});
  for (int i = 0; i < 5; ++i) t.ds().OnTimer(kT0 + absl::Seconds(i));
  REQUIRE(t.Sent().empty());
  REQUIRE(t.ds().stopped().ok());
}

TEST_CASE(
    "stopped() stays OK while the subscriber reconnects by itself, not without auto_reconnect",
    "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}));
  t.Connected(Ct({{kP, 10}}));
  t.FromBroker(SessionErrorMessage{"s", absl::StatusCode::kUnavailable, "stopped"});
  REQUIRE(t.ds().stopped().ok());  // it will connect again
  REQUIRE_FALSE(t.ds().connected());
  REQUIRE(t.rec.errors.size() == 1);

  SubscriberTest manual(Ct({{kP, 10}}), /*ack_stored_only=*/false, /*auto_reconnect=*/false);
  manual.Connected(Ct({{kP, 10}}));
  manual.FromBroker(SessionErrorMessage{"s", absl::StatusCode::kUnavailable, "stopped"});
  REQUIRE(manual.ds().stopped() == absl::UnavailableError("stopped"));
}

TEST_CASE("ConnectTo moves the subscriber to another broker with its CT", "[subscriber]") {
  SubscriberTest t(Ct({{kP, 10}}));
  t.Connected(Ct({{kP, 10}}));
  t.Deliver(kP, DeliveryKind::kEvent, 12, Colored("red"), 10);
  t.Sent();
  REQUIRE_CODE(t.ds().ConnectTo(""), absl::StatusCode::kInvalidArgument);
  REQUIRE_OK(t.ds().ConnectTo("other"));
  REQUIRE(t.ds().broker() == "other");
  // The old broker heard a final ack and a disconnect; messages from it are ignored now.
  std::vector<Message> sent = t.Sent();
  REQUIRE(sent.size() == 2);
  REQUIRE(std::get<AckMessage>(sent[0]).checkpoint == Ct({{kP, 12}}));
  REQUIRE(std::holds_alternative<DisconnectMessage>(sent[1]));
  REQUIRE(t.ds().connecting());
  t.Deliver(kP, DeliveryKind::kEvent, 13, Colored("red"), 12);
  REQUIRE(t.rec.log == Strings{"E1:12"});
}

}  // namespace
}  // namespace gryph
