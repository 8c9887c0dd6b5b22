#include "gryph/subscriber_hosting_broker.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "lib/shb/shb_host.h"
#include "lib/shb/shb_keys.h"
#include "lib/shb/subscriber_hosting_broker_impl.h"
#include "lib/util/coding.h"
#include "lib/util/option_checks.h"
#include "lib/util/status_macros.h"
#include "lib/util/stopwatch.h"

namespace gryph {

using internal::FormatMillis;
using internal::kShbDeliveredTable;
using internal::kShbMetaTable;
using internal::kShbNextIdKey;
using internal::kShbPositionsTable;
using internal::kShbSubscriptionsTable;
using internal::Stopwatch;

namespace internal {

SubscriberHostingBrokerImpl::SubscriberHostingBrokerImpl(SubscriberHostingBrokerOptions options,
                                                         Storage* storage, Channel* channel)
    : options_(std::move(options)), storage_(storage), channel_(channel) {
  GroupCommitOptions gc;
  gc.max_records = SIZE_MAX;  // rounds, not records: the interval alone closes a group
  gc.max_delay = options_.commit_thread ? options_.commit_interval : absl::ZeroDuration();
  gc.clock = options_.clock;
  committer_ = std::make_unique<GroupCommitter>(storage_, std::move(gc));
}

SubscriberHostingBrokerImpl::~SubscriberHostingBrokerImpl() {
  committer_->Stop();  // commits what was submitted: a clean shutdown loses nothing
  // Readers must go before their PFS.
  for (auto& [name, s] : subscriptions_) s.positions.clear();
}

void SubscriberHostingBrokerImpl::Start() {
  if (options_.commit_thread && !options_.simulated_commit_thread) committer_->Start();
}

void SubscriberHostingBrokerImpl::WaitForRoom(absl::Duration least) {
  waiting_ = true;
  room_least_ = Now() + least;
  room_probe_ = Now() + 2 * least;
}

std::vector<std::pair<std::string, absl::Time>> SubscriberHostingBrokerImpl::LastHeard() const {
  std::vector<std::pair<std::string, absl::Time>> heard;
  heard.reserve(subscriptions_.size());
  for (const auto& [name, s] : subscriptions_) heard.emplace_back(name, s.last_heard);
  return heard;
}

void SubscriberHostingBrokerImpl::AdoptLastHeard(
    const std::vector<std::pair<std::string, absl::Time>>& heard) {
  for (const auto& [name, at] : heard) {
    auto it = subscriptions_.find(name);
    if (it != subscriptions_.end()) it->second.last_heard = std::min(it->second.last_heard, at);
  }
}

void SubscriberHostingBrokerImpl::StopWaiting(absl::string_view why) {
  waiting_ = false;
  dirty_ = true;
  Log(LogLevel::kInfo, absl::StrCat("the constreams go on (", why, ")"));
}

namespace {

// Runs `first` on this thread and `second` on a thread of its own, side by side, when `beside`
// (and a thread can be made); else `first`, then `second`. So `second` may wait for what `first`
// makes, never the other way round. Returns when both are done.
void RunBeside(bool beside, absl::FunctionRef<void()> first, absl::FunctionRef<void()> second) {
  std::thread t;
  if (beside) {
    try {
      t = std::thread([&] { second(); });
    } catch (const std::system_error&) {
      // Out of threads (a process limit): the same work on this one.
    }
  }
  first();
  if (t.joinable()) {
    t.join();
  } else {
    second();
  }
}

// Below this many subscriptions, stage 2 of recovery runs on one thread: a second would cost
// more than it saves.
constexpr size_t kRecoveryThreadMinSubscriptions = 4096;

// Selectors are parsed in chunks of this many rows, taken in turn by the recovery's threads; the
// matcher's build follows the subscriptions' filing in steps as long.
constexpr size_t kRecoveryChunk = 1024;

// Copies of the subscription rows' texts and programs, packed into large blocks: recovery reads
// them once (to decode or parse), and a string apiece cost three allocations per row.
class RowTexts {
 public:
  // A copy of `s`, valid as long as *this.
  absl::string_view Copy(absl::string_view s) {
    if (s.empty()) return {};
    if (left_ < s.size()) {
      const size_t size = std::max(kBlock, s.size());
      blocks_.emplace_back(new char[size]);
      next_ = blocks_.back().get();
      left_ = size;
    }
    char* copy = next_;
    std::memcpy(copy, s.data(), s.size());
    next_ += s.size();
    left_ -= s.size();
    return {copy, s.size()};
  }

 private:
  static constexpr size_t kBlock = size_t{1} << 20;
  std::vector<std::unique_ptr<char[]>> blocks_;
  char* next_ = nullptr;
  size_t left_ = 0;
};

}  // namespace

// Recovery in two stages; with recovery_threads > 1, each runs on two threads:
//   1. the next id and the subscription rows beside the PFS of every pubend; then both threads
//      parse the rows' selectors, a chunk at a time;
//   2. the subscriptions' state, filed by name and id and checked in row order, then their
//      positions (and those a pubend added since lacks), beside the matcher's build, which
//      follows the filing a chunk behind.
// The threads touch different state (the rows against the PFS objects; the subscriptions'
// names, ids and positions against the matcher, which reads only what filing has finished), and
// each stage's errors are checked after it in a fixed order, so the outcome does not depend on
// how the threads interleave.
absl::Status SubscriberHostingBrokerImpl::Recover() {
  Stopwatch total;
  const bool threads = options_.recovery_threads > 1;
  for (const auto& up : options_.pubends) {
    if (pubends_.contains(up.pubend)) {
      return absl::InvalidArgumentError(absl::StrCat("pubend ", up.pubend.value, " appears twice"));
    }
    PubendState& p = pubends_[up.pubend];
    p.id = up.pubend;
    p.upstream = up.node;
    GRYPH_ASSIGN_OR_RETURN(auto ld,
                           storage_->Get(kShbDeliveredTable, internal::DeliveredKey(up.pubend)));
    Tick latest = 0;
    Tick lease = 0;
    if (ld) {
      std::optional<internal::DeliveredRow> row = internal::ParseDeliveredRow(*ld);
      if (!row) return absl::DataLossError("shb latestDelivered row is not 16 bytes");
      latest = row->latest_delivered;
      lease = row->lease;
      if (lease < latest) return absl::DataLossError("shb delivery lease below latestDelivered");
    }
    p.constream = std::make_unique<ConStream>(up.pubend, latest);
    p.committed = latest;
    p.lease = p.lease_submitted = p.recovered_lease = lease;
  }

  // Stage 1.
  struct StoredSubscription {
    std::string name;
    uint64_t id;
    uint64_t epoch;
    // In `texts`:
    absl::string_view selector;
    absl::string_view topic_filter;
    absl::string_view program;  // Selector::EncodeProgram(); empty in rows written before it
  };
  RowTexts texts;
  std::vector<StoredSubscription> stored;
  std::vector<absl::StatusOr<Subscription>> parsed;
  absl::Notification rows_read;  // stored and parsed are sized (or the rows failed)
  std::atomic<size_t> next_chunk{0};
  // Accepted when it was made: a smaller limit since must not lose it.
  SelectorOptions accepted;
  accepted.max_length = SIZE_MAX;
  // Rows whose texts were parsed, each thread's own count: those without a stored program, and
  // those whose program did not decode (with the first such row and why: a thread takes its
  // chunks in row order).
  struct Reparsed {
    size_t absent = 0;
    size_t unusable = 0;
    size_t first = SIZE_MAX;  // the first unusable row
    absl::Status why;
  };
  Reparsed reparsed[2];
  auto parse_chunks = [&](Reparsed& mine) {
    rows_read.WaitForNotification();
    for (size_t c; (c = next_chunk.fetch_add(1)) * kRecoveryChunk < stored.size();) {
      const size_t end = std::min(stored.size(), (c + 1) * kRecoveryChunk);
      for (size_t i = c * kRecoveryChunk; i < end; ++i) {
        const StoredSubscription& row = stored[i];
        if (row.program.empty()) {
          ++mine.absent;
        } else {
          absl::StatusOr<Selector> selector = Selector::DecodeProgram(row.selector, row.program);
          if (selector.ok()) {
            parsed[i] = Subscription::Create(*std::move(selector), row.topic_filter);
            continue;
          }
          if (mine.unusable++ == 0) {
            mine.first = i;
            mine.why = selector.status();
          }
        }
        parsed[i] = Subscription::Create(row.selector, row.topic_filter, accepted);
      }
    }
  };
  absl::Status rows_status;
  absl::Status pfs_status;
  Stopwatch stage;
  RunBeside(
      threads,
      [&] {
        Stopwatch rows;
        rows_status = [&]() -> absl::Status {
          GRYPH_ASSIGN_OR_RETURN(auto next, storage_->Get(kShbMetaTable, kShbNextIdKey));
          if (next) {
            std::optional<uint64_t> id = internal::ParseNextId(*next);
            if (!id) return absl::DataLossError("shb next id row is not 8 bytes");
            next_id_ = *id;
          }
          absl::Status parse;
          GRYPH_RETURN_IF_ERROR(storage_->Scan(
              kShbSubscriptionsTable, "", "", [&](absl::string_view key, absl::string_view value) {
                absl::StatusOr<internal::SubscriptionRow> row =
                    internal::ParseSubscriptionRow(value);
                if (!row.ok()) {
                  parse = absl::DataLossError(row.status().message());
                  return false;
                }
                stored.push_back({std::string(key), row->id, row->epoch, texts.Copy(row->selector),
                                  texts.Copy(row->topic_filter), texts.Copy(row->program)});
                return true;
              }));
          return parse;
        }();
        if (!rows_status.ok()) stored.clear();
        parsed.resize(stored.size());
        recovery_.subscriptions = rows.Lap();
        rows_read.Notify();
        parse_chunks(reparsed[0]);
      },
      [&] {
        Stopwatch pfs_time;
        for (auto& [id, p] : pubends_) {
          PfsOptions po;
          po.pubend = id;
          po.checkpoint_interval = options_.pfs_checkpoint_interval;
          po.read_cache_bytes = options_.pfs_read_cache_bytes;
          absl::StatusOr<std::unique_ptr<PFS>> pfs = PFS::Open(po, storage_);
          if (!pfs.ok()) {
            pfs_status = pfs.status();
            break;
          }
          p.pfs = *std::move(pfs);
        }
        recovery_.pfs = pfs_time.Lap();
        parse_chunks(reparsed[1]);
      });
  // The parse: what stage 1 took beyond the rows and the PFS (on one thread, all of it).
  recovery_.selectors = stage.Lap() - (threads ? std::max(recovery_.subscriptions, recovery_.pfs)
                                               : recovery_.subscriptions + recovery_.pfs);
  GRYPH_RETURN_IF_ERROR(pfs_status);
  GRYPH_RETURN_IF_ERROR(rows_status);
  if (const size_t absent = reparsed[0].absent + reparsed[1].absent; absent != 0) {
    Log(LogLevel::kInfo,
        absl::StrCat(
            absent, " of ", stored.size(),
            " stored subscriptions predate stored selector programs: their selectors "
            "were parsed (a row gains its program when it is next written: at a connection "
            "with a higher epoch)"));
  }
  if (const size_t unusable = reparsed[0].unusable + reparsed[1].unusable; unusable != 0) {
    const Reparsed& r = reparsed[0].first < reparsed[1].first ? reparsed[0] : reparsed[1];
    Log(LogLevel::kWarning,
        absl::StrCat(unusable, " of ", stored.size(),
                     " stored selector programs could not be used, so their texts were parsed "
                     "instead (the first, of subscription '",
                     stored[r.first].name, "': ", r.why.message(), ")"));
  }

  // Stage 2. What fails here on stored state is damage (DataLoss), whatever code the callee uses
  // for it.
  auto damaged = [](const absl::Status& st, absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("the stored subscriptions are inconsistent (", what, "): ", st.message()));
  };
  const size_t n = stored.size();
  std::vector<const SubscriptionState*> states(n);  // by row, once filed
  absl::Mutex filing_mu;
  absl::CondVar filing_cv;
  size_t filed = 0;          // guarded by filing_mu: the rows whose `states` are set
  bool filing_over = false;  // guarded by filing_mu: no more will be (done, or damage found)
  absl::Status filing_status;
  absl::Status positions_status;
  absl::Status matcher_status;
  WriteBatch added;
  RunBeside(
      threads && n >= kRecoveryThreadMinSubscriptions,
      [&] {
        Stopwatch step;
        auto say_filed = [&](size_t rows, bool over) {
          absl::MutexLock lock(&filing_mu);
          filed = rows;
          filing_over = over;
          filing_cv.Signal();
        };
        names_.reserve(n);
        by_id_.reserve(n);
        filing_status = [&]() -> absl::Status {
          for (size_t i = 0; i < n; ++i) {
            if (i % kRecoveryChunk == 0) say_filed(i, false);
            StoredSubscription& row = stored[i];
            if (!parsed[i].ok()) {
              return absl::DataLossError(
                  absl::StrCat("stored subscription '", row.name,
                               "' no longer parses: ", parsed[i].status().message()));
            }
            // Ids are unique and below next_id: anything else is damage that would surface
            // later as another error (two subscriptions sharing PFS chains, a new one reusing
            // an id).
            if (row.id >= next_id_ || names_.contains(row.id)) {
              return absl::DataLossError(absl::StrCat(
                  "stored subscription '", row.name, "' has id ", row.id,
                  names_.contains(row.id) ? absl::StrCat(", which '", names_[row.id], "' has too")
                                          : absl::StrCat(", not below the next id ", next_id_),
                  ": the subscriptions table is damaged"));
            }
            SubscriptionState s{
                SubscriberId{row.id}, row.name, *std::move(parsed[i]), row.epoch, "", {}};
            // For subscription_expiry: when it was last heard is not stored.
            s.last_heard = Now();
            names_[row.id] = row.name;
            // The rows come in name order: each goes at the end, without a search.
            SubscriptionState* state =
                &subscriptions_
                     .emplace_hint(subscriptions_.end(), std::move(row.name), std::move(s))
                     ->second;
            by_id_[row.id] = state;
            states[i] = state;
          }
          return absl::OkStatus();
        }();
        say_filed(filing_status.ok() ? n : filed, true);
        recovery_.selectors += step.Lap();
        if (!filing_status.ok()) return;
        positions_status = [&]() -> absl::Status {
          // Rows come by subscriber, then pubend: each subscriber's are looked up once.
          std::optional<uint64_t> looked_up;
          SubscriptionState* found = nullptr;  // looked_up's, or null if none
          absl::Status parse;
          GRYPH_RETURN_IF_ERROR(storage_->Scan(
              kShbPositionsTable, "", "", [&](absl::string_view key, absl::string_view value) {
                std::optional<internal::PositionKeyParts> k = internal::ParsePositionKey(key);
                std::optional<internal::PositionRow> row = internal::ParsePositionRow(value);
                if (!k || !row) {
                  parse = absl::DataLossError("shb position row has the wrong size");
                  return false;
                }
                if (looked_up != k->subscriber.value) {
                  auto s = by_id_.find(k->subscriber.value);
                  found = s == by_id_.end() ? nullptr : s->second;
                  looked_up = k->subscriber.value;
                }
                if (found == nullptr || !pubends_.contains(k->pubend)) {
                  return true;  // pubend no longer served
                }
                Position& pos = found->positions[k->pubend];
                pos.created = row->created;
                pos.released = row->released;
                return true;
              }));
          GRYPH_RETURN_IF_ERROR(parse);
          // A pubend added to the options since a subscription was created serves it from now
          // on, as it would a new subscription: registered in that pubend's PFS, starting at its
          // latestDelivered.
          for (auto& [name, s] : subscriptions_) {
            for (auto& [id, p] : pubends_) {
              if (s.positions.contains(id)) continue;
              Position& pos = s.positions[id];
              pos.created = pos.released = p.committed;
              if (absl::Status st = p.pfs->AddSubscriber(s.id, &added); !st.ok()) {
                return damaged(st, absl::StrCat(name, " has no position at pubend ", id.value,
                                                " but is in its PFS"));
              }
              PutPosition(s, id, added);
            }
          }
          return absl::OkStatus();
        }();
        recovery_.positions = step.Lap();
      },
      [&] {
        // The matcher's own thread until Recover returns. It reads a filed subscription's id
        // and parse, which filing no longer touches.
        Stopwatch step;
        size_t ready = 0;
        for (size_t i = 0;; ++i) {
          if (i == ready) {
            absl::MutexLock lock(&filing_mu);
            while (filed <= i && !filing_over) filing_cv.Wait(&filing_mu);
            ready = filed;
            if (i >= ready) break;  // all filed, or damage found (filing reports it)
          }
          const SubscriptionState& s = *states[i];
          if (absl::Status st = matcher_.Add(s.id, s.subscription); !st.ok()) {
            matcher_status = damaged(st, s.name);
            break;
          }
        }
        matcher_.Publish();
        recovery_.matcher = step.Lap();
      });
  GRYPH_RETURN_IF_ERROR(filing_status);
  GRYPH_RETURN_IF_ERROR(positions_status);
  GRYPH_RETURN_IF_ERROR(matcher_status);
  if (!added.empty()) GRYPH_RETURN_IF_ERROR(CommitNow(std::move(added)));
  recovery_.subscription_count = n;
  recovery_.total = total.Lap();
  if (recovery_.subscription_count == 0) return absl::OkStatus();  // a new broker: no news
  Log(LogLevel::kInfo,
      absl::StrCat("recovered ", recovery_.subscription_count, " subscriptions and the PFS of ",
                   pubends_.size(), " pubends in ", FormatMillis(recovery_.total), " (PFS ",
                   FormatMillis(recovery_.pfs), ", subscription rows ",
                   FormatMillis(recovery_.subscriptions), ", selectors ",
                   FormatMillis(recovery_.selectors), ", positions ",
                   FormatMillis(recovery_.positions), ", matcher ", FormatMillis(recovery_.matcher),
                   threads ? "; side by side on two threads" : "", ")"));
  return absl::OkStatus();
}

void SubscriberHostingBrokerImpl::LogGap(absl::string_view subscription, PubendId p, Tick t) const {
  Log(LogLevel::kWarning,
      absl::StrCat("subscription '", subscription, "' got a Gap through tick ", t, " of pubend ",
                   p.value,
                   ": events it may have matched there are lost to it (released "
                   "upstream before it acknowledged them, or damaged)"));
}

void SubscriberHostingBrokerImpl::Fail(const absl::Status& st) {
  if (!status_.ok()) return;
  status_ = st;
  Log(LogLevel::kError, absl::StrCat("the broker stopped: ", st.ToString(),
                                     "; every session ends; reopen the broker"));
  const absl::Status unavailable =
      absl::UnavailableError(absl::StrCat("broker storage failed: ", st.message(), "; reconnect"));
  for (auto& [name, s] : subscriptions_) {
    if (!s.session.empty()) {
      SendError(s.session, name, unavailable);
      EndSession(s);
    }
    if (s.awaiting_creation) SendError(s.awaiting_creation->first, name, unavailable);
    s.awaiting_creation.reset();
  }
  for (const auto& [from, m] : std::exchange(ready_connects_, {})) {
    SendError(from, m.subscription, unavailable);
  }
}

void SubscriberHostingBrokerImpl::Send(absl::string_view to, Message m) {
  (void)channel_->Send(to, std::move(m));  // a lost message is repaired by the protocol
}

void SubscriberHostingBrokerImpl::SendError(absl::string_view to, const std::string& subscription,
                                            const absl::Status& st) {
  Send(to, SessionErrorMessage{subscription, st.code(), std::string(st.message())});
}

void SubscriberHostingBrokerImpl::PutPosition(const SubscriptionState& s, PubendId p,
                                              WriteBatch& batch) const {
  const Position& pos = s.positions.at(p);
  batch.Put(kShbPositionsTable, internal::PositionKey(s.id, p),
            internal::EncodePositionRow({pos.created, pos.released}));
}

void SubscriberHostingBrokerImpl::Submit(WriteBatch batch, std::vector<Advance> advances) {
  for (const auto& [name, pubends] : dirty_released_) {
    auto it = subscriptions_.find(name);
    if (it == subscriptions_.end()) continue;
    for (PubendId p : pubends) PutPosition(it->second, p, batch);
  }
  dirty_released_.clear();
  const uint64_t seq = next_seq_++;
  // Waiting for room, every batch may use the store's reserve: none grows the store (no round,
  // no new subscription), and the chops among them are what makes room.
  if (waiting_) batch.set_frees_space(true);
  in_flight_.push_back(InFlight{seq, std::move(advances), std::exchange(creating_, {}),
                                std::exchange(freeing_, false)});
  ++stats_.commits;
  committer_->Submit(std::move(batch), 1, [this, seq](absl::Status st) {
    {
      absl::MutexLock lock(&finished_mu_);
      finished_.emplace_back(seq, std::move(st));
    }
    if (options_.on_commit) options_.on_commit();
  });
  if (!options_.commit_thread) {
    (void)committer_->Flush();  // the status arrives through the callback
    ProcessCommits();
  }
}

absl::Status SubscriberHostingBrokerImpl::CommitNow(WriteBatch batch) {
  if (!status_.ok()) return status_;
  Submit(std::move(batch), {});
  if (options_.commit_thread) {
    (void)committer_->Flush();  // waits for the running commit, then commits what is pending
    ProcessCommits();
  }
  return status_;
}

void SubscriberHostingBrokerImpl::ProcessCommits() {
  std::vector<std::pair<uint64_t, absl::Status>> finished;
  {
    absl::MutexLock lock(&finished_mu_);
    finished.swap(finished_);
  }
  // Callbacks run in submission order, one group after another.
  for (auto& [seq, st] : finished) {
    if (in_flight_.empty() || in_flight_.front().seq != seq) {
      Fail(absl::InternalError("shb commits finished out of order"));
      return;
    }
    if (!st.ok()) {
      // Nothing of it applied, but the state in memory has run ahead of it: the owner reads it
      // again from storage (ShbHost).
      if (absl::IsResourceExhausted(st) && status_.ok()) store_full_ = true;
      Fail(st);
      return;
    }
    room_made_ |= in_flight_.front().frees;
    for (const Advance& a : in_flight_.front().advances) {
      a.pubend->committed = a.through;
      a.pubend->lease = a.lease;
      a.pubend->pfs->MarkCommitted(a.pfs_through);
    }
    for (SubscriberId id : in_flight_.front().created) {
      auto it = by_id_.find(id.value);
      if (it == by_id_.end()) continue;  // deleted meanwhile
      SubscriptionState& s = *it->second;
      if (s.awaiting_creation) ready_connects_.push_back(std::move(*s.awaiting_creation));
      s.awaiting_creation.reset();
    }
    in_flight_.pop_front();
    dirty_ = true;  // a larger lease may let the constreams go on
  }
}

Tick SubscriberHostingBrokerImpl::latest_delivered(PubendId p) const {
  auto it = pubends_.find(p);
  return it == pubends_.end() ? 0 : it->second.committed;
}

size_t SubscriberHostingBrokerImpl::catching_up() const {
  size_t n = 0;
  for (const auto& [id, p] : pubends_) n += p.catchups.size();
  return n;
}

void SubscriberHostingBrokerImpl::HandleMessage(absl::string_view from, const Message& message) {
  if (const auto* k = std::get_if<KnowledgeMessage>(&message)) {
    OnKnowledge(from, *k);
  } else if (const auto* c = std::get_if<ConnectMessage>(&message)) {
    OnConnect(from, *c);
  } else if (const auto* a = std::get_if<AckMessage>(&message)) {
    OnAck(from, *a);
  } else if (const auto* d = std::get_if<DisconnectMessage>(&message)) {
    OnDisconnect(from, d->subscription);
  } else if (const auto* u = std::get_if<UnsubscribeMessage>(&message)) {
    OnUnsubscribe(from, u->subscription);
  }
}

void SubscriberHostingBrokerImpl::OnKnowledge(absl::string_view from, const KnowledgeMessage& m) {
  auto it = pubends_.find(m.pubend);
  if (it == pubends_.end() || it->second.upstream != from || !status_.ok()) return;
  PubendState& p = it->second;
  for (const KnowledgeSpan& span : m.spans) {
    const KnowledgeSpan* s = &span;
    KnowledgeSpan clipped;
    if (waiting_ && span.range.last > p.committed) {
      // The constream holds still: what lies above it would pile up in memory. Catchups read
      // only below it; the rest is nacked once the wait is over.
      if (span.range.first > p.committed) continue;
      clipped = KnowledgeSpan{{span.range.first, p.committed}, span.value, span.event};
      s = &clipped;
    }
    // Knowledge below what was forgotten is accumulated too: a catchup stream nacked it.
    absl::Status st = p.istream.Accumulate(*s);
    if (absl::IsFailedPrecondition(st)) {
      ++stats_.stale_knowledge;
    } else if (!st.ok()) {
      ++stats_.conflicting_knowledge;  // and it says nothing about how far upstream has got
    } else {
      p.highest_seen = std::max(p.highest_seen, s->range.last);
    }
  }
  p.curiosity.Prune(p.istream);
  p.unanswered.insert(p.unanswered.end(), m.unanswered.begin(), m.unanswered.end());
  dirty_ = true;
}

void SubscriberHostingBrokerImpl::AskForTheRest(PubendState& p) {
  if (p.unanswered.empty()) return;
  std::vector<TickRange> rest = p.curiosity.FollowUp(p.unanswered, 64);
  p.unanswered.clear();
  if (rest.empty()) return;
  // The renack timer is not postponed: it retries what follow-ups do not cover (a lost nack of a
  // live tick, say), and a retry that overtakes a follow-up only takes its place (FollowUp).
  ++stats_.nacks_sent;
  ++stats_.nacks_followed_up;
  Send(p.upstream, CuriosityMessage{p.id, std::move(rest)});
}

bool SubscriberHostingBrokerImpl::Flush() {
  ProcessCommits();
  // The Connects of subscriptions that have become durable: answered now, as any other.
  for (const auto& [from, m] : std::exchange(ready_connects_, {})) OnConnect(from, m);
  if (!dirty_ || !status_.ok()) return false;
  dirty_ = false;
  // A failed round has moved constream positions past what is neither sent nor committed: the
  // broker stops (reopen it).
  if (absl::Status st = waiting_ ? absl::OkStatus() : AdvanceConStreams(); !st.ok()) {
    Fail(st);
    return false;
  }
  // The catchups step after the constreams have sent what they could, for one slice, starting
  // with the pubend whose turn it is; unless they rest.
  bool more = false;
  bool sliced = false;
  const absl::Time catchups_start = Now();
  const bool resting = catchups_start < catchup_rest_until_;
  catchup_until_ = resting ? catchups_start : catchups_start + options_.catchup_slice;
  const auto turn = pubends_.lower_bound(catchup_turn_);
  auto step = [&](PubendState& p) {
    if (sliced || resting) return;
    more |= StepCatchups(p, &sliced);
    if (sliced) {
      // The next pubend goes first next time (this one's catchups resume where they stopped).
      auto after = std::next(pubends_.find(p.id));
      catchup_turn_ = after == pubends_.end() ? pubends_.begin()->first : after->first;
    }
  };
  for (auto it = turn; it != pubends_.end(); ++it) step(it->second);
  for (auto it = pubends_.begin(); it != turn; ++it) step(it->second);
  for (auto& [id, p] : pubends_) {
    Forget(p);
    AskForTheRest(p);
  }
  if (sliced && options_.catchup_share < 1 && LiveMembers()) {
    // Their share of the time is spent: they rest; NextDeadline wakes the loop for the rest.
    catchup_rest_until_ = Now() + (Now() - catchups_start) * (1 / options_.catchup_share - 1);
    dirty_ = status_.ok();
    return false;
  }
  // The next Flush goes on where this one stopped, without waiting for a message.
  if ((more || resting) && status_.ok()) dirty_ = true;
  return dirty_ && !resting;
}

bool SubscriberHostingBrokerImpl::LiveMembers() const {
  for (const auto& [id, p] : pubends_) {
    if (p.constream->member_count() > 0) return true;
  }
  return false;
}

void SubscriberHostingBrokerImpl::Forget(PubendState& p) {
  // Forget events no catchup stream needs, beyond the cache window. A catchup paused by flow
  // control holds them too: upstream may have released them since (early release), and a
  // subscriber that never disconnected must not get a Gap for being slow.
  const Tick ld = p.constream->latest_delivered();
  Tick forget = ld > options_.event_cache_ticks ? ld - options_.event_cache_ticks : 0;
  for (const auto& [name, s] : p.catchups) {
    forget = std::min(forget, s->positions.at(p.id).live().catchup->position());
  }
  if (forget > p.forgotten) {
    p.istream.Forget(forget);
    p.forgotten = forget;
  }
}

// What one shared PFS read of StepCatchups may cost, in records times readers, and in the
// records' bytes (a record of many subscribers runs to kilobytes, each read and checked): a few
// hundred microseconds either way.
constexpr size_t kPassWork = size_t{1} << 15;
constexpr size_t kPassBytes = size_t{256} << 10;

// The most deliveries a round's buffers keep room for between rounds.
constexpr size_t kKeptRoundDeliveries = 1 << 16;

absl::Status SubscriberHostingBrokerImpl::AdvanceConStreams() {
  // Every round takes what each pubend's doubt horizon and durable lease allow, sends it to the
  // members, and submits one transaction for all pubends: the PFS records with the new positions
  // (latestDelivered once committed) and leases.
  std::vector<SubscriberId> matched;
  std::vector<std::pair<SubscriptionState*, PubendState*>> slow;
  for (;;) {
    if (!status_.ok()) return status_;
    WriteBatch wb;
    std::vector<Advance> advances;
    const absl::Time now = Now();
    slow.clear();
    for (auto& [id, p] : pubends_) {
      const Tick from = p.constream->latest_delivered();
      const ConStream::Batch batch =
          p.constream->Next(p.istream, options_.max_batch_events, p.lease);
      // The lease runs ahead of the knowledge seen; a commit renews it. Without one in flight,
      // a constream held back by its lease asks for one.
      const bool starved = batch.through == p.lease && p.lease_submitted == p.lease &&
                           p.istream.DoubtHorizon(batch.through) > batch.through;
      if (batch.through == from && !starved) continue;
      round_.messages.clear();
      round_.subscriptions.clear();
      round_.over_bound.clear();
      round_.gaps = round_.pfs_records = 0;
      GRYPH_RETURN_IF_ERROR(p.constream->Deliver(batch, matcher_, *p.pfs, &wb, now,
                                                 options_.max_unacked_events, &round_));
      stats_.pfs_records += round_.pfs_records;
      stats_.gaps_delivered += round_.gaps;
      if (round_.gaps > 0 && options_.log) {
        for (size_t i = 0; i < round_.messages.size(); ++i) {
          const auto* d = std::get_if<DeliveryMessage>(&round_.messages[i].message);
          if (d != nullptr && d->kind == DeliveryKind::kGap) {
            LogGap(round_.subscriptions[i], p.id, d->tick);
          }
        }
      }
      const Tick seen = std::max(p.highest_seen, batch.through);
      const Tick lease = std::max(p.lease_submitted,
                                  seen > kMaxTick - options_.delivery_lease_ticks
                                      ? kMaxTick  // saturates: knowledge may reach kMaxTick
                                      : seen + options_.delivery_lease_ticks);
      wb.Put(kShbDeliveredTable, internal::DeliveredKey(p.id),
             internal::EncodeDeliveredRow({batch.through, lease}));
      p.lease_submitted = lease;
      advances.push_back(Advance{&p, batch.through, lease, p.pfs->last_timestamp()});
      // Each pubend's deliveries go out as soon as they are built: the subscribers' side starts
      // on them while the next pubend's are built.
      SendRound(p, slow);
    }
    if (advances.empty()) return absl::OkStatus();
    for (auto [s, p] : slow) {
      Position& pos = s->positions.at(p->id);
      if (pos.live().member) Demote(*s, *p, pos);
    }
    Submit(std::move(wb), std::move(advances));
  }
}

void SubscriberHostingBrokerImpl::SendRound(
    PubendState& p, std::vector<std::pair<SubscriptionState*, PubendState*>>& slow) {
  std::vector<Channel::Outgoing>& deliveries = round_.messages;
  for (const std::string& name : round_.over_bound) slow.emplace_back(&subscriptions_.at(name), &p);
  // Sent before the commit: everything sent is within a durable lease (see the header).
  stats_.events_delivered += deliveries.size();
  if (channel_->SendMany(absl::MakeSpan(deliveries)) < deliveries.size()) {
    // The link to a subscriber is FIFO and must not skip an Event (the next one would claim
    // there was none): a session whose message the channel refused ends, and the subscriber
    // resumes from its CT when it reconnects.
    // (Their names first: ending a session leaves the constream, which the names point into.)
    std::vector<SubscriptionState*> refused;
    for (size_t i = 0; i < deliveries.size(); ++i) {
      if (!deliveries[i].accepted)
        refused.push_back(&subscriptions_.find(round_.subscriptions[i])->second);
    }
    for (SubscriptionState* s : refused) {
      if (!s->session.empty()) EndSession(*s);
    }
  }
  // The buffer is kept from round to round: a round of a few thousand deliveries in fresh
  // memory costs more in page faults than in building them. A burst (a restart's backlog) does
  // not pin it.
  if (deliveries.capacity() > kKeptRoundDeliveries) {
    deliveries = {};
    round_.subscriptions = {};
  } else {
    deliveries.clear();
    round_.subscriptions.clear();
  }
}

void SubscriberHostingBrokerImpl::Resend(SubscriptionState& s, PubendState& p, Position& pos) {
  DeliveryMessage again = pos.live().session.LastMessage(s.name, p.id);
  if (again.kind == DeliveryKind::kEvent) {
    const KnowledgeSpan span = p.istream.SpanAt(again.tick);
    if (span.value != TickValue::kD) {
      // Forgotten since (beyond the event cache): the subscriber resumes from its CT instead.
      SendError(s.session, s.name,
                absl::UnavailableError("a delivery was lost and is no longer cached; reconnect"));
      EndSession(s);
      return;
    }
    again.event = span.event;
  }
  Send(s.session, std::move(again));
  ++stats_.resent;
}

void SubscriberHostingBrokerImpl::Demote(SubscriptionState& s, PubendState& p, Position& pos) {
  // Everything through the constream's position has been sent to it (and, after a restart,
  // everything through the CT it resumed after): catch up from there.
  const Tick from = std::max(p.constream->latest_delivered(), pos.live().resume_after);
  absl::StatusOr<std::unique_ptr<PFS::Reader>> reader = p.pfs->NewReader(s.id, from, from);
  if (!reader.ok()) {
    SendError(s.session, s.name, reader.status());
    EndSession(s);
    return;
  }
  p.constream->Leave(s.name);
  pos.live().member = false;
  StartCatchup(s, p, pos, *std::move(reader), from, 0);
  ++stats_.demotions;
}

void SubscriberHostingBrokerImpl::StartCatchup(SubscriptionState& s, PubendState& p, Position& pos,
                                               std::unique_ptr<PFS::Reader> reader, Tick from,
                                               Tick refilter_through) {
  pos.live().reader = std::move(reader);
  pos.live().catchup = std::make_unique<CatchupStream>(
      s.name, p.id, from, refilter_through, s.subscription, &pos.live().session, options_.catchup);
  p.catchups[s.name] = &s;
  ++stats_.catchups_started;
}

void SubscriberHostingBrokerImpl::EndCatchup(SubscriptionState& s, PubendState& p, Position& pos) {
  pos.live().catchup.reset();
  pos.live().reader.reset();
  p.catchups.erase(s.name);
}

bool SubscriberHostingBrokerImpl::StepCatchups(PubendState& p, bool* sliced) {
  const Tick ld = p.constream->latest_delivered();
  // A step may end its own catchup (the hand-over, a session ended): walk a copy. (Positions do
  // not move while the catchups step: no subscription or pubend is added meanwhile.)
  using Catchup = std::pair<SubscriptionState*, Position*>;
  std::vector<Catchup> active;
  active.reserve(p.catchups.size());
  // From where the last Flush stopped, round to the beginning.
  const auto resume = p.catchups.lower_bound(p.catchup_resume);
  for (auto it = resume; it != p.catchups.end(); ++it) {
    active.emplace_back(it->second, &it->second->positions.at(p.id));
  }
  for (auto it = p.catchups.begin(); it != resume; ++it) {
    active.emplace_back(it->second, &it->second->positions.at(p.id));
  }
  p.catchup_resume.clear();
  std::vector<Catchup> next;
  std::vector<Position*> wanting;
  std::vector<PFS::Reader*> readers;
  std::vector<PFS::ReadResult> results;
  std::vector<DeliveryMessage> out;
  std::vector<TickRange> nacks;
  std::vector<Channel::Outgoing> batch;
  size_t sent = 0;
  // Whether a catchup has stepped: the slice ends nothing before one has, so that catchups move
  // in every Flush that reaches them, even when the slice was spent before their first step (a
  // long shared pass, a preempted thread).
  bool stepped = false;
  // Rounds over the catchups that still have something to send, until the Flush's budget is
  // spent (the next Flush goes on).
  for (int round = 0; round < 4 && !active.empty(); ++round) {
    if (stepped && Now() >= catchup_until_) {
      // The Flush's slice is spent: the next Flush starts here.
      p.catchup_resume = active.front().first->name;
      *sliced = true;
      return true;
    }
    // Flow control: a consumer that has not acknowledged enough waits, and so does its hand-over.
    next.clear();
    for (const Catchup& c : active) {
      if (c.second->live().catchup != nullptr &&
          c.second->live().session.MaySendMore(options_.max_unacked_events)) {
        next.push_back(c);
      }
    }
    active.swap(next);
    // The catchups that need PFS matches read them in one pass when there are several: after an
    // outage they read the same records. A pass costs its records times its readers, so it takes
    // the kPassWork / records of them that are furthest behind; the others wait for a later pass
    // (the PFS keeps what this one read for it). The furthest behind always move: no catchup
    // waits for ever.
    const size_t pass_records = options_.catchup.max_buffered_matches / 2;
    const size_t pass_readers = std::max<size_t>(2, kPassWork / pass_records);
    wanting.clear();
    for (const auto& [s, pos] : active) {
      if (pos->live().catchup->WantedMatches(ld)) wanting.push_back(pos);
    }
    if (wanting.size() > pass_readers) {
      std::nth_element(wanting.begin(), wanting.begin() + static_cast<ptrdiff_t>(pass_readers),
                       wanting.end(), [](Position* a, Position* b) {
                         return a->live().reader->position() < b->live().reader->position();
                       });
      wanting.resize(pass_readers);
    }
    readers.clear();
    for (Position* pos : wanting) {
      pos->live().reader->ExtendTo(ld);
      readers.push_back(pos->live().reader.get());
    }
    const bool passed =
        readers.size() >= 2 &&
        p.pfs->ReadTogether(absl::MakeSpan(readers), pass_records, &results, kPassBytes).ok();
    if (passed) {
      // (On an error each catchup reads alone below, and reports it to its own session.)
      for (size_t i = 0; i < wanting.size(); ++i) {
        const PFS::ReadResult& r = results[i];
        wanting[i]->live().catchup->AddMatches(r.ticks, r.through, r.lost_through);
      }
    }
    next.clear();
    for (const Catchup& c : active) {
      SubscriptionState& s = *c.first;
      Position& pos = *c.second;
      const std::string& name = s.name;
      if (pos.live().catchup == nullptr) continue;
      const bool out_of_time = stepped && Now() >= catchup_until_;
      if (sent >= options_.max_catchup_messages_per_flush || out_of_time) {
        // The budget or the slice is spent (a step sends at most
        // catchup.max_deliveries_per_step past it): the next Flush starts here, after the loop
        // has handled what arrived meanwhile.
        p.catchup_resume = name;
        *sliced = out_of_time;
        return true;
      }
      // A catchup a pass left short waits for the next pass: alone it would walk the whole
      // window of its chain.
      if (!passed && pos.live().catchup->WantedMatches(ld)) {
        PFS::ReadResult r;
        if (absl::Status st =
                pos.live().reader->Read(options_.catchup.max_buffered_matches / 2, &r);
            !st.ok()) {
          Log(LogLevel::kError,
              absl::StrCat("subscription '", name, "': its catchup at pubend ", p.id.value,
                           " failed reading the PFS: ", st.ToString(), "; its session ends"));
          SendError(s.session, name, st);
          EndSession(s);
          continue;
        }
        pos.live().catchup->AddMatches(r.ticks, r.through, r.lost_through);
      }
      out.clear();
      nacks.clear();
      pos.live().catchup->Step(p.istream, ld, &out, &nacks);
      stepped = true;
      uint64_t events = 0;
      Tick last_event = 0;
      batch.clear();
      for (DeliveryMessage& d : out) {  // stamped by the catchup stream: finished
        if (d.kind == DeliveryKind::kEvent) {
          ++events;
          last_event = d.tick;
        }
        if (d.kind == DeliveryKind::kGap) {
          ++stats_.gaps_delivered;
          LogGap(name, p.id, d.tick);
        }
        batch.push_back(Channel::Outgoing{s.session, std::move(d)});
      }
      stats_.events_delivered += events;
      sent += batch.size();
      // As for the constream: a refused message ends the session (the link must not skip).
      if (channel_->SendMany(absl::MakeSpan(batch)) < batch.size()) {
        EndSession(s);
        continue;
      }
      pos.live().session.NoteEventsSent(last_event, events, Now());
      if (!nacks.empty()) Nack(p, name, nacks);
      if (pos.live().catchup->caught_up(ld)) {
        // The hand-over: the constream has delivered exactly through ld, and so has the catchup.
        EndCatchup(s, p, pos);
        p.constream->Join(s.id, name, s.session, &pos.live().session, Now());
        pos.live().member = true;
        ++stats_.catchups_completed;
      } else if (nacks.empty() && !out.empty()) {
        next.push_back(c);  // it may have more at once
      }
    }
    active.swap(next);
  }
  // Whatever sent may have more to send.
  return sent > 0;
}

void SubscriberHostingBrokerImpl::Nack(PubendState& p, const std::string& requester,
                                       const std::vector<TickRange>& ranges) {
  CuriosityMessage m{p.id, {}};
  const bool none_outstanding = p.curiosity.empty();
  for (TickRange r : ranges) {
    for (TickRange fresh : p.curiosity.Add(requester, r)) m.ranges.push_back(fresh);
  }
  if (m.ranges.empty()) return;
  // The renack interval runs from the first send: without this, the next timer would send these
  // ranges again at once. Only when nothing was outstanding, so that a stream of fresh nacks never
  // postpones the retries of older ones.
  if (none_outstanding) p.last_renack = Now();
  std::sort(m.ranges.begin(), m.ranges.end(),
            [](TickRange a, TickRange b) { return a.first < b.first; });
  ++stats_.nacks_sent;
  Send(p.upstream, std::move(m));
}

void SubscriberHostingBrokerImpl::OnConnect(absl::string_view from, const ConnectMessage& m) {
  if (!status_.ok()) {
    SendError(from, m.subscription,
              absl::UnavailableError(absl::StrCat("broker is stopped: ", status_.message())));
    return;
  }
  if (m.subscription.empty()) {
    SendError(from, m.subscription, absl::InvalidArgumentError("a subscription needs a name"));
    return;
  }
  if (m.subscription.size() > kMaxSubscriptionNameBytes) {
    // The name is a storage key: a commit that fails on it would stop the broker for everyone.
    SendError(
        from, m.subscription,
        absl::InvalidArgumentError(absl::StrCat("subscription name of ", m.subscription.size(),
                                                " bytes; at most ", kMaxSubscriptionNameBytes)));
    return;
  }
  // The CT must name pubends this broker serves and not be ahead of it. (The home broker of a
  // subscription ignores pubends it no longer serves: they may have been removed from it.)
  const bool hosted = subscriptions_.contains(m.subscription);
  for (const auto& [p, t] : m.checkpoint.entries()) {
    auto it = pubends_.find(p);
    if (it == pubends_.end() && hosted) continue;
    if (it == pubends_.end()) {
      SendError(from, m.subscription,
                absl::InvalidArgumentError(absl::StrCat("checkpoint names pubend ", p.value,
                                                        " which this broker does not serve")));
      return;
    }
    if (t > AcceptableTick(it->second)) {
      SendError(from, m.subscription,
                absl::OutOfRangeError(absl::StrCat("checkpoint tick ", t, " for pubend ", p.value,
                                                   " is ahead of this broker (",
                                                   AcceptableTick(it->second), ")")));
      return;
    }
  }
  WriteBatch wb;
  auto it = subscriptions_.find(m.subscription);
  if (it == subscriptions_.end()) {
    if (!m.create) {
      SendError(from, m.subscription,
                absl::NotFoundError(absl::StrCat("no subscription '", m.subscription, "'")));
      return;
    }
    if (waiting_) {
      SendError(from, m.subscription,
                absl::UnavailableError(
                    "the broker's store is full: new subscriptions wait until its subscribers' "
                    "acknowledgements make room; retry later"));
      return;
    }
    // A CT that names no pubend is a new subscription's. Any other comes from a broker that
    // hosted the subscription (reconnect anywhere), and must say where the subscriber stands on
    // every pubend served here: starting one it does not name at latestDelivered would skip
    // whatever matched it since the subscription began elsewhere.
    if (!m.checkpoint.empty()) {
      for (const auto& [id, p] : pubends_) {
        if (m.checkpoint.Names(id)) continue;
        SendError(from, m.subscription,
                  absl::InvalidArgumentError(absl::StrCat(
                      "checkpoint ", m.checkpoint.ToString(), " does not name pubend ", id.value,
                      ", which this broker serves; a subscription it never hosted needs a CT "
                      "naming every pubend (connect to the subscription's own broker)")));
        return;
      }
    }
    absl::StatusOr<Subscription> sub =
        Subscription::Create(m.selector, m.topic_filter, options_.selector);
    if (!sub.ok()) {
      SendError(from, m.subscription, sub.status());
      return;
    }
    SubscriptionState s{SubscriberId{next_id_++}, m.subscription, *std::move(sub), m.epoch, "", {}};
    for (auto& [id, p] : pubends_) {
      // A new subscription starts at latestDelivered; a CT from elsewhere (reconnect anywhere)
      // is refiltered from there up to latestDelivered.
      Position& pos = s.positions[id];
      pos.created = p.constream->latest_delivered();
      pos.released = m.checkpoint.Names(id) ? m.checkpoint.Get(id) : pos.created;
      if (absl::Status st = p.pfs->AddSubscriber(s.id, &wb); !st.ok()) {
        SendError(from, m.subscription, st);
        return;
      }
    }
    wb.Put(kShbSubscriptionsTable, s.name, s.EncodeRow());
    wb.Put(kShbMetaTable, kShbNextIdKey, internal::EncodeNextId(next_id_));
    names_[s.id.value] = s.name;
    it = subscriptions_.emplace(s.name, std::move(s)).first;
    if (absl::Status st = matcher_.Add(it->second.id, it->second.subscription); !st.ok()) {
      Fail(st);
      return;
    }
    matcher_.Publish();
    by_id_[it->second.id.value] = &it->second;
    for (const auto& [id, pos] : it->second.positions) PutPosition(it->second, id, wb);
    // Answered once this commit is durable (SubscriptionState::awaiting_creation): the matcher
    // and the PFS have it from now on, so the session's catchup from the subscription's start
    // serves what matches meanwhile.
    it->second.awaiting_creation =
        std::make_unique<std::pair<std::string, ConnectMessage>>(std::string(from), m);
    creating_.push_back(it->second.id);
    Submit(std::move(wb), {});
    return;
  } else {
    SubscriptionState& s = it->second;
    if (s.SelectorText() != m.selector || s.FilterText() != m.topic_filter) {
      SendError(from, m.subscription,
                absl::InvalidArgumentError(absl::StrCat(
                    "subscription '", m.subscription,
                    "' exists with another selector or topic filter; unsubscribe first")));
      return;
    }
    if (!SessionEpochTakesOver(m.epoch, s.epoch)) {
      // A newer process holds the subscription: this one is fenced, as a session would be.
      SendError(from, m.subscription,
                absl::AbortedError(absl::StrCat(
                    "epoch ", m.epoch, " is older than the subscription's epoch ", s.epoch)));
      return;
    }
    if (s.awaiting_creation) {
      // Not durable yet: this Connect (a retry, or a newer process) waits in the place of the
      // one before, which is told it was replaced if it came from elsewhere.
      if (s.awaiting_creation->first != from) {
        SendError(
            s.awaiting_creation->first, s.name,
            absl::AbortedError(absl::StrCat("fenced by a newer connection (epoch ", m.epoch, ")")));
      }
      s.awaiting_creation =
          std::make_unique<std::pair<std::string, ConnectMessage>>(std::string(from), m);
      return;
    }
    if (!s.session.empty()) {
      // A session on another endpoint hears that it was fenced; one on this endpoint belonged
      // to a process this one replaced (the error would reach the new one).
      if (s.session != from) {
        Log(LogLevel::kWarning,
            absl::StrCat("subscription '", s.name, "': the session of '", s.session,
                         "' is fenced by '", from, "' (epoch ", m.epoch, ")"));
        SendError(
            s.session, s.name,
            absl::AbortedError(absl::StrCat("fenced by a newer session (epoch ", m.epoch, ")")));
      }
      EndSession(s);
    }
    if (m.epoch > s.epoch) {
      s.epoch = m.epoch;
      wb.Put(kShbSubscriptionsTable, s.name, s.EncodeRow());
    }
  }
  // Submitted, not waited for: a burst of reconnections must not cost the loop an fsync each.
  // An existing subscription's row changes here only with its epoch, and Connected may go out
  // before that is durable: a crash in between brings back the older epoch, which the
  // subscriber's own outranks. (A new subscription waits for its row: see above.)
  if (!wb.empty()) Submit(std::move(wb), {});
  if (!status_.ok()) {
    SendError(from, m.subscription, status_);
    return;
  }
  SubscriptionState& s = it->second;
  s.session = std::string(from);
  s.last_heard = Now();
  CheckpointToken start;
  for (auto& [id, p] : pubends_) {
    Position& pos = s.positions[id];
    const Tick ld = p.constream->latest_delivered();
    // Nothing before the subscription existed here can have matched it, unless a CT from
    // elsewhere asks to refilter that span. A CT that does not name this pubend predates its
    // coverage here (a new subscription, or a pubend added since): start where the coverage did.
    // The start names every pubend, at 0 too, so that the subscriber's CT says where it stands
    // on each wherever it goes next.
    const Tick from_tick = m.checkpoint.Names(id) ? m.checkpoint.Get(id) : pos.created;
    start.Set(id, from_tick);
    pos.live().session.Start(from_tick);
    // Each session resumes after its own CT: an earlier session's (which may have been ahead of
    // this one's, after a crash) must not hide the ticks this one is owed.
    pos.live().resume_after = 0;
    if (from_tick >= ld) {
      // Ahead of the constream only after a crash (see the header): resume after the CT.
      pos.live().resume_after = from_tick;
      if (from_tick > ld) ++stats_.resumed_ahead;
      p.constream->Join(s.id, s.name, s.session, &pos.live().session, Now(), from_tick);
      pos.live().member = true;
      continue;
    }
    const Tick refilter_through = from_tick < pos.created ? pos.created : 0;
    absl::StatusOr<std::unique_ptr<PFS::Reader>> reader =
        p.pfs->NewReader(s.id, std::max(from_tick, refilter_through), ld);
    if (!reader.ok()) {
      SendError(from, s.name, reader.status());
      EndSession(s);
      return;
    }
    StartCatchup(s, p, pos, *std::move(reader), from_tick, refilter_through);
  }
  Send(from, ConnectedMessage{s.name, start, s.epoch});
  // The catchups start in the next Flush: stepping them here would step every catchup again for
  // each connection of a burst (all subscribers back after an outage) before any other message.
  dirty_ = true;
}

void SubscriberHostingBrokerImpl::EndSession(SubscriptionState& s) {
  for (auto& [id, pos] : s.positions) {
    PubendState& p = pubends_.at(id);
    EndCatchup(s, p, pos);
    p.constream->Leave(s.name);
    pos.live().member = false;
    pos.live().session.End();
  }
  s.session.clear();
}

void SubscriberHostingBrokerImpl::OnAck(absl::string_view from, const AckMessage& m) {
  auto it = subscriptions_.find(m.subscription);
  if (it == subscriptions_.end() || it->second.session != from) {
    SendError(from, m.subscription,
              absl::FailedPreconditionError("no live session for this subscription; reconnect"));
    return;
  }
  SubscriptionState& s = it->second;
  s.last_heard = Now();
  // All or nothing: a bad entry leaves the others unapplied too. (A pubend this broker does not
  // serve, one removed from it, is ignored.)
  for (const auto& [p, t] : m.checkpoint.entries()) {
    auto pit = pubends_.find(p);
    if (pit == pubends_.end()) continue;
    if (t > AcceptableTick(pit->second)) {
      SendError(from, s.name,
                absl::OutOfRangeError(absl::StrCat("ack for pubend ", p.value, " tick ", t,
                                                   " is beyond what this broker delivered")));
      return;
    }
  }
  for (const auto& [p, t] : m.checkpoint.entries()) {
    if (!pubends_.contains(p)) continue;
    Position& pos = s.positions[p];
    if (pos.live().session.OnAck(
            t, Now(),
            &stats_.deliver_to_ack)) {  // the last message was lost (SessionStream::ShouldResend)
      Resend(s, pubends_.at(p), pos);
      if (s.session.empty()) return;
    }
    if (t > pos.released) {
      pos.released = t;
      dirty_released_[s.name].push_back(p);
    }
  }
  dirty_ = true;  // a paused catchup may go on
}

void SubscriberHostingBrokerImpl::OnDisconnect(absl::string_view from,
                                               const std::string& subscription) {
  auto it = subscriptions_.find(subscription);
  if (it == subscriptions_.end() || it->second.session != from) return;
  EndSession(it->second);
}

void SubscriberHostingBrokerImpl::OnUnsubscribe(absl::string_view from,
                                                const std::string& subscription) {
  auto it = subscriptions_.find(subscription);
  if (it == subscriptions_.end()) {
    SendError(from, subscription,
              absl::NotFoundError(absl::StrCat("no subscription '", subscription, "'")));
    return;
  }
  SubscriptionState& s = it->second;
  if (!s.session.empty() && s.session != from) {
    SendError(from, subscription,
              absl::FailedPreconditionError("another session holds this subscription"));
    return;
  }
  EndSession(s);
  Delete(it);
}

void SubscriberHostingBrokerImpl::Delete(
    std::map<std::string, SubscriptionState, std::less<>>::iterator it) {
  SubscriptionState& s = it->second;
  WriteBatch wb;
  for (auto& [id, p] : pubends_) {
    if (absl::Status st = p.pfs->RemoveSubscriber(s.id, &wb); !st.ok() && !absl::IsNotFound(st)) {
      Fail(st);
      return;
    }
    wb.Delete(kShbPositionsTable, internal::PositionKey(s.id, id));
  }
  wb.Delete(kShbSubscriptionsTable, s.name);
  names_.erase(s.id.value);
  dirty_released_.erase(s.name);
  (void)matcher_.Remove(s.id);
  matcher_.Publish();
  by_id_.erase(s.id.value);
  subscriptions_.erase(it);
  freeing_ = true;
  Submit(std::move(wb), {});  // not waited for (see OnConnect): a crash first brings it back
}

SubscriptionStatus SubscriberHostingBrokerImpl::StatusOf(const SubscriptionState& s) const {
  SubscriptionStatus st;
  st.name = s.name;
  st.selector = std::string(s.SelectorText());
  st.topic_filter = std::string(s.FilterText());
  st.session = s.session;
  st.epoch = s.epoch;
  st.last_heard = s.last_heard;
  bool catching_up = false;
  for (const auto& [id, pos] : s.positions) {
    SubscriptionStatus::AtPubend& at = st.pubends.emplace_back();
    at.pubend = id;
    at.released = pos.released;
    at.latest_delivered = latest_delivered(id);
    at.backlog_ticks = at.latest_delivered > at.released ? at.latest_delivered - at.released : 0;
    const Position::Live* live = pos.live_if_any();
    at.catching_up = live != nullptr && live->catchup != nullptr;
    if (!s.session.empty() && live != nullptr) {
      at.sent_through = live->session.sent_through();
      at.unacked_events = live->session.unacked();
    }
    catching_up = catching_up || at.catching_up;
  }
  st.state = s.session.empty() ? SubscriptionStatus::State::kDisconnected
             : catching_up     ? SubscriptionStatus::State::kCatchingUp
                               : SubscriptionStatus::State::kConnected;
  return st;
}

std::vector<SubscriptionStatus> SubscriberHostingBrokerImpl::Subscriptions() const {
  std::vector<SubscriptionStatus> all;
  all.reserve(subscriptions_.size());
  for (const auto& [name, s] : subscriptions_) all.push_back(StatusOf(s));
  return all;
}

absl::StatusOr<SubscriptionStatus> SubscriberHostingBrokerImpl::FindSubscription(
    absl::string_view name) const {
  auto it = subscriptions_.find(name);
  if (it == subscriptions_.end()) {
    return absl::NotFoundError(absl::StrCat("no subscription '", name, "'"));
  }
  return StatusOf(it->second);
}

absl::StatusOr<uint64_t> SubscriberHostingBrokerImpl::BacklogEvents(absl::string_view name,
                                                                    PubendId p) {
  auto it = subscriptions_.find(name);
  if (it == subscriptions_.end()) {
    return absl::NotFoundError(absl::StrCat("no subscription '", name, "'"));
  }
  auto pit = pubends_.find(p);
  auto pos = it->second.positions.find(p);
  if (pit == pubends_.end() || pos == it->second.positions.end()) {
    return absl::NotFoundError(absl::StrCat("subscription '", name, "' has no pubend ", p.value));
  }
  // Through the durable latestDelivered: the PFS holds every record up to it.
  const Tick to = pit->second.committed;
  if (pos->second.released >= to) return 0;
  absl::StatusOr<std::unique_ptr<PFS::Reader>> reader =
      pit->second.pfs->NewReader(it->second.id, pos->second.released, to);
  if (!reader.ok()) return reader.status();
  uint64_t events = 0;
  PFS::ReadResult result;
  while (!(*reader)->done()) {
    GRYPH_RETURN_IF_ERROR((*reader)->Read(4096, &result));
    events += result.ticks.size();
  }
  return events;
}

absl::Status SubscriberHostingBrokerImpl::DeleteSubscription(absl::string_view name) {
  if (!status_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the broker is stopped: ", status_.ToString()));
  }
  auto it = subscriptions_.find(name);
  if (it == subscriptions_.end()) {
    return absl::NotFoundError(absl::StrCat("no subscription '", name, "'"));
  }
  SubscriptionState& s = it->second;
  if (!s.session.empty()) {
    SendError(s.session, s.name, absl::NotFoundError("the subscription was deleted at its broker"));
    EndSession(s);
  }
  Log(LogLevel::kInfo, absl::StrCat("subscription '", name, "' deleted by its administrator"));
  Delete(it);
  ++stats_.subscriptions_deleted;
  return status_;
}

void SubscriberHostingBrokerImpl::OnTimer(absl::Time now) {
  if (!status_.ok()) return;
  // A stalled broker (a long commit, a busy thread) has not read the acks that arrived
  // meanwhile: no session counts as silent for it.
  if (last_timer_ != absl::InfinitePast() && now - last_timer_ > options_.session_timeout / 2) {
    for (auto& [name, s] : subscriptions_) {
      if (!s.session.empty()) s.last_heard = now;
    }
  }
  last_timer_ = now;
  if (waiting_ && room_made_ && now >= room_least_) {
    StopWaiting("commits that freed space went through");
  } else if (waiting_ && now >= room_probe_) {
    StopWaiting("its longest wait for room has passed");
  }
  // Rounds first: the chop below must follow every PFS write in commit order.
  dirty_ = true;
  Flush();
  if (!status_.ok()) return;
  const bool release_due = now - last_release_ >= options_.release_interval;
  WriteBatch wb;
  for (auto& [id, p] : pubends_) {
    // Nack what is Q below the highest tick seen, once it has been so for nack_delay.
    const Tick ld = p.constream->latest_delivered();
    if (p.highest_seen > ld) {
      if (p.q_seen_since == absl::InfiniteFuture()) p.q_seen_since = now;
      if (now - p.q_seen_since >= options_.nack_delay) {
        Nack(p, "constream", p.istream.QRanges({ld + 1, p.highest_seen}, 64));
        p.q_seen_since = absl::InfiniteFuture();
      }
    } else {
      p.q_seen_since = absl::InfiniteFuture();
    }
    // Retries: nacks (or their answers) may be lost.
    if (!p.curiosity.empty() && now - p.last_renack >= options_.renack_interval) {
      p.last_renack = now;
      p.curiosity.Prune(p.istream);
      std::vector<TickRange> again = p.curiosity.Outstanding(64);
      if (!again.empty()) {
        ++stats_.nacks_sent;
        Send(p.upstream, CuriosityMessage{p.id, std::move(again)});
      }
    }
    // Silence for constream members that matched nothing for a while.
    for (Channel::Outgoing& o : p.constream->Silences(now, options_.silence_interval)) {
      Send(o.peer, std::move(o.message));
    }
    if (release_due) {
      // Upstream hears only the durable latestDelivered: ticks above it may be needed again
      // after a crash, so they must not become L (paper §3: t > Td(p) is never released).
      Tick released = p.committed;
      for (const auto& [name, s] : subscriptions_) {
        auto pos = s.positions.find(id);
        if (pos != s.positions.end()) released = std::min(released, pos->second.released);
      }
      Send(p.upstream, ReleaseMessage{{{id, released, p.committed}}});
      // Catchups still reading below the released point keep their records.
      Tick chop = released;
      for (const auto& [name, s] : p.catchups) {
        chop = std::min(chop, s->positions.at(id).live().catchup->position());
      }
      if (chop > p.pfs->chopped_through()) {
        if (absl::Status st = p.pfs->Chop(chop, &wb); !st.ok()) {
          Fail(st);
          return;
        }
        freeing_ = true;
      }
    }
  }
  if (release_due) {
    last_release_ = now;
    // A session that has sent nothing for session_timeout belongs to a process that is gone
    // (crashed, or moved to another broker): its catchup, paused by flow control, would hold
    // the event cache and the PFS chop for ever.
    for (auto& [name, s] : subscriptions_) {
      if (s.session.empty() || now - s.last_heard < options_.session_timeout) continue;
      Log(LogLevel::kWarning,
          absl::StrCat("subscription '", name, "': nothing from '", s.session, "' for ",
                       absl::FormatDuration(now - s.last_heard), "; its session ends"));
      SendError(s.session, name,
                absl::UnavailableError(absl::StrCat("no ack or keepalive for ",
                                                    absl::FormatDuration(now - s.last_heard),
                                                    "; the session ended; reconnect")));
      EndSession(s);
    }
    // Subscriptions whose subscriber stayed away past subscription_expiry (after the batch
    // above, which their deletion must follow).
    if (options_.subscription_expiry != absl::InfiniteDuration()) {
      if (!wb.empty()) Submit(std::move(wb), {});
      wb = WriteBatch();
      for (auto it = subscriptions_.begin(); it != subscriptions_.end() && status_.ok();) {
        auto next = std::next(it);
        if (it->second.session.empty() &&
            now - it->second.last_heard >= options_.subscription_expiry) {
          Log(LogLevel::kWarning,
              absl::StrCat("subscription '", it->first, "' expired: no subscriber for ",
                           absl::FormatDuration(now - it->second.last_heard),
                           " (subscription_expiry); deleted, and a Gap awaits it if it returns"));
          Delete(it);
          ++stats_.subscriptions_expired;
        }
        it = next;
      }
    }
  }
  if (!wb.empty() || !dirty_released_.empty()) Submit(std::move(wb), {});
}

absl::Time SubscriberHostingBrokerImpl::NextDeadline(absl::Time now) const {
  if (!status_.ok()) return absl::InfiniteFuture();
  absl::Time next = last_release_ + options_.release_interval;
  // OnTimer takes a gap of more than session_timeout/2 for a stall: come well before it.
  if (last_timer_ != absl::InfinitePast()) {
    next = std::min(next, last_timer_ + options_.session_timeout / 4);
  }
  // Missing ticks start their nack_delay at the next OnTimer; after a nack they wait for the
  // answer or the renack (at least a millisecond apart, so that a nack_delay of 0 cannot spin).
  if (waiting_) next = std::min(next, room_made_ ? room_least_ : room_probe_);
  // Catchups resting (catchup_share) go on then.
  if (dirty_ && catchup_rest_until_ > now) next = std::min(next, catchup_rest_until_);
  const absl::Duration q_wait = std::max(options_.nack_delay, absl::Milliseconds(1));
  for (const auto& [id, p] : pubends_) {
    if (p.highest_seen > p.constream->latest_delivered()) {
      next = std::min(
          next, p.q_seen_since == absl::InfiniteFuture() ? now + q_wait : p.q_seen_since + q_wait);
    }
    if (!p.curiosity.empty()) next = std::min(next, p.last_renack + options_.renack_interval);
  }
  return std::max(next, now);
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<SubscriberHostingBroker>> SubscriberHostingBroker::Open(
    SubscriberHostingBrokerOptions options, Storage* storage, Channel* channel) {
  if (options.pubends.empty()) return absl::InvalidArgumentError("an SHB needs a pubend");
  // Each of these at 0 (or 1 for the matches, read half a buffer at a time) would stall every
  // constream or catchup without an error.
  for (const auto& [value, least, name] :
       {std::tuple<uint64_t, uint64_t, const char*>{options.max_batch_events, 1,
                                                    "max_batch_events"},
        {options.max_catchup_messages_per_flush, 1, "max_catchup_messages_per_flush"},
        {options.max_unacked_events, 1, "max_unacked_events"},
        {options.recovery_threads, 1, "recovery_threads"},
        {options.catchup.max_buffered_matches, 2, "catchup.max_buffered_matches"},
        {options.catchup.nack_window, 1, "catchup.nack_window"},
        {options.catchup.max_deliveries_per_step, 1, "catchup.max_deliveries_per_step"}}) {
    if (value < least) {
      return absl::InvalidArgumentError(
          absl::StrCat("SHB option ", name, " is ", value, "; it must be at least ", least));
    }
  }
  GRYPH_RETURN_IF_ERROR(
      internal::CheckPositive("SHB", {{options.renack_interval, "renack_interval"},
                                      {options.release_interval, "release_interval"},
                                      {options.silence_interval, "silence_interval"},
                                      {options.session_timeout, "session_timeout"},
                                      {options.subscription_expiry, "subscription_expiry"},
                                      {options.full_store_wait, "full_store_wait"},
                                      {options.catchup_slice, "catchup_slice"}}));
  if (options.nack_delay < absl::ZeroDuration() || options.commit_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("SHB options nack_delay and commit_interval must be >= 0");
  }
  if (!(options.catchup_share > 0 && options.catchup_share <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SHB option catchup_share is ", options.catchup_share, "; it must be in (0, 1]"));
  }
  if (options.delivery_lease_ticks == 0) {
    return absl::InvalidArgumentError("SHB option delivery_lease_ticks is 0");
  }
  if (options.simulated_commit_thread && !options.commit_thread) {
    return absl::InvalidArgumentError("SHB option simulated_commit_thread needs commit_thread");
  }
  for (const auto& up : options.pubends) {
    if (up.node.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SHB: pubend ", up.pubend.value, " has no upstream node"));
    }
  }
  if (storage == nullptr || channel == nullptr) {
    return absl::InvalidArgumentError("an SHB needs a storage and a channel");
  }
  if (!options.clock) options.clock = [] { return absl::Now(); };
  GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<internal::ShbHost> shb,
                         internal::ShbHost::Open(std::move(options), storage, channel));
  return shb;
}

}  // namespace gryph
