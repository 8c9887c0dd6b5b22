#include "gryph/publisher_hosting_broker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/util/status_macros.h"

namespace gryph {

PublisherHostingBroker::PublisherHostingBroker(PublisherHostingBrokerOptions options,
                                               Channel* channel)
    : options_(std::move(options)), channel_(channel) {}

absl::StatusOr<std::unique_ptr<PublisherHostingBroker>> PublisherHostingBroker::Open(
    PublisherHostingBrokerOptions options, Storage* storage, Channel* channel) {
  if (options.pubends.empty()) return absl::InvalidArgumentError("a PHB needs a pubend");
  if (options.group_commit.max_records == 0) {
    return absl::InvalidArgumentError("PHB option group_commit.max_records is 0");
  }
  if (options.group_commit.max_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("PHB option group_commit.max_delay is negative");
  }
  for (const std::string& node : options.downstream) {
    if (node.empty()) return absl::InvalidArgumentError("PHB option downstream names an empty node");
  }
  if (storage == nullptr || channel == nullptr) {
    return absl::InvalidArgumentError("a PHB needs a storage and a channel");
  }
  if (!options.clock) options.clock = [] { return absl::Now(); };
  std::unique_ptr<PublisherHostingBroker> phb(
      new PublisherHostingBroker(std::move(options), channel));
  GroupCommitOptions gc = phb->options_.group_commit;
  // The pubends' rows never build on one another's commits: a full store fails only its group.
  gc.resume_after_full = true;
  gc.clock = phb->options_.clock;
  PublisherHostingBroker* self = phb.get();
  gc.after_group = [self] {
    for (auto& [id, pubend] : self->pubends_) pubend->FlushKnowledge();
  };
  phb->committer_ = std::make_unique<GroupCommitter>(storage, std::move(gc));
  for (const PubendOptions& po : phb->options_.pubends) {
    if (phb->pubends_.contains(po.id)) {
      return absl::InvalidArgumentError(absl::StrCat("pubend ", po.id.value, " appears twice"));
    }
    GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Pubend> p,
                           Pubend::Open(po, storage, phb->committer_.get(), channel));
    for (const std::string& node : phb->options_.downstream) {
      if (absl::Status s = p->AddDownstream(node); !s.ok() && !absl::IsAlreadyExists(s)) return s;
    }
    phb->ids_.push_back(po.id);
    phb->pubends_[po.id] = std::move(p);
  }
  if (phb->options_.commit_thread) phb->committer_->Start();
  channel->SetReceiver([self](absl::string_view from, Message m) {
    (void)self->HandleMessage(from, m);  // a bad message changes nothing; the sender retries
  });
  return phb;
}

PublisherHostingBroker::~PublisherHostingBroker() {
  channel_->SetReceiver(nullptr);
  if (options_.commit_thread) committer_->Stop();
}

absl::Time PublisherHostingBroker::Now() const { return options_.clock(); }

Pubend* PublisherHostingBroker::pubend(PubendId p) const {
  auto it = pubends_.find(p);
  return it == pubends_.end() ? nullptr : it->second.get();
}

void PublisherHostingBroker::Publish(PubendId p, absl::string_view publisher, uint64_t sequence,
                                     EventRef event, Pubend::PublishDone done) {
  Pubend* pubend = this->pubend(p);
  if (pubend == nullptr) {
    std::move(done)(absl::NotFoundError(absl::StrCat("no pubend ", p.value, " at this PHB")));
    return;
  }
  pubend->Publish(publisher, sequence, std::move(event), Now(), std::move(done));
}

PubendId PublisherHostingBroker::PublishByKey(absl::string_view key, absl::string_view publisher,
                                              uint64_t sequence, EventRef event,
                                              Pubend::PublishDone done) {
  const PubendId p = PubendForKey(key, ids_);
  Publish(p, publisher, sequence, std::move(event), std::move(done));
  return p;
}

absl::Status PublisherHostingBroker::HandleMessage(absl::string_view from, const Message& m) {
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
      absl::Status s = p == nullptr ? absl::NotFoundError(absl::StrCat(
                                          "release for unknown pubend ", e.pubend.value))
                                    : p->HandleRelease(from, e, Now());
      if (first.ok()) first = s;
    }
    return first;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("a PHB does not take ", MessageKindName(m), " messages"));
}

void PublisherHostingBroker::OnTimer(absl::Time now) {
  if (!options_.commit_thread) (void)committer_->FlushIfDue(now);  // failures reach the pubends
  for (auto& [id, p] : pubends_) p->OnTimer(now);
}

absl::Time PublisherHostingBroker::NextDeadline(absl::Time now) const {
  absl::Time next = now + absl::Milliseconds(10);
  for (const PubendOptions& po : options_.pubends) next = std::min(next, now + po.heartbeat);
  if (!options_.commit_thread) {
    if (std::optional<absl::Time> due = committer_->NextDeadline()) next = std::min(next, *due);
  }
  return next;
}

absl::Status PublisherHostingBroker::Flush() { return committer_->Flush(); }

}  // namespace gryph
