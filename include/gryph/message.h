// The messages gryph's nodes exchange through a Channel, and their wire encoding.
//
// Between brokers (paper §3):
//   KnowledgeMessage  downstream: a pubend's ticks as S, D (with events) and L spans;
//   CuriosityMessage  upstream: nack ranges (ticks that are Q downstream);
//   ReleaseMessage    upstream: per pubend, the downstream node's released and latestDelivered.
// Between a subscriber and its subscriber hosting broker (paper §2):
//   ConnectMessage, ConnectedMessage, DeliveryMessage (Event / Silence / Gap), AckMessage,
//   DisconnectMessage, UnsubscribeMessage, SessionErrorMessage.
// Between a publisher in another process and its publisher hosting broker:
//   PublishMessage (an event to log), PublishedMessage (its tick, or why it was refused).
//
// Encoding (docs/format.md, "Messages"): a version byte, a kind byte, then the kind's fields with
// varints. DecodeMessage accepts exactly what EncodeMessage produces; anything else yields
// InvalidArgument, never a crash or a read past the input.
//
// Thread-safety: plain values (thread-compatible); events inside are immutable and shared.

#ifndef GRYPH_MESSAGE_H_
#define GRYPH_MESSAGE_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/broker/knowledge_stream.h"
#include "gryph/checkpoint_token.h"
#include "gryph/tick.h"

namespace gryph {

// The kind byte of each message on the wire (docs/format.md, "Messages"). These numbers are the
// wire contract: DO NOT CHANGE them. Each message type names its kind (`kKind`); the order of the
// Message variant below is not part of the format.
enum class MessageKind : uint8_t {
  kKnowledge = 1,
  kCuriosity = 2,
  kRelease = 3,
  kConnect = 4,
  kConnected = 5,
  kDelivery = 6,
  kAck = 7,
  kDisconnect = 8,
  kSessionError = 9,
  kUnsubscribe = 10,
  kPublish = 11,
  kPublished = 12,
};

// Knowledge about one pubend. REQUIRES (checked by decoding): spans in increasing tick order,
// not overlapping, each S, D or L; unanswered ranges likewise, and overlapping no span.
struct KnowledgeMessage {
  static constexpr MessageKind kKind = MessageKind::kKnowledge;
  PubendId pubend;
  std::vector<KnowledgeSpan> spans;
  // On the last message of a nack's answer that stopped short (the answerer bounds the bytes of
  // one answer): the parts of the nacked ranges it leaves unanswered, ascending and disjoint.
  // The nacker asks for them again at once instead of waiting for its renack timer. Empty
  // otherwise.
  std::vector<TickRange> unanswered = {};
  friend bool operator==(const KnowledgeMessage&, const KnowledgeMessage&) = default;
};

// Nacks for one pubend: ranges in increasing order, not overlapping.
struct CuriosityMessage {
  static constexpr MessageKind kKind = MessageKind::kCuriosity;
  PubendId pubend;
  std::vector<TickRange> ranges;
  friend bool operator==(const CuriosityMessage&, const CuriosityMessage&) = default;
};

struct ReleaseEntry {
  PubendId pubend;
  Tick released = 0;          // everything at or below is acknowledged by all subscribers
  Tick latest_delivered = 0;  // REQUIRES: released <= latest_delivered
  friend bool operator==(const ReleaseEntry&, const ReleaseEntry&) = default;
};

// Release information from a downstream node, one entry per pubend in increasing pubend order.
struct ReleaseMessage {
  static constexpr MessageKind kKind = MessageKind::kRelease;
  std::vector<ReleaseEntry> entries;
  friend bool operator==(const ReleaseMessage&, const ReleaseMessage&) = default;
};

// A subscriber opens (or creates) the durable subscription `subscription` and asks for delivery
// after `checkpoint`. An `epoch` at or above the subscription's fences its live session (a lower
// one is refused).
struct ConnectMessage {
  static constexpr MessageKind kKind = MessageKind::kConnect;
  std::string subscription;
  std::string selector;
  std::string topic_filter;
  CheckpointToken checkpoint;
  uint64_t epoch = 0;
  bool create = true;  // create the subscription when the broker does not know it
  friend bool operator==(const ConnectMessage&, const ConnectMessage&) = default;
};

// The broker accepted a connection; delivery resumes after `start` (a new subscription starts at
// the broker's latestDelivered).
struct ConnectedMessage {
  static constexpr MessageKind kKind = MessageKind::kConnected;
  std::string subscription;
  CheckpointToken start;
  uint64_t epoch = 0;
  friend bool operator==(const ConnectedMessage&, const ConnectedMessage&) = default;
};

// The three messages a subscriber receives, relative to t0 = `previous`, the tick of the
// previous message of the session from the same pubend (or the session's start CT(s, p) for the
// first). DO NOT CHANGE the values: sent on the wire.
enum class DeliveryKind : uint8_t {
  kEvent = 0,    // `event` matched at `tick`; nothing matched in (t0, tick)
  kSilence = 1,  // nothing matched in (t0, tick]
  kGap = 2,      // (t0, tick] may have held matches that early release discarded
};

const char* DeliveryKindName(DeliveryKind k);

struct DeliveryMessage {
  static constexpr MessageKind kKind = MessageKind::kDelivery;
  std::string subscription;
  PubendId pubend;
  DeliveryKind kind = DeliveryKind::kSilence;
  Tick tick = 0;
  EventRef event;  // set iff kind == kEvent
  // t0: the message covers (previous, tick]. A subscriber whose CT(p) is below `previous` has
  // missed a message of the session (lost in transit) and must resume from its CT. 0 claims
  // nothing about what came before. previous < tick.
  Tick previous = 0;
  friend bool operator==(const DeliveryMessage& a, const DeliveryMessage& b);
};

// The subscriber has consumed everything at or below `checkpoint`.
struct AckMessage {
  static constexpr MessageKind kKind = MessageKind::kAck;
  std::string subscription;
  CheckpointToken checkpoint;
  friend bool operator==(const AckMessage&, const AckMessage&) = default;
};

struct DisconnectMessage {
  static constexpr MessageKind kKind = MessageKind::kDisconnect;
  std::string subscription;
  friend bool operator==(const DisconnectMessage&, const DisconnectMessage&) = default;
};

// The subscriber deletes its durable subscription: its filtering records and release hold go.
struct UnsubscribeMessage {
  static constexpr MessageKind kKind = MessageKind::kUnsubscribe;
  std::string subscription;
  friend bool operator==(const UnsubscribeMessage&, const UnsubscribeMessage&) = default;
};

// The broker refused or ended a session (bad selector, CT from the future, fenced, ...).
struct SessionErrorMessage {
  static constexpr MessageKind kKind = MessageKind::kSessionError;
  std::string subscription;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  std::string message;
  friend bool operator==(const SessionErrorMessage&, const SessionErrorMessage&) = default;
};

// A publisher asks a publisher hosting broker to publish `event` (PublisherHostingBroker::Publish,
// or PublishByKey). The publisher is not a field: it is the name the message arrives under on the
// channel, so that under a channel that authenticates names (ZmqChannel with CURVE, each allowed
// key bound to its name) no peer can publish as another. (that name, sequence) is the idempotency
// key of Pubend::Publish: a retry of a recent sequence gets the original tick; 0 opts out.
// The pubend is named (pubend != 0) or chosen by the routing key (pubend 0: PubendForKey(key)),
// so a PHB's pubend 0, if it has one, is reached only by key.
// REQUIRES: event != nullptr; key is empty unless pubend is 0.
struct PublishMessage {
  static constexpr MessageKind kKind = MessageKind::kPublish;
  uint64_t sequence = 0;
  PubendId pubend;
  std::string key;  // the routing key when pubend is 0 (it may be empty)
  EventRef event;
  bool by_key() const { return pubend.value == 0; }
  friend bool operator==(const PublishMessage& a, const PublishMessage& b);
};

// A publisher hosting broker's answer to a PublishMessage, sent to the peer that published it:
// the publish of `sequence` went to `pubend` (the one named, or the key's) and `result` is the
// event's tick once its commit is durable, or why it failed (Pubend::Publish's errors, NotFound
// for an unknown pubend, Aborted when the broker closed before committing it, ...). Every
// retry is answered, so a publisher may receive one publish's answer more than once.
// REQUIRES: a tick is at least 1; an error's code is a canonical absl::StatusCode. A status's
// payloads are not sent.
struct PublishedMessage {
  static constexpr MessageKind kKind = MessageKind::kPublished;
  uint64_t sequence = 0;
  PubendId pubend;
  absl::StatusOr<Tick> result = absl::UnknownError("no result");
  friend bool operator==(const PublishedMessage&, const PublishedMessage&) = default;
};

using Message =
    std::variant<KnowledgeMessage, CuriosityMessage, ReleaseMessage, ConnectMessage,
                 ConnectedMessage, DeliveryMessage, AckMessage, DisconnectMessage,
                 SessionErrorMessage, UnsubscribeMessage, PublishMessage, PublishedMessage>;

// The message's kind: what it is sent as.
MessageKind KindOf(const Message& m);

// The name of the message's kind ("knowledge", "curiosity", ...), for logs.
const char* MessageKindName(MessageKind kind);
inline const char* MessageKindName(const Message& m) { return MessageKindName(KindOf(m)); }

// Version 1: every message as first specified (kinds 11 and 12 came later, under version 1: a
// reader older than them refuses them as an unknown kind). Version 2: a Knowledge message with
// unanswered ranges (docs/format.md); every other message is still written as version 1.
inline constexpr uint8_t kMessageEncodingVersion = 2;

// Appends the encoding of `m` to *out. REQUIRES: m satisfies its type's REQUIRES.
void EncodeMessage(const Message& m, std::string* out);
std::string EncodeMessage(const Message& m);

// Parses one encoded message. Fails with InvalidArgument naming what is malformed and where.
absl::StatusOr<Message> DecodeMessage(absl::string_view bytes);

}  // namespace gryph

#endif  // GRYPH_MESSAGE_H_
