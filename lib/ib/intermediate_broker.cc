#include "gryph/intermediate_broker.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/strings/str_cat.h"
#include "gryph/broker/curiosity_stream.h"
#include "lib/util/option_checks.h"
#include "lib/util/status_macros.h"

namespace gryph {

namespace internal {
namespace {

class IntermediateBrokerImpl final : public IntermediateBroker {
 public:
  IntermediateBrokerImpl(IntermediateBrokerOptions options, Channel* channel)
      : options_(std::move(options)), channel_(channel) {}
  ~IntermediateBrokerImpl() override { channel_->SetReceiver(nullptr); }

  // Sets up the pubends and downstream nodes (IntermediateBrokerImpl::Open), then receives.
  absl::Status Start();

  void HandleMessage(absl::string_view from, const Message& message) override;
  void OnTimer(absl::Time now) override;
  absl::Time NextDeadline(absl::Time now) const override;
  const Stats& stats() const override { return stats_; }
  const KnowledgeStream& cache(PubendId p) const override { return pubends_.at(p).cache; }
  std::vector<TickRange> outstanding(PubendId p) const override {
    return pubends_.at(p).curiosity.Outstanding();
  }

 private:
  struct DownstreamState {
    std::vector<Subscription> filter;
    absl::btree_map<PubendId, ReleaseEntry> release;  // latest reported, per pubend
  };
  struct PubendState {
    PubendId id;
    std::string upstream;
    KnowledgeStream cache;
    absl::btree_set<Tick> cached_data;  // the D ticks in the cache, for the event bound
    CuriosityStream curiosity;
    Tick highest_seen = 0;
    Tick forwarded = 0;  // the live stream has been forwarded through this tick
    absl::Time last_renack = absl::InfinitePast();
  };

  void OnKnowledge(absl::string_view from, const KnowledgeMessage& m);
  void OnCuriosity(absl::string_view from, const CuriosityMessage& m);
  void OnRelease(absl::string_view from, const ReleaseMessage& m);

  // Sends what the cache knows of `windows` (in tick order; Q skipped) to `to`, through its
  // filter, in bounded messages. Returns the number of known ticks sent.
  uint64_t SendKnown(PubendState& p, const std::string& to, const std::vector<TickRange>& windows);
  // Sends the answers for resolved interests to their requesters.
  void SendResolved(PubendState& p, const std::vector<CuriosityStream::Interest>& interests);
  // Applies the cache bounds.
  void Trim(PubendState& p);
  void Send(absl::string_view to, Message m);

  const IntermediateBrokerOptions options_;
  Channel* const channel_;
  Stats stats_;
  std::map<PubendId, PubendState> pubends_;
  absl::btree_map<std::string, DownstreamState> downstream_;
  absl::Time last_release_ = absl::InfinitePast();
};

}  // namespace

absl::Status IntermediateBrokerImpl::Start() {
  for (const auto& up : options_.pubends) {
    if (pubends_.contains(up.pubend)) {
      return absl::InvalidArgumentError(absl::StrCat("pubend ", up.pubend.value, " appears twice"));
    }
    PubendState& p = pubends_[up.pubend];
    p.id = up.pubend;
    p.upstream = up.node;
  }
  for (const auto& down : options_.downstream) {
    if (!downstream_.try_emplace(down.node, DownstreamState{down.filter, {}}).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("downstream node '", down.node, "' appears twice"));
    }
  }
  channel_->SetReceiver([this](absl::string_view from, Message m) { HandleMessage(from, m); });
  return absl::OkStatus();
}

void IntermediateBrokerImpl::Send(absl::string_view to, Message m) {
  (void)channel_->Send(to, std::move(m));  // a lost message is repaired by the protocol
}

void IntermediateBrokerImpl::HandleMessage(absl::string_view from, const Message& message) {
  if (const auto* k = std::get_if<KnowledgeMessage>(&message)) {
    OnKnowledge(from, *k);
  } else if (const auto* c = std::get_if<CuriosityMessage>(&message)) {
    OnCuriosity(from, *c);
  } else if (const auto* r = std::get_if<ReleaseMessage>(&message)) {
    OnRelease(from, *r);
  }
}

uint64_t IntermediateBrokerImpl::SendKnown(PubendState& p, const std::string& to,
                                           const std::vector<TickRange>& windows) {
  auto d = downstream_.find(to);
  const std::vector<Subscription>* filter =
      d == downstream_.end() || d->second.filter.empty() ? nullptr : &d->second.filter;
  uint64_t ticks = 0;
  KnowledgeMessage m{p.id, {}};
  auto flush = [&] {
    if (m.spans.empty()) return;
    ++stats_.knowledge_sent;
    Send(to, std::move(m));
    m = KnowledgeMessage{p.id, {}};
  };
  auto push = [&](KnowledgeSpan s) {
    ticks += s.range.size();
    if (!m.spans.empty()) {
      KnowledgeSpan& last = m.spans.back();
      // Coalesce adjacent S (or L) runs: a filtered D between two S becomes one span.
      if (last.value == s.value && s.value != TickValue::kD &&
          last.range.last + 1 == s.range.first) {
        last.range.last = s.range.last;
        return;
      }
    }
    if (m.spans.size() >= options_.max_spans_per_message) flush();
    m.spans.push_back(std::move(s));
  };
  for (TickRange w : windows) {
    p.cache.ForEachSpan(w, [&](const KnowledgeSpan& s) {
      if (s.value == TickValue::kQ) return true;
      if (s.value == TickValue::kD && filter != nullptr &&
          std::none_of(filter->begin(), filter->end(),
                       [&](const Subscription& sub) { return sub.Matches(*s.event); })) {
        ++stats_.events_filtered;
        push(KnowledgeSpan::Silence(s.range));
      } else {
        push(s);
      }
      return true;
    });
  }
  flush();
  return ticks;
}

void IntermediateBrokerImpl::SendResolved(PubendState& p,
                                          const std::vector<CuriosityStream::Interest>& interests) {
  // Interests come grouped by requester, ranges in tick order: one batch of messages each.
  size_t i = 0;
  while (i < interests.size()) {
    const std::string& requester = interests[i].requester;
    std::vector<TickRange> ranges;
    for (; i < interests.size() && interests[i].requester == requester; ++i) {
      ranges.push_back(interests[i].range);
    }
    SendKnown(p, requester, ranges);
  }
}

void IntermediateBrokerImpl::Trim(PubendState& p) {
  Tick through = p.highest_seen > options_.cache_ticks ? p.highest_seen - options_.cache_ticks : 0;
  if (p.cached_data.size() > options_.cache_events) {
    auto it = p.cached_data.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(p.cached_data.size() - options_.cache_events - 1));
    through = std::max(through, *it);
  }
  if (through < kFirstTick) return;
  p.cache.Forget(through);
  p.cached_data.erase(p.cached_data.begin(), p.cached_data.upper_bound(through));
}

void IntermediateBrokerImpl::OnKnowledge(absl::string_view from, const KnowledgeMessage& m) {
  auto it = pubends_.find(m.pubend);
  if (it == pubends_.end() || it->second.upstream != from) {
    ++stats_.unknown_senders;
    return;
  }
  PubendState& p = it->second;
  ++stats_.knowledge_received;
  Tick first = kMaxTick;
  Tick last = 0;
  for (const KnowledgeSpan& s : m.spans) {
    absl::Status st = p.cache.Accumulate(s);
    if (absl::IsFailedPrecondition(st)) {
      ++stats_.stale_knowledge;
      continue;
    }
    if (!st.ok()) {
      ++stats_.conflicting_knowledge;
      continue;
    }
    if (s.value == TickValue::kD) {
      p.cached_data.insert(s.range.first);
    } else if (s.value == TickValue::kL) {
      p.cached_data.erase(p.cached_data.lower_bound(s.range.first),
                          p.cached_data.upper_bound(s.range.last));
    }
    first = std::min(first, s.range.first);
    last = std::max(last, s.range.last);
  }
  if (first <= last) {
    p.highest_seen = std::max(p.highest_seen, last);
    // Answers go to the nodes that asked for them (one upstream nack served them all).
    SendResolved(p, p.curiosity.Prune(p.cache));
  }
  // An answer that stopped short: ask upstream for the rest now, not at the next renack (the
  // requesters' curiosity is still here, and the rest goes to them when it comes).
  if (!m.unanswered.empty()) {
    std::vector<TickRange> rest = p.curiosity.FollowUp(m.unanswered, 64);
    if (!rest.empty()) {
      // (The renack timer is not postponed: it retries what follow-ups do not cover.)
      ++stats_.nacks_sent;
      Send(p.upstream, CuriosityMessage{p.id, std::move(rest)});
    }
  }
  if (first > last) return;
  // The live stream goes to every downstream node. Below what was already forwarded, knowledge
  // is a repair: only requesters get it (above), the others nack what they miss.
  if (last > p.forwarded) {
    const TickRange live{std::max(first, p.forwarded + 1), last};
    for (const auto& [name, d] : downstream_) SendKnown(p, name, {live});
    p.forwarded = last;
  }
  Trim(p);
}

void IntermediateBrokerImpl::OnCuriosity(absl::string_view from, const CuriosityMessage& m) {
  auto it = pubends_.find(m.pubend);
  if (it == pubends_.end() || !downstream_.contains(from)) {
    ++stats_.unknown_senders;
    return;
  }
  PubendState& p = it->second;
  ++stats_.nacks_received;
  std::vector<TickRange> known;
  std::vector<TickRange> unknown;
  for (TickRange r : m.ranges) {
    if (r.first < kFirstTick || r.first > r.last) continue;
    p.cache.ForEachSpan(r, [&](const KnowledgeSpan& s) {
      (s.value == TickValue::kQ ? unknown : known).push_back(s.range);
      return true;
    });
  }
  const std::string requester(from);
  stats_.ticks_answered_from_cache += SendKnown(p, requester, known);
  CuriosityMessage up{p.id, {}};
  for (TickRange q : unknown) {
    std::vector<TickRange> fresh = p.curiosity.Add(requester, q);
    if (fresh.empty()) ++stats_.nack_ranges_consolidated;
    for (TickRange f : fresh) up.ranges.push_back(f);
  }
  if (up.ranges.empty()) return;
  std::sort(up.ranges.begin(), up.ranges.end(),
            [](TickRange a, TickRange b) { return a.first < b.first; });
  ++stats_.nacks_sent;
  Send(p.upstream, std::move(up));
}

void IntermediateBrokerImpl::OnRelease(absl::string_view from, const ReleaseMessage& m) {
  auto d = downstream_.find(from);
  if (d == downstream_.end()) {
    stats_.unknown_releases += std::max<size_t>(1, m.entries.size());
    return;
  }
  for (const ReleaseEntry& e : m.entries) {
    if (!pubends_.contains(e.pubend)) {
      ++stats_.unknown_releases;
      continue;
    }
    if (e.released > e.latest_delivered) {
      ++stats_.invalid_releases;
      continue;
    }
    auto [it, inserted] = d->second.release.try_emplace(e.pubend, e);
    if (!inserted) {  // values only move forward: a late, older message changes nothing
      it->second.released = std::max(it->second.released, e.released);
      it->second.latest_delivered = std::max(it->second.latest_delivered, e.latest_delivered);
    }
  }
}

absl::Time IntermediateBrokerImpl::NextDeadline(absl::Time now) const {
  absl::Time next = last_release_ + options_.release_interval;
  for (const auto& [id, p] : pubends_) {
    if (!p.curiosity.empty()) next = std::min(next, p.last_renack + options_.renack_interval);
  }
  return std::max(next, now);
}

void IntermediateBrokerImpl::OnTimer(absl::Time now) {
  for (auto& [id, p] : pubends_) {
    // Retries: nacks (or their answers) may be lost.
    if (!p.curiosity.empty() && now - p.last_renack >= options_.renack_interval) {
      p.last_renack = now;
      SendResolved(p, p.curiosity.Prune(p.cache));
      std::vector<TickRange> again = p.curiosity.Outstanding(64);
      if (!again.empty()) {
        ++stats_.nacks_sent;
        Send(p.upstream, CuriosityMessage{p.id, std::move(again)});
      }
    }
  }
  if (now - last_release_ < options_.release_interval) return;
  last_release_ = now;
  for (auto& [id, p] : pubends_) {
    ReleaseEntry agg{id, kMaxTick, kMaxTick};
    bool all = true;
    for (const auto& [name, d] : downstream_) {
      auto r = d.release.find(id);
      if (r == d.release.end()) {
        all = false;  // a node that has not reported may still need everything
        break;
      }
      agg.released = std::min(agg.released, r->second.released);
      agg.latest_delivered = std::min(agg.latest_delivered, r->second.latest_delivered);
    }
    if (!all) continue;
    ++stats_.releases_sent;
    Send(p.upstream, ReleaseMessage{{agg}});
  }
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<IntermediateBroker>> IntermediateBroker::Open(
    IntermediateBrokerOptions options, Channel* channel) {
  if (options.pubends.empty()) {
    return absl::InvalidArgumentError("an intermediate broker needs a pubend");
  }
  if (options.downstream.empty()) {
    return absl::InvalidArgumentError("an intermediate broker needs a downstream node");
  }
  if (options.max_spans_per_message == 0) {
    return absl::InvalidArgumentError("intermediate broker option max_spans_per_message is 0");
  }
  GRYPH_RETURN_IF_ERROR(internal::CheckPositive("intermediate broker",
                                                {{options.renack_interval, "renack_interval"},
                                                 {options.release_interval, "release_interval"}}));
  for (const auto& up : options.pubends) {
    if (up.node.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("intermediate broker: pubend ", up.pubend.value, " has no upstream node"));
    }
  }
  for (const auto& down : options.downstream) {
    if (down.node.empty()) {
      return absl::InvalidArgumentError("intermediate broker: a downstream node has no name");
    }
  }
  if (channel == nullptr)
    return absl::InvalidArgumentError("an intermediate broker needs a channel");
  auto ib = std::make_unique<internal::IntermediateBrokerImpl>(std::move(options), channel);
  GRYPH_RETURN_IF_ERROR(ib->Start());
  return ib;
}

}  // namespace gryph
