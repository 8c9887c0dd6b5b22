// The session rules (gryph/broker/session.h), one test per clause. The broker-level behaviour they
// add up to is tested in subscriber_hosting_broker_test.cc and shb_flow_control_test.cc.

#include "gryph/broker/session.h"

#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP{1};

DeliveryMessage Msg(DeliveryKind kind, Tick t) { return {"s", kP, kind, t, nullptr, 0}; }

// A session started after tick 10 that was sent a Silence through 20 and an ack through 10 since.
SessionStream QuietAfterOneMessage() {
  SessionStream s;
  s.Start(10);
  DeliveryMessage d = Msg(DeliveryKind::kSilence, 20);
  s.Stamp(d);
  (void)s.OnAck(10);  // acks what it had: the last message's absence is not news yet
  return s;
}

TEST_CASE("session: an epoch at or above the subscription's takes over, a lower one does not",
          "[session]") {
  CHECK(SessionEpochTakesOver(3, 2));
  CHECK(SessionEpochTakesOver(2, 2));
  CHECK_FALSE(SessionEpochTakesOver(1, 2));
}

TEST_CASE("session: each message names the previous one's tick, the first names the start",
          "[session]") {
  SessionStream s;
  s.Start(10);
  REQUIRE(s.sent_through() == 10);
  DeliveryMessage a = Msg(DeliveryKind::kEvent, 15);
  s.Stamp(a);
  DeliveryMessage b = Msg(DeliveryKind::kSilence, 30);
  s.Stamp(b);
  CHECK(a.previous == 10);
  CHECK(b.previous == 15);
  CHECK(s.sent_through() == 30);
  CHECK(s.AlreadySent(30));
  CHECK_FALSE(s.AlreadySent(31));
  // The last message is what a resend sends, with its own previous.
  const DeliveryMessage last = s.LastMessage("s", kP);
  CHECK(last.kind == DeliveryKind::kSilence);
  CHECK(last.tick == 30);
  CHECK(last.previous == 15);
}

TEST_CASE("session: a quiet session's ack that lacks its last message gets it again", "[session]") {
  SessionStream s = QuietAfterOneMessage();
  CHECK(s.ShouldResend(10));
  CHECK(s.OnAck(10));
}

TEST_CASE("session resend, clause 1: an ack through the last message gets nothing", "[session]") {
  SessionStream s = QuietAfterOneMessage();
  CHECK_FALSE(s.AckLacksLastMessage(20));
  CHECK_FALSE(s.ShouldResend(20));
  CHECK(s.AckLacksLastMessage(19));
}

TEST_CASE("session resend, clause 2: only a message of this session is resent", "[session]") {
  // A session that has sent nothing: its last "message" is its start, which an earlier session
  // sent, if anyone did.
  SessionStream s;
  s.Start(20);
  (void)s.OnAck(20);
  CHECK_FALSE(s.LastMessageIsThisSessions());
  CHECK_FALSE(s.ShouldResend(15));  // an ack below the start (a subscriber rewound) gets nothing
  CHECK(QuietAfterOneMessage().LastMessageIsThisSessions());
}

TEST_CASE("session resend, clause 3: nothing is resent while messages are on their way",
          "[session]") {
  SessionStream s = QuietAfterOneMessage();
  DeliveryMessage d = Msg(DeliveryKind::kSilence, 25);
  s.Stamp(d);  // sent since the last ack: the ack below may simply predate it
  CHECK_FALSE(s.NothingSentSinceLastAck());
  CHECK_FALSE(s.ShouldResend(10));
  CHECK_FALSE(s.OnAck(10));
  // After that ack the session is quiet again, and the same ack now proves the loss.
  CHECK(s.NothingSentSinceLastAck());
  CHECK(s.OnAck(10));
}

TEST_CASE("session resend, clause 4: an ack that moved is not taken for a loss", "[session]") {
  SessionStream s;
  s.Start(10);
  DeliveryMessage d = Msg(DeliveryKind::kEvent, 20);
  s.Stamp(d);
  (void)s.OnAck(10);
  DeliveryMessage e = Msg(DeliveryKind::kEvent, 40);
  s.Stamp(e);
  (void)s.OnAck(10);
  // The subscriber, still working through what is on its way, acks 20: it moved.
  CHECK_FALSE(s.AckHasNotMoved(20));
  CHECK_FALSE(s.ShouldResend(20));
  CHECK_FALSE(s.OnAck(20));
  // Stuck at 20 with nothing sent since: now the last message (40) was lost.
  CHECK(s.AckHasNotMoved(20));
  CHECK(s.OnAck(20));
}

TEST_CASE("session: each send an ack completes is one deliver-to-ack sample", "[session]") {
  SessionStream s;
  s.Start(0);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  s.NoteEventsSent(10, 3, t0);
  s.NoteEventsSent(20, 2, t0 + absl::Milliseconds(5));
  s.NoteEventsSent(30, 1);  // no time: no sample
  LatencyHistogram h;
  s.OnAck(15, t0 + absl::Milliseconds(8), &h);  // completes the first send only
  REQUIRE(h.count() == 1);
  REQUIRE(h.sum() == absl::Milliseconds(8));
  s.OnAck(30, t0 + absl::Milliseconds(9), &h);
  REQUIRE(h.count() == 2);
  REQUIRE(h.sum() == absl::Milliseconds(12));
  REQUIRE(s.unacked() == 0);
}

TEST_CASE("session flow control: Events count until an ack covers their tick", "[session]") {
  SessionStream s;
  s.Start(0);
  s.NoteEventsSent(10, 3);  // three Events, the last at tick 10
  s.NoteEventsSent(20, 2);
  s.NoteEventsSent(30, 0);  // no Events: nothing recorded
  CHECK(s.unacked() == 5);
  CHECK(s.OverFlowBound(4));
  CHECK_FALSE(s.OverFlowBound(5));
  CHECK_FALSE(s.MaySendMore(5));
  CHECK(s.MaySendMore(6));
  (void)s.OnAck(15);  // covers the first send only
  CHECK(s.unacked() == 2);
  (void)s.OnAck(20);
  CHECK(s.unacked() == 0);
}

TEST_CASE("session: a new session starts its books afresh", "[session]") {
  SessionStream s;
  s.Start(0);
  s.NoteEventsSent(10, 3);
  DeliveryMessage d = Msg(DeliveryKind::kEvent, 10);
  s.Stamp(d);
  s.End();
  CHECK(s.unacked() == 0);
  s.Start(5);
  CHECK(s.sent_through() == 5);
  CHECK(s.NothingSentSinceLastAck());
  CHECK_FALSE(s.LastMessageIsThisSessions());
}

TEST_CASE("session flow control: many sends acknowledged a few at a time keep their counts",
          "[session]") {
  // Enough sends that the acknowledged ones are dropped while others are still outstanding.
  SessionStream s;
  s.Start(0);
  uint64_t sent = 0;
  Tick next = 1;
  Tick acked = 0;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 50; ++i, ++next) {
      s.NoteEventsSent(next, 2);
      sent += 2;
    }
    acked += 37;  // behind what was sent: marks stay behind the acknowledged ones
    (void)s.OnAck(acked);
    REQUIRE(s.unacked() == sent - 2 * acked);
  }
  (void)s.OnAck(next - 1);
  REQUIRE(s.unacked() == 0);
  s.NoteEventsSent(next, 1);
  REQUIRE(s.unacked() == 1);
}

}  // namespace
}  // namespace gryph
