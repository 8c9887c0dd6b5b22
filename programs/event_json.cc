#include "programs/event_json.h"

#include <cstdint>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "lib/selector/utf8.h"
#include "nlohmann/json.hpp"

namespace gryph::programs {

namespace {

using nlohmann::json;

// Whether `s` is well-formed UTF-8: every non-ASCII byte starts a well-formed sequence.
bool ValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = selector_ast::Utf8CharLength(s, i);
    if (n == 1 && static_cast<unsigned char>(s[i]) >= 0x80) return false;
    i += n;
  }
  return true;
}

// Every string handed to dump() is valid UTF-8 (checked above or produced by base64), so the
// strict handler never throws; the replace handler keeps that true of attribute strings too.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string EventToJson(PubendId p, Tick t, const Event& event) {
  json j = json::object();
  j["pubend"] = p.value;
  j["tick"] = t;
  if (!event.topic().empty()) j["topic"] = event.topic();
  json attributes = json::object();
  for (const Attribute& a : event.attributes()) {
    std::visit([&](const auto& v) { attributes[a.name] = v; }, a.value);
  }
  if (!attributes.empty()) j["attributes"] = std::move(attributes);
  if (!event.payload().empty()) {
    if (ValidUtf8(event.payload())) {
      j["payload"] = event.payload();
    } else {
      j["payload_base64"] = absl::Base64Escape(event.payload());
    }
  }
  return Dump(j);
}

std::string GapToJson(PubendId p, Tick t) {
  json j = json::object();
  j["pubend"] = p.value;
  j["tick"] = t;
  j["gap"] = true;
  return Dump(j);
}

absl::StatusOr<Event> EventFromJson(absl::string_view line, std::string* key) {
  const json j = json::parse(line.begin(), line.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  Event e;
  for (const auto& [name, value] : j.items()) {
    if (name == "topic" || name == "payload" || name == "payload_base64" || name == "key") {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat("\"", name, "\" is not a string"));
      }
      const std::string& s = value.get_ref<const std::string&>();
      if (name == "topic") {
        e.SetTopic(s);
      } else if (name == "payload") {
        e.SetPayload(s);
      } else if (name == "payload_base64") {
        std::string raw;
        if (!absl::Base64Unescape(s, &raw)) {
          return absl::InvalidArgumentError("\"payload_base64\" is not base64");
        }
        e.SetPayload(raw);
      } else if (key != nullptr) {
        *key = s;
      }
    } else if (name == "attributes") {
      if (!value.is_object()) return absl::InvalidArgumentError("\"attributes\" is not an object");
      for (const auto& [attr, v] : value.items()) {
        if (v.is_boolean()) {
          e.SetBool(attr, v.get<bool>());
        } else if (v.is_number_integer()) {
          if (v.is_number_unsigned() &&
              v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            return absl::InvalidArgumentError(
                absl::StrCat("attribute \"", attr, "\" is beyond a 64-bit integer"));
          }
          e.SetInt64(attr, v.get<int64_t>());
        } else if (v.is_number_float()) {
          e.SetDouble(attr, v.get<double>());
        } else if (v.is_string()) {
          e.SetString(attr, v.get_ref<const std::string&>());
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("attribute \"", attr, "\" is ", v.type_name(),
                           ": attributes are numbers, strings or booleans"));
        }
      }
    } else if (name != "pubend" && name != "tick") {  // gryph-sub's own lines read back
      return absl::InvalidArgumentError(absl::StrCat("unknown member \"", name, "\""));
    }
  }
  return e;
}

}  // namespace gryph::programs
