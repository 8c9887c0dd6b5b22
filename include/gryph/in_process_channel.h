// InProcessNetwork: channels between nodes that live in one process.
//
// Each Connect(name) returns an endpoint. Send queues the message (no encoding: events are
// shared, not copied) on the receiver's inbox; Deliver() hands queued messages to the receivers.
// Links are reliable and FIFO; nothing is delivered until Deliver() runs, so a node never
// re-enters itself through Send.
//
// Lanes: every endpoint belongs to one lane, and Deliver(max, lane) hands out only the messages
// addressed to endpoints of that lane, in the order they were sent. A lane is driven by one
// thread at a time, so nodes on different lanes run on different threads (the brokers on one,
// their subscribers on another). With one lane (the default) every message goes through one
// Deliver in global send order.
//
// Cost: Deliver takes a lane's whole queue under one lock and resolves its receivers a chunk at a
// time, and SendMany queues a batch a chunk at a time, so a message costs no lock of its own and
// no thread holds the network's lock for long.
//
// Thread-safety: thread-safe. Send may be called from any thread; Deliver() for one lane from
// one thread at a time. An endpoint must not outlive its network.

#ifndef GRYPH_IN_PROCESS_CHANNEL_H_
#define GRYPH_IN_PROCESS_CHANNEL_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gryph/channel.h"

namespace gryph {

class InProcessNetwork {
 public:
  // A network whose endpoints are spread over `lanes` lanes. REQUIRES: lanes > 0.
  explicit InProcessNetwork(size_t lanes = 1);
  InProcessNetwork(const InProcessNetwork&) = delete;
  InProcessNetwork& operator=(const InProcessNetwork&) = delete;
  ~InProcessNetwork();

  // A new endpoint named `name` on `lane`. Fails with AlreadyExists when an endpoint of that name
  // is open, InvalidArgument for a lane out of range. Destroying the endpoint disconnects it and
  // drops its undelivered messages.
  absl::StatusOr<std::unique_ptr<Channel>> Connect(absl::string_view name, size_t lane = 0);

  // Delivers up to `max_messages` queued messages for `lane`'s endpoints in the order they were
  // sent; returns how many were delivered. Messages sent by receivers during the call are queued
  // behind and may be delivered by the same call. REQUIRES: lane < lanes.
  size_t Deliver(size_t max_messages = SIZE_MAX, size_t lane = 0);

  // Delivers until no message is queued for `lane`; returns how many were delivered.
  size_t DeliverAll(size_t lane = 0) { return Deliver(SIZE_MAX, lane); }

  // Blocks until a message is queued for `lane` (or one is still to be handed out by Deliver), or
  // until `timeout` passed; returns whether there is one. For a lane's thread with nothing to
  // do: it sleeps instead of spinning. REQUIRES: lane < lanes.
  bool Wait(size_t lane, absl::Duration timeout);

  // Number of undelivered messages to connected endpoints, over all lanes.
  size_t pending() const;

  // Sets the function called whenever a message is queued for `lane` while its queue is empty
  // (null: none), for a thread that sleeps elsewhere than in Wait (Runtime's InProcessLane). It
  // runs on the sending thread after the send has queued its messages, outside the network's
  // lock but under the lane's hook lock: it must only signal (write an eventfd, notify a
  // condition), never call the network. Once SetArrivalHook returns, the old hook is not running
  // and will not run again. REQUIRES: lane < lanes.
  void SetArrivalHook(size_t lane, std::function<void()> hook);

 private:
  class Endpoint;
  struct Envelope {
    Envelope(absl::string_view from_name, uint64_t to, Message&& m)
        : from(from_name), to_id(to), message(std::move(m)) {}
    std::string from;
    uint64_t to_id;  // the connection it was sent to; a later one of the same name drops it
    Message message;
  };
  using SharedReceiver = std::shared_ptr<const Channel::Receiver>;
  struct Peer {
    uint64_t id;
    size_t lane;
    SharedReceiver receiver;  // null until set
    size_t queued = 0;        // in its lane's queue
  };
  // The delivering side of a lane: a batch taken from the queue, with its receivers resolved.
  struct Outbox {
    absl::Mutex mu;  // serializes Deliver() on the lane: a receiver never runs concurrently
    std::vector<Envelope> batch ABSL_GUARDED_BY(mu);
    std::vector<SharedReceiver> receivers ABSL_GUARDED_BY(mu);  // null: drop
    size_t next ABSL_GUARDED_BY(mu) = 0;
    size_t resolved ABSL_GUARDED_BY(mu) = 0;      // receivers[next, resolved) are looked up
    uint64_t generation ABSL_GUARDED_BY(mu) = 0;  // of the topology the receivers come from
  };

  // Per lane, what a sender or a waiter reads without the network's lock.
  struct LaneState {
    // Messages in the lane's queue (a copy of its size, kept under mu_): a zero Wait reads it
    // instead of taking mu_, which a sender may hold for a long batch.
    std::atomic<size_t> queued{0};
    absl::Mutex hook_mu;  // held (shared) while the hook runs, so that a replaced one has ended
    std::function<void()> hook ABSL_GUARDED_BY(hook_mu);
  };

  // Queues `message`; returns the lane whose queue it made non-empty (its hook is to run once
  // the caller has released mu_: RunArrivalHooks), or kNoLane.
  absl::StatusOr<size_t> EnqueueLocked(absl::string_view from, absl::string_view to,
                                       Message message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr size_t kNoLane = SIZE_MAX;
  void RunArrivalHook(size_t lane) ABSL_LOCKS_EXCLUDED(mu_);
  size_t SendMany(absl::string_view from, absl::Span<Channel::Outgoing> messages);
  void SetReceiver(const std::string& name, Channel::Receiver receiver);
  void Disconnect(const std::string& name);
  // Looks up the receivers of outbox.batch[outbox.next, end); with `take`, those envelopes are
  // looked up for the first time and leave their queue's counts (resolved moves to `end`).
  void ResolveLocked(Outbox& outbox, size_t end, bool take)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, outbox.mu);
  // How many messages a SendMany queues, and a Deliver looks up, per hold of mu_.
  static constexpr size_t kSendChunk = 256;
  static constexpr size_t kResolveChunk = 256;

  mutable absl::Mutex mu_;
  // Connected endpoints by name, and by connection id (queued messages name their connection).
  // Node-based: by_id_ points into it.
  absl::node_hash_map<std::string, Peer> receivers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Peer*> by_id_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  size_t live_ ABSL_GUARDED_BY(mu_) = 0;  // queued messages whose endpoint is still connected
  std::vector<std::vector<Envelope>> queues_ ABSL_GUARDED_BY(mu_);  // per lane
  // Per lane: signalled when its queue becomes non-empty. (A CondVar rather than an
  // absl::Condition, so that only the waiting thread reads the guarded state.)
  std::vector<std::unique_ptr<absl::CondVar>> arrived_;  // the vector never changes
  std::vector<std::unique_ptr<LaneState>> lanes_;        // the vector never changes
  // Bumped (under mu_) whenever an endpoint goes or changes its receiver: outboxes re-resolve.
  std::atomic<uint64_t> generation_{0};
  // Taken into an outbox, to a live receiver, not yet delivered.
  std::atomic<size_t> in_hand_{0};
  std::vector<std::unique_ptr<Outbox>> outboxes_;  // per lane; the vector never changes
};

}  // namespace gryph

#endif  // GRYPH_IN_PROCESS_CHANNEL_H_
