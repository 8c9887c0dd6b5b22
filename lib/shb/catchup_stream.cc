#include "gryph/broker/catchup_stream.h"

#include <algorithm>

namespace gryph {

CatchupStream::CatchupStream(std::string subscription_name, PubendId pubend, Tick checkpoint,
                             Tick refilter_through, Subscription subscription,
                             SessionStream* session, CatchupStreamOptions options)
    : name_(std::move(subscription_name)),
      pubend_(pubend),
      subscription_(std::move(subscription)),
      session_(session),
      options_(options),
      refilter_through_(refilter_through),
      position_(checkpoint),
      last_message_(checkpoint),
      matches_through_(std::max(checkpoint, refilter_through)) {}

std::optional<TickRange> CatchupStream::WantedMatches(Tick latest_delivered) const {
  if (matches_through_ >= latest_delivered) return std::nullopt;
  if (matches_.size() >= options_.max_buffered_matches / 2) return std::nullopt;
  return TickRange{matches_through_ + 1, latest_delivered};
}

void CatchupStream::AddMatches(const std::vector<Tick>& ticks, Tick through, Tick lost_through) {
  for (Tick t : ticks) {
    if (t > matches_through_ && t > lost_through) matches_.push_back(t);
  }
  matches_through_ = std::max(matches_through_, through);
  lost_through_ = std::max(lost_through_, lost_through);
}

void CatchupStream::Emit(DeliveryKind kind, Tick t, EventRef event,
                         std::vector<DeliveryMessage>* out) {
  EmitPendingGap(out);
  DeliveryMessage d{name_, pubend_, kind, t, std::move(event)};
  session_->Stamp(d);
  out->push_back(std::move(d));
  last_message_ = t;
}

void CatchupStream::Lost(Tick t) { pending_gap_ = std::max(pending_gap_, t); }

void CatchupStream::EmitPendingGap(std::vector<DeliveryMessage>* out) {
  if (pending_gap_ == 0) return;
  DeliveryMessage d{name_, pubend_, DeliveryKind::kGap, pending_gap_, nullptr};
  session_->Stamp(d);
  out->push_back(std::move(d));
  last_message_ = pending_gap_;
  pending_gap_ = 0;
}

void CatchupStream::Step(const KnowledgeStream& knowledge, Tick latest_delivered,
                         std::vector<DeliveryMessage>* out, std::vector<TickRange>* nacks) {
  size_t budget = options_.max_deliveries_per_step;
  if (position_ < refilter_through_) {
    StepRefilter(knowledge, out, nacks, &budget);
    if (position_ < refilter_through_ || budget == 0) return;
  }
  // What the PFS no longer knows (chopped below our checkpoint) is lost, exactly that interval.
  if (lost_through_ > position_) {
    const Tick through = std::min(lost_through_, latest_delivered);
    Lost(through);
    position_ = through;
    while (!matches_.empty() && matches_.front() <= position_) matches_.pop_front();
  }
  KnowledgeStream::Cursor cursor(knowledge);
  while (budget > 0 && !matches_.empty() && matches_.front() <= latest_delivered) {
    const Tick t = matches_.front();
    const KnowledgeSpan span = cursor.SpanAt(t);
    if (span.value == TickValue::kQ) {
      // Still waiting for what was nacked: nothing to do until knowledge arrives (this is the
      // common case while many catchups wait, so it must cost O(1)).
      if (t <= nacked_through_) return;
      // Nack the next matches that are unknown, up to the flow-control window.
      size_t window = 0;
      for (Tick m : matches_) {
        if (++window > options_.nack_window) break;
        if (m <= nacked_through_) continue;
        if (knowledge.ValueAt(m) != TickValue::kQ) continue;
        if (!nacks->empty() && nacks->back().last + 1 == m) {
          nacks->back().last = m;
        } else {
          nacks->push_back({m, m});
        }
        nacked_through_ = m;
      }
      return;
    }
    if (span.value == TickValue::kD && pending_gap_ != 0) {
      // The held Gap goes first, and counts against the budget too.
      EmitPendingGap(out);
      if (--budget == 0) break;
    }
    matches_.pop_front();
    switch (span.value) {
      case TickValue::kD:
        Emit(DeliveryKind::kEvent, t, span.event, out);
        --budget;
        break;
      case TickValue::kL: {
        // Released upstream before we got it. The run of lost matches that follows (known now,
        // or answered by later nacks) joins the same Gap: it goes out before the next message.
        Tick last = t;
        while (!matches_.empty() && matches_.front() <= latest_delivered &&
               knowledge.ValueAt(matches_.front()) == TickValue::kL) {
          last = matches_.front();
          matches_.pop_front();
        }
        Lost(last);
        position_ = last;
        continue;
      }
      case TickValue::kS:  // filtered upstream: no event for anyone downstream
      case TickValue::kQ: break;
    }
    position_ = t;
  }
  if (matches_.empty())
    position_ = std::max(position_, std::min(matches_through_, latest_delivered));
  if (position_ >= latest_delivered) {
    // Caught up: a lost span still held goes out now, and a Silence moves the CT to the end.
    EmitPendingGap(out);
    if (last_message_ < position_) Emit(DeliveryKind::kSilence, position_, nullptr, out);
  }
}

void CatchupStream::StepRefilter(const KnowledgeStream& knowledge,
                                 std::vector<DeliveryMessage>* out, std::vector<TickRange>* nacks,
                                 size_t* budget) {
  while (*budget > 0 && position_ < refilter_through_) {
    const KnowledgeSpan span = knowledge.SpanAt(position_ + 1);
    const Tick last = std::min(span.range.last, refilter_through_);
    switch (span.value) {
      case TickValue::kQ: {
        // The whole unknown span at once: however long, upstream answers it a bounded part at a
        // time (in bytes, not ticks: a quiet span costs one S), and says where it stopped.
        if (last > refilter_nacked_) {
          nacks->push_back({std::max(position_ + 1, refilter_nacked_ + 1), last});
          refilter_nacked_ = last;
        }
        return;
      }
      case TickValue::kS: break;
      case TickValue::kD:
        if (subscription_.Matches(*span.event)) {
          if (pending_gap_ != 0) {
            EmitPendingGap(out);
            if (--*budget == 0) return;  // the event is the next step's
          }
          Emit(DeliveryKind::kEvent, span.range.first, span.event, out);
          --*budget;
        }
        break;
      case TickValue::kL:
        // Released before this broker could refilter it: it may have held matches.
        Lost(last);
        break;
    }
    position_ = last;
  }
}

}  // namespace gryph
