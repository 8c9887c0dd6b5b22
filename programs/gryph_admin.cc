// gryph-admin: one command to a running gryph-broker's admin endpoint (its --admin flag), the
// answer (JSON) on standard output.
//
//   gryph-admin --broker=ipc:///run/gryph/shb.admin subscriptions
//   gryph-admin --broker=ipc:///run/gryph/shb.admin subscription orders-audit
//   gryph-admin --broker=ipc:///run/gryph/shb.admin delete orders-audit
//   gryph-admin --broker=ipc:///run/gryph/shb.admin stats
//
// Exit status: 0 with the answer, 1 when the broker refused the command (its answer names why)
// or did not answer within --timeout, 2 for a bad flag.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "programs/admin_server.h"
#include "programs/program_support.h"

ABSL_FLAG(std::string, broker, "", "the broker's admin endpoint (its --admin flag)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5), "how long to wait for the answer");

int main(int argc, char** argv) {
  using gryph::programs::Die;
  gryph::programs::SetProgramName("gryph-admin");
  absl::SetProgramUsageMessage(
      "one command to a running gryph-broker (see its --admin flag).\n"
      "  gryph-admin --broker=ipc:///run/gryph/shb.admin subscriptions | subscription NAME | "
      "delete NAME | stats | help");
  std::vector<char*> rest = gryph::programs::ParseFlags(argc, argv, "gryph_admin.cc");
  const std::string broker = absl::GetFlag(FLAGS_broker);
  if (broker.empty()) Die("--broker is required (the broker's --admin endpoint)");
  if (rest.size() < 2) Die("name a command: subscriptions, subscription NAME, delete NAME, stats");
  const std::string request = absl::StrJoin(rest.begin() + 1, rest.end(), " ");
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout <= absl::ZeroDuration() || timeout > absl::Hours(1)) {
    Die("--timeout is positive, at most 1h");
  }
  absl::StatusOr<std::string> answer = gryph::programs::AdminRequest(
      broker, request, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  if (!answer.ok()) {
    Die(answer.status().ToString(), absl::IsInvalidArgument(answer.status())
                                        ? gryph::programs::kExitUsage
                                        : gryph::programs::kExitFailure);
  }
  std::printf("%s\n", answer->c_str());
  const nlohmann::json parsed = nlohmann::json::parse(*answer, nullptr, false);
  return parsed.is_object() && parsed.contains("error") ? gryph::programs::kExitFailure : 0;
}
