#include "gryph/broker/session.h"

namespace gryph {

void SessionStream::Start(Tick start) {
  start_ = sent_through_ = acked_ = start;
  sent_since_ack_ = false;
}

void SessionStream::End() {
  sent_ = acked_events_ = 0;
  sent_marks_.clear();
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

void SessionStream::NoteEventsSent(Tick last, uint64_t n) {
  if (n == 0) return;
  sent_ += n;
  sent_marks_.emplace_back(last, sent_);
}

bool SessionStream::OnAck(Tick t) {
  while (!sent_marks_.empty() && sent_marks_.front().first <= t) {
    acked_events_ = sent_marks_.front().second;
    sent_marks_.pop_front();
  }
  const bool resend = ShouldResend(t);
  sent_since_ack_ = false;
  acked_ = std::max(acked_, t);
  return resend;
}

}  // namespace gryph
