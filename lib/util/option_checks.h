// Checks of the options a component is opened with: each failure is InvalidArgument naming the
// component and the option, so that a bad configuration says what to change.

#ifndef GRYPH_LIB_UTIL_OPTION_CHECKS_H_
#define GRYPH_LIB_UTIL_OPTION_CHECKS_H_

#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gryph::internal {

// The first of `durations` (value, option name) that is not positive, as "<owner> option <name>
// is <value>; it must be positive"; OK when all are.
inline absl::Status CheckPositive(
    absl::string_view owner,
    std::initializer_list<std::pair<absl::Duration, absl::string_view>> durations) {
  for (const auto& [value, name] : durations) {
    if (value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          owner, " option ", name, " is ", absl::FormatDuration(value), "; it must be positive"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gryph::internal

#endif  // GRYPH_LIB_UTIL_OPTION_CHECKS_H_
