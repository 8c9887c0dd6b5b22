#include "gryph/message.h"

#include "absl/strings/str_cat.h"
#include "lib/util/coding.h"

namespace gryph {

namespace {

using internal::ByteReader;
using internal::PutLengthPrefixed;
using internal::PutVarint64;

// Ranges are sent as (gap from the end of the previous range, length - 1), so that ordered,
// non-overlapping ranges cost a few bytes each.
void PutRange(std::string* out, Tick* next, TickRange r) {
  PutVarint64(out, r.first - *next);
  PutVarint64(out, r.last - r.first);
  *next = r.last + 1;  // wraps to 0 only after kMaxTick, which must be the final range
}

bool ReadRange(ByteReader& in, Tick* next, bool* at_end, TickRange* r) {
  uint64_t gap = 0;
  uint64_t extra = 0;
  if (!in.ReadVarint64(&gap, "range start") || !in.ReadVarint64(&extra, "range length")) {
    return false;
  }
  if (*at_end) return in.Fail("range after the last tick");
  if (gap > kMaxTick - *next) return in.Fail("range start overflows");
  r->first = *next + gap;
  if (extra > kMaxTick - r->first) return in.Fail("range end overflows");
  r->last = r->first + extra;
  *at_end = r->last == kMaxTick;
  *next = r->last + 1;
  return true;
}

void PutCheckpoint(std::string* out, const CheckpointToken& ct) {
  PutLengthPrefixed(out, ct.Encode());
}

bool ReadCheckpoint(ByteReader& in, CheckpointToken* ct) {
  absl::string_view bytes;
  if (!in.ReadLengthPrefixed(&bytes, "checkpoint token")) return false;
  absl::StatusOr<CheckpointToken> decoded = CheckpointToken::Decode(bytes);
  if (!decoded.ok()) return in.Fail(decoded.status().message());
  *ct = *std::move(decoded);
  return true;
}

bool ReadString(ByteReader& in, std::string* s, absl::string_view what) {
  absl::string_view v;
  if (!in.ReadLengthPrefixed(&v, what)) return false;
  *s = std::string(v);
  return true;
}

bool ReadPubend(ByteReader& in, PubendId* p) {
  uint64_t v = 0;
  if (!in.ReadVarintAtMost(UINT32_MAX, &v, "pubend")) return false;
  p->value = static_cast<uint32_t>(v);
  return true;
}

bool ReadEvent(ByteReader& in, EventRef* e) {
  absl::string_view bytes;
  if (!in.ReadLengthPrefixed(&bytes, "event")) return false;
  absl::StatusOr<Event> decoded = Event::Decode(bytes);
  if (!decoded.ok()) return in.Fail(decoded.status().message());
  *e = MakeEventRef(*std::move(decoded));
  return true;
}

struct Encoder {
  std::string* out;

  void operator()(const KnowledgeMessage& m) const {
    PutVarint64(out, m.pubend.value);
    PutVarint64(out, m.spans.size());
    Tick next = kFirstTick;
    for (const KnowledgeSpan& s : m.spans) {
      out->push_back(static_cast<char>(s.value));
      PutRange(out, &next, s.range);
      if (s.value == TickValue::kD) {
        std::string event;
        s.event->EncodeTo(&event);
        PutLengthPrefixed(out, event);
      }
    }
    // Only in version 2 (EncodeMessage), which only a Knowledge message with them uses.
    if (!m.unanswered.empty()) {
      PutVarint64(out, m.unanswered.size());
      Tick at = kFirstTick;
      for (TickRange r : m.unanswered) PutRange(out, &at, r);
    }
  }
  void operator()(const CuriosityMessage& m) const {
    PutVarint64(out, m.pubend.value);
    PutVarint64(out, m.ranges.size());
    Tick next = kFirstTick;
    for (TickRange r : m.ranges) PutRange(out, &next, r);
  }
  void operator()(const ReleaseMessage& m) const {
    PutVarint64(out, m.entries.size());
    for (const ReleaseEntry& e : m.entries) {
      PutVarint64(out, e.pubend.value);
      PutVarint64(out, e.released);
      PutVarint64(out, e.latest_delivered);
    }
  }
  void operator()(const ConnectMessage& m) const {
    PutLengthPrefixed(out, m.subscription);
    PutLengthPrefixed(out, m.selector);
    PutLengthPrefixed(out, m.topic_filter);
    PutCheckpoint(out, m.checkpoint);
    PutVarint64(out, m.epoch);
    out->push_back(m.create ? 1 : 0);
  }
  void operator()(const ConnectedMessage& m) const {
    PutLengthPrefixed(out, m.subscription);
    PutCheckpoint(out, m.start);
    PutVarint64(out, m.epoch);
  }
  void operator()(const DeliveryMessage& m) const {
    PutLengthPrefixed(out, m.subscription);
    PutVarint64(out, m.pubend.value);
    out->push_back(static_cast<char>(m.kind));
    PutVarint64(out, m.tick);
    PutVarint64(out, m.previous);
    if (m.kind == DeliveryKind::kEvent) {
      std::string event;
      m.event->EncodeTo(&event);
      PutLengthPrefixed(out, event);
    }
  }
  void operator()(const AckMessage& m) const {
    PutLengthPrefixed(out, m.subscription);
    PutCheckpoint(out, m.checkpoint);
  }
  void operator()(const DisconnectMessage& m) const { PutLengthPrefixed(out, m.subscription); }
  void operator()(const UnsubscribeMessage& m) const { PutLengthPrefixed(out, m.subscription); }
  void operator()(const SessionErrorMessage& m) const {
    PutLengthPrefixed(out, m.subscription);
    PutVarint64(out, static_cast<uint64_t>(m.code));
    PutLengthPrefixed(out, m.message);
  }
  void operator()(const PublishMessage& m) const {
    PutVarint64(out, m.sequence);
    PutVarint64(out, m.pubend.value);
    if (m.by_key()) PutLengthPrefixed(out, m.key);
    std::string event;
    m.event->EncodeTo(&event);
    PutLengthPrefixed(out, event);
  }
  void operator()(const PublishedMessage& m) const {
    PutVarint64(out, m.sequence);
    PutVarint64(out, m.pubend.value);
    PutVarint64(out, static_cast<uint64_t>(m.result.status().code()));
    if (m.result.ok()) {
      PutVarint64(out, *m.result);
    } else {
      PutLengthPrefixed(out, m.result.status().message());
    }
  }
};

bool Decode(ByteReader& in, KnowledgeMessage* m) {
  uint64_t count = 0;
  if (!ReadPubend(in, &m->pubend) ||
      !in.ReadVarintAtMost(in.remaining() / 3, &count, "span count")) {
    return false;
  }
  m->spans.reserve(count);
  Tick next = kFirstTick;
  bool at_end = false;
  for (uint64_t i = 0; i < count; ++i) {
    uint8_t value = 0;
    KnowledgeSpan s;
    if (!in.ReadByte(&value, "tick value")) return false;
    if (value < static_cast<uint8_t>(TickValue::kS) ||
        value > static_cast<uint8_t>(TickValue::kL)) {
      return in.Fail(absl::StrCat("tick value ", value, " is not S, D or L"));
    }
    s.value = static_cast<TickValue>(value);
    if (!ReadRange(in, &next, &at_end, &s.range)) return false;
    if (s.value == TickValue::kD) {
      if (s.range.first != s.range.last) return in.Fail("a D span longer than one tick");
      if (!ReadEvent(in, &s.event)) return false;
    }
    m->spans.push_back(std::move(s));
  }
  return true;
}

// Version 2's field after a Knowledge message's spans: the unanswered ranges, at least one.
bool ReadUnanswered(ByteReader& in, KnowledgeMessage* m) {
  uint64_t count = 0;
  if (!in.ReadVarintAtMost(in.remaining() / 2, &count, "unanswered range count")) return false;
  if (count == 0) return in.Fail("no unanswered range (version 1 is written then)");
  Tick next = kFirstTick;
  bool at_end = false;
  size_t span = 0;  // both ascend: one pass finds an overlap
  for (uint64_t i = 0; i < count; ++i) {
    TickRange r;
    if (!ReadRange(in, &next, &at_end, &r)) return false;
    while (span < m->spans.size() && m->spans[span].range.last < r.first) ++span;
    if (span < m->spans.size() && m->spans[span].range.first <= r.last) {
      return in.Fail(absl::StrCat("unanswered range ", ToString(r), " overlaps a span"));
    }
    m->unanswered.push_back(r);
  }
  return true;
}

bool Decode(ByteReader& in, CuriosityMessage* m) {
  uint64_t count = 0;
  if (!ReadPubend(in, &m->pubend) ||
      !in.ReadVarintAtMost(in.remaining() / 2, &count, "range count")) {
    return false;
  }
  m->ranges.reserve(count);
  Tick next = kFirstTick;
  bool at_end = false;
  for (uint64_t i = 0; i < count; ++i) {
    TickRange r;
    if (!ReadRange(in, &next, &at_end, &r)) return false;
    m->ranges.push_back(r);
  }
  return true;
}

bool Decode(ByteReader& in, ReleaseMessage* m) {
  uint64_t count = 0;
  if (!in.ReadVarintAtMost(in.remaining() / 3, &count, "entry count")) return false;
  for (uint64_t i = 0; i < count; ++i) {
    ReleaseEntry e;
    if (!ReadPubend(in, &e.pubend) || !in.ReadVarint64(&e.released, "released") ||
        !in.ReadVarint64(&e.latest_delivered, "latest delivered")) {
      return false;
    }
    if (!m->entries.empty() && m->entries.back().pubend >= e.pubend) {
      return in.Fail(absl::StrCat("pubend ", e.pubend.value, " is out of order or repeated"));
    }
    if (e.released > e.latest_delivered) {
      return in.Fail(
          absl::StrCat("released ", e.released, " is above latest delivered ", e.latest_delivered));
    }
    m->entries.push_back(e);
  }
  return true;
}

bool Decode(ByteReader& in, ConnectMessage* m) {
  uint8_t create = 0;
  if (!ReadString(in, &m->subscription, "subscription") ||
      !ReadString(in, &m->selector, "selector") ||
      !ReadString(in, &m->topic_filter, "topic filter") || !ReadCheckpoint(in, &m->checkpoint) ||
      !in.ReadVarint64(&m->epoch, "epoch") || !in.ReadByte(&create, "create flag")) {
    return false;
  }
  if (create > 1) return in.Fail("create flag is neither 0 nor 1");
  m->create = create == 1;
  return true;
}

bool Decode(ByteReader& in, ConnectedMessage* m) {
  return ReadString(in, &m->subscription, "subscription") && ReadCheckpoint(in, &m->start) &&
         in.ReadVarint64(&m->epoch, "epoch");
}

bool Decode(ByteReader& in, DeliveryMessage* m) {
  uint8_t kind = 0;
  if (!ReadString(in, &m->subscription, "subscription") || !ReadPubend(in, &m->pubend) ||
      !in.ReadByte(&kind, "delivery kind") || !in.ReadVarint64(&m->tick, "tick") ||
      !in.ReadVarint64(&m->previous, "previous tick")) {
    return false;
  }
  if (kind > static_cast<uint8_t>(DeliveryKind::kGap)) {
    return in.Fail(absl::StrCat("unknown delivery kind ", kind));
  }
  if (m->tick == 0) return in.Fail("delivery at tick 0");
  if (m->previous >= m->tick) {
    return in.Fail(absl::StrCat("delivery at tick ", m->tick, " claims a previous tick ",
                                m->previous, " not below it"));
  }
  m->kind = static_cast<DeliveryKind>(kind);
  return m->kind != DeliveryKind::kEvent || ReadEvent(in, &m->event);
}

bool Decode(ByteReader& in, AckMessage* m) {
  return ReadString(in, &m->subscription, "subscription") && ReadCheckpoint(in, &m->checkpoint);
}

bool Decode(ByteReader& in, DisconnectMessage* m) {
  return ReadString(in, &m->subscription, "subscription");
}

bool Decode(ByteReader& in, UnsubscribeMessage* m) {
  return ReadString(in, &m->subscription, "subscription");
}

bool Decode(ByteReader& in, SessionErrorMessage* m) {
  uint64_t code = 0;
  if (!ReadString(in, &m->subscription, "subscription") ||
      !in.ReadVarintAtMost(static_cast<uint64_t>(absl::StatusCode::kUnauthenticated), &code,
                           "status code") ||
      !ReadString(in, &m->message, "error message")) {
    return false;
  }
  m->code = static_cast<absl::StatusCode>(code);
  return true;
}

bool Decode(ByteReader& in, PublishMessage* m) {
  if (!in.ReadVarint64(&m->sequence, "sequence") || !ReadPubend(in, &m->pubend)) return false;
  // Pubend 0 is "by key": only then is the key on the wire.
  if (m->by_key() && !ReadString(in, &m->key, "routing key")) return false;
  return ReadEvent(in, &m->event);
}

bool Decode(ByteReader& in, PublishedMessage* m) {
  uint64_t code = 0;
  if (!in.ReadVarint64(&m->sequence, "sequence") || !ReadPubend(in, &m->pubend) ||
      !in.ReadVarintAtMost(static_cast<uint64_t>(absl::StatusCode::kUnauthenticated), &code,
                           "status code")) {
    return false;
  }
  if (code == 0) {
    Tick tick = 0;
    if (!in.ReadVarint64(&tick, "tick")) return false;
    if (tick == 0) return in.Fail("published at tick 0");
    m->result = tick;
    return true;
  }
  std::string message;
  if (!ReadString(in, &message, "error message")) return false;
  m->result = absl::Status(static_cast<absl::StatusCode>(code), message);
  return true;
}

template <typename M>
bool DecodeAs(ByteReader& in, Message* out) {
  M m;
  if (!Decode(in, &m)) return false;
  *out = std::move(m);
  return true;
}

bool DecodeKind(ByteReader& in, uint8_t kind, Message* out) {
  switch (static_cast<MessageKind>(kind)) {
    case MessageKind::kKnowledge: return DecodeAs<KnowledgeMessage>(in, out);
    case MessageKind::kCuriosity: return DecodeAs<CuriosityMessage>(in, out);
    case MessageKind::kRelease: return DecodeAs<ReleaseMessage>(in, out);
    case MessageKind::kConnect: return DecodeAs<ConnectMessage>(in, out);
    case MessageKind::kConnected: return DecodeAs<ConnectedMessage>(in, out);
    case MessageKind::kDelivery: return DecodeAs<DeliveryMessage>(in, out);
    case MessageKind::kAck: return DecodeAs<AckMessage>(in, out);
    case MessageKind::kDisconnect: return DecodeAs<DisconnectMessage>(in, out);
    case MessageKind::kSessionError: return DecodeAs<SessionErrorMessage>(in, out);
    case MessageKind::kUnsubscribe: return DecodeAs<UnsubscribeMessage>(in, out);
    case MessageKind::kPublish: return DecodeAs<PublishMessage>(in, out);
    case MessageKind::kPublished: return DecodeAs<PublishedMessage>(in, out);
  }
  return in.Fail(absl::StrCat("unknown message kind ", kind));
}

}  // namespace

bool operator==(const DeliveryMessage& a, const DeliveryMessage& b) {
  if (a.subscription != b.subscription || a.pubend != b.pubend || a.kind != b.kind ||
      a.tick != b.tick || a.previous != b.previous) {
    return false;
  }
  if (a.event == b.event) return true;
  return a.event != nullptr && b.event != nullptr && *a.event == *b.event;
}

bool operator==(const PublishMessage& a, const PublishMessage& b) {
  if (a.sequence != b.sequence || a.pubend != b.pubend || a.key != b.key) return false;
  if (a.event == b.event) return true;
  return a.event != nullptr && b.event != nullptr && *a.event == *b.event;
}

const char* DeliveryKindName(DeliveryKind k) {
  switch (k) {
    case DeliveryKind::kEvent: return "Event";
    case DeliveryKind::kSilence: return "Silence";
    case DeliveryKind::kGap: return "Gap";
  }
  return "?";
}

MessageKind KindOf(const Message& m) {
  return std::visit([](const auto& v) { return std::decay_t<decltype(v)>::kKind; }, m);
}

const char* MessageKindName(MessageKind kind) {
  switch (kind) {
    case MessageKind::kKnowledge: return "knowledge";
    case MessageKind::kCuriosity: return "curiosity";
    case MessageKind::kRelease: return "release";
    case MessageKind::kConnect: return "connect";
    case MessageKind::kConnected: return "connected";
    case MessageKind::kDelivery: return "delivery";
    case MessageKind::kAck: return "ack";
    case MessageKind::kDisconnect: return "disconnect";
    case MessageKind::kSessionError: return "session-error";
    case MessageKind::kUnsubscribe: return "unsubscribe";
    case MessageKind::kPublish: return "publish";
    case MessageKind::kPublished: return "published";
  }
  return "?";
}

void EncodeMessage(const Message& m, std::string* out) {
  // Version 1 where it can hold the message, so that readers that know only it read it.
  const auto* k = std::get_if<KnowledgeMessage>(&m);
  out->push_back(static_cast<char>(k != nullptr && !k->unanswered.empty() ? 2 : 1));
  out->push_back(static_cast<char>(KindOf(m)));
  std::visit(Encoder{out}, m);
}

std::string EncodeMessage(const Message& m) {
  std::string out;
  EncodeMessage(m, &out);
  return out;
}

absl::StatusOr<Message> DecodeMessage(absl::string_view bytes) {
  ByteReader in(bytes, "message");
  uint8_t version = 0;
  uint8_t kind = 0;
  if (!in.ReadByte(&version, "version")) return in.status();
  if (version != 1 && version != 2) {
    in.Fail(absl::StrCat("unsupported version ", version));
    return in.status();
  }
  if (!in.ReadByte(&kind, "kind")) return in.status();
  Message m;
  if (!DecodeKind(in, kind, &m)) return in.status();
  if (version == 2) {
    auto* k = std::get_if<KnowledgeMessage>(&m);
    if (k == nullptr) {
      in.Fail(absl::StrCat("version 2 is only for knowledge, not ", MessageKindName(m)));
      return in.status();
    }
    if (!ReadUnanswered(in, k)) return in.status();
  }
  if (!in.ExpectEnd()) return in.status();
  return m;
}

}  // namespace gryph
