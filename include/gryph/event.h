// An event: what a publisher publishes and a subscriber receives.
//
// An event has a hierarchical topic ("orders/us/IBM"), typed attributes that selectors test
// (int64, double, string or bool, named by case-sensitive strings, at most one value per name),
// and an opaque payload that gryph never interprets.
//
// Encoding (docs/format.md, "Event"): a version byte, then varint-prefixed fields. Decode()
// accepts exactly what Encode() produces; any other byte string yields an InvalidArgument status,
// never a crash and never a read past the input.
//
// Thread-safety: thread-compatible (a const Event may be shared between threads). Events flow
// through gryph as EventRef, an immutable shared handle, so fan-out to many subscribers copies
// no bytes.

#ifndef GRYPH_EVENT_H_
#define GRYPH_EVENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gryph {

// The value of an attribute. Its type tag on the wire is fixed per type, not by this order
// (docs/format.md, "Event": 0 int64, 1 double, 2 string, 3 bool).
using AttributeValue = std::variant<int64_t, double, std::string, bool>;

struct Attribute {
  std::string name;
  AttributeValue value;
  friend bool operator==(const Attribute&, const Attribute&) = default;
};

class Event {
 public:
  // The current encoding version, the first byte of every encoded event.
  static constexpr uint8_t kEncodingVersion = 1;

  Event() = default;

  // Setters replace any earlier value of the same name and return *this for chaining.
  // The named variants avoid the C++ trap of a string literal converting to bool.
  Event& SetInt64(absl::string_view name, int64_t v);
  Event& SetDouble(absl::string_view name, double v);
  Event& SetString(absl::string_view name, absl::string_view v);
  Event& SetBool(absl::string_view name, bool v);
  Event& Set(absl::string_view name, AttributeValue v);
  Event& SetTopic(absl::string_view topic);
  Event& SetPayload(absl::string_view payload);

  // The value named `name`, or nullptr when the event has none (a selector's NULL).
  // The pointer is valid until the next setter call or the event's destruction.
  const AttributeValue* Find(absl::string_view name) const;

  // Attributes sorted by name.
  absl::Span<const Attribute> attributes() const { return attributes_; }
  const std::string& topic() const { return topic_; }
  const std::string& payload() const { return payload_; }

  // Appends the encoding to *out.
  void EncodeTo(std::string* out) const;
  std::string Encode() const;

  // Parses an encoded event. Fails with InvalidArgument (naming what is wrong and where) on a
  // truncated or malformed input, an unknown version or type tag, a duplicate or unsorted
  // attribute name, or trailing bytes.
  static absl::StatusOr<Event> Decode(absl::string_view bytes);

  friend bool operator==(const Event&, const Event&) = default;

 private:
  std::string topic_;
  std::vector<Attribute> attributes_;  // sorted by name, names unique
  std::string payload_;
};

// An immutable, shared event: what knowledge streams, caches and deliveries hold.
using EventRef = std::shared_ptr<const Event>;

inline EventRef MakeEventRef(Event e) { return std::make_shared<const Event>(std::move(e)); }

}  // namespace gryph

#endif  // GRYPH_EVENT_H_
