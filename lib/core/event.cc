#include "gryph/event.h"

#include <algorithm>
#include <bit>

#include "absl/strings/str_cat.h"
#include "lib/util/coding.h"

namespace gryph {

namespace {

using internal::ByteReader;

// The type tag of each attribute type. DO NOT CHANGE: stored and sent (docs/format.md, "Event").
// Independent of AttributeValue's order.
enum class TypeTag : uint8_t { kInt64 = 0, kDouble = 1, kString = 2, kBool = 3 };
constexpr uint64_t kMaxTypeTag = 3;

// Appends an attribute value: its type tag, then its encoding.
struct ValueEncoder {
  std::string* out;
  void Tag(TypeTag t) const { out->push_back(static_cast<char>(t)); }
  void operator()(int64_t v) const {
    Tag(TypeTag::kInt64);
    internal::PutVarint64(out, internal::ZigZagEncode(v));
  }
  void operator()(double v) const {
    Tag(TypeTag::kDouble);
    internal::PutFixed64LE(out, std::bit_cast<uint64_t>(v));
  }
  void operator()(const std::string& v) const {
    Tag(TypeTag::kString);
    internal::PutLengthPrefixed(out, v);
  }
  void operator()(bool v) const {
    Tag(TypeTag::kBool);
    out->push_back(v ? 1 : 0);
  }
};

}  // namespace

Event& Event::Set(absl::string_view name, AttributeValue v) {
  auto it = std::lower_bound(attributes_.begin(), attributes_.end(), name,
                             [](const Attribute& a, absl::string_view n) { return a.name < n; });
  if (it != attributes_.end() && it->name == name) {
    it->value = std::move(v);
  } else {
    attributes_.insert(it, Attribute{std::string(name), std::move(v)});
  }
  return *this;
}

Event& Event::SetInt64(absl::string_view name, int64_t v) { return Set(name, AttributeValue(v)); }
Event& Event::SetDouble(absl::string_view name, double v) { return Set(name, AttributeValue(v)); }
Event& Event::SetBool(absl::string_view name, bool v) { return Set(name, AttributeValue(v)); }
Event& Event::SetString(absl::string_view name, absl::string_view v) {
  return Set(name, AttributeValue(std::string(v)));
}

Event& Event::SetTopic(absl::string_view topic) {
  topic_ = std::string(topic);
  return *this;
}

Event& Event::SetPayload(absl::string_view payload) {
  payload_ = std::string(payload);
  return *this;
}

const AttributeValue* Event::Find(absl::string_view name) const {
  auto it = std::lower_bound(attributes_.begin(), attributes_.end(), name,
                             [](const Attribute& a, absl::string_view n) { return a.name < n; });
  if (it == attributes_.end() || it->name != name) return nullptr;
  return &it->value;
}

void Event::EncodeTo(std::string* out) const {
  out->push_back(static_cast<char>(kEncodingVersion));
  internal::PutLengthPrefixed(out, topic_);
  internal::PutVarint64(out, attributes_.size());
  for (const Attribute& a : attributes_) {
    internal::PutLengthPrefixed(out, a.name);
    std::visit(ValueEncoder{out}, a.value);
  }
  internal::PutLengthPrefixed(out, payload_);
}

std::string Event::Encode() const {
  std::string out;
  EncodeTo(&out);
  return out;
}

absl::StatusOr<Event> Event::Decode(absl::string_view bytes) {
  ByteReader in(bytes, "event");
  uint8_t version = 0;
  if (!in.ReadByte(&version, "version")) return in.status();
  if (version != kEncodingVersion) {
    in.Fail(absl::StrCat("unsupported version ", version));
    return in.status();
  }
  Event e;
  absl::string_view topic;
  if (!in.ReadLengthPrefixed(&topic, "topic")) return in.status();
  e.topic_ = std::string(topic);
  uint64_t count = 0;
  // Each attribute takes at least 3 bytes, which bounds the count before any allocation.
  if (!in.ReadVarintAtMost(in.remaining() / 3, &count, "attribute count")) return in.status();
  e.attributes_.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    absl::string_view name;
    uint64_t tag = 0;
    if (!in.ReadLengthPrefixed(&name, "attribute name")) return in.status();
    if (!e.attributes_.empty() && e.attributes_.back().name >= name) {
      in.Fail(absl::StrCat("attribute '", name, "' is out of order or repeated"));
      return in.status();
    }
    if (!in.ReadVarintAtMost(kMaxTypeTag, &tag, "type tag")) return in.status();
    AttributeValue value;
    switch (static_cast<TypeTag>(tag)) {
      case TypeTag::kInt64: {
        uint64_t v;
        if (!in.ReadVarint64(&v, "int64 value")) return in.status();
        value = internal::ZigZagDecode(v);
        break;
      }
      case TypeTag::kDouble: {
        uint64_t v;
        if (!in.ReadFixed64LE(&v, "double value")) return in.status();
        value = std::bit_cast<double>(v);
        break;
      }
      case TypeTag::kString: {
        absl::string_view v;
        if (!in.ReadLengthPrefixed(&v, "string value")) return in.status();
        value = std::string(v);
        break;
      }
      case TypeTag::kBool: {
        uint8_t v;
        if (!in.ReadByte(&v, "bool value")) return in.status();
        if (v > 1) {
          in.Fail(absl::StrCat("bool value ", v, " is neither 0 nor 1"));
          return in.status();
        }
        value = v == 1;
        break;
      }
    }
    e.attributes_.push_back(Attribute{std::string(name), std::move(value)});
  }
  absl::string_view payload;
  if (!in.ReadLengthPrefixed(&payload, "payload")) return in.status();
  e.payload_ = std::string(payload);
  if (!in.ExpectEnd()) return in.status();
  return e;
}

}  // namespace gryph
