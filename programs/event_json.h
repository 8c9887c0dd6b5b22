// Events as JSON lines, for gryph's programs: gryph-sub prints what it receives, gryph-pub reads
// what to publish.
//
//   {"pubend":1,"tick":1733140000123456,"topic":"orders",
//    "attributes":{"id":7,"price":12.5,"side":"buy","urgent":true},"payload":"..."}
//
// Attributes keep their types: JSON integers are int64 attributes, other numbers doubles,
// strings strings, true/false bools. A payload that is not valid UTF-8 is written as
// "payload_base64" instead of "payload" (and read back from either).

#ifndef GRYPH_PROGRAMS_EVENT_JSON_H_
#define GRYPH_PROGRAMS_EVENT_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/event.h"
#include "gryph/tick.h"

namespace gryph::programs {

// One line (no newline) for an event delivered at tick `t` of pubend `p`.
std::string EventToJson(PubendId p, Tick t, const Event& event);
// One line for a Gap: {"pubend":1,"tick":...,"gap":true}.
std::string GapToJson(PubendId p, Tick t);

// An event to publish, from one JSON object with "topic", "attributes", "payload" (or
// "payload_base64"), all optional; "key" (a string: the routing key that picks the pubend) is
// returned in *key when present. InvalidArgument, naming what is wrong, for anything else: not
// JSON, not an object, an unknown member, an attribute that is null, an array or an object, an
// integer beyond int64.
absl::StatusOr<Event> EventFromJson(absl::string_view line, std::string* key);

}  // namespace gryph::programs

#endif  // GRYPH_PROGRAMS_EVENT_JSON_H_
