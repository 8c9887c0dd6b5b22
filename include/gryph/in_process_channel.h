// InProcessNetwork: channels between nodes that live in one process.
//
// Each Connect(name) returns an endpoint. Send queues the message (no encoding: events are
// shared, not copied) on the receiver's FIFO inbox; Deliver() hands queued messages to the
// receivers. Links are reliable and FIFO; nothing is delivered until Deliver() runs, so a node
// never re-enters itself through Send.
//
// Thread-safety: thread-safe. Send may be called from any thread; Deliver() from one thread at a
// time (the one that runs the nodes). An endpoint must not outlive its network.

#ifndef GRYPH_IN_PROCESS_CHANNEL_H_
#define GRYPH_IN_PROCESS_CHANNEL_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gryph/channel.h"

namespace gryph {

class InProcessNetwork {
 public:
  InProcessNetwork() = default;
  InProcessNetwork(const InProcessNetwork&) = delete;
  InProcessNetwork& operator=(const InProcessNetwork&) = delete;

  // A new endpoint named `name`. Fails with AlreadyExists when an endpoint of that name is open.
  // Destroying the endpoint disconnects it and drops its undelivered messages.
  absl::StatusOr<std::unique_ptr<Channel>> Connect(absl::string_view name);

  // Delivers up to `max_messages` queued messages in the order they were sent (across all
  // links); returns how many were delivered. Messages sent by receivers during the call are
  // queued behind and may be delivered by the same call.
  size_t Deliver(size_t max_messages = SIZE_MAX);

  // Delivers until no message is queued; returns how many were delivered.
  size_t DeliverAll() { return Deliver(SIZE_MAX); }

  // Number of queued messages to connected endpoints.
  size_t pending() const;

 private:
  class Endpoint;
  struct Envelope {
    std::string from;
    std::string to;
    uint64_t to_id;  // the connection it was sent to; a later one of the same name drops it
    Message message;
  };
  struct Peer {
    uint64_t id;
    std::shared_ptr<const Channel::Receiver> receiver;  // null until set
    size_t queued = 0;
  };

  absl::Status Enqueue(absl::string_view from, absl::string_view to, Message message);
  void SetReceiver(const std::string& name, Channel::Receiver receiver);
  void Disconnect(const std::string& name);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Peer> receivers_ ABSL_GUARDED_BY(mu_);  // connected endpoints
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  size_t live_ ABSL_GUARDED_BY(mu_) = 0;  // queued messages whose endpoint is still connected
  std::deque<Envelope> queue_ ABSL_GUARDED_BY(mu_);
  // Serializes Deliver() so that a receiver is never called concurrently with itself.
  absl::Mutex deliver_mu_;
};

}  // namespace gryph

#endif  // GRYPH_IN_PROCESS_CHANNEL_H_
