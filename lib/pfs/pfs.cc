#include "gryph/broker/pfs.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/pfs/pfs_keys.h"
#include "lib/pfs/record_cache.h"
#include "lib/storage/last_row.h"
#include "lib/util/status_macros.h"

namespace gryph {

using internal::kPfsRecordKeyBytes;
using internal::kPfsRecordsTable;
using internal::kPfsSubscriberRowBytes;

namespace {

absl::Status Corrupt(PubendId p, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("PFS of pubend ", p.value, ": ", what));
}

absl::StatusOr<Tick> DecodeMetaTick(PubendId p, absl::string_view field,
                                    const std::optional<std::string>& row) {
  if (!row) return Tick{0};
  if (row->size() != 8) {
    return Corrupt(p, absl::StrCat(field, " is ", row->size(), " bytes, not 8"));
  }
  return internal::DecodeFixed64BE(row->data());
}

}  // namespace

// ---- PFS ----------------------------------------------------------------------------------------

PFS::PFS(const PfsOptions& options, Storage* storage)
    : options_(options),
      storage_(storage),
      records_begin_(internal::PubendPrefix(options.pubend)),
      records_end_(internal::PubendEnd(options.pubend)),
      cache_(std::make_unique<internal::PfsRecordCache>(options.read_cache_bytes)) {}

PFS::~PFS() = default;

absl::StatusOr<std::unique_ptr<PFS>> PFS::Open(const PfsOptions& options, Storage* storage) {
  if (options.checkpoint_interval < 1 || options.reader_chunk_ticks < 1) {
    return absl::InvalidArgumentError(
        "PFS: checkpoint_interval and reader_chunk_ticks must be >= 1");
  }
  std::unique_ptr<PFS> pfs(new PFS(options, storage));
  GRYPH_RETURN_IF_ERROR(pfs->Recover());
  return pfs;
}

absl::Status PFS::Recover() {
  const PubendId p = options_.pubend;
  GRYPH_ASSIGN_OR_RETURN(
      auto chop_row,
      storage_->Get(internal::kPfsMetaTable, internal::PfsMetaKey(p, internal::kPfsMetaChopped)));
  GRYPH_ASSIGN_OR_RETURN(chopped_, DecodeMetaTick(p, "chop point", chop_row));
  GRYPH_ASSIGN_OR_RETURN(auto checkpoint_row,
                         storage_->Get(internal::kPfsMetaTable,
                                       internal::PfsMetaKey(p, internal::kPfsMetaCheckpoint)));
  GRYPH_ASSIGN_OR_RETURN(checkpoint_tick_, DecodeMetaTick(p, "checkpoint tick", checkpoint_row));

  // The subscribers, with lastIndex as of the checkpoint: gathered first, then filed in a table
  // sized for all of them (growing it row by row rehashed every row about twice, a quarter of
  // the open at a million subscribers).
  std::vector<std::pair<uint64_t, Sub>> rows;
  absl::Status parse;
  GRYPH_RETURN_IF_ERROR(storage_->Scan(
      internal::kPfsSubscribersTable, records_begin_, records_end_,
      [&](absl::string_view key, absl::string_view value) {
        uint64_t id = 0;
        internal::PfsSubscriberRow row;
        if (!internal::ParsePfsSubscriberKey(key, p, &id) ||
            !internal::ParsePfsSubscriberRow(value, &row)) {
          parse = Corrupt(p, absl::StrCat("a subscriber row has a ", key.size(), "-byte key and a ",
                                          value.size(), "-byte value, not 12 and 16"));
          return false;
        }
        Sub sub;
        sub.added_at = row.registered_at;
        sub.last_index = row.last_index;
        if (sub.last_index != 0 &&
            (sub.last_index <= sub.added_at || sub.last_index > checkpoint_tick_)) {
          parse = Corrupt(p, absl::StrCat("subscriber ", id, " has lastIndex ", sub.last_index,
                                          " outside (", sub.added_at, ", ", checkpoint_tick_,
                                          "] (registration, checkpoint]"));
          return false;
        }
        sub.incarnation = next_incarnation_++;
        rows.emplace_back(id, sub);
        return true;
      }));
  GRYPH_RETURN_IF_ERROR(parse);
  subs_.reserve(rows.size());
  for (const auto& [id, sub] : rows) subs_.emplace(id, sub);
  std::vector<std::pair<uint64_t, Sub>>().swap(rows);

  // The last record.
  Tick last_record = 0;
  {
    GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Cursor> c, storage_->NewCursor(kPfsRecordsTable));
    GRYPH_ASSIGN_OR_RETURN(std::optional<std::string> key,
                           internal::SeekToLastBelow(*c, records_end_));
    if (key && internal::HasPubendPrefix(*key, p)) {
      GRYPH_RETURN_IF_ERROR(c->status());  // a damaged last record
      if (!internal::ParsePfsRecordKey(*key, p, &last_record)) {
        return Corrupt(p, absl::StrCat("a record key is ", key->size(), " bytes, not 12"));
      }
    }
  }

  // The tail: the records after the checkpoint (after the chop point, if later: Chop checkpoints
  // first, so no record between the checkpoint and the chop point was ever lost from it).
  const Tick tail_from = std::max(checkpoint_tick_, chopped_);
  if (tail_from < last_record) {
    GRYPH_RETURN_IF_ERROR(storage_->Scan(
        kPfsRecordsTable, internal::PfsRecordKey(p, tail_from + 1), records_end_,
        [&](absl::string_view key, absl::string_view value) {
          Tick t = 0;
          if (!internal::ParsePfsRecordKey(key, p, &t)) {
            parse = Corrupt(p, absl::StrCat("a record key is ", key.size(), " bytes, not 12"));
            return false;
          }
          internal::PfsRecordView record;
          if (!record.Parse(value)) {
            parse = Corrupt(p, absl::StrCat("the record of tick ", t, " (", value.size(),
                                            " bytes) does not parse"));
            return false;
          }
          uint64_t previous_id = 0;
          for (size_t i = 0; i < record.count(); ++i) {
            const uint64_t id = record.id(i);
            const uint64_t delta = record.delta(i);
            const Tick prev = delta == 0 ? 0 : t - delta;
            if ((i > 0 && id <= previous_id) || delta >= t) {
              parse = Corrupt(p, absl::StrCat("the record of tick ", t,
                                              " has unsorted subscribers or a forward pointer"));
              return false;
            }
            previous_id = id;
            auto it = subs_.find(id);
            // Entries of removed subscribers, or of an earlier registration of this id, are dead.
            if (it == subs_.end() || t <= it->second.added_at) continue;
            Sub& sub = it->second;
            if (prev != sub.last_index) {
              parse = Corrupt(p, absl::StrCat("the record of tick ", t, " says subscriber ", id,
                                              "'s previous record is at tick ", prev,
                                              ", but recovery found ", sub.last_index));
              return false;
            }
            sub.last_index = t;
            if (!sub.dirty) {
              sub.dirty = true;
              dirty_.push_back(id);
            }
          }
          ++recovered_tail_records_;
          return true;
        }));
    GRYPH_RETURN_IF_ERROR(parse);
  }
  records_since_checkpoint_ = recovered_tail_records_;
  last_tick_ = std::max({last_record, checkpoint_tick_, chopped_});
  committed_ = last_tick_;
  for (const auto& [id, sub] : subs_) {
    if (sub.added_at > last_tick_) {
      return Corrupt(p, absl::StrCat("subscriber ", id, " was registered at tick ", sub.added_at,
                                     ", after the last tick ", last_tick_));
    }
  }
  return absl::OkStatus();
}

absl::Status PFS::CheckUsable() const { return status_; }

const PFS::Sub* PFS::FindSub(SubscriberId s) const {
  auto it = subs_.find(s.value);
  return it == subs_.end() ? nullptr : &it->second;
}

absl::Status PFS::AddSubscriber(SubscriberId s, WriteBatch* batch) {
  GRYPH_RETURN_IF_ERROR(CheckUsable());
  if (subs_.contains(s.value)) {
    return absl::AlreadyExistsError(absl::StrCat("PFS of pubend ", options_.pubend.value,
                                                 ": subscriber ", s.value, " is registered"));
  }
  Sub sub;
  sub.added_at = last_tick_;
  sub.incarnation = next_incarnation_++;
  subs_.emplace(s.value, sub);
  char row[kPfsSubscriberRowBytes];
  internal::EncodePfsSubscriberRow(row, {sub.added_at, 0});
  batch->Put(internal::kPfsSubscribersTable, internal::PfsSubscriberKey(options_.pubend, s),
             absl::string_view(row, sizeof row));
  return absl::OkStatus();
}

absl::Status PFS::RemoveSubscriber(SubscriberId s, WriteBatch* batch) {
  GRYPH_RETURN_IF_ERROR(CheckUsable());
  auto it = subs_.find(s.value);
  if (it == subs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("PFS of pubend ", options_.pubend.value, ": unknown subscriber ", s.value));
  }
  subs_.erase(it);  // a stale id left in dirty_ is skipped by AppendCheckpoint
  batch->Delete(internal::kPfsSubscribersTable, internal::PfsSubscriberKey(options_.pubend, s));
  return absl::OkStatus();
}

absl::Status PFS::Write(Tick t, absl::Span<const SubscriberId> subscribers, WriteBatch* batch) {
  GRYPH_RETURN_IF_ERROR(CheckUsable());
  if (t <= last_tick_ || subscribers.empty()) return absl::OkStatus();

  // Validate everything before changing anything. No insertion happens below, so the Sub
  // pointers stay valid.
  scratch_subs_.clear();
  for (SubscriberId s : subscribers) {
    auto it = subs_.find(s.value);
    if (it == subs_.end()) {
      return absl::NotFoundError(absl::StrCat("PFS of pubend ", options_.pubend.value,
                                              ": write of tick ", t, " for unknown subscriber ",
                                              s.value));
    }
    scratch_subs_.emplace_back(s.value, &it->second);
  }
  auto by_id = [](const std::pair<uint64_t, Sub*>& a, const std::pair<uint64_t, Sub*>& b) {
    return a.first < b.first;
  };
  if (!std::is_sorted(scratch_subs_.begin(), scratch_subs_.end(), by_id)) {
    std::sort(scratch_subs_.begin(), scratch_subs_.end(), by_id);
  }
  for (size_t i = 1; i < scratch_subs_.size(); ++i) {
    if (scratch_subs_[i].first == scratch_subs_[i - 1].first) {
      return absl::InvalidArgumentError(absl::StrCat("PFS of pubend ", options_.pubend.value,
                                                     ": write of tick ", t, " lists subscriber ",
                                                     scratch_subs_[i].first, " twice"));
    }
  }

  // The record: (subscriber, tick - previous record tick) pairs sorted by subscriber, each field
  // as wide as the record's largest needs.
  uint64_t max_delta = 0;
  for (const auto& [id, sub] : scratch_subs_) {
    if (sub->last_index != 0) max_delta = std::max(max_delta, t - sub->last_index);
  }
  const int id_bytes = internal::BytesFor(scratch_subs_.back().first);
  const int delta_bytes = internal::BytesFor(max_delta);
  scratch_value_.resize(1 + scratch_subs_.size() * static_cast<size_t>(id_bytes + delta_bytes));
  char* out = scratch_value_.data();
  *out++ = static_cast<char>(internal::PfsRecordHeader(id_bytes, delta_bytes));
  for (auto& [id, sub] : scratch_subs_) {
    internal::EncodeFixedBE(out, id, id_bytes);
    out += id_bytes;
    internal::EncodeFixedBE(out, sub->last_index == 0 ? 0 : t - sub->last_index, delta_bytes);
    out += delta_bytes;
    sub->last_index = t;
    if (!sub->dirty) {
      sub->dirty = true;
      dirty_.push_back(id);
    }
  }
  char key[kPfsRecordKeyBytes];
  internal::EncodePubendKey64(key, options_.pubend, t);
  batch->Put(kPfsRecordsTable, absl::string_view(key, sizeof key), scratch_value_);

  // Readers must see the record before its batch commits.
  unsettled_ticks_.push_back(t);
  unsettled_offsets_.push_back(unsettled_bytes_.size());
  unsettled_bytes_.append(scratch_value_);

  last_tick_ = t;
  if (++records_since_checkpoint_ >= options_.checkpoint_interval) AppendCheckpoint(batch);
  return absl::OkStatus();
}

void PFS::AppendCheckpoint(WriteBatch* batch) {
  // Sorted, so that the rows go into the table in key order.
  std::sort(dirty_.begin(), dirty_.end());
  char key[internal::kPfsSubscriberKeyBytes];
  char row[kPfsSubscriberRowBytes];
  for (uint64_t id : dirty_) {
    auto it = subs_.find(id);
    if (it == subs_.end() || !it->second.dirty) continue;  // removed (or re-added) since
    Sub& sub = it->second;
    sub.dirty = false;
    internal::EncodePubendKey64(key, options_.pubend, id);
    internal::EncodePfsSubscriberRow(row, {sub.added_at, sub.last_index});
    batch->Put(internal::kPfsSubscribersTable, absl::string_view(key, sizeof key),
               absl::string_view(row, sizeof row));
  }
  dirty_.clear();
  if (last_tick_ != checkpoint_tick_) {
    batch->Put(internal::kPfsMetaTable,
               internal::PfsMetaKey(options_.pubend, internal::kPfsMetaCheckpoint),
               internal::EncodePfsMetaTick(last_tick_));
  }
  checkpoint_tick_ = last_tick_;
  records_since_checkpoint_ = 0;
}

absl::Status PFS::Checkpoint(WriteBatch* batch) {
  GRYPH_RETURN_IF_ERROR(CheckUsable());
  AppendCheckpoint(batch);
  return absl::OkStatus();
}

absl::Status PFS::Chop(Tick through, WriteBatch* batch) {
  GRYPH_RETURN_IF_ERROR(CheckUsable());
  if (through <= chopped_) return absl::OkStatus();
  // Recovery replays only the records after the checkpoint: the ones about to be deleted must be
  // in a checkpoint first.
  if (last_tick_ > checkpoint_tick_ && through > checkpoint_tick_) AppendCheckpoint(batch);
  batch->DeleteRange(
      kPfsRecordsTable, internal::PfsRecordKey(options_.pubend, chopped_ + 1),
      through == kMaxTick ? records_end_ : internal::PfsRecordKey(options_.pubend, through + 1));
  batch->Put(internal::kPfsMetaTable,
             internal::PfsMetaKey(options_.pubend, internal::kPfsMetaChopped),
             internal::EncodePfsMetaTick(through));
  chopped_ = through;
  last_tick_ = std::max(last_tick_, through);
  cache_->DropThrough(through);
  return absl::OkStatus();
}

absl::Status PFS::ScanCommitted(Tick from, Tick to,
                                absl::FunctionRef<bool(Tick, absl::string_view)> visit) {
  // Storage holds nothing at or below the chop point; a chunk from before the chop may still.
  Tick at = std::max(from, chopped_);  // every record in (from, at] has been visited
  while (at < to) {
    if (const internal::PfsRecordCache::Chunk* c = cache_->Covering(at)) {
      for (size_t i = c->UpperBound(at); i < c->size() && c->tick(i) <= to; ++i) {
        if (!visit(c->tick(i), c->value(i))) return absl::OkStatus();
      }
      at = std::min(c->hi(), to);
      continue;
    }
    // Storage up to the next cached chunk (or `to`), remembered for the next pass.
    const Tick stop = std::min(to, cache_->NextStart(at));
    internal::PfsRecordCache::Builder kept(cache_.get(), at);
    absl::Status parse;
    Tick last = at;
    bool stopped = false;
    GRYPH_RETURN_IF_ERROR(storage_->Scan(
        kPfsRecordsTable, internal::PfsRecordKey(options_.pubend, at + 1),
        internal::PfsRecordKey(options_.pubend, stop + 1),
        [&](absl::string_view key, absl::string_view value) {
          if (!internal::ParsePfsRecordKey(key, options_.pubend, &last)) {
            parse = Corrupt(options_.pubend,
                            absl::StrCat("a record key is ", key.size(), " bytes, not 12"));
            return false;
          }
          kept.Add(last, value);
          stopped = !visit(last, value);
          return !stopped;
        }));
    GRYPH_RETURN_IF_ERROR(parse);
    kept.Finish(stopped ? last : stop);
    if (stopped) return absl::OkStatus();
    at = stop;
  }
  return absl::OkStatus();
}

void PFS::MarkCommitted(Tick through) {
  through = std::min(through, last_tick_);
  if (through <= committed_) return;
  committed_ = through;
  auto first_live = std::upper_bound(unsettled_ticks_.begin() + unsettled_begin_,
                                     unsettled_ticks_.end(), through);
  unsettled_begin_ = first_live - unsettled_ticks_.begin();
  if (unsettled_begin_ == unsettled_ticks_.size()) {
    unsettled_ticks_.clear();
    unsettled_offsets_.clear();
    unsettled_bytes_.clear();
    unsettled_begin_ = 0;
  } else if (unsettled_begin_ >= 64 && unsettled_begin_ * 2 >= unsettled_ticks_.size()) {
    // Compact: drop the committed prefix (amortized O(1) per record).
    const size_t base = unsettled_offsets_[unsettled_begin_];
    unsettled_ticks_.erase(unsettled_ticks_.begin(),
                           unsettled_ticks_.begin() + static_cast<ptrdiff_t>(unsettled_begin_));
    unsettled_offsets_.erase(unsettled_offsets_.begin(),
                             unsettled_offsets_.begin() + static_cast<ptrdiff_t>(unsettled_begin_));
    for (size_t& off : unsettled_offsets_) off -= base;
    unsettled_bytes_.erase(0, base);
    unsettled_begin_ = 0;
  }
}

absl::Status PFS::Commit(const WriteBatch& batch) {
  GRYPH_RETURN_IF_ERROR(CheckUsable());
  absl::Status s = storage_->Commit(batch);
  if (!s.ok()) {
    status_ = absl::FailedPreconditionError(
        absl::StrCat("PFS of pubend ", options_.pubend.value,
                     " must be reopened after a failed commit: ", s.ToString()));
    return s;
  }
  MarkCommitted(last_tick_);
  return absl::OkStatus();
}

absl::string_view PFS::UnsettledRecord(size_t i) const {
  const size_t end =
      i + 1 < unsettled_ticks_.size() ? unsettled_offsets_[i + 1] : unsettled_bytes_.size();
  return absl::string_view(unsettled_bytes_)
      .substr(unsettled_offsets_[i], end - unsettled_offsets_[i]);
}

absl::StatusOr<absl::string_view> PFS::LookupRecord(Tick t, std::unique_ptr<Cursor>* cursor) {
  if (t > committed_) {
    auto begin = unsettled_ticks_.begin() + static_cast<ptrdiff_t>(unsettled_begin_);
    auto it = std::lower_bound(begin, unsettled_ticks_.end(), t);
    if (it == unsettled_ticks_.end() || *it != t) {
      return Corrupt(options_.pubend, absl::StrCat("no record at tick ", t));
    }
    return UnsettledRecord(static_cast<size_t>(it - unsettled_ticks_.begin()));
  }
  if (*cursor == nullptr) {
    GRYPH_ASSIGN_OR_RETURN(*cursor, storage_->NewCursor(kPfsRecordsTable));
  }
  char key[kPfsRecordKeyBytes];
  internal::EncodePubendKey64(key, options_.pubend, t);
  const absl::string_view target(key, sizeof key);
  Cursor* c = cursor->get();
  c->Seek(target);
  GRYPH_RETURN_IF_ERROR(c->status());
  if (!c->Valid() || c->key() != target) {
    return Corrupt(options_.pubend,
                   absl::StrCat("a back-pointer leads to tick ", t, ", which has no record"));
  }
  return c->value();
}

absl::StatusOr<Tick> PFS::FindPrev(absl::string_view value, Tick t, SubscriberId s) {
  internal::PfsRecordView record;
  if (!record.Parse(value)) {
    return absl::DataLossError(
        absl::StrCat("PFS: the record of tick ", t, " (", value.size(), " bytes) does not parse"));
  }
  const size_t i = record.Find(s.value);
  if (i == record.count()) {
    return absl::DataLossError(absl::StrCat("PFS: the record of tick ", t,
                                            " does not hold subscriber ", s.value,
                                            ", whose back-pointer leads to it"));
  }
  const uint64_t delta = record.delta(i);
  if (delta >= t) {
    return absl::DataLossError(absl::StrCat("PFS: the record of tick ", t, " points ", delta,
                                            " ticks back for subscriber ", s.value));
  }
  return delta == 0 ? 0 : t - delta;
}

absl::StatusOr<std::unique_ptr<PFS::Reader>> PFS::NewReader(SubscriberId s, Tick from, Tick to) {
  GRYPH_RETURN_IF_ERROR(CheckUsable());
  const Sub* sub = FindSub(s);
  if (sub == nullptr) {
    return absl::NotFoundError(absl::StrCat("PFS of pubend ", options_.pubend.value,
                                            ": read for unknown subscriber ", s.value));
  }
  if (from > to) {
    return absl::InvalidArgumentError(
        absl::StrCat("PFS read window (", from, ", ", to, "] is reversed"));
  }
  return std::unique_ptr<Reader>(new Reader(this, s, sub->incarnation, from, to));
}

std::optional<Tick> PFS::last_index(SubscriberId s) const {
  const Sub* sub = FindSub(s);
  if (sub == nullptr) return std::nullopt;
  return sub->last_index;
}

std::vector<SubscriberId> PFS::subscribers() const {
  std::vector<SubscriberId> out;
  out.reserve(subs_.size());
  for (const auto& [id, sub] : subs_) out.push_back(SubscriberId{id});
  return out;
}

absl::Status PFS::ReadTogether(absl::Span<Reader* const> readers, size_t max_records,
                               std::vector<ReadResult>* results, size_t max_bytes) {
  GRYPH_RETURN_IF_ERROR(CheckUsable());
  if (max_records == 0) return absl::InvalidArgumentError("PFS read of no records");
  results->resize(readers.size());
  // Per reader, the window the pass serves, (from, end], and the ticks at or below `floor` that
  // are not its subscriber's (an earlier registration's records).
  struct Want {
    Tick from;
    Tick end;
    Tick floor;
    SubscriberId subscriber;
    std::vector<Tick>* ticks;
  };
  std::vector<Want> wants;
  wants.reserve(readers.size());
  // Per reader, where its window starts after what the PFS chopped (unknown, as for Read), and
  // whether it needs the pass: a reader with no record of its subscriber after that (its last is
  // below) has nothing to read, and the pass need not start down there.
  std::vector<std::pair<Tick, bool>> starts(readers.size());
  Tick lo = kMaxTick;
  Tick hi = 0;
  for (size_t i = 0; i < readers.size(); ++i) {
    const Reader& r = *readers[i];
    GRYPH_RETURN_IF_ERROR(r.CheckRegistered());
    ReadResult& result = (*results)[i];
    result.ticks.clear();
    result.lost_through = 0;
    result.through = r.position_;
    if (r.done()) continue;
    const Tick from = std::max(r.position_, std::min(chopped_, r.end_));
    const Sub& sub = *FindSub(r.subscriber_);
    const bool needs_pass = sub.last_index > from;
    starts[i] = {from, needs_pass};
    if (!needs_pass) continue;
    wants.push_back(Want{from, r.end_, sub.added_at, r.subscriber_, &result.ticks});
    lo = std::min(lo, from);
    hi = std::max(hi, r.end_);
  }
  std::sort(wants.begin(), wants.end(),
            [](const Want& a, const Want& b) { return a.subscriber.value < b.subscriber.value; });
  // The pass: records in (lo, hi], committed ones from storage and the rest from memory, in tick
  // order; `through` ends at the last record read when max_records or max_bytes ran out.
  Tick through = hi;
  size_t records = 0;
  size_t bytes = 0;
  absl::Status parse;
  auto visit = [&](Tick t, absl::string_view value) {
    bytes += value.size();
    if (records == max_records || (records > 0 && bytes > max_bytes)) {
      through = std::min(through, t - 1);
      return false;
    }
    ++records;
    internal::PfsRecordView record;
    if (!record.Parse(value)) {
      parse = absl::DataLossError(absl::StrCat("PFS: the record of tick ", t, " (", value.size(),
                                               " bytes) does not parse"));
      return false;
    }
    auto take = [t](const Want& w) {
      if (t > w.from && t <= w.end && t > w.floor) w.ticks->push_back(t);
    };
    const size_t n = record.count();
    if (wants.size() * 8 < n) {
      // Few readers in a large record: find each.
      for (const Want& w : wants) {
        if (record.Find(w.subscriber.value) != n) take(w);
      }
    } else {
      // Many: one merge of the two sorted lists.
      size_t i = 0;
      for (const Want& w : wants) {
        while (i < n && record.id(i) < w.subscriber.value) ++i;
        if (i == n) break;
        if (record.id(i) == w.subscriber.value) take(w);
      }
    }
    return true;
  };
  if (!wants.empty() && lo < committed_) {
    GRYPH_RETURN_IF_ERROR(ScanCommitted(lo, std::min(hi, committed_), visit));
  }
  if (parse.ok() && !wants.empty() && hi > committed_ && through == hi) {
    auto begin = unsettled_ticks_.begin() + static_cast<ptrdiff_t>(unsettled_begin_);
    for (auto it = std::upper_bound(begin, unsettled_ticks_.end(), std::max(lo, committed_));
         it != unsettled_ticks_.end() && *it <= hi; ++it) {
      if (!visit(*it, UnsettledRecord(static_cast<size_t>(it - unsettled_ticks_.begin())))) {
        break;
      }
    }
  }
  if (!parse.ok()) {
    for (ReadResult& result : *results) result.ticks.clear();
    return parse;
  }
  for (size_t i = 0; i < readers.size(); ++i) {
    Reader& r = *readers[i];
    ReadResult& result = (*results)[i];
    if (r.done()) continue;
    const auto [from, needs_pass] = starts[i];
    // The pass covered (from, through], unless it stopped below `from`.
    if (!needs_pass) {
      result.through = r.end_;
    } else if (through >= from) {
      result.through = std::min(through, r.end_);
    } else {
      continue;
    }
    if (result.through == r.position_) continue;
    if (from > r.position_) result.lost_through = from;
    r.SkipTo(result.through);
  }
  return absl::OkStatus();
}

// ---- Reader -------------------------------------------------------------------------------------

PFS::Reader::Reader(PFS* pfs, SubscriberId s, uint64_t incarnation, Tick from, Tick to)
    : pfs_(pfs), subscriber_(s), incarnation_(incarnation), position_(from), end_(to) {
  if (from < to) pending_.push_back(Segment{from, to, 0});
}

PFS::Reader::~Reader() = default;

void PFS::Reader::ExtendTo(Tick to) {
  if (to <= end_) return;
  if (!pending_.empty() && pending_.back().start == 0) {
    pending_.back().hi = to;  // not walked yet: walk the longer window at once
  } else {
    pending_.push_back(Segment{end_, to, 0});
  }
  end_ = to;
}

absl::Status PFS::Reader::WalkNext() {
  const Segment seg = pending_.front();
  const Sub* sub = pfs_->FindSub(subscriber_);  // checked by Read
  const Tick lo = std::max({seg.lo, position_, pfs_->chopped_, sub->added_at});
  const size_t chunk = pfs_->options_.reader_chunk_ticks;
  std::vector<Segment> chunks;  // bookmarked chunks above ticks_, highest first
  std::unique_ptr<Cursor> cursor;
  Tick p = seg.start != 0 ? seg.start : sub->last_index;
  while (p > lo) {
    absl::StatusOr<absl::string_view> record = pfs_->LookupRecord(p, &cursor);
    absl::StatusOr<Tick> prev = record.ok() ? FindPrev(*record, p, subscriber_) : record.status();
    if (!prev.ok()) {
      ticks_.clear();
      return prev.status();
    }
    if (p <= seg.hi) {
      if (ticks_.size() == chunk) {
        // ticks_ is a full chunk above p: keep only its top as a bookmark.
        chunks.push_back(Segment{p, ticks_.front(), ticks_.front()});
        ticks_.clear();
      }
      ticks_.push_back(p);
    }
    p = *prev;
  }
  pending_.pop_front();
  for (const Segment& c : chunks) pending_.push_front(c);  // lowest ends up first
  return absl::OkStatus();
}

absl::Status PFS::Reader::CheckRegistered() const {
  const Sub* sub = pfs_->FindSub(subscriber_);
  if (sub == nullptr || sub->incarnation != incarnation_) {
    return absl::NotFoundError(absl::StrCat("PFS of pubend ", pfs_->options_.pubend.value,
                                            ": subscriber ", subscriber_.value,
                                            " was removed since the reader was created"));
  }
  return absl::OkStatus();
}

void PFS::Reader::SkipTo(Tick through) {
  position_ = through;
  while (!ticks_.empty() && ticks_.back() <= through) ticks_.pop_back();
  while (!pending_.empty() && pending_.front().hi <= through) pending_.pop_front();
  for (Segment& seg : pending_) seg.lo = std::max(seg.lo, through);
}

absl::Status PFS::Reader::Read(size_t max_ticks, ReadResult* result) {
  GRYPH_RETURN_IF_ERROR(pfs_->CheckUsable());
  GRYPH_RETURN_IF_ERROR(CheckRegistered());
  if (max_ticks == 0) return absl::InvalidArgumentError("PFS read into an empty buffer");
  result->ticks.clear();
  result->lost_through = 0;

  const Tick position_before = position_;
  // Ticks the PFS chopped since (or before) are unknown now, even if already walked.
  Tick from = position_;
  if (pfs_->chopped_ > from && from < end_) {
    from = std::min(pfs_->chopped_, end_);
    result->lost_through = from;
    SkipTo(from);
  }

  while (result->ticks.size() < max_ticks) {
    if (ticks_.empty()) {
      if (pending_.empty()) break;
      absl::Status s = WalkNext();
      if (!s.ok()) {
        // Put back what this call took, so that the position stays where it was: below a chop
        // it skipped, which the next read reports again (what it dropped was chopped anyway).
        for (auto it = result->ticks.rbegin(); it != result->ticks.rend(); ++it) {
          ticks_.push_back(*it);
        }
        position_ = position_before;
        result->ticks.clear();
        result->lost_through = 0;
        return s;
      }
      continue;
    }
    result->ticks.push_back(ticks_.back());
    ticks_.pop_back();
  }
  const bool more = !ticks_.empty() || !pending_.empty();
  result->through = more && result->ticks.size() == max_ticks ? result->ticks.back() : end_;
  position_ = result->through;
  return absl::OkStatus();
}

}  // namespace gryph
