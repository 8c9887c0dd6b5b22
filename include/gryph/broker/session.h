// Session: the rules of a session (docs/design.md, "Sessions"), one place for each.
//
// A session is one connection of a durable subscription to its subscriber hosting broker. It has
// an epoch, which decides who owns the subscription (SessionEpochTakesOver), and per pubend a
// SessionStream: the chain of messages it was sent from that pubend, which lets the subscriber
// find a lost one, the resend of a lost last message, and flow control. The streams that build a
// session's messages (ConStream, CatchupStream) stamp each through its SessionStream, so what
// they emit is finished; the broker sends it. Each rule is a named predicate with a test of its
// own (tests/session_test.cc).
//
// Thread-safety: thread-compatible (the broker's thread).

#ifndef GRYPH_BROKER_SESSION_H_
#define GRYPH_BROKER_SESSION_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "gryph/latency_histogram.h"
#include "gryph/message.h"
#include "gryph/tick.h"

namespace gryph {

// Whether a Connect with epoch `connecting` takes a subscription whose epoch is `current` (and
// fences the session it has): an epoch at or above the subscription's does; a lower one is a
// stale connection, refused.
inline bool SessionEpochTakesOver(uint64_t connecting, uint64_t current) {
  return connecting >= current;
}

// One session's messages from one pubend.
class SessionStream {
 public:
  // A session that starts after `start` (its start CT at this pubend): nothing sent, nothing
  // acknowledged beyond it.
  void Start(Tick start);
  // The session ended: flow control starts afresh with the next one.
  void End();

  // ---- The previous chain --------------------------------------------------------------------
  // Each message names the tick of the session's previous message from the pubend (its start
  // for the first), so a subscriber whose CT is below it knows it missed one. Gives `d` its
  // `previous` and makes it the session's last message. REQUIRES: d.tick > sent_through().
  void Stamp(DeliveryMessage& d);
  // The tick of the session's last message (its start before any).
  Tick sent_through() const { return sent_through_; }
  // Whether a message through `t` would tell the session nothing new: it has been sent as far.
  bool AlreadySent(Tick t) const { return t <= sent_through_; }

  // ---- The resend of a lost last message -----------------------------------------------------
  // A lost message is found by the next one's `previous`, but a quiet or flow-controlled session
  // may never get a next one. So an ack that lacks the last message gets it again, when all of
  // these hold (each its own predicate below):
  //   AckLacksLastMessage(t)   the ack is below the last message;
  //   LastMessageIsThisSessions()  that message belongs to this session (above its start), so
  //                            it is this session's to resend;
  //   NothingSentSinceLastAck()  nothing was sent since the previous ack (an ack racing new
  //                            messages proves nothing);
  //   AckHasNotMoved(t)        the ack is not above the session's previous acks: a subscriber
  //                            whose CT still moves is working through what is on its way.
  bool AckLacksLastMessage(Tick t) const { return t < sent_through_; }
  bool LastMessageIsThisSessions() const { return sent_through_ > start_; }
  bool NothingSentSinceLastAck() const { return !sent_since_ack_; }
  bool AckHasNotMoved(Tick t) const { return t <= acked_; }
  bool ShouldResend(Tick t) const {
    return AckLacksLastMessage(t) && LastMessageIsThisSessions() && NothingSentSinceLastAck() &&
           AckHasNotMoved(t);
  }
  // The last message again, for `subscription` at `pubend`, without its event (the broker
  // finds it). REQUIRES: LastMessageIsThisSessions().
  DeliveryMessage LastMessage(const std::string& subscription, PubendId pubend) const;

  // ---- Acks and flow control -----------------------------------------------------------------
  // Records `n` Event messages sent at `now`, the last at tick `last`. REQUIRES: ticks increase.
  void NoteEventsSent(Tick last, uint64_t n, absl::Time now = absl::InfinitePast());
  // An ack through `t` arriving at `now`: the Events at or below it are acknowledged, and with
  // `deliver_to_ack` each send it completes adds one sample, from the send to `now` (sends
  // recorded without a time add none). Returns ShouldResend(t) as it stood before the ack (the
  // caller resends), then takes the ack as the session's latest.
  bool OnAck(Tick t, absl::Time now = absl::InfinitePast(),
             LatencyHistogram* deliver_to_ack = nullptr);
  // Event messages sent and not acknowledged.
  uint64_t unacked() const { return sent_ - acked_events_; }
  // A constream member past the bound is demoted to catchup (its session goes on, fed from the
  // PFS); a catchup sends only while under it. The bound is max_unacked_events.
  bool OverFlowBound(uint64_t max_unacked) const { return unacked() > max_unacked; }
  bool MaySendMore(uint64_t max_unacked) const { return unacked() < max_unacked; }

 private:
  Tick start_ = 0;
  Tick sent_through_ = 0;
  DeliveryKind last_kind_ = DeliveryKind::kSilence;
  Tick last_previous_ = 0;
  bool sent_since_ack_ = false;
  // The session's highest ack (its start before any). Not released(s,p): a session may start
  // below what an earlier one acknowledged, and its acks climb towards it.
  Tick acked_ = 0;
  // Flow control: Events sent and acknowledged, and per send the tick of its last Event with the
  // running count, until an ack covers it.
  uint64_t sent_ = 0;
  uint64_t acked_events_ = 0;
  struct SentMark {
    Tick last;
    uint64_t sent;  // the running count through this send
    absl::Time at;
  };
  // A FIFO: the marks from sent_marks_head_ on are live. Not a std::deque, which allocates
  // about 600 bytes when constructed: a broker holds one SessionStream per subscription and
  // pubend, most of them never used until their subscriber connects.
  std::vector<SentMark> sent_marks_;
  size_t sent_marks_head_ = 0;
};

}  // namespace gryph

#endif  // GRYPH_BROKER_SESSION_H_
