#include "gryph/publisher_hosting_broker.h"

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "lib/util/status_macros.h"
#include "lib/util/stopwatch.h"

namespace gryph {

namespace internal {
namespace {

class PublisherHostingBrokerImpl final : public PublisherHostingBroker {
 public:
  PublisherHostingBrokerImpl(PublisherHostingBrokerOptions options, Channel* channel)
      : options_(std::move(options)), channel_(channel) {}
  ~PublisherHostingBrokerImpl() override;

  // Opens the pubends and the committer (PublisherHostingBrokerImpl::Open), then receives.
  absl::Status Start(Storage* storage);

  void Publish(PubendId p, absl::string_view publisher, uint64_t sequence, EventRef event,
               Pubend::PublishDone done) override;
  PubendId PublishByKey(absl::string_view key, absl::string_view publisher, uint64_t sequence,
                        EventRef event, Pubend::PublishDone done) override;
  absl::Status HandleMessage(absl::string_view from, const Message& message) override;
  void OnTimer(absl::Time now) override;
  absl::Time NextDeadline(absl::Time now) const override;
  absl::Status Flush() override { return committer_->Flush(); }
  Pubend* pubend(PubendId p) const override;
  const std::vector<PubendId>& pubend_ids() const override { return ids_; }
  GroupCommitter& committer() override { return *committer_; }

 private:
  absl::Time Now() const { return options_.clock(); }
  // A publish from a peer: published as from `from`, answered to `from` with Published.
  absl::Status OnPublish(absl::string_view from, const PublishMessage& m);

  const PubendRecovery& recovery() const override { return recovery_; }
  Stats stats() const override {
    absl::MutexLock lock(&stats_mu_);
    return stats_;
  }

  const PublisherHostingBrokerOptions options_;
  Channel* const channel_;
  mutable absl::Mutex stats_mu_;
  Stats stats_ ABSL_GUARDED_BY(stats_mu_);
  std::unique_ptr<GroupCommitter> committer_;
  std::map<PubendId, std::unique_ptr<Pubend>> pubends_;
  PubendRecovery recovery_;
  std::vector<PubendId> ids_;
};

}  // namespace

absl::Status PublisherHostingBrokerImpl::Start(Storage* storage) {
  GroupCommitOptions gc = options_.group_commit;
  // The pubends' rows never build on one another's commits: a full store fails only its group.
  gc.resume_after_full = true;
  gc.clock = options_.clock;
  gc.after_group = [this] {
    for (auto& [id, pubend] : pubends_) pubend->FlushKnowledge();
  };
  committer_ = std::make_unique<GroupCommitter>(storage, std::move(gc));
  internal::Stopwatch total;
  for (const PubendOptions& po : options_.pubends) {
    if (pubends_.contains(po.id)) {
      return absl::InvalidArgumentError(absl::StrCat("pubend ", po.id.value, " appears twice"));
    }
    PubendOptions with_log = po;
    if (!with_log.log) with_log.log = options_.log;
    GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Pubend> p,
                           Pubend::Open(with_log, storage, committer_.get(), channel_));
    for (const std::string& node : options_.downstream) {
      if (absl::Status s = p->AddDownstream(node); !s.ok() && !absl::IsAlreadyExists(s)) return s;
    }
    recovery_ += p->recovery();
    ids_.push_back(po.id);
    pubends_[po.id] = std::move(p);
  }
  recovery_.total = total.Lap();
  bool recovered = false;  // a new broker has no news
  for (const auto& [id, p] : pubends_) recovered = recovered || p->committed_tick() > 0;
  if (options_.log && recovered) {
    using internal::FormatMillis;
    options_.log(
        LogRecord{LogLevel::kInfo, "phb",
                  absl::StrCat("recovered ", pubends_.size(), " pubends in ",
                               FormatMillis(recovery_.total), " (log ", FormatMillis(recovery_.log),
                               ", release table ", FormatMillis(recovery_.downstream), ")")});
  }
  if (options_.commit_thread && !options_.simulated_commit_thread) committer_->Start();
  channel_->SetReceiver([this](absl::string_view from, Message m) {
    (void)HandleMessage(from, m);  // a bad message changes nothing; the sender retries
  });
  return absl::OkStatus();
}

PublisherHostingBrokerImpl::~PublisherHostingBrokerImpl() {
  channel_->SetReceiver(nullptr);
  if (options_.commit_thread) {
    committer_->Stop();
    // Publishes made after a clean shutdown stopped the thread (Runtime::Shutdown) are answered.
    committer_->Abandon(absl::AbortedError("the PHB closed; publish it again"));
  } else {
    // Driven by hand, the broker commits only when told (Flush, OnTimer): what it was not told
    // to commit is not committed, as in a crash, but its publishers hear so.
    committer_->Abandon(
        absl::AbortedError("the PHB closed before this publish was committed; publish it again"));
  }
}

Pubend* PublisherHostingBrokerImpl::pubend(PubendId p) const {
  auto it = pubends_.find(p);
  return it == pubends_.end() ? nullptr : it->second.get();
}

void PublisherHostingBrokerImpl::Publish(PubendId p, absl::string_view publisher, uint64_t sequence,
                                         EventRef event, Pubend::PublishDone done) {
  Pubend* pubend = this->pubend(p);
  if (pubend == nullptr) {
    std::move(done)(absl::NotFoundError(absl::StrCat("no pubend ", p.value, " at this PHB")));
    return;
  }
  const absl::Time start = Now();
  pubend->Publish(publisher, sequence, std::move(event), start,
                  [this, start, done = std::move(done)](absl::StatusOr<Tick> tick) mutable {
                    {
                      absl::MutexLock lock(&stats_mu_);
                      ++stats_.publishes;
                      if (tick.ok()) {
                        stats_.publish_to_durable.Record(Now() - start);
                      } else {
                        ++stats_.failed;
                      }
                    }
                    std::move(done)(std::move(tick));
                  });
}

PubendId PublisherHostingBrokerImpl::PublishByKey(absl::string_view key,
                                                  absl::string_view publisher, uint64_t sequence,
                                                  EventRef event, Pubend::PublishDone done) {
  const PubendId p = PubendForKey(key, ids_);
  Publish(p, publisher, sequence, std::move(event), std::move(done));
  return p;
}

absl::Status PublisherHostingBrokerImpl::OnPublish(absl::string_view from,
                                                   const PublishMessage& m) {
  const PubendId p = m.by_key() ? PubendForKey(m.key, ids_) : m.pubend;
  // The publisher is the name the message came under, never one it claims: the channel vouches
  // for names, the message for nothing. The answer may be sent from the commit thread, as
  // knowledge is, or from the destructor (Aborted), which the channel outlives.
  Pubend::PublishDone answer = [channel = channel_, to = std::string(from), sequence = m.sequence,
                                p](absl::StatusOr<Tick> result) {
    // A lost answer costs a resend, which is answered again.
    (void)channel->Send(to, PublishedMessage{sequence, p, std::move(result)});
  };
  absl::Status refused;
  if (pubend(p) == nullptr) {
    refused = absl::NotFoundError(absl::StrCat("no pubend ", p.value, " at this PHB"));
  } else if (m.event == nullptr) {
    refused = absl::InvalidArgumentError("publish of a null event");
  }
  if (!refused.ok()) {
    std::move(answer)(refused);
    return refused;
  }
  Publish(p, from, m.sequence, m.event, std::move(answer));
  return absl::OkStatus();
}

absl::Status PublisherHostingBrokerImpl::HandleMessage(absl::string_view from, const Message& m) {
  if (const auto* publish = std::get_if<PublishMessage>(&m)) return OnPublish(from, *publish);
  if (const auto* nack = std::get_if<CuriosityMessage>(&m)) {
    Pubend* p = pubend(nack->pubend);
    if (p == nullptr) {
      return absl::NotFoundError(absl::StrCat("nack for unknown pubend ", nack->pubend.value));
    }
    return p->HandleCuriosity(from, *nack);
  }
  if (const auto* release = std::get_if<ReleaseMessage>(&m)) {
    absl::Status first;
    for (const ReleaseEntry& e : release->entries) {
      Pubend* p = pubend(e.pubend);
      absl::Status s =
          p == nullptr
              ? absl::NotFoundError(absl::StrCat("release for unknown pubend ", e.pubend.value))
              : p->HandleRelease(from, e, Now());
      if (first.ok()) first = s;
    }
    return first;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("a PHB does not take ", MessageKindName(m), " messages"));
}

void PublisherHostingBrokerImpl::OnTimer(absl::Time now) {
  if (!options_.commit_thread) (void)committer_->FlushIfDue(now);  // failures reach the pubends
  for (auto& [id, p] : pubends_) p->OnTimer(now);
}

absl::Time PublisherHostingBrokerImpl::NextDeadline(absl::Time now) const {
  absl::Time next = now + absl::Milliseconds(10);
  for (const PubendOptions& po : options_.pubends) next = std::min(next, now + po.heartbeat);
  if (!options_.commit_thread) {
    if (std::optional<absl::Time> due = committer_->NextDeadline()) next = std::min(next, *due);
  }
  return next;
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<PublisherHostingBroker>> PublisherHostingBroker::Open(
    PublisherHostingBrokerOptions options, Storage* storage, Channel* channel) {
  if (options.pubends.empty()) return absl::InvalidArgumentError("a PHB needs a pubend");
  if (options.group_commit.max_records == 0) {
    return absl::InvalidArgumentError("PHB option group_commit.max_records is 0");
  }
  if (options.group_commit.max_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("PHB option group_commit.max_delay is negative");
  }
  if (options.simulated_commit_thread && !options.commit_thread) {
    return absl::InvalidArgumentError("PHB option simulated_commit_thread needs commit_thread");
  }
  for (const std::string& node : options.downstream) {
    if (node.empty())
      return absl::InvalidArgumentError("PHB option downstream names an empty node");
  }
  if (storage == nullptr || channel == nullptr) {
    return absl::InvalidArgumentError("a PHB needs a storage and a channel");
  }
  if (!options.clock) options.clock = [] { return absl::Now(); };
  auto phb = std::make_unique<internal::PublisherHostingBrokerImpl>(std::move(options), channel);
  GRYPH_RETURN_IF_ERROR(phb->Start(storage));
  return phb;
}

}  // namespace gryph
