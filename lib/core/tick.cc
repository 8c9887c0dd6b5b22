#include "gryph/tick.h"

#include "absl/strings/str_cat.h"

namespace gryph {

const char* TickValueName(TickValue v) {
  switch (v) {
    case TickValue::kQ: return "Q";
    case TickValue::kS: return "S";
    case TickValue::kD: return "D";
    case TickValue::kL: return "L";
  }
  return "?";
}

std::string ToString(TickRange r) { return absl::StrCat("[", r.first, ",", r.last, "]"); }

}  // namespace gryph
