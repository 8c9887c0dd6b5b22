#include "gryph/durable_subscriber.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/util/option_checks.h"
#include "lib/util/status_macros.h"

namespace gryph {

namespace {

// The errors after which a subscriber that wants a connection always connects again (the
// header's table).
bool CallsForReconnect(absl::StatusCode code) {
  return code == absl::StatusCode::kFailedPrecondition || code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kOutOfRange;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DurableSubscriber>> DurableSubscriber::Create(
    DurableSubscriberOptions options, Channel* channel, Handler* handler) {
  if (options.subscription.empty() || options.subscription.size() > kMaxSubscriptionNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("DurableSubscriberOptions::subscription must have 1 to ",
                     kMaxSubscriptionNameBytes, " bytes; it has ", options.subscription.size()));
  }
  if (options.broker.empty()) {
    return absl::InvalidArgumentError("DurableSubscriberOptions::broker is empty");
  }
  GRYPH_RETURN_IF_ERROR(internal::CheckPositive(
      "DurableSubscriber", {{options.ack_interval, "ack_interval"},
                            {options.keepalive_interval, "keepalive_interval"},
                            {options.connect_retry_interval, "connect_retry_interval"},
                            {options.reconnect_interval, "reconnect_interval"}}));
  if (channel == nullptr || handler == nullptr) {
    return absl::InvalidArgumentError("DurableSubscriber needs a channel and a handler");
  }
  absl::StatusOr<Subscription> sub = Subscription::Create(options.selector, options.topic_filter);
  if (!sub.ok()) return sub.status();
  return std::unique_ptr<DurableSubscriber>(
      new DurableSubscriber(std::move(options), *std::move(sub), channel, handler));
}

DurableSubscriber::DurableSubscriber(DurableSubscriberOptions options, Subscription subscription,
                                     Channel* channel, Handler* handler)
    : options_(std::move(options)),
      subscription_(std::move(subscription)),
      channel_(channel),
      handler_(handler),
      broker_(options_.broker),
      checkpoint_(options_.checkpoint),
      stored_(options_.checkpoint),
      acked_(options_.checkpoint),
      reconnect_delay_(options_.reconnect_interval) {}

absl::Status DurableSubscriber::Connect() {
  connected_ = false;
  connecting_ = true;
  want_connected_ = true;
  reconnect_pending_ = false;
  stopped_ = absl::OkStatus();
  connect_sent_ = absl::InfinitePast();
  return channel_->Send(
      broker_, ConnectMessage{options_.subscription, options_.selector, options_.topic_filter,
                              checkpoint_, options_.epoch, true});
}

absl::Status DurableSubscriber::ConnectTo(absl::string_view broker) {
  if (broker.empty()) return absl::InvalidArgumentError("ConnectTo needs a broker name");
  if (broker != broker_) {
    (void)Disconnect();
    broker_ = std::string(broker);
  }
  return Connect();
}

absl::Status DurableSubscriber::Disconnect() {
  want_connected_ = false;
  reconnect_pending_ = false;
  stopped_ = absl::OkStatus();
  if (!connected_ && !connecting_) return absl::OkStatus();
  if (connected_ && !(acked_ == ackable())) {
    (void)channel_->Send(broker_, AckMessage{options_.subscription, ackable()});
    acked_ = ackable();
  }
  connected_ = false;
  connecting_ = false;
  // Also while connecting: the broker, which gets it after the request, ends what it started.
  return channel_->Send(broker_, DisconnectMessage{options_.subscription});
}

absl::Status DurableSubscriber::Unsubscribe() {
  connected_ = false;
  connecting_ = false;
  want_connected_ = false;
  reconnect_pending_ = false;
  stopped_ = absl::OkStatus();
  return channel_->Send(broker_, UnsubscribeMessage{options_.subscription});
}

void DurableSubscriber::HandleMessage(absl::string_view from, const Message& message) {
  if (from != broker_) return;
  if (const auto* d = std::get_if<DeliveryMessage>(&message)) {
    if (d->subscription == options_.subscription && connected_) Deliver(*d);
  } else if (const auto* c = std::get_if<ConnectedMessage>(&message)) {
    if (c->subscription != options_.subscription || c->epoch != options_.epoch) return;
    // An answer nobody awaits: to a request withdrawn by Disconnect or Unsubscribe, or a second
    // answer after a retried request (the session it started resumes from the same CT).
    if (!connecting_) return;
    connected_ = true;
    connecting_ = false;
    reconnect_delay_ = options_.reconnect_interval;
    last_ack_ = absl::InfinitePast();
    // A new subscription starts where the broker is; an existing one where we asked. The start
    // names every pubend (0 included), and so does the CT from now on: any broker can then tell
    // where the subscriber stands.
    for (const auto& [p, t] : c->start.entries()) {
      if (!checkpoint_.Names(p)) checkpoint_.Set(p, t);
      // Where a new subscription starts is where a restart without a stored CT resumes too.
      if (!stored_.Names(p)) stored_.Set(p, t);
    }
    handler_->OnConnected(c->start);
  } else if (const auto* e = std::get_if<SessionErrorMessage>(&message)) {
    if (e->subscription != options_.subscription) return;
    connected_ = false;
    connecting_ = false;
    absl::Status error(e->code, e->message);
    if (options_.auto_reconnect && want_connected_ && CallsForReconnect(e->code)) {
      reconnect_pending_ = true;
      reconnect_at_ = absl::InfinitePast();
    } else if (want_connected_) {
      want_connected_ = false;
      stopped_ = error;
    }
    handler_->OnError(error);
  }
}

void DurableSubscriber::Deliver(const DeliveryMessage& d) {
  const Tick ct = checkpoint_.Get(d.pubend);
  if (d.tick <= ct) {
    ++duplicates_;
    return;
  }
  if (d.previous > ct) {
    // The session sent something in (ct, previous] that never arrived: resume from the CT.
    ++resyncs_;
    (void)Connect();
    return;
  }
  switch (d.kind) {
    case DeliveryKind::kEvent:
      if (d.event == nullptr || !subscription_.Matches(*d.event)) {
        handler_->OnError(absl::DataLossError(
            absl::StrCat("broker delivered an event at pubend ", d.pubend.value, " tick ", d.tick,
                         " that does not match subscription '", options_.subscription, "'")));
        return;
      }
      handler_->OnEvent(d.pubend, d.tick, d.event);
      break;
    case DeliveryKind::kSilence: handler_->OnSilence(d.pubend, d.tick); break;
    case DeliveryKind::kGap: handler_->OnGap(d.pubend, d.tick); break;
  }
  checkpoint_.Set(d.pubend, d.tick);
}

void DurableSubscriber::OnTimer(absl::Time now) {
  if (reconnect_pending_) {
    if (reconnect_at_ == absl::InfinitePast()) {
      reconnect_at_ = now + reconnect_delay_;
      reconnect_delay_ = std::min(2 * reconnect_delay_, std::max(options_.connect_retry_interval,
                                                                 options_.reconnect_interval));
    }
    if (now >= reconnect_at_) {
      ++reconnects_;
      (void)Connect();
    }
  }
  if (connecting_ && !connected_) {
    if (connect_sent_ == absl::InfinitePast()) {
      connect_sent_ = now;
    } else if (now - connect_sent_ >= options_.connect_retry_interval) {
      (void)Connect();
      connect_sent_ = now;
    }
  }
  if (!connected_) return;
  const bool moved = !(acked_ == ackable()) && now - last_ack_ >= options_.ack_interval;
  if (!moved && now - last_ack_ < options_.keepalive_interval) return;
  // A send that failed is tried again after ack_interval, not at once.
  if (channel_->Send(broker_, AckMessage{options_.subscription, ackable()}).ok())
    acked_ = ackable();
  last_ack_ = now;
}

absl::Time DurableSubscriber::NextDeadline(absl::Time now) const {
  absl::Time next = absl::InfiniteFuture();
  if (reconnect_pending_) next = std::min(next, reconnect_at_);  // InfinitePast: OnTimer sets it
  if (connecting_ && !connected_) {
    next = std::min(next, connect_sent_ == absl::InfinitePast()
                              ? now
                              : connect_sent_ + options_.connect_retry_interval);
  }
  if (connected_) {
    next = std::min(next, last_ack_ + options_.keepalive_interval);
    if (!(acked_ == ackable())) next = std::min(next, last_ack_ + options_.ack_interval);
  }
  return std::max(next, now);
}

absl::Status DurableSubscriber::Stored(const CheckpointToken& ct) {
  for (const auto& [p, t] : ct.entries()) {
    if (t > checkpoint_.Get(p)) {
      return absl::InvalidArgumentError(absl::StrCat("stored CT tick ", t, " for pubend ", p.value,
                                                     " is ahead of the subscriber's CT (",
                                                     checkpoint_.Get(p), ")"));
    }
  }
  stored_ = ct;
  return absl::OkStatus();
}

}  // namespace gryph
