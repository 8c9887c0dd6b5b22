// ConStream: the consolidated stream of one pubend at a subscriber hosting broker (paper §4.1).
//
// The constream delivers, in tick order, to every connected subscriber that is not catching up,
// and to the PFS. It keeps its position — everything at or below it has been sent to all
// non-catchup subscribers and appended to the PFS — and moves it to the doubt horizon of the
// broker's knowledge stream: the highest tick below which nothing is Q. It advances through S as
// well as D, so the position keeps up with the pubend's heartbeats.
//
// One round is: Next() proposes the D ticks in (position, through]; Deliver() matches each against
// all durable subscriptions (a Matcher), appends one PFS record per tick with the full matching
// set to the broker's storage transaction, builds an Event for each member that matched —
// finished: stamped through the member's session (SessionStream) — and moves the position to
// `through`. The broker adds its own rows (the new position) to the same transaction, sends the
// messages and commits. The paper's latestDelivered(p) is the position once that transaction has
// committed; the broker tracks the commit (delivery to a subscriber is complete when the message
// is sent, delivery to the PFS when it is durable, paper §4.1). A member that matched nothing for
// a while gets a Silence(position) so that its CT keeps moving.
//
// The constream delivers a Gap only for an L span above its position: an event upstream could
// not serve (its log row was damaged). Early release never reaches past what this stream
// delivered: a tick becomes L at the pubend only once every SHB's latestDelivered has passed it.
//
// Thread-safety: thread-compatible.

#ifndef GRYPH_BROKER_CON_STREAM_H_
#define GRYPH_BROKER_CON_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gryph/broker/knowledge_stream.h"
#include "gryph/broker/matcher.h"
#include "gryph/broker/pfs.h"
#include "gryph/broker/session.h"
#include "gryph/channel.h"
#include "gryph/message.h"
#include "gryph/storage.h"
#include "gryph/tick.h"

namespace gryph {

class ConStream {
 public:
  // The next step: the D ticks and L spans in (latest_delivered(), through], in order. An L span
  // there is an event upstream could not serve (its log row was damaged; early release never
  // reaches past what this stream delivered): every subscriber may have matched it and gets a
  // Gap.
  struct Batch {
    Tick through = 0;
    std::vector<KnowledgeSpan> data;
  };

  ConStream(PubendId pubend, Tick latest_delivered)
      : pubend_(pubend), latest_delivered_(latest_delivered) {}

  // What can be delivered now: up to the doubt horizon and not beyond `limit`, stopping after
  // `max_data` D ticks and L spans. through == latest_delivered() when nothing can.
  Batch Next(const KnowledgeStream& knowledge, size_t max_data,
             Tick limit = std::numeric_limits<Tick>::max()) const;
  // What a round delivered: the messages to send, finished and in order, and what they did.
  struct Round {
    std::vector<Channel::Outgoing> messages;  // peers valid until the next Join or Leave
    // Parallel to `messages`: whose each is, for after sending (which moves the messages from).
    // Valid until the next Join or Leave.
    std::vector<absl::string_view> subscriptions;
    // Members past the flow-control bound after the round (SessionStream::OverFlowBound), by
    // name: the broker demotes them to catchup.
    std::vector<std::string> over_bound;
    uint64_t gaps = 0;         // of the messages, Gaps (for an L span)
    uint64_t pfs_records = 0;  // records appended to the batch
  };
  // Delivers `batch` (from Next): matches each event against `matcher`, appends the PFS record of
  // every tick that matched somebody to `wb`, and an Event for each member that matched to
  // round->messages; an L span gets a Gap through its end for every member and a PFS record
  // naming every subscriber of `pfs` (so that catching-up ones learn the same). Each message is
  // stamped through its member's session; each member's flow control counts them
  // (`max_unacked` decides round->over_bound). Then the position is batch.through. Appends to
  // *round (the caller clears it). Fails only with the PFS's error; the round and the sessions'
  // books are then unusable, and the broker stops.
  // REQUIRES: batch is this stream's Next() at its position.
  absl::Status Deliver(const Batch& batch, const Matcher& matcher, PFS& pfs, WriteBatch* wb,
                       absl::Time now, uint64_t max_unacked, Round* round);

  // Membership: connected subscribers that are not catching up, each with its session's stream
  // at this pubend and the peer its messages go to. `session` must stay valid while the member
  // is. A member whose CT is `start` gets no Silence at or below it; a member already sent a
  // tick (SessionStream::AlreadySent) gets nothing more there. Joining again replaces the entry.
  void Join(SubscriberId id, const std::string& subscription, const std::string& peer,
            SessionStream* session, absl::Time now, Tick start = 0);
  void Leave(const std::string& subscription);
  bool IsMember(const std::string& subscription) const { return ids_.contains(subscription); }
  size_t member_count() const { return members_.size(); }

  // Silence(position) for the members that got no message for `interval`, finished (stamped),
  // in name order. Peers valid until the next Join or Leave.
  std::vector<Channel::Outgoing> Silences(absl::Time now, absl::Duration interval);

  PubendId pubend() const { return pubend_; }
  Tick latest_delivered() const { return latest_delivered_; }

 private:
  struct Member {
    std::string subscription;
    std::string peer;
    SessionStream* session;
    absl::Time last_message;
    Tick last_tick = 0;
    // Scratch of a round: its messages to the member and the tick of the last.
    uint64_t round_messages = 0;
    Tick round_last = 0;
  };
  // A message of the round to `m`, stamped.
  void Emit(Member& m, DeliveryKind kind, Tick t, EventRef event, Round* round);

  const PubendId pubend_;
  Tick latest_delivered_;
  // By subscriber id, for the matcher's answers; nodes, so that the messages' peers stay put.
  absl::node_hash_map<uint64_t, Member> members_;
  absl::flat_hash_map<std::string, uint64_t> ids_;  // subscription name -> id
  // Scratch of a round.
  std::vector<SubscriberId> matched_;
  std::vector<Member*> touched_;
};

}  // namespace gryph

#endif  // GRYPH_BROKER_CON_STREAM_H_
