#include "gryph/pubend.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "lib/pubend/pubend_impl.h"
#include "lib/pubend/pubend_keys.h"
#include "lib/storage/last_row.h"
#include "lib/util/coding.h"
#include "lib/util/fnv1a.h"
#include "lib/util/status_macros.h"
#include "lib/util/stopwatch.h"

namespace gryph {

using internal::EventKey;
using internal::MetaKey;
using internal::Stopwatch;

namespace {

absl::StatusOr<Tick> DecodeTickValue(absl::string_view what, absl::string_view bytes) {
  std::optional<Tick> t = internal::ParseMetaTick(bytes);
  if (!t) {
    return absl::DataLossError(
        absl::StrCat("pubend ", what, " is ", bytes.size(), " bytes, not 8"));
  }
  return *t;
}

}  // namespace

namespace internal {

PubendImpl::PubendImpl(const PubendOptions& options, Storage* storage, GroupCommitter* committer,
                       Channel* channel)
    : options_(options), storage_(storage), committer_(committer), channel_(channel) {}

PubendImpl::~PubendImpl() = default;

absl::Status PubendImpl::Recover() {
  absl::MutexLock lock(&mu_);
  Stopwatch total;
  Stopwatch step;
  const PubendId p = options_.id;
  Tick announced = 0;
  GRYPH_ASSIGN_OR_RETURN(auto t_row, storage_->Get(internal::kPubendMetaTable,
                                                   MetaKey(p, internal::kMetaAnnouncedTick)));
  if (t_row) {
    GRYPH_ASSIGN_OR_RETURN(announced, DecodeTickValue("announced tick", *t_row));
  }
  GRYPH_ASSIGN_OR_RETURN(
      auto l_row, storage_->Get(internal::kPubendMetaTable, MetaKey(p, internal::kMetaLPrefix)));
  if (l_row) {
    GRYPH_ASSIGN_OR_RETURN(l_prefix_, DecodeTickValue("L prefix", *l_row));
  }

  // The last logged event: the greatest key below the next pubend's prefix.
  Tick last_event = 0;
  {
    GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Cursor> c, storage_->NewCursor(internal::kEventsTable));
    // Only the key matters here: a damaged last row still holds its tick.
    GRYPH_ASSIGN_OR_RETURN(std::optional<std::string> key,
                           internal::SeekToLastBelow(*c, internal::PubendEnd(p)));
    if (key) last_event = internal::ParseEventKey(p, *key).value_or(0);
  }
  committed_ = assigned_ = std::max({announced, last_event, l_prefix_});
  releasing_ = l_prefix_;
  recovery_.log = step.Lap();

  const std::string begin = internal::PubendPrefix(p);
  const std::string end = internal::PubendEnd(p);
  // Scan callbacks fill locals (the lock analysis does not follow into lambdas).
  absl::btree_map<std::string, Downstream> downstream;
  absl::Status parse;
  GRYPH_RETURN_IF_ERROR(storage_->Scan(
      internal::kDownstreamTable, begin, end, [&](absl::string_view key, absl::string_view value) {
        std::optional<internal::DownstreamRow> row = internal::ParseDownstreamRow(value);
        if (!row) {
          parse = absl::DataLossError("pubend downstream row is not 16 bytes");
          return false;
        }
        downstream[std::string(internal::ParseDownstreamKey(key))] =
            Downstream{row->released, row->latest_delivered};
        return true;
      }));
  GRYPH_RETURN_IF_ERROR(parse);
  recovery_.downstream = step.Lap();
  downstream_ = std::move(downstream);
  // The publisher sequences are read per publisher, at its first publish since the open
  // (LoadPublisherLocked): a restart costs nothing per publisher or per logged sequence.
  recovery_.total = total.Lap();
  return absl::OkStatus();
}

Tick PubendImpl::NowTick(absl::Time now) const {
  const int64_t micros = absl::ToUnixMicros(now);
  return std::max<Tick>(committed_, micros > 0 ? static_cast<Tick>(micros) : 0);
}

absl::StatusOr<PubendImpl::Publisher> PubendImpl::LoadPublisherLocked(absl::string_view name) {
  // One row per logged sequence, in sequence order (docs/format.md), at most 2 * kSequenceWindow
  // of them (trimmed); the window is the latest kSequenceWindow. Every key of the range is this
  // publisher's: its length is fixed by the name's.
  const std::string begin = internal::PublisherSequenceKey(options_.id, name, 0);
  const std::string end =
      absl::StrCat(internal::PublisherSequenceKey(options_.id, name, UINT64_MAX), "\0");
  Publisher pub;
  absl::Status parse;
  GRYPH_RETURN_IF_ERROR(storage_->Scan(
      internal::kPublishersTable, begin, end, [&](absl::string_view key, absl::string_view value) {
        std::optional<internal::PublisherSequence> seq = internal::ParsePublisherSequenceKey(key);
        absl::StatusOr<Tick> tick = internal::ParsePublisherRow(value);
        if (!seq || seq->name != name || !tick.ok()) {
          parse = absl::DataLossError(
              absl::StrCat("pubend ", options_.id.value, " publisher row \"", absl::CHexEscape(key),
                           "\" is malformed", tick.ok() ? "" : ": ", tick.status().message()));
          return false;
        }
        pub.committed.Push({seq->sequence, *tick});  // keys ascend: so do the sequences
        pub.last_sequence = seq->sequence;
        ++pub.stored_rows;
        return true;
      }));
  GRYPH_RETURN_IF_ERROR(parse);
  return pub;
}

void PubendImpl::Fail(const absl::Status& status) {
  // A full store applied nothing and the committer goes on (GroupCommitter): the submission's
  // own callback undoes what it had reserved, and a later one (after a release) succeeds.
  if (absl::IsResourceExhausted(status)) return;
  if (!status_.ok()) return;
  status_ = status;
  Log(LogLevel::kError,
      absl::StrCat("failed: ", status.ToString(), "; it publishes and answers nothing more"));
}

void PubendImpl::Publish(absl::string_view publisher, uint64_t sequence, EventRef event,
                         absl::Time now, PublishDone done) {
  absl::StatusOr<Tick> immediate;  // the outcome when known without a commit
  // Encoded before the lock, which the commit thread takes for every committed event: the
  // buffer is the calling thread's and keeps its capacity.
  thread_local std::string encoded;
  encoded.clear();
  if (event != nullptr) event->EncodeTo(&encoded);
  {
    absl::MutexLock lock(&mu_);
    if (!status_.ok()) {
      immediate = status_;
    } else if (event == nullptr) {
      immediate = absl::InvalidArgumentError("publish of a null event");
    } else if (publisher.size() > kMaxPublisherNameBytes) {
      // Checked here, where it enters: in the group commit it would fail everyone's publishes.
      immediate = absl::InvalidArgumentError(absl::StrCat(
          "publisher name of ", publisher.size(), " bytes; at most ", kMaxPublisherNameBytes));
    } else {
      Publisher* pub = nullptr;
      bool unreadable = false;
      if (sequence > 0) {
        auto it = publishers_.find(publisher);
        if (it == publishers_.end()) {
          // Its first publish since the open: a bounded read of its stored sequences. A damaged
          // one, or one just after them (its key may be what was damaged), fails this
          // publisher's publishes (its retries cannot be told apart), not the pubend's.
          absl::StatusOr<Publisher> loaded = LoadPublisherLocked(publisher);
          if (loaded.ok()) {
            it = publishers_.emplace(std::string(publisher), *std::move(loaded)).first;
          } else {
            unreadable = true;
            immediate = absl::DataLossError(
                absl::StrCat("publisher '", publisher, "': its stored sequences are unreadable (",
                             loaded.status().message(), "); publish under another publisher name"));
          }
        }
        if (it != publishers_.end()) pub = &it->second;
      }
      if (unreadable) {
        // Refused above.
      } else if (pub != nullptr && sequence <= pub->last_sequence) {
        if (auto it = pub->pending.find(sequence); it != pub->pending.end()) {
          it->second.waiters.push_back(std::move(done));  // answered with the original's commit
          return;
        }
        if (const SequenceEntry* hit = pub->committed.Find(sequence); hit != nullptr) {
          immediate = hit->tick;
        } else if (pub->committed.size() == kSequenceWindow &&
                   sequence < pub->committed.front().sequence) {
          // Below a full window nothing is known. A window not full holds every sequence the
          // publisher ever logged here (none was dropped or trimmed): one not in it never was,
          // even below its first (lost on the way, say, while a later one arrived).
          immediate = absl::AlreadyExistsError(
              absl::StrCat("publisher '", publisher, "' sequence ", sequence,
                           " was logged but is older than the retry window of ", kSequenceWindow));
        } else {
          immediate = absl::InvalidArgumentError(
              absl::StrCat("publisher '", publisher, "' sequence ", sequence,
                           " is below its latest ", pub->last_sequence,
                           " and was never logged (if its publish failed, publish it "
                           "again under a new sequence)"));
        }
      } else {
        const Tick t = std::max(assigned_ + 1, NowTick(now));
        assigned_ = t;
        last_activity_ = now;
        // Written straight into the pending group (SubmitInto): no batch of its own, no copy of
        // one.
        // The sequence's own row, written by the commit that logs the event and by no other:
        // no row claims a sequence whose commit failed (a full store fails one group, and the
        // ones after it may commit).
        std::string row;
        if (pub != nullptr) {
          pub->last_sequence = sequence;
          pub->pending[sequence].tick = t;
          row = internal::EncodePublisherRow(t);
        }
        ++in_flight_;
        auto fill = [&](WriteBatch& batch) {
          batch.Put(internal::kEventsTable, EventKey(options_.id, t), encoded);
          if (pub != nullptr) {
            batch.Put(internal::kPublishersTable,
                      internal::PublisherSequenceKey(options_.id, publisher, sequence), row);
          }
        };
        // The commit thread cannot run the batch's callback meanwhile: it needs mu_.
        if (open_batch_ == nullptr || !committer_->JoinPending(open_group_, 1, fill)) {
          open_batch_ = std::make_shared<CommitBatch>();
          open_group_ = committer_->SubmitInto(
              1, fill, [this, batch = open_batch_](absl::Status s) { OnCommitted(*batch, s); });
        }
        open_batch_->events.push_back(
            Published{t, std::move(event), std::string(publisher), sequence, std::move(done)});
        return;
      }
    }
  }
  std::move(done)(std::move(immediate));
}

void PubendImpl::OnCommitted(CommitBatch& batch, absl::Status status) {
  // Each publish's answer, then those of its retries that waited for it.
  std::vector<std::pair<PublishDone, absl::StatusOr<Tick>>> answers;
  {
    // Publishes join the batch under mu_ until its group is taken: read it only under mu_.
    absl::MutexLock lock(&mu_);
    answers.reserve(batch.events.size());
    if (open_batch_.get() == &batch) open_batch_ = nullptr;  // its group is taken
    for (Published& e : batch.events) {
      --in_flight_;
      absl::StatusOr<Tick> result = e.tick;
      std::vector<PublishDone> waiters;
      if (e.sequence > 0) {
        Publisher& pub = publishers_[e.publisher];
        auto it = pub.pending.find(e.sequence);
        if (it != pub.pending.end()) {
          waiters = std::move(it->second.waiters);
          pub.pending.erase(it);
        }
        if (status.ok()) {
          pub.committed.Push({e.sequence, e.tick});
          if (++pub.stored_rows >= 2 * kSequenceWindow) TrimPublisherLocked(e.publisher, pub);
        } else {
          // Not logged: the publisher may retry the sequence (every later pending one of this
          // publisher fails too, see GroupCommitter, and moves it back further).
          pub.last_sequence = std::max(pub.committed.empty() ? 0 : pub.committed.back().sequence,
                                       pub.pending.empty() ? 0 : pub.pending.rbegin()->first);
        }
      }
      if (!status.ok()) {
        Fail(status);
        result = status;
      } else {
        if (e.tick > committed_ + 1) {
          unsent_.push_back(KnowledgeSpan::Silence({committed_ + 1, e.tick - 1}));
        }
        unsent_.push_back(KnowledgeSpan::Data(e.tick, std::move(e.event)));
        committed_ = e.tick;
        if (in_flight_ == 0 || unsent_.size() >= options_.max_spans_per_message) {
          FlushKnowledgeLocked();
        }
      }
      answers.emplace_back(std::move(e.done), result);
      for (PublishDone& w : waiters) answers.emplace_back(std::move(w), result);
    }
  }
  for (auto& [done, result] : answers) std::move(done)(std::move(result));
}

void PubendImpl::TrimPublisherLocked(const std::string& name, Publisher& pub) {
  // The rows below the committed window: deleting them depends on nothing still pending.
  WriteBatch batch;
  batch.DeleteRange(
      internal::kPublishersTable, internal::PublisherSequenceKey(options_.id, name, 0),
      internal::PublisherSequenceKey(options_.id, name, pub.committed.front().sequence));
  batch.set_frees_space(true);
  pub.stored_rows = pub.committed.size();
  SubmitOtherLocked(std::move(batch), [this](absl::Status s) {
    if (s.ok()) return;
    absl::MutexLock l(&mu_);
    Fail(s);  // left over rows are ignored at open, and trimmed with the next ones
  });
}

void PubendImpl::SubmitOtherLocked(WriteBatch batch, GroupCommitter::Done done) {
  open_batch_ = nullptr;  // nothing may join a batch submitted before this
  committer_->Submit(std::move(batch), 0, std::move(done));
}

void PubendImpl::FlushKnowledge() {
  absl::MutexLock lock(&mu_);
  FlushKnowledgeLocked();
}

void PubendImpl::FlushKnowledgeLocked() {
  if (unsent_.empty()) return;
  KnowledgeMessage message{options_.id, {}};
  size_t bytes = 0;
  for (KnowledgeSpan& span : unsent_) {
    if (message.spans.size() >= options_.max_spans_per_message ||
        bytes >= options_.max_bytes_per_message) {
      SendLocked(std::move(message));
      message = KnowledgeMessage{options_.id, {}};
      bytes = 0;
    }
    if (span.event != nullptr) bytes += span.event->payload().size();
    // Consecutive silences merge (a heartbeat after an event gap).
    if (!message.spans.empty() && span.value == TickValue::kS &&
        message.spans.back().value == TickValue::kS) {
      message.spans.back().range.last = span.range.last;
    } else {
      message.spans.push_back(std::move(span));
    }
  }
  SendLocked(std::move(message));
  unsent_.clear();
}

void PubendImpl::SendLocked(KnowledgeMessage message) {
  for (const auto& [node, state] : downstream_) {
    // A lost or refused message is repaired by the node's nacks.
    (void)channel_->Send(node, message);
  }
}

void PubendImpl::OnTimer(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return;
  FlushKnowledgeLocked();
  PersistDirtyDownstream();
  MaybeRelease(now);
  ReclaimSome();
  if (in_flight_ > 0 || now - last_activity_ < options_.heartbeat) return;
  last_activity_ = now;
  const Tick t = NowTick(now);
  if (t <= assigned_) return;
  // Announce silence up to now: reserve the ticks durably first, so that no later event (even
  // after a restart with a clock that went back) lands on a tick announced as S.
  assigned_ = t;
  ++in_flight_;
  WriteBatch batch;
  batch.Put(internal::kPubendMetaTable, MetaKey(options_.id, internal::kMetaAnnouncedTick),
            internal::EncodeMetaTick(t));
  SubmitOtherLocked(std::move(batch), [this, t](absl::Status s) {
    absl::MutexLock l(&mu_);
    --in_flight_;
    if (!s.ok()) {
      Fail(s);
      return;
    }
    if (t > committed_) {
      unsent_.push_back(KnowledgeSpan::Silence({committed_ + 1, t}));
      committed_ = t;
    }
    if (in_flight_ == 0) FlushKnowledgeLocked();
  });
}

void PubendImpl::ReclaimSome() {
  if (reclaiming_ || reclaimed_ >= l_prefix_) return;
  absl::StatusOr<std::unique_ptr<Cursor>> c = storage_->NewCursor(internal::kEventsTable);
  if (!c.ok()) {
    Fail(c.status());
    return;
  }
  Tick last = 0;
  size_t n = 0;
  Cursor& cursor = **c;
  // Only keys are read: a damaged row below the L prefix is deleted like any other.
  std::optional<std::string> damaged;
  for (cursor.Seek(EventKey(options_.id, reclaimed_ + 1));
       n < kReclaimChunk && (cursor.Valid() || (damaged = DamagedRowKey(cursor.status())));
       cursor.Next(), ++n) {
    absl::string_view key = cursor.Valid() ? cursor.key() : absl::string_view(*damaged);
    // A damaged row of a pubend before this one (a seek stands on one just before its place).
    if (!cursor.Valid() && key < internal::PubendPrefix(options_.id)) continue;
    const std::optional<Tick> parsed = internal::ParseEventKey(options_.id, key);
    if (!parsed) break;
    const Tick t = *parsed;
    if (t > l_prefix_) break;
    last = t;
  }
  if (absl::Status st = cursor.status(); !st.ok() && !DamagedRowKey(st)) {
    Fail(st);
    return;
  }
  c->reset();
  if (n == 0 || last == 0) {  // nothing left below the L prefix
    reclaimed_ = l_prefix_;
    return;
  }
  WriteBatch batch;
  batch.DeleteRange(internal::kEventsTable, EventKey(options_.id, reclaimed_ + 1),
                    EventKey(options_.id, last + 1));
  batch.set_frees_space(true);  // it may use the storage's reserve: at a full store it makes room
  reclaiming_ = true;
  SubmitOtherLocked(std::move(batch), [this, last](absl::Status s) {
    absl::MutexLock l(&mu_);
    reclaiming_ = false;
    if (!s.ok()) {
      Fail(s);
      return;
    }
    reclaimed_ = std::max(reclaimed_, last);
  });
}

void PubendImpl::MaybeRelease(absl::Time now) {
  if (downstream_.empty() || !status_.ok()) return;
  Tick tr = kMaxTick;
  Tick td = kMaxTick;
  for (const auto& [node, d] : downstream_) {
    tr = std::min(tr, d.released);
    td = std::min(td, d.latest_delivered);
  }
  Tick target = tr;
  if (options_.max_retain != absl::InfiniteDuration()) {
    // T(p) - t > maxRetain  <=>  t <= T(p) - maxRetain - 1.
    const Tick now_tick = NowTick(now);
    const int64_t retain = std::max<int64_t>(0, absl::ToInt64Microseconds(options_.max_retain));
    if (now_tick > static_cast<Tick>(retain)) {
      target = std::max(target, std::min(td, now_tick - static_cast<Tick>(retain) - 1));
    }
  }
  target = std::min(target, committed_);
  if (target <= releasing_) return;
  // Early release passing what every downstream node acknowledged: subscribers that have not
  // will get Gaps. Told when it begins, not at every timer.
  if (target > tr && !releasing_unacknowledged_) {
    Log(LogLevel::kWarning,
        absl::StrCat("releasing through tick ", target, ", beyond what downstream acknowledged (",
                     tr, "): max_retain ", absl::FormatDuration(options_.max_retain),
                     " passed; subscribers that had not acknowledged get Gaps"));
  }
  releasing_unacknowledged_ = target > tr;
  // The L prefix moves at once; the events below it are deleted by ReclaimSome in bounded chunks
  // (one huge delete could exceed what one storage transaction may touch).
  WriteBatch batch;
  batch.Put(internal::kPubendMetaTable, MetaKey(options_.id, internal::kMetaLPrefix),
            internal::EncodeMetaTick(target));
  // It names committed ticks only, so it may commit ahead of pending publishes, and from the
  // storage's reserve: at a full store the release is what makes room.
  batch.set_frees_space(true);
  releasing_ = target;  // the L prefix being committed; nack answers wait for l_prefix_
  SubmitOtherLocked(std::move(batch), [this, target](absl::Status s) {
    absl::MutexLock l(&mu_);
    if (!s.ok()) {
      Fail(s);
      // Tried again at the next timer (unless a later release is in flight or done).
      if (releasing_ == target) releasing_ = l_prefix_;
      return;
    }
    l_prefix_ = std::max(l_prefix_, target);
    releasing_ = std::max(releasing_, l_prefix_);
    SendLocked(KnowledgeMessage{options_.id, {KnowledgeSpan::Lost({kFirstTick, l_prefix_})}});
  });
}

void PubendImpl::PersistDownstream(const std::string& node) {
  const Downstream& d = downstream_.at(node);
  std::string value = internal::EncodeDownstreamRow({d.released, d.latest_delivered});
  WriteBatch batch;
  batch.Put(internal::kDownstreamTable, internal::DownstreamKey(options_.id, node), value);
  SubmitOtherLocked(std::move(batch), [this](absl::Status s) {
    if (s.ok()) return;
    absl::MutexLock l(&mu_);
    Fail(s);
    downstream_dirty_ = true;  // a full store: written again at the next timer
  });
}

void PubendImpl::PersistDirtyDownstream() {
  if (!downstream_dirty_) return;
  downstream_dirty_ = false;
  for (const auto& [node, d] : downstream_) PersistDownstream(node);
  for (const std::string& node : removed_unpersisted_) {
    WriteBatch batch;
    batch.Delete(internal::kDownstreamTable, internal::DownstreamKey(options_.id, node));
    SubmitOtherLocked(std::move(batch), [this, node](absl::Status s) {
      absl::MutexLock l(&mu_);
      if (s.ok()) {
        removed_unpersisted_.erase(node);
        return;
      }
      Fail(s);
      downstream_dirty_ = true;
    });
  }
}

absl::Status PubendImpl::AddDownstream(absl::string_view node) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  if (node.empty()) return absl::InvalidArgumentError("a downstream node needs a name");
  if (downstream_.contains(node)) {
    return absl::AlreadyExistsError(absl::StrCat("downstream node '", node, "' is registered"));
  }
  removed_unpersisted_.erase(std::string(node));
  downstream_[std::string(node)] = Downstream{releasing_, releasing_};
  PersistDownstream(std::string(node));
  return absl::OkStatus();
}

absl::Status PubendImpl::RemoveDownstream(absl::string_view node) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  auto it = downstream_.find(node);
  if (it == downstream_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown downstream node '", node, "'"));
  }
  downstream_.erase(it);
  WriteBatch batch;
  batch.Delete(internal::kDownstreamTable, internal::DownstreamKey(options_.id, node));
  SubmitOtherLocked(std::move(batch), [this, name = std::string(node)](absl::Status s) {
    if (s.ok()) return;
    absl::MutexLock l(&mu_);
    Fail(s);
    // A full store: deleted again at the next timer, or the node's hold would come back.
    removed_unpersisted_.insert(name);
    downstream_dirty_ = true;
  });
  return absl::OkStatus();
}

absl::Status PubendImpl::HandleRelease(absl::string_view from, const ReleaseEntry& entry,
                                       absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  if (entry.pubend != options_.id) {
    return absl::InvalidArgumentError(absl::StrCat("release for pubend ", entry.pubend.value,
                                                   " sent to pubend ", options_.id.value));
  }
  auto it = downstream_.find(from);
  if (it == downstream_.end()) {
    return absl::NotFoundError(absl::StrCat("release from unknown downstream node '", from, "'"));
  }
  if (entry.released > entry.latest_delivered) {
    return absl::InvalidArgumentError(absl::StrCat(
        "released ", entry.released, " is above latest delivered ", entry.latest_delivered));
  }
  if (entry.latest_delivered > committed_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", from, "' claims delivery through tick ", entry.latest_delivered, " but pubend ",
        options_.id.value, " has committed only through ", committed_));
  }
  Downstream& d = it->second;
  const Downstream before = d;
  d.released = std::max(d.released, entry.released);
  d.latest_delivered = std::max(d.latest_delivered, entry.latest_delivered);
  if (d.released == before.released && d.latest_delivered == before.latest_delivered) {
    return absl::OkStatus();
  }
  PersistDownstream(it->first);
  MaybeRelease(now);
  return absl::OkStatus();
}

absl::Status PubendImpl::HandleCuriosity(absl::string_view from, const CuriosityMessage& nack) {
  if (nack.pubend != options_.id) {
    return absl::InvalidArgumentError(
        absl::StrCat("nack for pubend ", nack.pubend.value, " sent to pubend ", options_.id.value));
  }
  Tick after = 0;  // ranges are ascending and disjoint, of ticks >= 1
  for (TickRange r : nack.ranges) {
    if (r.first == 0 || r.first > r.last || r.first <= after) {
      return absl::InvalidArgumentError(absl::StrCat("nack for pubend ", options_.id.value,
                                                     " with a malformed range ", ToString(r)));
    }
    after = r.last;
  }
  Tick committed;
  Tick lost;
  {
    absl::MutexLock lock(&mu_);
    if (!status_.ok()) return status_;
    committed = committed_;
    // Only the durable L prefix: an L prefix still being committed may not survive a crash, and
    // the events under it are in the log until it has (ReclaimSome deletes below l_prefix_).
    lost = l_prefix_;
  }
  std::vector<KnowledgeMessage> answers;
  std::vector<std::pair<std::string, absl::Status>> damaged;
  // Each range gets an equal part of what is left of the budget, so that a long range (a
  // refilter's) does not leave the short ones after it (a lost live tick) unanswered.
  size_t ranges = 0;
  while (ranges < nack.ranges.size() && nack.ranges[ranges].first <= committed) ++ranges;
  uint64_t left = options_.max_nack_answer_bytes;
  std::vector<TickRange> unanswered;
  for (size_t i = 0; i < ranges; ++i) {
    const TickRange r{nack.ranges[i].first, std::min(nack.ranges[i].last, committed)};
    const uint64_t share = left / (ranges - i);
    uint64_t budget = share;
    GRYPH_ASSIGN_OR_RETURN(const Tick stopped_at,
                           ReadKnowledge(r, lost, &budget, &answers, &damaged));
    left -= share - budget;
    if (stopped_at != 0) unanswered.push_back({stopped_at, r.last});
  }
  // The last message names what was left unanswered, so that the nacker asks for it at once.
  // (Ranges above the committed tick are not unanswered: they come with the live stream.)
  if (!unanswered.empty() && !answers.empty()) answers.back().unanswered = std::move(unanswered);
  // Events reclaimed while we read were released (durably) first: answer them as L.
  Tick lost_now;
  {
    absl::MutexLock lock(&mu_);
    lost_now = l_prefix_;
    for (auto& [key, why] : damaged) {
      if (!damaged_events_.insert(std::move(key)).second) continue;
      Log(LogLevel::kError, absl::StrCat("a damaged log row: ", why.ToString(),
                                         "; its ticks are answered as lost (L)"));
      if (damage_.ok()) damage_ = std::move(why);
    }
  }
  for (KnowledgeMessage& m : answers) {
    if (lost_now > lost) {
      std::vector<KnowledgeSpan> fixed;
      auto push = [&fixed](KnowledgeSpan s) {
        if (!fixed.empty() && s.value == TickValue::kL && fixed.back().value == TickValue::kL) {
          fixed.back().range.last = s.range.last;
        } else {
          fixed.push_back(std::move(s));
        }
      };
      for (KnowledgeSpan& s : m.spans) {
        if (s.range.first > lost_now) {
          push(std::move(s));
        } else if (s.range.last <= lost_now) {
          push(KnowledgeSpan::Lost(s.range));
        } else {  // an S range straddling the new L prefix
          push(KnowledgeSpan::Lost({s.range.first, lost_now}));
          s.range.first = lost_now + 1;
          push(std::move(s));
        }
      }
      m.spans = std::move(fixed);
    }
    for (const KnowledgeSpan& span : m.spans) {
      if (span.event != nullptr) nack_events_sent_.fetch_add(1, std::memory_order_relaxed);
    }
    (void)channel_->Send(from, std::move(m));
  }
  nacks_answered_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<Tick> PubendImpl::ReadKnowledge(
    TickRange range, Tick lost, uint64_t* budget, std::vector<KnowledgeMessage>* out,
    std::vector<std::pair<std::string, absl::Status>>* damaged) {
  auto message = [&]() -> KnowledgeMessage& {
    if (out->empty() || out->back().spans.size() >= options_.max_spans_per_message) {
      out->push_back(KnowledgeMessage{options_.id, {}});
    }
    return out->back();
  };
  size_t bytes = 0;
  auto add = [&](KnowledgeSpan span) {
    if (span.event != nullptr) {
      bytes += span.event->payload().size();
      if (bytes > options_.max_bytes_per_message && !out->empty()) {
        out->push_back(KnowledgeMessage{options_.id, {}});
        bytes = span.event->payload().size();
      }
    }
    message().spans.push_back(std::move(span));
  };
  if (range.first <= lost) {
    add(KnowledgeSpan::Lost({range.first, std::min(range.last, lost)}));
    if (range.last <= lost) return 0;
    range.first = lost + 1;
  }
  GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Cursor> c, storage_->NewCursor(internal::kEventsTable));
  Tick next = range.first;
  // A damaged row is never served. Its key may be damaged too, so which tick it held is known
  // only as "between the rows around it": the ticks from the last good row to the next are
  // answered L, and a Gap tells every subscriber that may have matched it (an unanswered tick
  // would stall them for good; an S would be a silent loss).
  bool damage_pending = false;
  auto answer_through = [&](Tick last) {  // [next, last] holds no good row
    if (last < next) return;
    if (damage_pending) {
      add(KnowledgeSpan::Lost({next, last}));
      damage_pending = false;
    } else {
      add(KnowledgeSpan::Silence({next, last}));
    }
  };
  auto note_damage = [&](std::string key, absl::Status why) {
    damaged->emplace_back(std::move(key), std::move(why));
    damage_pending = true;
  };
  c->Seek(EventKey(options_.id, range.first));
  for (;;) {
    if (!c->Valid()) {
      std::optional<std::string> damaged_key = DamagedRowKey(c->status());
      if (!damaged_key) break;
      // Another pubend's row, by its key: before this one's (a seek stands on a damaged row
      // just before its place), or after them all.
      if (*damaged_key < internal::PubendPrefix(options_.id)) {
        c->Next();
        continue;
      }
      if (const std::string after = internal::PubendEnd(options_.id);
          !after.empty() && *damaged_key >= after) {
        break;
      }
      note_damage(*std::move(damaged_key), c->status());
      c->Next();  // the cursor stands on the damaged row: step over it
      continue;
    }
    absl::string_view key = c->key();
    const std::optional<Tick> parsed = internal::ParseEventKey(options_.id, key);
    if (!parsed) break;
    const Tick t = *parsed;
    if (t > range.last) break;
    if (*budget == 0 && !out->empty()) {
      // Spent: answer what lies before this event, and no further.
      answer_through(t - 1);
      return t;
    }
    *budget -= std::min<uint64_t>(*budget, c->value().size());
    absl::StatusOr<Event> event = Event::Decode(c->value());
    if (event.ok()) {
      answer_through(t - 1);
      damage_pending = false;  // (a damaged row with no tick free around it hid nothing)
      add(KnowledgeSpan::Data(t, MakeEventRef(*std::move(event))));
      next = t + 1;
    } else {  // intact as stored but not an event: as damaged
      note_damage(std::string(key), absl::DataLossError(absl::StrCat(
                                        "pubend ", options_.id.value, " event at tick ", t,
                                        " does not decode: ", event.status().message())));
    }
    c->Next();
  }
  if (!DamagedRowKey(c->status())) GRYPH_RETURN_IF_ERROR(c->status());
  answer_through(range.last);
  return 0;
}

uint64_t PubendImpl::damaged_events() const {
  absl::MutexLock lock(&mu_);
  return damaged_events_.size();
}

absl::Status PubendImpl::damage() const {
  absl::MutexLock lock(&mu_);
  return damage_;
}

Tick PubendImpl::committed_tick() const {
  absl::MutexLock lock(&mu_);
  return committed_;
}

Tick PubendImpl::l_prefix() const {
  absl::MutexLock lock(&mu_);
  return l_prefix_;
}

Tick PubendImpl::released_min() const {
  absl::MutexLock lock(&mu_);
  Tick m = downstream_.empty() ? 0 : kMaxTick;
  for (const auto& [node, d] : downstream_) m = std::min(m, d.released);
  return m;
}

Tick PubendImpl::delivered_min() const {
  absl::MutexLock lock(&mu_);
  Tick m = downstream_.empty() ? 0 : kMaxTick;
  for (const auto& [node, d] : downstream_) m = std::min(m, d.latest_delivered);
  return m;
}

std::vector<std::string> PubendImpl::downstream() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [node, d] : downstream_) out.push_back(node);
  return out;
}

absl::Status PubendImpl::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Pubend>> Pubend::Open(const PubendOptions& options, Storage* storage,
                                                     GroupCommitter* committer, Channel* channel) {
  const std::string what = absl::StrCat("pubend ", options.id.value, " option ");
  if (options.max_retain < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(what, "max_retain is negative"));
  }
  if (options.heartbeat <= absl::ZeroDuration() || options.heartbeat == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(what, "heartbeat must be positive and finite"));
  }
  for (const auto& [value, name] :
       {std::pair<uint64_t, const char*>{options.max_spans_per_message, "max_spans_per_message"},
        {options.max_bytes_per_message, "max_bytes_per_message"},
        {options.max_nack_answer_bytes, "max_nack_answer_bytes"}}) {
    if (value == 0) return absl::InvalidArgumentError(absl::StrCat(what, name, " is 0"));
  }
  if (storage == nullptr || committer == nullptr || channel == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("pubend ", options.id.value, " needs a storage, a committer and a channel"));
  }
  auto p = std::make_unique<internal::PubendImpl>(options, storage, committer, channel);
  GRYPH_RETURN_IF_ERROR(p->Recover());
  return p;
}

PubendId PubendForKey(absl::string_view key, absl::Span<const PubendId> pubends) {
  // FNV-1a: the same choice in every process, unlike absl::Hash.
  return pubends[internal::Fnv1a64(key) % pubends.size()];
}

}  // namespace gryph
