#include "gryph/broker/session.h"

#include <algorithm>

namespace gryph {

void SessionStream::Start(Tick start) {
  start_ = sent_through_ = acked_ = start;
  sent_since_ack_ = false;
}

void SessionStream::End() {
  sent_ = acked_events_ = 0;
  sent_marks_.clear();
  sent_marks_head_ = 0;
}

void SessionStream::Stamp(DeliveryMessage& d) {
  d.previous = sent_through_;
  sent_through_ = d.tick;
  last_kind_ = d.kind;
  last_previous_ = d.previous;
  sent_since_ack_ = true;
}

DeliveryMessage SessionStream::LastMessage(const std::string& subscription, PubendId pubend) const {
  return DeliveryMessage{subscription, pubend, last_kind_, sent_through_, nullptr, last_previous_};
}

void SessionStream::NoteEventsSent(Tick last, uint64_t n, absl::Time now) {
  if (n == 0) return;
  sent_ += n;
  sent_marks_.push_back({last, sent_, now});
}

bool SessionStream::OnAck(Tick t, absl::Time now, LatencyHistogram* deliver_to_ack) {
  while (sent_marks_head_ < sent_marks_.size() && sent_marks_[sent_marks_head_].last <= t) {
    const SentMark& mark = sent_marks_[sent_marks_head_++];
    acked_events_ = mark.sent;
    if (deliver_to_ack != nullptr && mark.at != absl::InfinitePast() &&
        now != absl::InfinitePast()) {
      deliver_to_ack->Record(now - mark.at);
    }
  }
  // Drops the acknowledged marks: at once when none is left, else when they are at least half
  // (so that moving the rest costs amortized O(1) per mark).
  if (sent_marks_head_ == sent_marks_.size()) {
    sent_marks_.clear();
    sent_marks_head_ = 0;
  } else if (sent_marks_head_ >= 64 && 2 * sent_marks_head_ >= sent_marks_.size()) {
    sent_marks_.erase(sent_marks_.begin(), sent_marks_.begin() + sent_marks_head_);
    sent_marks_head_ = 0;
  }
  const bool resend = ShouldResend(t);
  sent_since_ack_ = false;
  acked_ = std::max(acked_, t);
  return resend;
}

}  // namespace gryph
