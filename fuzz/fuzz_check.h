// Shared by the libFuzzer targets: how a target reports a broken invariant (an abort, which
// libFuzzer records as a crash with the input that caused it).

#ifndef GRYPH_FUZZ_FUZZ_CHECK_H_
#define GRYPH_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace gryph::fuzz {

[[noreturn]] inline void Fail(const char* what, absl::string_view detail = "") {
  std::fprintf(stderr, "invariant broken: %s: %.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

// A decoder's refusal: InvalidArgument, saying where ("at byte N").
inline void CheckRefusal(const absl::Status& status) {
  if (!absl::IsInvalidArgument(status))
    Fail("a refusal that is not InvalidArgument", status.message());
  if (!absl::StrContains(status.message(), "at byte"))
    Fail("a refusal without its offset", status.message());
}

}  // namespace gryph::fuzz

#endif  // GRYPH_FUZZ_FUZZ_CHECK_H_
