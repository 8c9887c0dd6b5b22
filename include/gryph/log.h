// What gryph's nodes tell their operator: a broker stopping and why, a storage error, damaged
// data found, a session fenced or timed out, a Gap issued and to whom, a subscription expired.
//
// Each node takes a LogSink in its options (`log`) and reports through it, one record per
// occurrence (occurrences that can repeat at a high rate, such as a pubend releasing beyond what
// downstream acknowledged, are reported when they begin). An empty sink — the default — reports
// nothing: the library never writes to standard output or standard error by itself. Every error
// a record tells of also stays a Status where the API returns one (a node's status(), a
// callback's result): the log is for the humans watching, not the program's control flow.
//
// A sink may be called on a broker's commit thread as well as on the thread that owns the node,
// and from several nodes at once: it must be thread-safe, quick, and must not call into gryph.

#ifndef GRYPH_LOG_H_
#define GRYPH_LOG_H_

#include <functional>
#include <string>

#include "absl/strings/string_view.h"

namespace gryph {

enum class LogLevel {
  kInfo,     // an administrative act (a subscription deleted), a broker's recovery and its time
  kWarning,  // a subscriber affected: a Gap, a fenced or timed-out session, an expiry
  kError,    // a node or its data damaged: a broker stopped, a damaged row, a failed pubend
};

struct LogRecord {
  LogLevel level;
  absl::string_view node;  // the kind of node: "shb", "pubend 3", "phb"
  std::string message;
};

using LogSink = std::function<void(const LogRecord&)>;

// A sink that writes each record as one line on standard error, with the time (UTC, RFC 3339)
// and its level: "2026-12-02T21:43:33.123456Z W shb: subscription 'audit' got a Gap ...".
LogSink StderrLogSink();

// "I", "W", "E".
const char* LogLevelLetter(LogLevel level);

}  // namespace gryph

#endif  // GRYPH_LOG_H_
