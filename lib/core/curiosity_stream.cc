#include "gryph/broker/curiosity_stream.h"

namespace gryph {

std::vector<TickRange> CuriosityStream::Add(absl::string_view requester, TickRange range) {
  requesters_[requester].Add(range);
  return outstanding_.Add(range);
}

std::vector<CuriosityStream::Interest> CuriosityStream::Resolve(TickRange range) {
  std::vector<Interest> resolved;
  if (outstanding_.Remove(range).empty()) return resolved;
  for (auto it = requesters_.begin(); it != requesters_.end();) {
    for (TickRange r : it->second.Remove(range)) resolved.push_back({it->first, r});
    if (it->second.empty()) {
      it = requesters_.erase(it);
    } else {
      ++it;
    }
  }
  return resolved;
}

std::vector<CuriosityStream::Interest> CuriosityStream::Prune(const KnowledgeStream& knowledge) {
  std::vector<TickRange> known;
  for (TickRange want : outstanding_.ToVector()) {
    knowledge.ForEachSpan(want, [&](const KnowledgeSpan& s) {
      if (s.value != TickValue::kQ) known.push_back(s.range);
      return true;
    });
  }
  std::vector<Interest> resolved;
  for (TickRange r : known) {
    for (Interest& i : Resolve(r)) resolved.push_back(std::move(i));
  }
  return resolved;
}

std::vector<TickRange> CuriosityStream::RemoveRequester(absl::string_view requester) {
  auto it = requesters_.find(requester);
  if (it == requesters_.end()) return {};
  TickRangeSet mine = std::move(it->second);
  requesters_.erase(it);
  // Whatever another requester still wants stays outstanding.
  for (const auto& [name, set] : requesters_) {
    for (TickRange r : set.ToVector()) mine.Remove(r);
  }
  std::vector<TickRange> dropped = mine.ToVector();
  for (TickRange r : dropped) outstanding_.Remove(r);
  return dropped;
}

std::vector<TickRange> CuriosityStream::Outstanding(size_t max_ranges) const {
  std::vector<TickRange> out;
  outstanding_.ForEach([&](TickRange r) {
    out.push_back(r);
    return out.size() < max_ranges;
  });
  return out;
}

std::vector<TickRange> CuriosityStream::FollowUp(const std::vector<TickRange>& unanswered,
                                                 size_t max_ranges) {
  // Forget follow-ups whose ticks are all resolved.
  for (auto it = followed_up_.begin(); it != followed_up_.end();) {
    if (outstanding_.Intersect({it->second, it->first}).empty()) {
      it = followed_up_.erase(it);
    } else {
      ++it;
    }
  }
  TickRangeSet out;  // disjoint however the answers overlap
  for (TickRange u : unanswered) {
    if (u.first < kFirstTick || u.first > u.last) continue;
    for (TickRange part : outstanding_.Intersect(u)) {
      auto [it, fresh] = followed_up_.try_emplace(part.last, part.first);
      if (!fresh) {
        const Tick asked = it->second;
        // Asked again from exactly here already: a duplicate, or an answer that made no
        // progress (the renack timer retries it).
        if (part.first == asked) continue;
        // Still outstanding below what was asked last (the message that answered it was
        // lost): ask for that part too. Above it: the answer made progress.
        if (part.first < asked) part.last = asked - 1;
        it->second = part.first;
      }
      out.Add(part);
    }
  }
  std::vector<TickRange> ranges = out.ToVector();
  if (ranges.size() > max_ranges) ranges.resize(max_ranges);
  return ranges;
}

}  // namespace gryph
