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

void ConStream::Join(const std::string& subscription, absl::Time now, Tick start) {
  members_[subscription] = Member{now, std::max(start, latest_delivered_)};
}

void ConStream::Leave(const std::string& subscription) { members_.erase(subscription); }

void ConStream::NoteDelivered(const std::string& subscription, Tick tick, absl::Time now) {
  auto it = members_.find(subscription);
  if (it == members_.end()) return;
  it->second.last_message = now;
  it->second.last_tick = tick;
}

std::vector<DeliveryMessage> ConStream::Silences(absl::Time now, absl::Duration interval) {
  std::vector<std::pair<const std::string*, Member*>> due;
  for (auto& [name, m] : members_) {
    if (m.last_tick >= latest_delivered_ || now - m.last_message < interval) continue;
    due.emplace_back(&name, &m);
  }
  std::sort(due.begin(), due.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  std::vector<DeliveryMessage> out;
  out.reserve(due.size());
  for (auto& [name, m] : due) {
    out.push_back(
        DeliveryMessage{*name, pubend_, DeliveryKind::kSilence, latest_delivered_, nullptr});
    m->last_message = now;
    m->last_tick = latest_delivered_;
  }
  return out;
}

}  // namespace gryph
