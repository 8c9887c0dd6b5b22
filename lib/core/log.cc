#include "gryph/log.h"

#include <cstdio>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gryph {

const char* LogLevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

LogSink StderrLogSink() {
  return [](const LogRecord& r) {
    const std::string time =
        absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::Now(), absl::UTCTimeZone());
    // One fprintf: lines from several threads do not interleave.
    std::fprintf(stderr, "%s %s %.*s: %s\n", time.c_str(), LogLevelLetter(r.level),
                 static_cast<int>(r.node.size()), r.node.data(), r.message.c_str());
  };
}

}  // namespace gryph
