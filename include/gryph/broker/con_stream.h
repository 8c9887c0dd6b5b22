// ConStream: the consolidated stream of one pubend at a subscriber hosting broker (paper §4.1).
//
// The constream delivers, in tick order, to every connected subscriber that is not catching up,
// and to the PFS. It keeps its position — everything at or below it has been sent to all
// non-catchup subscribers and appended to the PFS — and moves it to the doubt horizon of the
// broker's knowledge stream: the highest tick below which nothing is Q. It advances through S as
// well as D, so the position keeps up with the pubend's heartbeats.
//
// One step is: Next() proposes the D ticks in (position, through]; the broker matches each
// against all durable subscriptions, appends one PFS record per tick with the full matching set
// and the new position to ONE storage transaction, calls Advanced(through) and sends Event
// messages to the members (connected, non-catchup) that matched. The paper's latestDelivered(p)
// is the position once that transaction has committed; the broker tracks the commit (delivery to
// a subscriber is complete when the message is sent, delivery to the PFS when it is durable,
// paper §4.1). A member that matched nothing for a while gets a Silence(position) so that its
// CT keeps moving.
//
// The constream never delivers a Gap: a tick can only become L at the pubend once every SHB's
// latestDelivered has passed it.
//
// Thread-safety: thread-compatible.

#ifndef GRYPH_BROKER_CON_STREAM_H_
#define GRYPH_BROKER_CON_STREAM_H_

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "gryph/broker/knowledge_stream.h"
#include "gryph/message.h"
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
  // The batch through `through` was sent and appended to the PFS.
  // REQUIRES: through >= latest_delivered().
  void Advanced(Tick through) { latest_delivered_ = through; }

  // Membership: connected subscribers that are not catching up. A member whose CT is `start`
  // gets no Silence at or below it.
  void Join(const std::string& subscription, absl::Time now, Tick start = 0);
  void Leave(const std::string& subscription);
  bool IsMember(const std::string& subscription) const { return members_.contains(subscription); }
  size_t member_count() const { return members_.size(); }

  // Records that `subscription` was sent a message at `tick`.
  void NoteDelivered(const std::string& subscription, Tick tick, absl::Time now);
  // Silence(latestDelivered) for members that got no message for `interval`.
  std::vector<DeliveryMessage> Silences(absl::Time now, absl::Duration interval);

  PubendId pubend() const { return pubend_; }
  Tick latest_delivered() const { return latest_delivered_; }

 private:
  struct Member {
    absl::Time last_message;
    Tick last_tick = 0;
  };
  const PubendId pubend_;
  Tick latest_delivered_;
  // Hashed: NoteDelivered runs for every member a round delivers to. Silences walks them in name
  // order, so that runs are reproducible.
  absl::flat_hash_map<std::string, Member> members_;
};

}  // namespace gryph

#endif  // GRYPH_BROKER_CON_STREAM_H_
