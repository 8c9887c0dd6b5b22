// gryph_bitflip_campaign: how single-bit flips across the pages of a real store are handled.
//
// Usage: gryph_bitflip_campaign [--trials=N] [--seed=S] [--events=E] [--timeout_s=T] [--verbose]
//                               [--no_lookups] [--offset=O --bit=B]
//   --trials     flips to try (default 300), each at a random offset and bit drawn from --seed
//                (default: from the clock; printed either way)
//   --events     events published into the store (default 2000)
//   --timeout_s  how long a trial may take before it counts as a hang (default 10)
//   --no_lookups judge by VerifyStorage and the scan alone, without the Get and Seek lookups
//   --offset, --bit  one trial flipping that bit of that byte: to rerun a trial a line printed
//
// Builds a store through the library itself — a PublisherHostingBroker with two pubends over
// OpenLmdbStorage, publishers with sequence numbers, a released prefix reclaimed part-way so that
// the file holds free pages too — and records its content (every row of every table). Each trial
// then flips one random bit at a random offset of a copy of data.mdb, and a forked child opens
// the copy, runs VerifyStorage, scans every table (stepping over damaged rows), looks every
// pristine row up with Get and with a fresh cursor's Seek (the read a pubend answers a nack
// with), and compares what it read with the pristine content. The child runs in its own process
// because damage to LMDB's page structure, which the row checksums do not cover
// (gryph/storage.h), can crash or hang it.
//
// Each trial falls in exactly one class:
//   open_failed_dataloss  OpenLmdbStorage failed. Any code counts (a damaged page, table
//                         directory or magic is DATA_LOSS; a flip in the format version is
//                         FAILED_PRECONDITION, because it reads as another format);
//                         "open_failed_codes" breaks the count down by code.
//   detected              the damage was reported — VerifyStorage listed damaged rows or a
//                         structure error, or a read failed — and nothing was read back wrong.
//                         "detected_structure" counts those with a structure error (the store
//                         is unusable until restored) rather than only damaged rows.
//   silent                the bad class: a row was read back (scan, Get or Seek) with a key or
//                         value that is not the pristine one, out of order or twice; or a
//                         lookup missed a row the scan read intact; or pristine rows are missing
//                         with nothing to account for them. "silent_by_lookup" counts those that
//                         only a lookup revealed (the scan read everything right),
//                         "silent_seek" those where a Seek went wrong. The program exits 1 if
//                         there is any.
//   benign                opened, verified clean, content identical: the bit was unused (free
//                         space in a page, a free page, a field no read depends on).
//   crash                 the child died (by a signal, or exited without a verdict).
//   hang                  the child gave no verdict within --timeout_s; it was killed.
// A missing pristine row is accounted for when it is itself reported damaged, when the walk
// stopped at a structure error, or by a damaged row at a key the pristine store lacks (or at one
// also read back intact, or in a table it lacks): the same row with its key or table name
// flipped, one such report for one missing row.
//
// Prints a line per silent, crashed or hung trial (every trial with --verbose) with the offset and
// bit to reproduce it, then one JSON line of figures; "by_page_kind" splits the verdicts by the
// kind of page the flipped byte is in (by its header: a free page counts as what it last held).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gryph/event.h"
#include "gryph/in_process_channel.h"
#include "gryph/message.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/storage.h"
#include "lib/util/status_macros.h"

namespace gryph {
namespace {

// The store depends only on --events, not on --seed: runs under different seeds sample the same
// file, so their figures add up.
constexpr uint64_t kBuildSeed = 0x6269'7466'6c69'7021;
constexpr PubendId kPubends[] = {PubendId{1}, PubendId{2}};
constexpr int kPublishers = 5;
// Small, so that the map (address space only) stays small in every child.
constexpr uint64_t kMapBytes = uint64_t{4} << 20;

struct Flags {
  uint64_t trials = 300;
  uint64_t seed = 0;
  uint64_t events = 2000;
  int timeout_s = 10;
  bool verbose = false;
  bool lookups = true;
  std::optional<uint64_t> offset;
  int bit = 0;
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  bool seeded = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    absl::string_view value;
    auto take = [&](absl::string_view prefix) {
      if (!absl::StartsWith(arg, prefix)) return false;
      value = arg.substr(prefix.size());
      return true;
    };
    bool ok = true;
    if (take("--trials=")) {
      ok = absl::SimpleAtoi(value, &flags.trials);
    } else if (take("--seed=")) {
      ok = absl::SimpleAtoi(value, &flags.seed);
      seeded = true;
    } else if (take("--events=")) {
      ok = absl::SimpleAtoi(value, &flags.events) && flags.events >= 10;
    } else if (take("--timeout_s=")) {
      ok = absl::SimpleAtoi(value, &flags.timeout_s) && flags.timeout_s > 0;
    } else if (take("--offset=")) {
      uint64_t offset = 0;
      ok = absl::SimpleAtoi(value, &offset);
      flags.offset = offset;
    } else if (take("--bit=")) {
      ok = absl::SimpleAtoi(value, &flags.bit) && flags.bit >= 0 && flags.bit < 8;
    } else if (arg == "--verbose") {
      flags.verbose = true;
    } else if (arg == "--no_lookups") {
      flags.lookups = false;
    } else {
      ok = false;
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad argument \"", arg,
                       "\"; usage: gryph_bitflip_campaign [--trials=N] [--seed=S] [--events=E>=10] "
                       "[--timeout_s=T>0] [--verbose] [--no_lookups] [--offset=O --bit=B(0..7)]"));
    }
  }
  if (!seeded) flags.seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  if (flags.offset) flags.trials = 1;
  return flags;
}

// Every row of every table: table -> key -> value.
using Content = std::map<std::string, std::map<std::string, std::string>>;

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class ScratchDir {
 public:
  static absl::StatusOr<std::unique_ptr<ScratchDir>> Create() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gryph-bitflip-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
    }
    return std::unique_ptr<ScratchDir>(new ScratchDir(tmpl));
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  explicit ScratchDir(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
};

StorageOptions StoreOptions(const std::filesystem::path& dir) {
  StorageOptions so;
  so.path = dir.string();
  // The store is built once and only read in the trials; nothing here needs fsync.
  so.durability = Durability::kNoSync;
  so.initial_map_bytes = kMapBytes;
  return so;
}

// ---- The pristine store -------------------------------------------------------------------------

EventRef MakeEvent(uint64_t id, absl::string_view symbol, std::mt19937_64& rng) {
  static constexpr absl::string_view kRegions[] = {"us", "eu", "apac"};
  std::string payload(20 + rng() % 281, '\0');  // 20..300 bytes
  for (char& c : payload) c = static_cast<char>(rng());
  Event e;
  e.SetTopic(absl::StrCat("orders/", kRegions[rng() % 3], "/", symbol))
      .SetInt64("id", static_cast<int64_t>(id))
      .SetDouble("price", static_cast<double>(rng() % 100000) / 100.0)
      .SetString("symbol", symbol)
      .SetBool("urgent", rng() % 10 == 0)
      .SetPayload(payload);
  return MakeEventRef(std::move(e));
}

// Publishes `events` events through a PHB with two pubends over a fresh LMDB store at `dir`,
// committing groups of 1..16 by hand under a fake clock. After 60% of them, the downstream node
// releases the older 40% of each pubend's events, which are reclaimed: the rest of the events
// are written partly into the freed pages, as in a store that has run for a while.
absl::Status BuildStore(const std::filesystem::path& dir, uint64_t events) {
  std::mt19937_64 rng(kBuildSeed);
  InProcessNetwork net;
  GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Channel> shb, net.Connect("shb"));
  // The knowledge stream is not under test: the downstream node drops it.
  shb->SetReceiver([](absl::string_view, Message) {});
  GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Channel> channel, net.Connect("phb"));
  absl::Time now = absl::FromUnixMicros(1'700'000'000'000'000);
  PublisherHostingBrokerOptions o;
  for (PubendId p : kPubends) o.pubends.push_back(PubendOptions{p});
  o.downstream = {"shb"};
  o.commit_thread = false;
  o.clock = [&now] { return now; };

  GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Storage> storage, OpenLmdbStorage(StoreOptions(dir)));
  GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<PublisherHostingBroker> phb,
                         PublisherHostingBroker::Open(o, storage.get(), channel.get()));
  std::map<PubendId, std::vector<Tick>> ticks;
  uint64_t acked = 0;
  absl::Status failure;
  uint64_t sequences[kPublishers] = {};
  auto flush = [&]() -> absl::Status {
    GRYPH_RETURN_IF_ERROR(phb->Flush());
    net.DeliverAll();
    return failure;
  };
  const uint64_t release_at = events * 3 / 5;
  for (uint64_t i = 0; i < events; ++i) {
    now += absl::Microseconds(1 + static_cast<int64_t>(rng() % 5));
    const std::string symbol = absl::StrCat("SYM", rng() % 40);
    const int publisher = static_cast<int>(rng() % kPublishers);
    const PubendId p = PubendForKey(symbol, phb->pubend_ids());
    phb->Publish(p, absl::StrCat("publisher-", publisher), ++sequences[publisher],
                 MakeEvent(i, symbol, rng), [&, p](absl::StatusOr<Tick> tick) {
                   if (!tick.ok()) {
                     if (failure.ok()) failure = tick.status();
                     return;
                   }
                   ++acked;
                   ticks[p].push_back(*tick);
                 });
    if (rng() % 8 == 0) GRYPH_RETURN_IF_ERROR(flush());
    if (i + 1 == release_at) {
      GRYPH_RETURN_IF_ERROR(flush());
      ReleaseMessage release;
      for (PubendId q : kPubends) {
        const std::vector<Tick>& t = ticks[q];
        if (t.empty()) return absl::InternalError("a pubend got no events before the release");
        release.entries.push_back({q, t[t.size() * 2 / 5], phb->pubend(q)->committed_tick()});
      }
      GRYPH_RETURN_IF_ERROR(phb->HandleMessage("shb", release));
      // The release commits first; reclaiming runs from OnTimer once the L prefix is durable.
      for (int round = 0; round < 3; ++round) {
        GRYPH_RETURN_IF_ERROR(flush());
        phb->OnTimer(now);
      }
      GRYPH_RETURN_IF_ERROR(flush());
      for (const ReleaseEntry& e : release.entries) {
        if (phb->pubend(e.pubend)->l_prefix() < e.released) {
          return absl::InternalError(absl::StrCat("pubend ", e.pubend.value, " did not release"));
        }
      }
    }
  }
  GRYPH_RETURN_IF_ERROR(flush());
  if (acked != events) {
    return absl::InternalError(absl::StrCat(acked, " of ", events, " publishes acknowledged"));
  }
  for (PubendId p : kPubends) GRYPH_RETURN_IF_ERROR(phb->pubend(p)->status());
  return absl::OkStatus();
}

// The content of the store at `dir`, which must verify clean.
absl::StatusOr<Content> ReadContent(const std::filesystem::path& dir) {
  GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Storage> storage, OpenLmdbStorage(StoreOptions(dir)));
  GRYPH_ASSIGN_OR_RETURN(StorageVerifyReport report, VerifyStorage(*storage));
  if (!report.clean()) return absl::InternalError("the pristine store does not verify clean");
  GRYPH_ASSIGN_OR_RETURN(std::vector<std::string> tables, storage->ListTables());
  Content content;
  for (const std::string& table : tables) {
    std::map<std::string, std::string>& rows = content[table];
    GRYPH_RETURN_IF_ERROR(
        storage->Scan(table, "", "", [&](absl::string_view key, absl::string_view value) {
          rows.emplace(std::string(key), std::string(value));
          return true;
        }));
  }
  return content;
}

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path.string()));
  return bytes;
}

absl::Status WriteFile(const std::filesystem::path& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

// ---- One trial, in the child --------------------------------------------------------------------

enum class Verdict { kOpenFailed, kDetected, kSilent, kBenign, kCrash, kHang };
constexpr int kVerdicts = 6;

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kOpenFailed: return "open_failed_dataloss";
    case Verdict::kDetected: return "detected";
    case Verdict::kSilent: return "silent";
    case Verdict::kBenign: return "benign";
    case Verdict::kCrash: return "crash";
    case Verdict::kHang: return "hang";
  }
  return "?";
}

// What the child found. Only the first report and the first silent finding are kept (with
// counts): a damaged page structure can make a walk go on for long, and the child's memory
// must not grow with it.
struct Findings {
  uint64_t reports = 0;
  std::string first_report;
  bool structure = false;  // a walk or a read stopped at an error that is not one damaged row
  // Silent findings by the read that made them.
  enum Read { kScan, kGet, kSeek };
  uint64_t silent[3] = {};
  std::string first_silent;

  void Report(const absl::Status& status) {
    if (reports++ == 0) first_report = status.ToString();
    if (!DamagedRowKey(status)) structure = true;
  }
  uint64_t silent_total() const { return silent[kScan] + silent[kGet] + silent[kSeek]; }
  void Silent(Read read, std::string what) {
    if (silent_total() == 0) first_silent = std::move(what);
    ++silent[read];
  }
};

std::string Printable(absl::string_view table, absl::string_view key) {
  return absl::StrCat(table, "/\"", absl::CHexEscape(key), "\"");
}

using RowSet = std::set<std::pair<std::string, std::string>>;

// Walks every table the store lists, stepping over damaged rows, and checks each row it gets
// against the pristine content. Fills *intact with the pristine rows read back unchanged.
void ScanAll(Storage& storage, const Content& pristine, Findings& f, RowSet* intact) {
  absl::StatusOr<std::vector<std::string>> tables = storage.ListTables();
  if (!tables.ok()) {
    f.Report(tables.status());
    return;
  }
  std::vector<std::pair<std::string, std::string>> damaged;  // as reported, repeats kept
  for (const std::string& table : *tables) {
    absl::StatusOr<std::unique_ptr<Cursor>> cursor = storage.NewCursor(table);
    if (!cursor.ok()) {
      f.Report(cursor.status());
      continue;
    }
    auto want = pristine.find(table);
    Cursor& c = **cursor;
    std::optional<std::string> previous;
    c.SeekToFirst();
    for (;;) {
      for (; c.Valid(); c.Next()) {
        const std::string key(c.key());
        if (previous && key <= *previous) {
          f.Silent(Findings::kScan,
                   absl::StrCat("scan: ", Printable(table, key), " returned after ",
                                Printable(table, *previous), " (out of order)"));
        }
        previous = key;
        if (want == pristine.end()) {
          f.Silent(Findings::kScan,
                   absl::StrCat("scan: ", Printable(table, key),
                                " returned from a table the pristine store lacks"));
          continue;
        }
        auto row = want->second.find(key);
        if (row == want->second.end()) {
          f.Silent(Findings::kScan, absl::StrCat("scan: ", Printable(table, key),
                                                 " returned, a key the pristine store lacks"));
        } else if (row->second != c.value()) {
          f.Silent(Findings::kScan,
                   absl::StrCat("scan: ", Printable(table, key), " returned with a changed value"));
        } else {
          intact->emplace(table, key);
        }
      }
      std::optional<std::string> key = DamagedRowKey(c.status());
      if (!key) break;
      f.Report(c.status());
      damaged.emplace_back(table, *std::move(key));
      c.Next();  // from the damaged row, which the cursor stands on
    }
    if (!c.status().ok()) f.Report(c.status());
  }
  if (f.structure) return;  // the walk stopped short: missing rows are accounted for
  // A damaged row at a pristine row's key accounts for that row. One at a key the pristine store
  // lacks, or at a key read back intact as well, is some other row with its key (or its table's
  // name) flipped: it accounts for one missing row, whichever.
  RowSet named;
  uint64_t foreign_damaged = 0;
  for (const auto& row : damaged) {
    auto t = pristine.find(row.first);
    if (t != pristine.end() && t->second.contains(row.second) && !intact->contains(row) &&
        named.insert(row).second) {
      continue;
    }
    ++foreign_damaged;
  }
  uint64_t missing = 0;
  std::string first_missing;
  for (const auto& [table, rows] : pristine) {
    for (const auto& [key, value] : rows) {
      const std::pair<std::string, std::string> row(table, key);
      if (intact->contains(row) || named.contains(row)) continue;
      if (missing++ == 0) first_missing = Printable(table, key);
    }
  }
  if (missing > foreign_damaged) {
    f.Silent(Findings::kScan,
             absl::StrCat("scan: ", missing, " pristine rows missing (first ", first_missing,
                          ") against ", foreign_damaged, " damaged rows at other keys"));
  }
}

// Looks every pristine row up, with Get and with a cursor's Seek (how a pubend answers a nack):
// a lookup descends through branch pages and binary-searches a leaf, which a scan never does, so
// damage that misleads a search shows here only.
void LookUpAll(Storage& storage, const Content& pristine, Findings& f, const RowSet& intact) {
  for (const auto& [table, rows] : pristine) {
    for (const auto& [key, value] : rows) {
      absl::StatusOr<std::optional<std::string>> got = storage.Get(table, key);
      if (!got.ok()) {
        f.Report(got.status());
      } else if (!got->has_value()) {
        // A row the scan did not read back is judged there.
        if (intact.contains({table, key})) {
          f.Silent(Findings::kGet, absl::StrCat("get: ", Printable(table, key),
                                                " absent, though the scan read it"));
        }
      } else if (**got != value) {
        f.Silent(Findings::kGet,
                 absl::StrCat("get: ", Printable(table, key), " with a changed value"));
      }
    }
    // A fresh cursor for each seek, as a pubend takes one per nack: a positioned cursor would
    // search its current page first and never consult the branch pages.
    for (const auto& [key, value] : rows) {
      absl::StatusOr<std::unique_ptr<Cursor>> cursor = storage.NewCursor(table);
      if (!cursor.ok()) {
        f.Report(cursor.status());
        break;
      }
      Cursor& c = **cursor;
      c.Seek(key);
      if (!c.Valid()) {
        if (!c.status().ok()) {
          f.Report(c.status());  // a damaged row where the seek landed: reported
        } else if (intact.contains({table, key})) {
          f.Silent(Findings::kSeek,
                   absl::StrCat("seek: to ", Printable(table, key),
                                " found no key at or after it, though the scan read it"));
        }
        if (!c.status().ok() && !DamagedRowKey(c.status())) break;  // sticky from here on
        continue;
      }
      if (c.key() == key) {
        if (c.value() != value) {
          f.Silent(Findings::kSeek,
                   absl::StrCat("seek: ", Printable(table, key), " with a changed value"));
        }
      } else if (intact.contains({table, key})) {
        f.Silent(Findings::kSeek,
                 absl::StrCat("seek: to ", Printable(table, key), " landed on ",
                              Printable(table, c.key()), ", though the scan read it"));
      }
    }
  }
}

struct ChildReport {
  Verdict verdict;
  std::string tag;     // open: the status code; detected: rows|structure; silent: the reads
  std::string detail;  // the first finding
};

ChildReport Examine(const std::filesystem::path& dir, const Content& pristine, bool lookups) {
  absl::StatusOr<std::unique_ptr<Storage>> opened = OpenLmdbStorage(StoreOptions(dir));
  if (!opened.ok()) {
    return {Verdict::kOpenFailed, absl::StatusCodeToString(opened.status().code()),
            opened.status().ToString()};
  }
  Storage& storage = **opened;
  Findings f;
  absl::StatusOr<StorageVerifyReport> report = VerifyStorage(storage);
  if (!report.ok()) {
    f.Report(report.status());
  } else {
    for (const StorageVerifyReport::DamagedRow& row : report->damaged) f.Report(row.status);
    if (!report->structure.ok()) f.Report(report->structure);
  }
  RowSet intact;
  ScanAll(storage, pristine, f, &intact);
  if (lookups) LookUpAll(storage, pristine, f, intact);
  if (f.silent_total() > 0) {
    // The tag names every read that went wrong: "scan", "get", "seek", joined by '+'.
    std::vector<std::string> reads;
    if (f.silent[Findings::kScan] > 0) reads.push_back("scan");
    if (f.silent[Findings::kGet] > 0) reads.push_back("get");
    if (f.silent[Findings::kSeek] > 0) reads.push_back("seek");
    return {
        Verdict::kSilent, absl::StrJoin(reads, "+"),
        absl::StrCat(f.first_silent, " (", f.silent_total(), " findings; ", f.reports, " reports",
                     f.reports > 0 ? absl::StrCat(", the first: ", f.first_report) : "", ")")};
  }
  if (f.reports > 0) {
    return {Verdict::kDetected, f.structure ? "structure" : "rows",
            absl::StrCat(f.first_report, " (", f.reports, " reports)")};
  }
  return {Verdict::kBenign, "", ""};
}

// The child's side: no core files (a crash is an expected outcome here, and the tests write only
// under the temp dir), LMDB's assertion messages silenced unless verbose, and the verdict sent as
// one short line before _exit (no atexit handlers or stdio buffers of the parent run twice).
[[noreturn]] void RunChild(int out_fd, const std::filesystem::path& dir, const Content& pristine,
                           const Flags& flags) {
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);  // also keeps a piped core_pattern handler away
  if (!flags.verbose) {
    const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null_fd >= 0) dup2(null_fd, STDERR_FILENO);
  }
  const ChildReport r = Examine(dir, pristine, flags.lookups);
  std::string line = absl::StrCat(static_cast<int>(r.verdict), "\t", r.tag, "\t", r.detail);
  // One line: newlines in a status message would split it.
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  line.resize(std::min<size_t>(line.size(), 2000));
  line.push_back('\n');
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = write(out_fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(3);
    p += n;
    left -= static_cast<size_t>(n);
  }
  _exit(0);
}

// ---- One trial, in the parent -------------------------------------------------------------------

std::string SignalName(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGABRT: return "SIGABRT";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTRAP: return "SIGTRAP";
    default: return absl::StrCat("SIG", sig);
  }
}

struct TrialResult {
  Verdict verdict;
  std::string tag;
  std::string detail;
};

absl::StatusOr<TrialResult> RunTrial(const std::filesystem::path& dir, const Content& pristine,
                                     const Flags& flags) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    close(fds[0]);
    RunChild(fds[1], dir, pristine, flags);
  }
  close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(flags.timeout_s);
  std::string out;
  bool eof = false;
  while (!eof) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    struct pollfd pfd = {fds[0], POLLIN, 0};
    const int rc = poll(&pfd, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno != EINTR) break;
    if (rc <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      eof = true;
    }
  }
  close(fds[0]);
  if (!eof) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
    }
  }
  if (!eof) {
    return TrialResult{Verdict::kHang, "", absl::StrCat("killed after ", flags.timeout_s, " s")};
  }
  if (WIFSIGNALED(status)) return TrialResult{Verdict::kCrash, SignalName(WTERMSIG(status)), ""};
  // The verdict: "<verdict>\t<tag>\t<detail>\n".
  std::vector<std::string> fields;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && absl::EndsWith(out, "\n")) {
    out.pop_back();
    size_t at = 0;
    for (int i = 0; i < 2; ++i) {
      const size_t tab = out.find('\t', at);
      if (tab == std::string::npos) break;
      fields.push_back(out.substr(at, tab - at));
      at = tab + 1;
    }
    fields.push_back(out.substr(at));
  }
  int verdict = -1;
  if (fields.size() != 3 || !absl::SimpleAtoi(fields[0], &verdict) || verdict < 0 ||
      verdict >= kVerdicts) {
    // An exit without a verdict (a sanitizer's report, exit() from a library) is a crash too.
    return TrialResult{Verdict::kCrash,
                       WIFEXITED(status) ? absl::StrCat("exit", WEXITSTATUS(status)) : "unknown",
                       absl::CHexEscape(out)};
  }
  return TrialResult{static_cast<Verdict>(verdict), std::move(fields[1]), std::move(fields[2])};
}

// What kind of page holds `offset` in the pristine file, from its header, for the report. A
// freed page keeps the header of what it last held. (LMDB's on-disk layout: the page size is
// the meta page's mm_psize at byte 40, a page's flags the 16 bits at byte 10.)
uint32_t PageBytes(absl::string_view file) {
  if (file.size() < 44) return 4096;
  uint32_t psize = 0;
  std::memcpy(&psize, file.data() + 40, sizeof(psize));
  const bool sane = psize >= 512 && psize <= 65536 && (psize & (psize - 1)) == 0;
  return sane ? psize : 4096;
}

std::string PageKind(absl::string_view file, uint64_t offset, uint32_t page_bytes) {
  const uint64_t start = offset / page_bytes * page_bytes;
  if (start + 12 > file.size()) return "other";
  uint16_t flags = 0;
  std::memcpy(&flags, file.data() + start + 10, sizeof(flags));
  if (flags & 0x08) return "meta";
  if (flags & 0x01) return "branch";
  if (flags & 0x02) return "leaf";
  if (flags & 0x04) return "overflow";
  return "other";
}

std::string CountsJson(const std::map<std::string, uint64_t>& counts) {
  std::vector<std::string> parts;
  for (const auto& [name, n] : counts) parts.push_back(absl::StrCat("\"", name, "\":", n));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

int Run(int argc, char** argv) {
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<Flags> parsed = ParseFlags(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return 2;
  }
  const Flags flags = *parsed;
  std::printf("bitflip campaign: seed=%llu trials=%llu events=%llu\n",
              static_cast<unsigned long long>(flags.seed),
              static_cast<unsigned long long>(flags.trials),
              static_cast<unsigned long long>(flags.events));
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "setup failed: %s\n", s.ToString().c_str());
    return 2;
  };
  absl::StatusOr<std::unique_ptr<ScratchDir>> scratch = ScratchDir::Create();
  if (!scratch.ok()) return fail(scratch.status());
  const std::filesystem::path pristine_dir = (*scratch)->path() / "pristine";
  if (absl::Status s = BuildStore(pristine_dir, flags.events); !s.ok()) return fail(s);
  absl::StatusOr<Content> content = ReadContent(pristine_dir);
  if (!content.ok()) return fail(content.status());
  absl::StatusOr<std::string> file = ReadFile(pristine_dir / "data.mdb");
  if (!file.ok()) return fail(file.status());
  if (file->empty()) return fail(absl::InternalError("empty data.mdb"));
  uint64_t rows = 0;
  for (const auto& [table, r] : *content) rows += r.size();
  const uint32_t page_bytes = PageBytes(*file);
  std::printf("pristine store: %zu bytes (%zu pages of %u), %zu tables, %llu rows\n", file->size(),
              file->size() / page_bytes, page_bytes, content->size(),
              static_cast<unsigned long long>(rows));

  std::mt19937_64 rng(flags.seed);
  uint64_t counts[kVerdicts] = {};
  uint64_t detected_structure = 0;
  uint64_t silent_by_lookup = 0;  // the scan read everything right; Get or Seek did not
  uint64_t silent_seek = 0;       // a Seek went wrong: the read a pubend answers nacks with
  std::map<std::string, uint64_t> open_codes;
  std::map<std::string, uint64_t> crash_signals;
  std::map<std::string, std::map<std::string, uint64_t>> by_page_kind;
  std::string& bytes = *file;
  for (uint64_t i = 0; i < flags.trials; ++i) {
    uint64_t offset = rng() % bytes.size();
    int bit = static_cast<int>(rng() % 8);
    if (flags.offset) {
      if (*flags.offset >= bytes.size()) {
        return fail(absl::InvalidArgumentError(absl::StrCat(
            "--offset=", *flags.offset, " is past the file's ", bytes.size(), " bytes")));
      }
      offset = *flags.offset;
      bit = flags.bit;
    }
    const std::filesystem::path dir = (*scratch)->path() / absl::StrCat("trial-", i);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return fail(absl::InternalError(absl::StrCat("mkdir ", dir.string(), ": ", ec.message())));
    }
    bytes[offset] = static_cast<char>(bytes[offset] ^ (1 << bit));
    const absl::Status written = WriteFile(dir / "data.mdb", bytes);
    bytes[offset] = static_cast<char>(bytes[offset] ^ (1 << bit));
    if (!written.ok()) return fail(written);
    absl::StatusOr<TrialResult> result = RunTrial(dir, *content, flags);
    std::filesystem::remove_all(dir, ec);
    if (!result.ok()) return fail(result.status());
    const std::string kind = PageKind(bytes, offset, page_bytes);
    ++counts[static_cast<int>(result->verdict)];
    ++by_page_kind[kind][VerdictName(result->verdict)];
    switch (result->verdict) {
      case Verdict::kOpenFailed: ++open_codes[result->tag]; break;
      case Verdict::kDetected:
        if (result->tag == "structure") ++detected_structure;
        break;
      case Verdict::kSilent:
        if (!absl::StrContains(result->tag, "scan")) ++silent_by_lookup;
        if (absl::StrContains(result->tag, "seek")) ++silent_seek;
        break;
      case Verdict::kCrash: ++crash_signals[result->tag]; break;
      case Verdict::kBenign:
      case Verdict::kHang: break;
    }
    const bool notable = result->verdict == Verdict::kSilent ||
                         result->verdict == Verdict::kCrash || result->verdict == Verdict::kHang;
    if (notable || flags.verbose) {
      std::printf(
          "trial=%llu seed=%llu offset=%llu page=%llu page_kind=%s byte_in_page=%llu "
          "bit=%d verdict=%s %s %s\n",
          static_cast<unsigned long long>(i), static_cast<unsigned long long>(flags.seed),
          static_cast<unsigned long long>(offset),
          static_cast<unsigned long long>(offset / page_bytes), kind.c_str(),
          static_cast<unsigned long long>(offset % page_bytes), bit, VerdictName(result->verdict),
          result->tag.c_str(), result->detail.c_str());
    }
  }

  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::vector<std::string> kinds;
  for (const auto& [kind, c] : by_page_kind) {
    kinds.push_back(absl::StrCat("\"", kind, "\":", CountsJson(c)));
  }
  std::string json =
      absl::StrCat("{\"campaign\":\"bitflip\",\"trials\":", flags.trials, ",\"seed\":", flags.seed,
                   ",\"events\":", flags.events, ",\"lookups\":", flags.lookups ? "true" : "false",
                   ",\"file_bytes\":", bytes.size(), ",\"rows\":", rows);
  for (int v = 0; v < kVerdicts; ++v) {
    absl::StrAppend(&json, ",\"", VerdictName(static_cast<Verdict>(v)), "\":", counts[v]);
  }
  absl::StrAppend(&json, ",\"detected_structure\":", detected_structure,
                  ",\"silent_by_lookup\":", silent_by_lookup, ",\"silent_seek\":", silent_seek,
                  ",\"open_failed_codes\":", CountsJson(open_codes),
                  ",\"crash_signals\":", CountsJson(crash_signals), ",\"by_page_kind\":{",
                  absl::StrJoin(kinds, ","), "}",
                  ",\"elapsed_s\":", absl::StrFormat("%.1f", elapsed), "}");
  std::printf("%s\n", json.c_str());
  return counts[static_cast<int>(Verdict::kSilent)] > 0 ? 1 : 0;
}

}  // namespace
}  // namespace gryph

int main(int argc, char** argv) {
  // Debian's Abseil keeps absl::Mutex's deadlock detection on; it costs much and finds nothing
  // in a single-threaded campaign.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return gryph::Run(argc, argv);
}
