// gryph_bench_table: the current table at the top of docs/benchmarks.md, made from the JSON lines
// that gryph_bench prints. scripts/bench-table builds both, runs the workloads, pipes one into the
// other and puts the table between the doc's bench-table markers.
//
// Usage:
//   gryph_bench_table --list_workloads   the workloads the table needs, comma-separated
//   gryph_bench --workloads=$(gryph_bench_table --list_workloads) | gryph_bench_table
//       [--command=TEXT] [--bench_command=TEXT] [--load_before=L] [--revision=TEXT] [--note=TEXT]
//
// Input: one flat JSON object a line, with string, number and null values (what Report::Print
// writes; blank lines are skipped). Output: a Markdown table with one row per entry of kRows,
// numbered notes saying where each target was stated, the machine and the command. When a line
// does not parse, or a figure or baseline a row needs is missing, not a number, or matched by more
// than one line, it prints the problems on stderr and nothing on stdout, and exits with 1: the
// table only ever shows figures of the run it was given.
//
// Run it on the machine that ran gryph_bench (scripts/bench-table does): the CPU model and the
// load average after the run come from /proc; the CPU count and the build type from the JSON.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "fmt/format.h"

ABSL_FLAG(bool, list_workloads, false,
          "print the workloads the table needs, comma-separated, and exit");
ABSL_FLAG(std::string, command, "", "the command that made the table, printed under it");
ABSL_FLAG(std::string, bench_command, "", "the gryph_bench command it ran, printed under it");
ABSL_FLAG(std::string, load_before, "",
          "the 1-minute load average before the run (first field of /proc/loadavg)");
ABSL_FLAG(std::string, note, "", "a sentence for the machine line, e.g. what else ran");
ABSL_FLAG(std::string, revision, "",
          "what was built, e.g. a commit and whether the tree was clean");

namespace {

// ---------------------------------------------------------------------------------------------
// The targets. One row of the table per entry of kRows; this is the only place they are written
// down. A row names its figure, the figure of the same run it is compared with (its baseline; none
// for an absolute bound or a bare floor), the kind of comparison, the bound, and where the target
// was stated (printed as a numbered note under the table; rows sharing a source share a note). To
// add a target, add a row here (and, for a new workload, nothing else: --list_workloads and so
// scripts/bench-table pick it up); to change one, change its row and say where the new one is
// stated. The workload names and JSON keys are gryph_bench's interface and never change.

// One figure of one JSON line: the line of `workload` whose fields match `where` ("key=value",
// several joined by commas, or empty when the workload prints one line), and its number under
// `key`.
struct Figure {
  const char* workload;
  const char* where;
  const char* key;
};

enum class Kind {
  kFloor,         // raw LMDB or the machine, no gryph code: no target; a ratio to baseline if named
  kAtLeast,       // the figure >= bound
  kAtMost,        // the figure <= bound
  kRatioAtLeast,  // figure / baseline >= bound
  kRatioAtMost,   // figure / baseline <= bound
};

struct Row {
  Figure figure;
  Figure baseline;  // baseline.workload == nullptr: none
  Kind kind;
  double bound;
  const char* source;  // where the target was stated, in its words (a note under the table)
};

constexpr Figure kNone = {nullptr, "", ""};
// The literature's standard range workload at its usual size (benchmarks/matcher_workloads.cc).
constexpr const char* kRangesWhere = "subscriptions=1000000,width=0.25,event_attributes=20";

constexpr const char* kFloors =
    "Floors: raw LMDB (sync, one environment) or the machine itself, no gryph code; a ratio is "
    "to a lone `lmdb_commit` of the same run, as the dated logs give it.";
constexpr const char* kIssue6 =
    "Issue #6, end-to-end latency: publish → deliver p50 at 10,000 events/s (1 M deliveries/s) "
    "≤ 2× a lone commit's p50 (`lmdb_commit`).";
constexpr const char* kFloorTargets =
    "Issue #15 (a runtime for every node), latency on the runtime against its floors: "
    "`e2e_latency` p50 ≤ 1.2× `e2e_floor` p50; `publish_latency` p99 at 10,000/s ≤ 1.2× "
    "`lmdb_group_commit_latency` p99.";
constexpr const char* kPublish =
    "The dated logs since 2026-11-30: durable publishing (`publish_sync`, 1 and 4 pubends) ≥ 80% "
    "of raw sync LMDB appends (`lmdb_append`); publish → durable ack p99 at 10,000/s ≤ 1.5× "
    "`lmdb_commit` p99.";
constexpr const char* kPfs =
    "The dated logs, 2026-11-30: nack answers ≥ 1 M events/s; the PFS ≥ 10× the queue per "
    "subscriber it replaces at 10% matching; PFS batch reads ≥ 2 M Q ticks/s; PFS records of "
    "n = 10 subscribers ≥ 70% of a raw append in the same run.";
constexpr const char* kShb =
    "The dated logs since 2026-11-30 (the paper's §5 scenario): `shb_steady` ≥ 1 M deliveries/s; "
    "`shb_churn` ≥ 95% and `shb_all_catchup` (while catching up) ≥ 80% of `shb_steady`.";
constexpr const char* kRecovery =
    "Issue \"partial nack answers stall recovery\": an SHB back from a crash catches up \"within "
    "2× of one unbounded answer whatever the bound\".";
constexpr const char* kNetwork =
    "Issue \"Beyond one process (1 of 2)\": the ZeroMQ channel ≥ 70% of raw ZeroMQ between the "
    "same processes; during a burst of 1,000 reconnections the caught-up subscribers keep ≥ 80% "
    "of their rate and a delivery p99 ≤ 2× normal.";
constexpr const char* kNetFanout =
    "Issue \"Beyond one process (2 of 2)\": `net_fanout` (every node a process, ZeroMQ TCP, sync "
    "at PHB and SHB) ≥ 1,000,000 deliveries/s and ≥ 50% of raw ZeroMQ of the same size and "
    "fan-out between the same processes; `lost` = `duplicated` = 0 with an SHB SIGKILL.";
constexpr const char* kMatcher =
    "docs/matcher.md, \"Against the targets\": inserts and removes ≥ 2,000,000/s in the three "
    "topic shapes, none below 1,000,000/s; `match_content` ≥ 20,000 events/s; `match_concurrent` "
    "2 readers ≥ 1.7× one.";
constexpr const char* kRanges =
    "Issue \"Content matching where every conjunct is a wide range\": `match_ranges` at 10^6 "
    "subscriptions (5 ranges of 25% over 20 attributes) ≥ 250 events/s and ≥ 3× "
    "`match_ranges_scan`; inserts and parses ≥ 1,000,000/s; ≤ 300 bytes per subscription.";

// In the order run: the floors first and the matcher (gigabytes of subscriptions) last.
constexpr Row kRows[] = {
    {{"lmdb_commit", "", "p50_us"}, kNone, Kind::kFloor, 0, kFloors},
    {{"lmdb_commit", "", "p99_us"}, kNone, Kind::kFloor, 0, kFloors},
    {{"lmdb_append", "", "records_per_s"}, kNone, Kind::kFloor, 0, kFloors},
    {{"lmdb_group_commit_latency", "", "p50_us"},
     {"lmdb_commit", "", "p50_us"},
     Kind::kFloor,
     0,
     kFloors},
    {{"lmdb_group_commit_latency", "", "p99_us"},
     {"lmdb_commit", "", "p99_us"},
     Kind::kFloor,
     0,
     kFloors},
    {{"e2e_floor", "", "p50_us"}, {"lmdb_commit", "", "p50_us"}, Kind::kFloor, 0, kFloors},
    {{"thread_wake_latency", "", "cross_cpu_p50_us"}, kNone, Kind::kFloor, 0, kFloors},
    {{"publish_sync", "pubends=1", "events_per_s"},
     {"lmdb_append", "", "records_per_s"},
     Kind::kRatioAtLeast,
     0.8,
     kPublish},
    {{"publish_sync", "pubends=4", "events_per_s"},
     {"lmdb_append", "", "records_per_s"},
     Kind::kRatioAtLeast,
     0.8,
     kPublish},
    {{"publish_latency", "offered_per_s=10000", "p99_us"},
     {"lmdb_commit", "", "p99_us"},
     Kind::kRatioAtMost,
     1.5,
     kPublish},
    {{"publish_latency", "offered_per_s=10000", "p99_us"},
     {"lmdb_group_commit_latency", "", "p99_us"},
     Kind::kRatioAtMost,
     1.2,
     kFloorTargets},
    {{"nack_answer", "", "events_per_s"}, kNone, Kind::kAtLeast, 1e6, kPfs},
    {{"pfs_write", "match_fraction=0.1", "events_per_s"},
     {"subscriber_queue_write", "match_fraction=0.1", "events_per_s"},
     Kind::kRatioAtLeast,
     10,
     kPfs},
    {{"pfs_read", "", "ticks_per_s"}, kNone, Kind::kAtLeast, 2e6, kPfs},
    {{"pfs_records", "n=10", "records_per_s"},
     {"pfs_records", "n=10", "baseline_records_per_s"},
     Kind::kRatioAtLeast,
     0.7,
     kPfs},
    {{"shb_steady", "", "deliveries_per_s"}, kNone, Kind::kAtLeast, 1e6, kShb},
    {{"shb_churn", "", "deliveries_per_s"},
     {"shb_steady", "", "deliveries_per_s"},
     Kind::kRatioAtLeast,
     0.95,
     kShb},
    {{"shb_all_catchup", "", "deliveries_per_s"},
     {"shb_steady", "", "deliveries_per_s"},
     Kind::kRatioAtLeast,
     0.8,
     kShb},
    {{"e2e_latency", "", "p50_us"}, {"lmdb_commit", "", "p50_us"}, Kind::kRatioAtMost, 2, kIssue6},
    {{"e2e_latency", "", "p50_us"},
     {"e2e_floor", "", "p50_us"},
     Kind::kRatioAtMost,
     1.2,
     kFloorTargets},
    {{"shb_recovery", "max_nack_answer_bytes=67108864", "events_per_s"},
     {"shb_recovery", "max_nack_answer_bytes=1073741824", "events_per_s"},
     Kind::kRatioAtLeast,
     0.5,
     kRecovery},
    {{"shb_recovery", "max_nack_answer_bytes=1048576", "events_per_s"},
     {"shb_recovery", "max_nack_answer_bytes=1073741824", "events_per_s"},
     Kind::kRatioAtLeast,
     0.5,
     kRecovery},
    {{"shb_recovery", "max_nack_answer_bytes=65536", "events_per_s"},
     {"shb_recovery", "max_nack_answer_bytes=1073741824", "events_per_s"},
     Kind::kRatioAtLeast,
     0.5,
     kRecovery},
    {{"shb_recovery", "max_nack_answer_bytes=4096", "events_per_s"},
     {"shb_recovery", "max_nack_answer_bytes=1073741824", "events_per_s"},
     Kind::kRatioAtLeast,
     0.5,
     kRecovery},
    {{"zmq_channel", "", "msgs_per_s"},
     {"zmq_channel", "", "zmq_raw_msgs_per_s"},
     Kind::kRatioAtLeast,
     0.7,
     kNetwork},
    {{"reconnect_storm", "", "storm_deliveries_per_s"},
     {"reconnect_storm", "", "steady_deliveries_per_s"},
     Kind::kRatioAtLeast,
     0.8,
     kNetwork},
    {{"reconnect_storm", "", "storm_p99_us"},
     {"reconnect_storm", "", "steady_p99_us"},
     Kind::kRatioAtMost,
     2,
     kNetwork},
    {{"net_fanout", "", "deliveries_per_s"}, kNone, Kind::kAtLeast, 1e6, kNetFanout},
    {{"net_fanout", "", "deliveries_per_s"},
     {"net_fanout", "", "zmq_raw_msgs_per_s"},
     Kind::kRatioAtLeast,
     0.5,
     kNetFanout},
    {{"net_fanout", "", "lost"}, kNone, Kind::kAtMost, 0, kNetFanout},
    {{"net_fanout", "", "duplicated"}, kNone, Kind::kAtMost, 0, kNetFanout},
    {{"match_one_topic", "", "inserts_per_s"}, kNone, Kind::kAtLeast, 2e6, kMatcher},
    {{"match_one_topic", "", "removes_per_s"}, kNone, Kind::kAtLeast, 2e6, kMatcher},
    {{"match_flat", "", "inserts_per_s"}, kNone, Kind::kAtLeast, 2e6, kMatcher},
    {{"match_flat", "", "removes_per_s"}, kNone, Kind::kAtLeast, 2e6, kMatcher},
    {{"match_deep", "", "inserts_per_s"}, kNone, Kind::kAtLeast, 2e6, kMatcher},
    {{"match_deep", "", "removes_per_s"}, kNone, Kind::kAtLeast, 2e6, kMatcher},
    {{"match_content", "", "events_per_s"}, kNone, Kind::kAtLeast, 2e4, kMatcher},
    {{"match_concurrent", "readers=2", "events_per_s"},
     {"match_concurrent", "readers=1", "events_per_s"},
     Kind::kRatioAtLeast,
     1.7,
     kMatcher},
    {{"match_ranges", kRangesWhere, "events_per_s"}, kNone, Kind::kAtLeast, 250, kRanges},
    {{"match_ranges", kRangesWhere, "events_per_s"},
     {"match_ranges_scan", kRangesWhere, "events_per_s"},
     Kind::kRatioAtLeast,
     3,
     kRanges},
    {{"match_ranges", kRangesWhere, "inserts_per_s"}, kNone, Kind::kAtLeast, 1e6, kRanges},
    {{"match_ranges", kRangesWhere, "parses_per_s"}, kNone, Kind::kAtLeast, 1e6, kRanges},
    {{"match_ranges", kRangesWhere, "bytes_per_subscription"}, kNone, Kind::kAtMost, 300, kRanges},
};

// ---------------------------------------------------------------------------------------------
// The input: flat JSON objects, one a line.

using Value = std::variant<std::monostate, double, std::string>;  // null, number, string

struct Line {
  int number = 0;  // in the input, from 1
  std::vector<std::pair<std::string, Value>> fields;

  const Value* Find(std::string_view key) const {
    for (const auto& [k, v] : fields) {
      if (k == key) return &v;
    }
    return nullptr;
  }
};

// Parses one flat object: {"key": "string" | number | true | false | null, ...}. No nesting, no
// arrays: gryph_bench prints none.
class LineParser {
 public:
  explicit LineParser(std::string_view text) : text_(text) {}

  // Returns an empty string on success, else what is wrong and where.
  std::string Parse(Line* line) {
    SkipSpace();
    if (!Take('{')) return Error("expected '{'");
    SkipSpace();
    if (Take('}')) return AtEnd();
    while (true) {
      SkipSpace();
      std::string key;
      if (!ParseString(&key)) return Error("expected a string key");
      SkipSpace();
      if (!Take(':')) return Error("expected ':'");
      SkipSpace();
      Value value;
      if (!ParseValue(&value)) return Error("expected a string, a number or null");
      line->fields.emplace_back(std::move(key), std::move(value));
      SkipSpace();
      if (Take('}')) return AtEnd();
      if (!Take(',')) return Error("expected ',' or '}'");
    }
  }

 private:
  std::string AtEnd() {
    SkipSpace();
    return pos_ == text_.size() ? "" : Error("text after the object");
  }
  std::string Error(std::string_view what) const {
    return fmt::format("{} at column {}", what, pos_ + 1);
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\n')) {
      ++pos_;
    }
  }
  bool Take(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ParseString(std::string* out) {
    if (!Take('"')) return false;
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ == text_.size()) return false;
      switch (const char e = text_[pos_++]; e) {
        case '"':
        case '\\':
        case '/': *out += e; break;
        case 'n': *out += '\n'; break;
        case 't': *out += '\t'; break;
        case 'r': *out += '\r'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        default: return false;  // \u escapes: gryph_bench writes none
      }
    }
    return false;
  }
  bool ParseValue(Value* out) {
    if (pos_ < text_.size() && text_[pos_] == '"') {
      std::string s;
      if (!ParseString(&s)) return false;
      *out = std::move(s);
      return true;
    }
    if (text_.substr(pos_, 4) == "null") {
      pos_ += 4;
      *out = std::monostate();
      return true;
    }
    // A boolean (match_ranges' "exact") reads as 1 or 0.
    for (const auto& [word, number] : {std::pair<std::string_view, double>{"true", 1},
                                       std::pair<std::string_view, double>{"false", 0}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        *out = number;
        return true;
      }
    }
    double d = 0;
    const char* begin = text_.data() + pos_;
    const auto [end, ec] = std::from_chars(begin, text_.data() + text_.size(), d);
    if (ec != std::errc() || end == begin) return false;
    pos_ += static_cast<size_t>(end - begin);
    *out = d;
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Finding a row's figures in the lines.

bool WhereMatches(const Line& line, std::string_view where) {
  if (where.empty()) return true;
  if (const size_t comma = where.find(','); comma != std::string_view::npos) {
    return WhereMatches(line, where.substr(0, comma)) &&
           WhereMatches(line, where.substr(comma + 1));
  }
  const size_t eq = where.find('=');
  const Value* v = line.Find(where.substr(0, eq));
  if (v == nullptr) return false;
  const std::string_view want = where.substr(eq + 1);
  if (const auto* s = std::get_if<std::string>(v)) return *s == want;
  if (const auto* d = std::get_if<double>(v)) {
    double w = 0;
    const auto [end, ec] = std::from_chars(want.data(), want.data() + want.size(), w);
    return ec == std::errc() && end == want.data() + want.size() && w == *d;
  }
  return false;
}

std::string Name(const Figure& f) {
  return std::string(f.where).empty() ? fmt::format("{} {}", f.workload, f.key)
                                      : fmt::format("{} ({}) {}", f.workload, f.where, f.key);
}

// Appends `error` unless it is there already (a baseline serves several rows).
void AddError(std::vector<std::string>* errors, std::string error) {
  if (std::find(errors->begin(), errors->end(), error) == errors->end()) {
    errors->push_back(std::move(error));
  }
}

// The number of `figure` in `lines`, or nullopt with a reason appended to `errors`.
std::optional<double> Lookup(const std::vector<Line>& lines, const Figure& figure,
                             std::vector<std::string>* errors) {
  const Line* found = nullptr;
  int matches = 0;
  for (const Line& line : lines) {
    const Value* w = line.Find("workload");
    const auto* name = w != nullptr ? std::get_if<std::string>(w) : nullptr;
    if (name == nullptr || *name != figure.workload || !WhereMatches(line, figure.where)) continue;
    found = &line;
    ++matches;
  }
  if (matches != 1) {
    AddError(errors, fmt::format("{}: {} lines match, want 1", Name(figure), matches));
    return std::nullopt;
  }
  const Value* v = found->Find(figure.key);
  const auto* d = v != nullptr ? std::get_if<double>(v) : nullptr;
  if (d == nullptr) {
    AddError(errors,
             fmt::format("{}: no number under that key (line {})", Name(figure), found->number));
    return std::nullopt;
  }
  return *d;
}

// ---------------------------------------------------------------------------------------------
// Formatting.

bool IsDuration(std::string_view key) { return key.ends_with("_us") || key.ends_with("_ms"); }

// The unit of a key, from its suffix: p50_us -> µs, deliveries_per_s -> deliveries/s.
std::string Unit(std::string_view key) {
  if (key.ends_with("_us")) return "µs";
  if (key.ends_with("_ms")) return "ms";
  if (key.ends_with("_per_s")) {
    std::string_view what = key.substr(0, key.size() - 6);
    if (what.starts_with("baseline_")) what.remove_prefix(9);
    return fmt::format("{}/s", what);
  }
  return "";
}

// 12345 -> "12,345".
std::string Thousands(double v) {
  const std::string digits = fmt::format("{:.0f}", std::fabs(v));
  std::string out = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Three significant digits; rates in k and M, durations whole above 100.
std::string Number(double v, std::string_view key) {
  const double a = std::fabs(v);
  if (IsDuration(key)) return a >= 99.95 ? Thousands(v) : fmt::format("{:.3g}", v);
  if (a >= 999.5e3) return fmt::format("{:.3g} M", v / 1e6);
  if (a >= 9999.5) return fmt::format("{:.3g} k", v / 1e3);
  return a >= 999.5 ? Thousands(v) : fmt::format("{:.3g}", v);
}

std::string Ratio(double r) {
  return r < 9.995 ? fmt::format("{:.2f}×", r) : fmt::format("{:.1f}×", r);
}

std::string Workload(const Figure& f) {
  std::string out = fmt::format("`{}`", f.workload);
  if (!std::string(f.where).empty()) {
    std::string where = f.where;
    where.replace(where.find('='), 1, " = ");
    out += fmt::format(" ({})", where);
  }
  return out;
}

std::string FirstLineOf(const char* path, std::string_view prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(prefix)) return line;
  }
  return "";
}

std::string CpuModel() {
  std::string line = FirstLineOf("/proc/cpuinfo", "model name");
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return "CPU model unknown";
  const size_t start = line.find_first_not_of(" \t", colon + 1);
  return start == std::string::npos ? "CPU model unknown" : line.substr(start);
}

std::string LoadNow() {
  std::string line = FirstLineOf("/proc/loadavg", "");
  return line.substr(0, line.find(' '));
}

std::string Compiler() {
#if defined(__clang__)
  return "Clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "an unknown compiler";
#endif
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// The distinct values of one string field over all lines, joined with " / ".
std::string Distinct(const std::vector<Line>& lines, std::string_view key) {
  std::vector<std::string> seen;
  for (const Line& line : lines) {
    const Value* v = line.Find(key);
    if (v == nullptr) continue;
    std::string text;
    if (const auto* s = std::get_if<std::string>(v)) text = *s;
    if (const auto* d = std::get_if<double>(v)) text = fmt::format("{:g}", *d);
    if (std::find(seen.begin(), seen.end(), text) == seen.end()) seen.push_back(text);
  }
  if (seen.empty()) return "unknown";
  std::string out = seen[0];
  for (size_t i = 1; i < seen.size(); ++i) out += " / " + seen[i];
  return out;
}

int ListWorkloads() {
  std::vector<std::string> names;
  auto add = [&names](const char* name) {
    if (name != nullptr && std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(name);
    }
  };
  for (const Row& row : kRows) {
    add(row.figure.workload);
    add(row.baseline.workload);
  }
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  std::printf("%s\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "reads gryph_bench's JSON lines on stdin and prints docs/benchmarks.md's current table");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_list_workloads)) return ListWorkloads();

  std::vector<Line> lines;
  std::vector<std::string> errors;
  std::string text;
  for (int number = 1; std::getline(std::cin, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Line line;
    line.number = number;
    if (std::string error = LineParser(text).Parse(&line); !error.empty()) {
      errors.push_back(fmt::format("line {}: {}", number, error));
      continue;
    }
    lines.push_back(std::move(line));
  }

  std::vector<const char*> sources;  // in order of first use; a row's note is its index + 1
  std::string table =
      "| workload | figure | value | baseline in the same run | ratio | target | met |\n"
      "| --- | --- | ---: | --- | ---: | --- | :---: |\n";
  for (const Row& row : kRows) {
    const std::optional<double> value = Lookup(lines, row.figure, &errors);
    std::optional<double> base;
    if (row.baseline.workload != nullptr) base = Lookup(lines, row.baseline, &errors);
    if (!value || (row.baseline.workload != nullptr && !base)) continue;

    size_t note = 0;
    while (note < sources.size() && std::string_view(sources[note]) != row.source) ++note;
    if (note == sources.size()) sources.push_back(row.source);

    std::string baseline = "—";
    std::string ratio = "—";
    if (base) {
      baseline = fmt::format("{} `{}` {}", Workload(row.baseline), row.baseline.key,
                             Number(*base, row.baseline.key));
      if (*base != 0) ratio = Ratio(*value / *base);
    }
    std::string target;
    bool met = false;
    switch (row.kind) {
      case Kind::kFloor: target = "floor"; break;
      case Kind::kAtLeast:
        target = fmt::format("≥ {}", Number(row.bound, row.figure.key));
        met = *value >= row.bound;
        break;
      case Kind::kAtMost:
        target = fmt::format("≤ {}", Number(row.bound, row.figure.key));
        met = *value <= row.bound;
        break;
      case Kind::kRatioAtLeast:
        target = fmt::format("≥ {:g}× baseline", row.bound);
        met = *base != 0 && *value / *base >= row.bound;
        break;
      case Kind::kRatioAtMost:
        target = fmt::format("≤ {:g}× baseline", row.bound);
        met = *base != 0 && *value / *base <= row.bound;
        break;
    }
    const std::string unit = Unit(row.figure.key);
    table += fmt::format("| {} | `{}`{} | {} | {} | {} | {} [{}] | {} |\n", Workload(row.figure),
                         row.figure.key, unit.empty() ? "" : fmt::format(" ({})", unit),
                         Number(*value, row.figure.key), baseline, ratio, target, note + 1,
                         row.kind == Kind::kFloor ? "—" : (met ? "✓" : "✗"));
  }
  if (!errors.empty()) {
    for (const std::string& e : errors) std::fprintf(stderr, "gryph_bench_table: %s\n", e.c_str());
    return 1;
  }

  std::string out = table + "\n";
  for (size_t i = 0; i < sources.size(); ++i) out += fmt::format("- [{}] {}\n", i + 1, sources[i]);
  if (!sources.empty()) out += "\n";

  const std::string before = absl::GetFlag(FLAGS_load_before);
  const std::string note = absl::GetFlag(FLAGS_note);
  const std::string revision = absl::GetFlag(FLAGS_revision);
  out += fmt::format(
      "Machine: {} CPUs ({}), {} build{} by {}; 1-minute load average {}{} after the run; {}.{}\n",
      Distinct(lines, "cpus"), CpuModel(), Distinct(lines, "build"),
      revision.empty() ? "" : " of " + revision, Compiler(),
      before.empty() ? "" : before + " before and ", LoadNow(), UtcNow(),
      note.empty() ? "" : " " + note);
  const std::string command = absl::GetFlag(FLAGS_command);
  const std::string bench_command = absl::GetFlag(FLAGS_bench_command);
  if (!command.empty()) {
    out +=
        fmt::format("\nCommand: `{}`{}\n", command,
                    bench_command.empty() ? "" : fmt::format(", which ran `{}`.", bench_command));
  } else if (!bench_command.empty()) {
    out += fmt::format("\nCommand: `{}`\n", bench_command);
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}
