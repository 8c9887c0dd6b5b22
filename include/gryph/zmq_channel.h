// ZmqChannel: a Channel over ZeroMQ (libzmq), for nodes in separate processes and on separate
// hosts. A separate library, gryph::zmq: the core keeps no transport dependency.
//
// Sockets. Each endpoint has a name, which is its ZeroMQ routing id, and up to two kinds of
// socket:
//   - one ROUTER bound to `listen`, for the peers that connect to this node (downstream nodes
//     and subscribers). ROUTER is the pattern for a server that answers many named peers: an
//     incoming connection announces its routing id, so a message from "shb-2" arrives with that
//     name and a reply is routed back by it. ROUTER_MANDATORY makes a send to a peer that is not
//     connected fail (Unavailable, the protocol's loss) instead of vanishing, and (plain TCP
//     only, see Security) ROUTER_HANDOVER lets a restarted peer take its name over from the
//     connection its previous process left behind;
//   - one DEALER per peer this node dials (`peers`: its upstream brokers, a subscriber's
//     broker). A DEALER queues while it connects and reconnects by itself after the peer
//     restarts (reconnect_interval, backing off to reconnect_interval_max).
// Messages keep their gryph encoding (message.h), each in a frame of its own followed by the
// CRC-32C of its bytes (docs/format.md, "ZeroMQ frames"); SendMany sends consecutive messages for
// one peer as one multipart message, so a batch costs one system call.
//
// Loss is the protocol's to repair (nacks, resends, reconnections), so queues are bounded:
// a send to a peer whose queue is full (send_queue_messages) is dropped and counted, as is one
// to a peer that is not connected. Heartbeats (heartbeat_interval) find a peer that vanished
// without closing its connection.
//
// Hostile peers and damaged links. Every frame is checked and decoded on its own: one whose
// checksum does not match (a bit flipped, bytes cut or added on the way: plain TCP's own checksum
// misses some, and a buggy sender or middlebox none), a malformed, truncated or oversized one
// (max_message_bytes; ZeroMQ drops a peer that sends a larger frame) is dropped and counted, and
// reported through `log` at most once per peer per log_interval; the protocol repairs the loss.
// The frames after it are still delivered: a message is never half applied. The checksum
// guards against damage, not against a peer that means harm: that is CURVE's part.
//
// Security. With `curve`, every connection is encrypted and authenticated with CURVE
// (CurveZMQ, libzmq's, on libsodium). The listening socket accepts only clients whose public key
// is in allowed_clients (checked by a ZAP handler this channel runs); an allowed client may be
// bound to a name, and a message from that key under another name is dropped (counted as
// impersonations), so that one subscriber's key cannot ack, nack or release as a broker. A name
// this endpoint dials is never accepted on the listening socket. Under CURVE the first
// connection under a name keeps it while it lives (no handover), so an allowed key cannot take a
// connected peer's name and the messages sent to it; bind every key to its name, or an allowed
// key may still claim the name of a peer that is not connected. Dialed peers are authenticated
// by their server key. Without `curve` the channel is plain TCP: anyone
// who reaches the port can connect under any name and send anything gryph accepts — publish
// knowledge, acks, releases that let a pubend discard its log. Use it only on a network whose
// every host is trusted (README, "Running over a network").
//
// Driving it: the channel is an EventSource; a Runtime (runtime.h) polls its sockets and calls
// Dispatch, which hands arrived messages to the receiver on the loop thread. ZeroMQ sockets
// are not thread-safe, so Send from another thread (a broker's commit thread) queues the message
// and wakes the loop, which sends it; Send on the loop thread sends at once.
//
// Thread-safety: Send and SendMany from any thread; everything else on the thread that drives
// the channel (the loop thread, or the creating thread until a runtime attaches it).

#ifndef GRYPH_ZMQ_CHANNEL_H_
#define GRYPH_ZMQ_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gryph/channel.h"
#include "gryph/runtime.h"

namespace gryph {

// A CURVE key pair, each key in Z85 (40 characters).
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};
// A fresh key pair (libsodium's randomness). Unimplemented when libzmq was built without CURVE.
absl::StatusOr<CurveKeyPair> GenerateCurveKeyPair();
// The public key of a Z85 secret key. InvalidArgument for a malformed key.
absl::StatusOr<std::string> CurvePublicKey(const std::string& secret_key);

struct ZmqChannelOptions {
  // This endpoint's name, as peers address it: 1 to 255 bytes, not starting with a NUL.
  std::string name;
  // Where the ROUTER listens ("tcp://127.0.0.1:7001", "tcp://*:7001", "ipc:///run/gryph/phb");
  // empty: none (a subscriber that only dials its broker).
  std::string listen;
  struct Peer {
    std::string name;        // the peer's endpoint name
    std::string endpoint;    // where it listens ("tcp://10.0.0.2:7001")
    std::string server_key;  // with curve: its public key (Z85)
  };
  // The peers this endpoint dials. Messages to any other name go out of the listening socket.
  std::vector<Peer> peers;

  // CURVE (see the file comment). Z85 keys.
  bool curve = false;
  CurveKeyPair keys;
  struct AllowedClient {
    std::string public_key;
    std::string name;  // the only name this key may speak as; empty: any
  };
  std::vector<AllowedClient> allowed_clients;

  // Messages queued per peer and direction before sends are dropped (ZeroMQ's high-water marks).
  // What a peer can make this endpoint buffer is bounded by receive_queue_messages multipart
  // messages of max_message_bytes frames each; keep both as small as the traffic allows. (A PHB
  // splits its knowledge messages at PubendOptions::max_bytes_per_message, 1 MiB.)
  int send_queue_messages = 100'000;
  int receive_queue_messages = 20'000;
  // The largest frame sent or accepted (one encoded message; its checksum is not counted).
  size_t max_message_bytes = size_t{16} << 20;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  absl::Duration reconnect_interval = absl::Milliseconds(100);
  absl::Duration reconnect_interval_max = absl::Seconds(2);
  // Durations: positive (linger and log_interval: at least 0), at most 20 days; ZeroMQ counts
  // milliseconds, so shorter ones round up to 1 ms.
  // Queued messages a closing channel still tries to send, for at most this long.
  absl::Duration linger = absl::Milliseconds(500);
  // Where problems with peers are reported (one line each, at most once per peer and kind per
  // log_interval). Empty: standard error.
  std::function<void(const std::string&)> log;
  absl::Duration log_interval = absl::Seconds(10);
};

class ZmqChannel final : public Channel, public EventSource {
 public:
  struct Stats {
    uint64_t sent = 0;            // messages handed to ZeroMQ
    uint64_t received = 0;        // messages decoded and handed to the receiver
    uint64_t dropped_full = 0;    // sends dropped: the peer's queue was full
    uint64_t unreachable = 0;     // sends to a peer that is not connected
    uint64_t malformed = 0;       // frames that did not decode
    uint64_t corrupted = 0;       // frames whose checksum did not match
    uint64_t oversized = 0;       // frames over max_message_bytes
    uint64_t impersonations = 0;  // messages from an allowed key under a name not its own
    uint64_t not_encodable = 0;   // messages to send over max_message_bytes
    uint64_t denied = 0;          // CURVE handshakes refused: the client's key is not allowed
  };

  // Binds and dials. InvalidArgument for a bad name, endpoint or key (naming it), a peer twice
  // or a curve peer without a server key; the bind's error (address in use: Unavailable).
  static absl::StatusOr<std::unique_ptr<ZmqChannel>> Create(ZmqChannelOptions options);
  ~ZmqChannel() override;

  // Dials one more peer (reconnect anywhere: a subscriber moving to another broker). On the
  // driving thread. AlreadyExists for a name already dialed.
  absl::Status AddPeer(ZmqChannelOptions::Peer peer);

  // Channel.
  const std::string& name() const override;
  absl::Status Send(absl::string_view peer, Message message) override;
  size_t SendMany(absl::Span<Outgoing> messages) override;
  void SetReceiver(Receiver receiver) override;

  // EventSource.
  void Attach(std::function<void()> wake) override;
  std::vector<int> WaitFds() const override;
  bool Dispatch(size_t max) override;
  bool Ready() override;

  // The endpoint the listening socket is bound to, with the port the system chose for
  // "tcp://127.0.0.1:*". Empty without `listen`.
  std::string bound_endpoint() const;
  Stats stats() const;

 private:
  class Impl;
  explicit ZmqChannel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gryph

#endif  // GRYPH_ZMQ_CHANNEL_H_
