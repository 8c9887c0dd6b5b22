#include "gryph/broker/con_stream.h"

#include <algorithm>

namespace gryph {

ConStream::Batch ConStream::Next(const KnowledgeStream& knowledge, size_t max_data,
                                 Tick limit) const {
  Batch batch;
  const Tick horizon =
      std::max(latest_delivered_, std::min(limit, knowledge.DoubtHorizon(latest_delivered_)));
  batch.through = horizon;
  if (horizon == latest_delivered_) return batch;
  // The L prefix is what upstream released: a stream that starts below it (a pubend added to
  // the broker, a fresh broker) had no subscriber there. Only an L span above it is a loss.
  const Tick released = knowledge.LPrefix();
  knowledge.ForEachSpan({latest_delivered_ + 1, horizon}, [&](const KnowledgeSpan& s) {
    if (s.value == TickValue::kL && s.range.first <= released) return true;
    if (s.value != TickValue::kD && s.value != TickValue::kL) return true;
    if (batch.data.size() == max_data) {
      batch.through = s.range.first - 1;  // stop before the first D that does not fit
      return false;
    }
    batch.data.push_back(s);
    return true;
  });
  return batch;
}

absl::Status ConStream::Deliver(const Batch& batch, const Matcher& matcher, PFS& pfs,
                                WriteBatch* wb, absl::Time now, uint64_t max_unacked,
                                Round* round) {
  touched_.clear();
  for (const KnowledgeSpan& d : batch.data) {
    if (d.value == TickValue::kL) {
      // An event upstream could not serve: everyone may have matched it.
      const Tick t = d.range.last;
      std::vector<SubscriberId> everyone = pfs.subscribers();
      std::sort(everyone.begin(), everyone.end());
      for (SubscriberId id : everyone) {
        auto m = members_.find(id.value);
        if (m == members_.end() || m->second.session->AlreadySent(t)) continue;
        Emit(m->second, DeliveryKind::kGap, t, nullptr, round);
        ++round->gaps;
      }
      if (everyone.empty()) continue;
      if (absl::Status st = pfs.Write(t, everyone, wb); !st.ok()) return st;
      ++round->pfs_records;
      continue;
    }
    const Tick t = d.range.first;
    matched_.clear();
    matcher.Match(*d.event, &matched_);
    // The matcher's order follows its layout; a fixed order keeps runs reproducible.
    std::sort(matched_.begin(), matched_.end());
    for (SubscriberId id : matched_) {
      auto m = members_.find(id.value);
      // A member that resumed after a CT ahead of this stream (after a crash) has it already.
      if (m == members_.end() || m->second.session->AlreadySent(t)) continue;
      Emit(m->second, DeliveryKind::kEvent, t, d.event, round);
    }
    if (matched_.empty()) continue;
    if (absl::Status st = pfs.Write(t, matched_, wb); !st.ok()) return st;
    ++round->pfs_records;
  }
  latest_delivered_ = batch.through;
  // Silence and flow-control bookkeeping, once per member per round.
  for (Member* m : touched_) {
    m->last_message = now;
    m->last_tick = m->round_last;
    m->session->NoteEventsSent(m->round_last, m->round_messages, now);
    if (m->session->OverFlowBound(max_unacked)) round->over_bound.push_back(m->subscription);
    m->round_messages = 0;
    m->round_last = 0;
  }
  return absl::OkStatus();
}

void ConStream::Emit(Member& m, DeliveryKind kind, Tick t, EventRef event, Round* round) {
  round->messages.push_back(Channel::Outgoing{
      m.peer, DeliveryMessage{m.subscription, pubend_, kind, t, std::move(event)}});
  round->subscriptions.push_back(m.subscription);
  m.session->Stamp(std::get<DeliveryMessage>(round->messages.back().message));
  if (m.round_messages++ == 0) touched_.push_back(&m);
  m.round_last = t;
}

void ConStream::Join(SubscriberId id, const std::string& subscription, const std::string& peer,
                     SessionStream* session, absl::Time now, Tick start) {
  Leave(subscription);
  members_[id.value] =
      Member{subscription, peer, session, now, std::max(start, latest_delivered_), 0, 0};
  ids_[subscription] = id.value;
}

void ConStream::Leave(const std::string& subscription) {
  auto it = ids_.find(subscription);
  if (it == ids_.end()) return;
  members_.erase(it->second);
  ids_.erase(it);
}

std::vector<Channel::Outgoing> ConStream::Silences(absl::Time now, absl::Duration interval) {
  std::vector<Member*> due;
  for (auto& [id, m] : members_) {
    if (m.last_tick >= latest_delivered_ || now - m.last_message < interval) continue;
    due.push_back(&m);
  }
  std::sort(due.begin(), due.end(),
            [](const Member* a, const Member* b) { return a->subscription < b->subscription; });
  std::vector<Channel::Outgoing> out;
  out.reserve(due.size());
  for (Member* m : due) {
    m->last_message = now;
    m->last_tick = latest_delivered_;
    // A member that resumed after a CT ahead of this stream has nothing to learn below it.
    if (m->session->AlreadySent(latest_delivered_)) continue;
    out.push_back(
        Channel::Outgoing{m->peer, DeliveryMessage{m->subscription, pubend_, DeliveryKind::kSilence,
                                                   latest_delivered_, nullptr}});
    m->session->Stamp(std::get<DeliveryMessage>(out.back().message));
  }
  return out;
}

}  // namespace gryph
