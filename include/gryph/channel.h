// Channel: the pluggable transport between gryph's nodes (docs/design.md, Architecture, rule 2).
//
// A Channel is one node's endpoint: it sends messages to peers named by strings and hands the
// messages that arrive for this node to a receiver. gryph never assumes a reliable link: a
// message may be lost, duplicated, delayed or reordered with respect to other links, and the
// protocol (nacks, knowledge merge, release) repairs it. What a Channel must provide is that
// messages on one link (one sender, one receiver) that do arrive are not corrupted; a network
// adapter checks this by decoding (DecodeMessage rejects malformed frames). The link from a
// subscriber hosting broker to a subscriber must also keep order (a delivery names the tick of
// the one before it, so a lost one costs the subscriber a reconnection; a reordered one would
// cost one too).
//
// Applications wire gryph to their own transport by implementing this interface; gryph ships
// InProcessNetwork (in_process_channel.h) and the deterministic simulator's channel.
//
// Thread-safety: implementations say which threads may call Send; the receiver is called on the
// thread that drives delivery, one message at a time, never reentrantly from Send.

#ifndef GRYPH_CHANNEL_H_
#define GRYPH_CHANNEL_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gryph/message.h"

namespace gryph {

class Channel {
 public:
  // Called with the sender's name and the message.
  using Receiver = std::function<void(absl::string_view from, Message message)>;

  virtual ~Channel() = default;

  // This endpoint's name, as peers address it.
  virtual const std::string& name() const = 0;

  // Queues `message` for `peer`. OK means accepted, not delivered. Fails with Unavailable when
  // the peer is unknown or unreachable now; the caller treats that like a lost message.
  virtual absl::Status Send(absl::string_view peer, Message message) = 0;

  // One message of a SendMany.
  struct Outgoing {
    absl::string_view peer;  // must stay valid for the call
    Message message;
    bool accepted = false;  // set by SendMany: what Send would have returned OK for
  };
  // Queues each message as Send would, in order, marks each accepted or not, and returns how
  // many were accepted (the others are lost, as with Send). The default sends them one by one; a
  // transport overrides it to pay its per-call costs (a lock, a system call) once per batch. The
  // messages are moved from.
  virtual size_t SendMany(absl::Span<Outgoing> messages);

  // Sets the function that receives this endpoint's messages, replacing any earlier one. Messages
  // that arrive while no receiver is set are dropped.
  virtual void SetReceiver(Receiver receiver) = 0;
};

}  // namespace gryph

#endif  // GRYPH_CHANNEL_H_
