// gryph-inspect: an operator's look into a broker's store, read-only.
//
//   gryph-inspect [--json] [--subscriber=NAME] [--pfs_limit=N] DATA_DIR
//
// DATA_DIR is a broker's --data_dir (data.mdb, lock.mdb). The store is opened read-only
// (StorageOptions::read_only): nothing in it is written, so it may run beside the broker that
// owns it, whose commits it does not hold back. Like any LMDB reader it takes a slot in
// DATA_DIR/lock.mdb (creating the file when the broker never ran there since a copy), so it
// needs write access to that file. What it prints depends on the tables it finds
// (docs/format.md gives every layout, docs/design.md "What is persisted" what each holds):
//
//   pubend.*        a publisher hosting broker's: per pubend the latest tick T(p) (the greatest
//                   of the announced T, the last logged event and the L prefix), the L prefix,
//                   the logged events (how many, their tick range), the release table (each
//                   downstream node's released and latestDelivered) and the publishers (the
//                   last sequence logged and its tick);
//   shb.*, pfs.*    a subscriber hosting broker's: per pubend latestDelivered, the delivery lease
//                   and its PFS (checkpoint, chop point, records, registered subscribers); each
//                   subscription's id, epoch, selector and topic filter, and per pubend its
//                   created and released(s,p) positions and its backlog: latestDelivered(p) −
//                   released(s,p) in ticks, and the PFS records (matched events) above
//                   released(s,p). --subscriber=NAME lists the ticks of those records, at most
//                   --pfs_limit per pubend.
//
// Every row read is checked: its row checksum (by the storage), its layout (the parse functions
// of lib/*/*_keys.h), and what the brokers check when they open (a lease below latestDelivered,
// subscription ids not unique or not below the next id, selectors that no longer parse, PFS
// records out of order or whose back-pointers lead nowhere). What is damaged is listed and the
// walk goes on. Oddities a healthy store may hold (rows of a subscription or pubend no longer
// served) are listed as notes.
//
// A table is read in snapshots of kRowsPerSnapshot rows, so that a live broker's pages are not
// pinned for long: the figures of a store being written are each of its moment, not all of one
// snapshot, and the consistency checks allow for what a commit in between can change.
//
// --json prints the same as one JSON document on standard output, with snake_case keys (see
// ToJson); without it, aligned text.
//
// Exit status: 0 when nothing is damaged, 1 when something is (after printing what could be
// read), 2 for a bad flag or a directory that holds no gryph store.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "gryph/event.h"
#include "gryph/storage.h"
#include "gryph/subscription.h"
#include "lib/pfs/pfs_keys.h"
#include "lib/pubend/pubend_keys.h"
#include "lib/shb/shb_keys.h"
#include "lib/util/coding.h"
#include "lib/util/pubend_prefix.h"
#include "nlohmann/json.hpp"
#include "programs/program_support.h"

ABSL_FLAG(bool, json, false, "print one JSON document instead of text");
ABSL_FLAG(std::string, subscriber, "",
          "SHB: also list this subscription's PFS records above its released position");
ABSL_FLAG(int64_t, pfs_limit, 100, "with --subscriber: list at most this many ticks per pubend");

namespace gryph::programs {
namespace {

using Json = nlohmann::ordered_json;

// Rows per read snapshot (see the file comment).
constexpr size_t kRowsPerSnapshot = 4096;

// ---- What the store holds -----------------------------------------------------------------------

// A damaged row, a row that does not parse, state the brokers would refuse, or a read that
// failed. `key` is empty when the problem is not one row's.
struct Problem {
  std::string table;
  std::string key;
  std::string what;
};

struct PublisherInfo {
  uint64_t last_sequence = 0;
  Tick tick = 0;  // of last_sequence
  uint64_t rows = 0;
};

struct PhbPubend {
  Tick announced = 0;  // pubend.meta 'T' (0: absent)
  Tick l_prefix = 0;   // pubend.meta 'L' (0: absent)
  uint64_t events = 0;
  Tick first_event = 0;
  Tick last_event = 0;
  std::map<std::string, internal::DownstreamRow> downstream;
  std::map<std::string, PublisherInfo> publishers;

  // T(p) as the pubend recovers it (docs/format.md, "Pubend").
  Tick LatestTick() const { return std::max({announced, last_event, l_prefix}); }
};

struct PfsInfo {
  Tick checkpoint = 0;  // 'C' (0: absent)
  Tick chopped = 0;     // 'X' (0: absent)
  uint64_t records = 0;
  Tick first_record = 0;
  Tick last_record = 0;
  std::map<uint64_t, internal::PfsSubscriberRow> subscribers;
};

struct ShbPubend {
  internal::DeliveredRow delivered;  // zeros when absent, as the SHB reads it
  PfsInfo pfs;
};

struct PositionInfo {
  Tick created = 0;
  Tick released = 0;
  uint64_t backlog_records = 0;  // PFS records of the subscription above released
  std::vector<Tick> listed;      // with --subscriber: the first --pfs_limit of them
};

struct SubscriptionInfo {
  std::string name;
  uint64_t id = 0;
  uint64_t epoch = 0;
  std::string selector;
  std::string topic_filter;
  std::map<uint32_t, PositionInfo> positions;  // by pubend
};

struct Report {
  std::string path;
  uint32_t format_version = 0;
  uint64_t bytes_used = 0;
  std::vector<std::pair<std::string, std::optional<uint64_t>>> tables;  // name, rows

  bool has_phb = false;
  std::map<uint32_t, PhbPubend> phb;  // by pubend

  bool has_shb = false;
  uint64_t next_id = 1;  // the SHB's first id when shb.meta has none
  std::map<uint32_t, ShbPubend> shb;
  std::vector<SubscriptionInfo> subscriptions;  // in name order
  std::map<uint64_t, size_t> by_id;             // subscriptions[] index by id
  std::optional<size_t> subscriber;             // --subscriber's index
  uint64_t pfs_limit = 0;

  std::vector<Problem> damage;
  std::vector<std::string> notes;

  void Damaged(absl::string_view table, absl::string_view key, absl::string_view what) {
    damage.push_back({std::string(table), std::string(key), std::string(what)});
  }
};

std::string Hex(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

// A status without its payloads (a damaged row's carries its key, which the problem names).
std::string Describe(const absl::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
}

// A name or text as the terminal should see it: printable ASCII as is, the rest escaped.
std::string Printable(absl::string_view s) { return absl::CHexEscape(s); }

// The pubend a partitioned key starts with (lib/util/pubend_prefix.h); nullopt if too short.
std::optional<PubendId> KeyPubend(absl::string_view key) {
  if (key.size() < internal::kPubendPrefixBytes) return std::nullopt;
  return PubendId{internal::DecodeFixed32BE(key.data())};
}

// ---- Reading ------------------------------------------------------------------------------------

// Calls fn(key, value) for each intact row of `table`, in key order. A damaged row is recorded
// and stepped over; an error that ends the walk (damaged page structure, a failed read) is
// recorded too. Each kRowsPerSnapshot rows the snapshot is let go and a new one resumes after
// the last key seen.
void Walk(Storage& storage, absl::string_view table, Report& report,
          absl::FunctionRef<void(absl::string_view key, absl::string_view value)> fn) {
  std::string resume;  // the last key walked over
  for (bool first = true;; first = false) {
    absl::StatusOr<std::unique_ptr<Cursor>> made = storage.NewCursor(table);
    if (!made.ok()) {
      report.Damaged(table, "", Describe(made.status()));
      return;
    }
    Cursor& cursor = **made;
    if (first) {
      cursor.SeekToFirst();
    } else {
      // Past what the previous snapshot walked: the resume key, and a damaged row below it that
      // the seek may stand on (Cursor::Seek stops at one that could hide its target).
      cursor.Seek(resume);
      for (;;) {
        const std::optional<std::string> at = cursor.Valid()
                                                  ? std::optional<std::string>(cursor.key())
                                                  : DamagedRowKey(cursor.status());
        if (!at || *at > resume) break;
        cursor.Next();
      }
    }
    for (size_t n = 0; n < kRowsPerSnapshot; ++n) {
      if (!cursor.Valid()) {
        const absl::Status status = cursor.status();
        if (status.ok()) return;
        std::optional<std::string> damaged = DamagedRowKey(status);
        if (!damaged) {
          report.Damaged(table, "", Describe(status));
          return;
        }
        report.Damaged(table, *damaged, Describe(status));
        resume = *std::move(damaged);
        cursor.Next();
        continue;
      }
      resume = std::string(cursor.key());
      fn(cursor.key(), cursor.value());
      cursor.Next();
    }
  }
}

void ReadPhb(Storage& storage, Report& report) {
  using internal::kDownstreamTable;
  using internal::kEventsTable;
  using internal::kPubendMetaTable;
  using internal::kPublishersTable;

  Walk(storage, kPubendMetaTable, report, [&](absl::string_view key, absl::string_view value) {
    std::optional<PubendId> p = KeyPubend(key);
    std::optional<Tick> tick = internal::ParseMetaTick(value);
    if (!p || key.size() != internal::kPubendPrefixBytes + 1 || !tick) {
      report.Damaged(kPubendMetaTable, key, "not a (pubend, field) -> tick row");
      return;
    }
    const char field = key.back();
    if (field == internal::kMetaAnnouncedTick) {
      report.phb[p->value].announced = *tick;
    } else if (field == internal::kMetaLPrefix) {
      report.phb[p->value].l_prefix = *tick;
    } else {
      report.Damaged(kPubendMetaTable, key,
                     absl::StrCat("an unknown field '", Printable(key.substr(4)), "'"));
    }
  });

  Walk(storage, kEventsTable, report, [&](absl::string_view key, absl::string_view value) {
    std::optional<PubendId> p = KeyPubend(key);
    std::optional<Tick> t = p ? internal::ParseEventKey(*p, key) : std::nullopt;
    if (!t) {
      report.Damaged(kEventsTable, key, "not a (pubend, tick) key");
      return;
    }
    // The row is there (it counts, and T(p) counts it); an event that does not decode is one
    // the pubend can serve only as lost.
    PhbPubend& pubend = report.phb[p->value];
    if (pubend.events++ == 0) pubend.first_event = *t;
    pubend.last_event = *t;
    if (absl::StatusOr<Event> event = Event::Decode(value); !event.ok()) {
      report.Damaged(kEventsTable, key,
                     absl::StrCat("the event does not decode: ", event.status().message()));
    }
  });

  Walk(storage, kDownstreamTable, report, [&](absl::string_view key, absl::string_view value) {
    std::optional<PubendId> p = KeyPubend(key);
    std::optional<internal::DownstreamRow> row = internal::ParseDownstreamRow(value);
    if (!p || key.size() == internal::kPubendPrefixBytes || !row) {
      report.Damaged(kDownstreamTable, key, "not a (pubend, node) -> (released, latest) row");
      return;
    }
    const absl::string_view node = internal::ParseDownstreamKey(key);
    // The pubend takes no release with released above latestDelivered.
    if (row->released > row->latest_delivered) {
      report.Damaged(kDownstreamTable, key,
                     absl::StrCat("released ", row->released, " is above latest_delivered ",
                                  row->latest_delivered));
    }
    report.phb[p->value].downstream[std::string(node)] = *row;
  });

  Walk(storage, kPublishersTable, report, [&](absl::string_view key, absl::string_view value) {
    std::optional<PubendId> p = KeyPubend(key);
    std::optional<internal::PublisherSequence> sequence = internal::ParsePublisherSequenceKey(key);
    if (!p || !sequence) {
      report.Damaged(kPublishersTable, key, "not a (pubend, publisher, sequence) key");
      return;
    }
    absl::StatusOr<Tick> tick = internal::ParsePublisherRow(value);
    if (!tick.ok()) {
      report.Damaged(kPublishersTable, key, tick.status().message());
      return;
    }
    // A publisher's rows are in sequence order: the last one read is its last sequence.
    PublisherInfo& publisher = report.phb[p->value].publishers[std::string(sequence->name)];
    ++publisher.rows;
    publisher.last_sequence = sequence->sequence;
    publisher.tick = *tick;
  });
}

void ReadShb(Storage& storage, Report& report, const std::string& subscriber) {
  using internal::kPfsMetaTable;
  using internal::kPfsRecordsTable;
  using internal::kPfsSubscribersTable;
  using internal::kShbDeliveredTable;
  using internal::kShbMetaTable;
  using internal::kShbPositionsTable;
  using internal::kShbSubscriptionsTable;

  Walk(storage, kShbDeliveredTable, report, [&](absl::string_view key, absl::string_view value) {
    std::optional<PubendId> p = KeyPubend(key);
    std::optional<internal::DeliveredRow> row = internal::ParseDeliveredRow(value);
    if (!p || key.size() != internal::kPubendPrefixBytes || !row) {
      report.Damaged(kShbDeliveredTable, key, "not a pubend -> (latest_delivered, lease) row");
      return;
    }
    if (row->lease < row->latest_delivered) {  // the SHB refuses to open on it
      report.Damaged(kShbDeliveredTable, key,
                     absl::StrCat("the lease ", row->lease, " is below latest_delivered ",
                                  row->latest_delivered));
    }
    report.shb[p->value].delivered = *row;
  });

  auto read_subscription = [&](absl::string_view key, absl::string_view value) {
    absl::StatusOr<internal::SubscriptionRow> row = internal::ParseSubscriptionRow(value);
    if (!row.ok()) {
      report.Damaged(kShbSubscriptionsTable, key, row.status().message());
      return;
    }
    if (auto [it, fresh] = report.by_id.emplace(row->id, report.subscriptions.size()); !fresh) {
      report.Damaged(kShbSubscriptionsTable, key,
                     absl::StrCat("id ", row->id, " is taken by subscription '",
                                  Printable(report.subscriptions[it->second].name), "' too"));
      return;
    }
    SelectorOptions stored;  // as the SHB parses its stored subscriptions: no length limit
    stored.max_length = SIZE_MAX;
    if (absl::StatusOr<Subscription> parsed =
            Subscription::Create(row->selector, row->topic_filter, stored);
        !parsed.ok()) {
      report.Damaged(kShbSubscriptionsTable, key,
                     absl::StrCat("the selector or topic filter no longer parses: ",
                                  parsed.status().message()));
    }
    SubscriptionInfo info;
    info.name = std::string(key);
    info.id = row->id;
    info.epoch = row->epoch;
    info.selector = std::string(row->selector);
    info.topic_filter = std::string(row->topic_filter);
    report.subscriptions.push_back(std::move(info));
  };
  Walk(storage, kShbSubscriptionsTable, report, read_subscription);
  // Read after the subscriptions: a subscription created meanwhile raised it in the same commit.
  absl::StatusOr<std::optional<std::string>> next =
      storage.Get(kShbMetaTable, internal::kShbNextIdKey);
  if (!next.ok()) {
    report.Damaged(kShbMetaTable, internal::kShbNextIdKey, Describe(next.status()));
  } else if (next->has_value()) {
    std::optional<uint64_t> id = internal::ParseNextId(**next);
    if (id) {
      report.next_id = *id;
    } else {
      report.Damaged(kShbMetaTable, internal::kShbNextIdKey, "the next id is not 8 bytes");
    }
  }
  for (const SubscriptionInfo& s : report.subscriptions) {
    if (s.id >= report.next_id) {
      report.Damaged(kShbSubscriptionsTable, s.name,
                     absl::StrCat("id ", s.id, " is not below the next id ", report.next_id));
    }
  }
  if (!subscriber.empty()) {
    for (size_t i = 0; i < report.subscriptions.size(); ++i) {
      if (report.subscriptions[i].name == subscriber) report.subscriber = i;
    }
  }

  Walk(storage, kShbPositionsTable, report, [&](absl::string_view key, absl::string_view value) {
    std::optional<internal::PositionKeyParts> k = internal::ParsePositionKey(key);
    std::optional<internal::PositionRow> row = internal::ParsePositionRow(value);
    if (!k || !row) {
      report.Damaged(kShbPositionsTable, key,
                     "not a (subscriber, pubend) -> (created, released) row");
      return;
    }
    auto it = report.by_id.find(k->subscriber.value);
    if (it == report.by_id.end()) {
      // The SHB ignores it: unsubscribed while the pubend was not served, or created and
      // unsubscribed since the subscriptions were read.
      report.notes.push_back(absl::StrCat("shb.positions: subscriber id ", k->subscriber.value,
                                          " at pubend ", k->pubend.value,
                                          " belongs to no subscription"));
      return;
    }
    PositionInfo& position = report.subscriptions[it->second].positions[k->pubend.value];
    position.created = row->created;
    position.released = row->released;
    report.shb.try_emplace(k->pubend.value);
  });

  Walk(storage, kPfsMetaTable, report, [&](absl::string_view key, absl::string_view value) {
    std::optional<PubendId> p = KeyPubend(key);
    std::optional<Tick> tick = internal::ParseMetaTick(value);  // the same u64be layout
    if (!p || key.size() != internal::kPubendPrefixBytes + 1 || !tick) {
      report.Damaged(kPfsMetaTable, key, "not a (pubend, field) -> tick row");
      return;
    }
    PfsInfo& pfs = report.shb[p->value].pfs;
    if (key.back() == internal::kPfsMetaCheckpoint) {
      pfs.checkpoint = *tick;
    } else if (key.back() == internal::kPfsMetaChopped) {
      pfs.chopped = *tick;
    } else {
      report.Damaged(kPfsMetaTable, key,
                     absl::StrCat("an unknown field '", Printable(key.substr(4)), "'"));
    }
  });

  Walk(storage, kPfsSubscribersTable, report, [&](absl::string_view key, absl::string_view value) {
    std::optional<PubendId> p = KeyPubend(key);
    uint64_t id = 0;
    internal::PfsSubscriberRow row;
    if (!p || !internal::ParsePfsSubscriberKey(key, *p, &id) ||
        !internal::ParsePfsSubscriberRow(value, &row)) {
      report.Damaged(kPfsSubscribersTable, key,
                     "not a (pubend, subscriber) -> (registered_at, last_index) row");
      return;
    }
    if (row.last_index != 0 && row.last_index <= row.registered_at) {
      report.Damaged(kPfsSubscribersTable, key,
                     absl::StrCat("last_index ", row.last_index, " is not above registered_at ",
                                  row.registered_at));
    }
    if (!report.by_id.contains(id)) {
      report.notes.push_back(absl::StrCat("pfs.subscribers: subscriber id ", id, " at pubend ",
                                          p->value, " belongs to no subscription"));
    }
    report.shb[p->value].pfs.subscribers[id] = row;
  });

  // The records, in tick order per pubend: each entry's back-pointer must name the previous
  // record of its subscriber, or a chopped tick. One a commit in between could explain (a chop
  // of records not walked yet) is judged against the chop point read again afterwards.
  struct Suspect {
    uint32_t pubend;
    uint64_t subscriber;
    Tick tick;
    Tick previous;
  };
  std::vector<Suspect> suspects;
  std::map<std::pair<uint32_t, uint64_t>, Tick> last_seen;  // (pubend, subscriber) -> tick
  Walk(storage, kPfsRecordsTable, report, [&](absl::string_view key, absl::string_view value) {
    std::optional<PubendId> p = KeyPubend(key);
    Tick t = 0;
    if (!p || !internal::ParsePfsRecordKey(key, *p, &t)) {
      report.Damaged(kPfsRecordsTable, key, "not a (pubend, tick) key");
      return;
    }
    PfsInfo& pfs = report.shb[p->value].pfs;
    if (pfs.records++ == 0) pfs.first_record = t;
    pfs.last_record = t;
    internal::PfsRecordView record;
    if (!record.Parse(value)) {
      report.Damaged(kPfsRecordsTable, key,
                     "the record does not parse (reserved header bits, or not whole entries)");
      return;
    }
    for (size_t i = 0; i < record.count(); ++i) {
      if (i > 0 && record.id(i) <= record.id(i - 1)) {
        report.Damaged(kPfsRecordsTable, key, "its subscribers are not in increasing order");
        return;
      }
      if (record.delta(i) >= t) {
        report.Damaged(kPfsRecordsTable, key,
                       absl::StrCat("subscriber ", record.id(i), "'s back-pointer ",
                                    record.delta(i), " is not below the tick"));
        return;
      }
    }
    for (size_t i = 0; i < record.count(); ++i) {
      const uint64_t s = record.id(i);
      auto registration = pfs.subscribers.find(s);
      // An entry of an earlier registration of the id, or of a subscriber removed since: dead.
      if (registration == pfs.subscribers.end() || t <= registration->second.registered_at) {
        continue;
      }
      const Tick previous = record.delta(i) == 0 ? 0 : t - record.delta(i);
      auto [seen, fresh] = last_seen.try_emplace({p->value, s}, t);
      if (!fresh) {
        const Tick before = std::exchange(seen->second, t);
        if (previous != before) {
          if (previous == 0) {
            report.Damaged(kPfsRecordsTable, key,
                           absl::StrCat("subscriber ", s, "'s entry names no previous record, but ",
                                        "one is at tick ", before));
          } else {
            suspects.push_back({p->value, s, t, previous});
          }
        }
      } else if (previous != 0) {
        suspects.push_back({p->value, s, t, previous});
      }
      auto sub = report.by_id.find(s);
      if (sub == report.by_id.end()) continue;
      SubscriptionInfo& subscription = report.subscriptions[sub->second];
      auto position = subscription.positions.find(p->value);
      if (position == subscription.positions.end() || t <= position->second.released) continue;
      ++position->second.backlog_records;
      if (report.subscriber == sub->second && position->second.listed.size() < report.pfs_limit) {
        position->second.listed.push_back(t);
      }
    }
  });
  // A back-pointer to a damaged record is that record's damage, reported already.
  std::set<std::string> damaged_records;
  for (const Problem& problem : report.damage) {
    if (problem.table == kPfsRecordsTable) damaged_records.insert(problem.key);
  }
  std::map<uint32_t, Tick> chopped_now;
  for (const Suspect& suspect : suspects) {
    if (damaged_records.contains(
            internal::PfsRecordKey(PubendId{suspect.pubend}, suspect.previous))) {
      continue;
    }
    auto [it, fresh] = chopped_now.try_emplace(suspect.pubend, 0);
    if (fresh) {
      const std::string chop_key =
          internal::PfsMetaKey(PubendId{suspect.pubend}, internal::kPfsMetaChopped);
      absl::StatusOr<std::optional<std::string>> row = storage.Get(kPfsMetaTable, chop_key);
      std::optional<Tick> tick = row.ok() && row->has_value()
                                     ? internal::ParseMetaTick(**row)
                                     : std::optional<Tick>(report.shb[suspect.pubend].pfs.chopped);
      it->second = tick.value_or(0);
    }
    if (suspect.previous <= it->second) continue;  // chopped
    report.Damaged(kPfsRecordsTable, internal::PfsRecordKey(PubendId{suspect.pubend}, suspect.tick),
                   absl::StrCat("subscriber ", suspect.subscriber, "'s back-pointer names tick ",
                                suspect.previous, ", which holds no record of it (chop point ",
                                it->second, ")"));
  }
}

// ---- Text ---------------------------------------------------------------------------------------

// Rows of cells in aligned columns, two spaces apart: text columns left-aligned, numeric ones
// right-aligned.
class Table {
 public:
  // A header name ending in '#' names a numeric column (the '#' is not printed).
  explicit Table(std::vector<std::string> header) {
    for (std::string& name : header) {
      absl::string_view view = name;
      right_.push_back(absl::ConsumeSuffix(&view, "#"));
      name = std::string(view);
    }
    rows_.push_back(std::move(header));
  }

  // REQUIRES: as many cells as the header.
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.size() == 1; }

  // Every line, indented by `indent` spaces.
  std::string Render(int indent) const {
    std::vector<size_t> width(right_.size(), 0);
    for (const auto& row : rows_) {
      for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line(static_cast<size_t>(indent), ' ');
      for (size_t c = 0; c < row.size(); ++c) {
        const std::string pad(width[c] - row[c].size(), ' ');
        if (c > 0) line += "  ";
        line += right_[c] ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
      }
      absl::StrAppend(&out, line, "\n");
    }
    return out;
  }

 private:
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

std::string N(uint64_t n) { return absl::StrCat(n); }
std::string Range(uint64_t count, Tick first, Tick last) {
  return count == 0 ? "-" : absl::StrCat(first, "..", last);
}
Tick Backlog(const Report& report, uint32_t pubend, const PositionInfo& position) {
  auto it = report.shb.find(pubend);
  const Tick latest = it == report.shb.end() ? 0 : it->second.delivered.latest_delivered;
  // A CT accepted within the lease after a crash may stand above latestDelivered: no backlog.
  return latest > position.released ? latest - position.released : 0;
}

std::string ToText(const Report& report) {
  std::string out = absl::StrCat("store ", report.path, ": gryph storage format ",
                                 report.format_version, ", ", report.bytes_used, " bytes used\n");
  std::vector<std::string> tables;
  for (const auto& [name, rows] : report.tables) {
    tables.push_back(absl::StrCat(name, " ", rows ? N(*rows) : "?"));
  }
  absl::StrAppend(&out, "tables (rows): ", absl::StrJoin(tables, ", "), "\n");
  if (!report.has_phb && !report.has_shb) absl::StrAppend(&out, "no broker tables\n");

  if (report.has_phb) {
    absl::StrAppend(&out, "\npublisher hosting broker: ", report.phb.size(), " pubend",
                    report.phb.size() == 1 ? "" : "s", "\n");
    Table pubends({"pubend", "latest_tick#", "announced#", "l_prefix#", "events#", "event_ticks"});
    Table release({"pubend", "node", "released#", "latest_delivered#"});
    Table publishers({"pubend", "publisher", "last_sequence#", "tick#", "rows#"});
    for (const auto& [id, p] : report.phb) {
      pubends.Add({N(id), N(p.LatestTick()), N(p.announced), N(p.l_prefix), N(p.events),
                   Range(p.events, p.first_event, p.last_event)});
      for (const auto& [node, row] : p.downstream) {
        release.Add({N(id), Printable(node), N(row.released), N(row.latest_delivered)});
      }
      for (const auto& [name, publisher] : p.publishers) {
        publishers.Add({N(id), Printable(name), N(publisher.last_sequence), N(publisher.tick),
                        N(publisher.rows)});
      }
    }
    absl::StrAppend(&out, pubends.Render(2));
    absl::StrAppend(&out, "\n  release table", release.empty() ? ": empty" : "", "\n");
    if (!release.empty()) absl::StrAppend(&out, release.Render(2));
    absl::StrAppend(&out, "\n  publishers", publishers.empty() ? ": none" : "", "\n");
    if (!publishers.empty()) absl::StrAppend(&out, publishers.Render(2));
  }

  if (report.has_shb) {
    absl::StrAppend(&out, "\nsubscriber hosting broker: ", report.shb.size(), " pubend",
                    report.shb.size() == 1 ? "" : "s", ", ", report.subscriptions.size(),
                    " subscription", report.subscriptions.size() == 1 ? "" : "s",
                    ", next subscriber id ", report.next_id, "\n");
    Table pubends({"pubend", "latest_delivered#", "lease#", "pfs_records#", "record_ticks",
                   "checkpoint#", "chop_point#", "pfs_subscribers#"});
    for (const auto& [id, p] : report.shb) {
      pubends.Add({N(id), N(p.delivered.latest_delivered), N(p.delivered.lease), N(p.pfs.records),
                   Range(p.pfs.records, p.pfs.first_record, p.pfs.last_record), N(p.pfs.checkpoint),
                   N(p.pfs.chopped), N(p.pfs.subscribers.size())});
    }
    absl::StrAppend(&out, pubends.Render(2));
    Table subscriptions({"subscription", "id#", "epoch#", "selector", "topic_filter"});
    Table positions(
        {"subscription", "pubend#", "created#", "released#", "backlog_ticks#", "backlog_records#"});
    for (const SubscriptionInfo& s : report.subscriptions) {
      subscriptions.Add({Printable(s.name), N(s.id), N(s.epoch),
                         absl::StrCat("\"", Printable(s.selector), "\""),
                         absl::StrCat("\"", Printable(s.topic_filter), "\"")});
      for (const auto& [pubend, position] : s.positions) {
        positions.Add({Printable(s.name), N(pubend), N(position.created), N(position.released),
                       N(Backlog(report, pubend, position)), N(position.backlog_records)});
      }
    }
    absl::StrAppend(&out, "\n  subscriptions", subscriptions.empty() ? ": none" : "", "\n");
    if (!subscriptions.empty()) absl::StrAppend(&out, subscriptions.Render(2));
    if (!positions.empty()) absl::StrAppend(&out, "\n  positions\n", positions.Render(2));
    if (report.subscriber) {
      const SubscriptionInfo& s = report.subscriptions[*report.subscriber];
      absl::StrAppend(&out, "\n  PFS records of ", Printable(s.name), " (id ", s.id,
                      ") above its released position\n");
      for (const auto& [pubend, position] : s.positions) {
        absl::StrAppend(&out, "    pubend ", pubend, ": ", position.backlog_records, " record",
                        position.backlog_records == 1 ? "" : "s", " above ", position.released);
        if (!position.listed.empty()) {
          absl::StrAppend(&out, ": ", absl::StrJoin(position.listed, " "));
          if (position.listed.size() < position.backlog_records) {
            absl::StrAppend(&out, " (the first ", position.listed.size(), ")");
          }
        }
        absl::StrAppend(&out, "\n");
      }
    }
  }

  if (!report.notes.empty()) {
    absl::StrAppend(&out, "\nnotes\n");
    for (const std::string& note : report.notes) absl::StrAppend(&out, "  ", note, "\n");
  }
  if (report.damage.empty()) {
    absl::StrAppend(&out, "\ndamage: none\n");
  } else {
    absl::StrAppend(&out, "\nDAMAGED: ", report.damage.size(), " problem",
                    report.damage.size() == 1 ? "" : "s", "\n");
    for (const Problem& problem : report.damage) {
      absl::StrAppend(&out, "  ", problem.table, problem.key.empty() ? "" : " ", Hex(problem.key),
                      ": ", problem.what, "\n");
    }
  }
  return out;
}

// ---- JSON ---------------------------------------------------------------------------------------

// The document. Its keys are stable, for scripts; ticks are JSON integers (exact to 2^64 − 1).
// Keys are in bytes' hex; names and texts are strings (bytes that are not UTF-8 print as U+FFFD).
Json ToJson(const Report& report) {
  Json doc = Json::object();
  doc["path"] = report.path;
  doc["format_version"] = report.format_version;
  doc["bytes_used"] = report.bytes_used;
  Json tables = Json::array();
  for (const auto& [name, rows] : report.tables) {
    tables.push_back({{"name", name}, {"rows", rows ? Json(*rows) : Json(nullptr)}});
  }
  doc["tables"] = std::move(tables);

  Json phb = nullptr;
  if (report.has_phb) {
    Json pubends = Json::array();
    for (const auto& [id, p] : report.phb) {
      Json release = Json::array();
      for (const auto& [node, row] : p.downstream) {
        release.push_back({{"node", node},
                           {"released", row.released},
                           {"latest_delivered", row.latest_delivered}});
      }
      Json publishers = Json::array();
      for (const auto& [name, publisher] : p.publishers) {
        publishers.push_back({{"publisher", name},
                              {"last_sequence", publisher.last_sequence},
                              {"tick", publisher.tick},
                              {"rows", publisher.rows}});
      }
      Json pubend = Json::object();
      pubend["pubend"] = id;
      pubend["latest_tick"] = p.LatestTick();
      pubend["announced_tick"] = p.announced;
      pubend["l_prefix"] = p.l_prefix;
      pubend["events"] = {{"count", p.events},
                          {"first_tick", p.events == 0 ? Json(nullptr) : Json(p.first_event)},
                          {"last_tick", p.events == 0 ? Json(nullptr) : Json(p.last_event)}};
      pubend["release_table"] = std::move(release);
      pubend["publishers"] = std::move(publishers);
      pubends.push_back(std::move(pubend));
    }
    phb = {{"pubends", std::move(pubends)}};
  }
  doc["phb"] = std::move(phb);

  Json shb = nullptr;
  if (report.has_shb) {
    Json pubends = Json::array();
    for (const auto& [id, p] : report.shb) {
      Json pfs = Json::object();
      pfs["records"] = p.pfs.records;
      pfs["first_tick"] = p.pfs.records == 0 ? Json(nullptr) : Json(p.pfs.first_record);
      pfs["last_tick"] = p.pfs.records == 0 ? Json(nullptr) : Json(p.pfs.last_record);
      pfs["checkpoint_tick"] = p.pfs.checkpoint;
      pfs["chop_tick"] = p.pfs.chopped;
      pfs["subscribers"] = p.pfs.subscribers.size();
      Json pubend = Json::object();
      pubend["pubend"] = id;
      pubend["latest_delivered"] = p.delivered.latest_delivered;
      pubend["lease"] = p.delivered.lease;
      pubend["pfs"] = std::move(pfs);
      pubends.push_back(std::move(pubend));
    }
    Json subscriptions = Json::array();
    for (const SubscriptionInfo& s : report.subscriptions) {
      Json positions = Json::array();
      for (const auto& [pubend, position] : s.positions) {
        positions.push_back({{"pubend", pubend},
                             {"created", position.created},
                             {"released", position.released},
                             {"backlog_ticks", Backlog(report, pubend, position)},
                             {"backlog_records", position.backlog_records}});
      }
      Json subscription = Json::object();
      subscription["name"] = s.name;
      subscription["id"] = s.id;
      subscription["epoch"] = s.epoch;
      subscription["selector"] = s.selector;
      subscription["topic_filter"] = s.topic_filter;
      subscription["positions"] = std::move(positions);
      subscriptions.push_back(std::move(subscription));
    }
    Json subscriber = nullptr;
    if (report.subscriber) {
      const SubscriptionInfo& s = report.subscriptions[*report.subscriber];
      Json listed = Json::array();
      for (const auto& [pubend, position] : s.positions) {
        listed.push_back({{"pubend", pubend},
                          {"released", position.released},
                          {"records", position.backlog_records},
                          {"ticks", position.listed},
                          {"truncated", position.listed.size() < position.backlog_records}});
      }
      subscriber = {{"name", s.name},
                    {"id", s.id},
                    {"pfs_limit", report.pfs_limit},
                    {"pubends", std::move(listed)}};
    }
    shb = Json::object();
    shb["next_subscriber_id"] = report.next_id;
    shb["pubends"] = std::move(pubends);
    shb["subscriptions"] = std::move(subscriptions);
    shb["subscriber"] = std::move(subscriber);
  }
  doc["shb"] = std::move(shb);

  doc["notes"] = report.notes;
  doc["damaged"] = !report.damage.empty();
  Json damage = Json::array();
  for (const Problem& problem : report.damage) {
    damage.push_back({{"table", problem.table}, {"key", Hex(problem.key)}, {"what", problem.what}});
  }
  doc["damage"] = std::move(damage);
  return doc;
}

// ---- Flags and main -----------------------------------------------------------------------------

int Run(const std::string& dir) {
  const std::string subscriber = absl::GetFlag(FLAGS_subscriber);
  const int64_t pfs_limit = absl::GetFlag(FLAGS_pfs_limit);
  if (pfs_limit < 0) Die(absl::StrCat("--pfs_limit is a count (0 or more), not ", pfs_limit));

  StorageOptions options;
  options.path = dir;
  options.read_only = true;
  absl::StatusOr<std::unique_ptr<Storage>> opened = OpenLmdbStorage(options);
  if (!opened.ok()) {
    // No store to look into here (none, another program's or version's, not ours to read) is a
    // usage error; a damaged store, or a failure to read one, is a finding.
    const absl::StatusCode code = opened.status().code();
    const bool usage = code == absl::StatusCode::kNotFound ||
                       code == absl::StatusCode::kInvalidArgument ||
                       code == absl::StatusCode::kFailedPrecondition ||
                       code == absl::StatusCode::kPermissionDenied;
    Die(opened.status().ToString(), usage ? kExitUsage : kExitFailure);
  }
  Storage& storage = **opened;

  Report report;
  report.path = dir;
  report.pfs_limit = static_cast<uint64_t>(pfs_limit);
  absl::StatusOr<std::optional<std::string>> version = storage.Get("gryph.meta", "format_version");
  if (version.ok() && version->has_value() && (*version)->size() == 4) {
    report.format_version = internal::DecodeFixed32BE((*version)->data());
  }
  if (absl::StatusOr<uint64_t> bytes = storage.ApproximateBytesUsed(); bytes.ok()) {
    report.bytes_used = *bytes;
  }
  absl::StatusOr<std::vector<std::string>> tables = storage.ListTables();
  if (!tables.ok()) Die(absl::StrCat(dir, ": ", tables.status().ToString()), kExitFailure);
  for (const std::string& table : *tables) {
    absl::StatusOr<std::optional<uint64_t>> rows = storage.RecordedRowCount(table);
    report.tables.emplace_back(table, rows.ok() ? *rows : std::nullopt);
    if (absl::StartsWith(table, "pubend.")) {
      report.has_phb = true;
    } else if (absl::StartsWith(table, "shb.") || absl::StartsWith(table, "pfs.")) {
      report.has_shb = true;
    } else if (!absl::StartsWith(table, Storage::kReservedTablePrefix)) {
      report.notes.push_back(absl::StrCat("table ", Printable(table), " is no broker's"));
    }
  }
  if (!subscriber.empty() && !report.has_shb) {
    Die(absl::StrCat("--subscriber: ", dir, " holds no subscriber hosting broker's store"));
  }

  if (report.has_phb) ReadPhb(storage, report);
  if (report.has_shb) ReadShb(storage, report, subscriber);
  if (!subscriber.empty() && !report.subscriber) {
    Die(absl::StrCat("--subscriber: ", dir, " holds no subscription '", Printable(subscriber),
                     "'"));
  }

  if (absl::GetFlag(FLAGS_json)) {
    const std::string text = ToJson(report).dump(2, ' ', false, Json::error_handler_t::replace);
    std::printf("%s\n", text.c_str());
  } else {
    const std::string text = ToText(report);
    std::fputs(text.c_str(), stdout);
  }
  if (std::fflush(stdout) != 0) Die("writing standard output failed", kExitFailure);
  return report.damage.empty() ? 0 : kExitFailure;
}

}  // namespace
}  // namespace gryph::programs

int main(int argc, char** argv) {
  gryph::programs::SetProgramName("gryph-inspect");
  absl::SetProgramUsageMessage(
      "a read-only look into a gryph broker's store (safe beside the running broker).\n"
      "  gryph-inspect [--json] [--subscriber=NAME] [--pfs_limit=N] DATA_DIR\n"
      "DATA_DIR is the broker's --data_dir. Exit status: 0 nothing damaged, 1 damage found (what\n"
      "could be read is printed), 2 a bad flag or no gryph store in DATA_DIR.");
  std::vector<char*> rest = gryph::programs::ParseFlags(argc, argv, "gryph_inspect.cc");
  if (rest.size() != 2) {
    gryph::programs::Die(rest.size() < 2
                             ? "DATA_DIR is required (see --help)"
                             : absl::StrCat("unexpected argument '", rest[2], "' (see --help)"));
  }
  return gryph::programs::Run(rest[1]);
}
