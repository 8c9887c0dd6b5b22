// DurableSubscriber: the client side of a durable subscription (paper §2).
//
// It holds the subscriber's checkpoint token (CT), connects to a subscriber hosting broker with
// it, and hands the application the Event / Silence / Gap messages that follow it, per pubend in
// tick order:
//   - a message at or below CT(p) is a duplicate (a resend after a reconnection) and is dropped;
//   - a message whose `previous` is above CT(p) follows one that never arrived (lost in
//     transit): it is dropped and the subscriber connects again from its CT (a resync), so a
//     link that loses or duplicates messages costs a reconnection, never an event;
//   - an Event must carry an event that matches the subscription (checked: a broker bug or a
//     mismatched selector is reported, not delivered);
//   - after the handler returns, CT(p) becomes the message's tick.
// The application stores checkpoint() in its own transaction together with the effects of the
// messages it handled (the exactly-once pattern), and gives it back to the constructor after a
// restart. It stores it once connected too (OnConnected): a new subscription's start CT names
// every pubend, 0 included, which lets any broker serve it (ConnectTo); a CT that names no pubend
// starts a new subscription at a broker that does not host it. Acks (the CT) go to the broker every
// ack_interval, so that it can release: once acked, what the CT covers may be discarded upstream.
// An application that stores its CT after the handler returns (in batches, say) sets
// ack_stored_only and reports each stored CT with Stored(): acks then never run ahead of what a
// crash would bring back.
//
// Errors (Handler::OnError) and what the subscriber does about them itself, with auto_reconnect,
// while the application wants a connection (after Connect or ConnectTo, until Disconnect or
// Unsubscribe):
//   FailedPrecondition  the broker holds no live session (it restarted, or ended it): connects
//                       again from the CT after reconnect_interval.
//   Unavailable         the broker is stopped, or ended the session over a lost delivery it no
//                       longer caches: connects again after reconnect_interval.
//   OutOfRange          the CT is ahead of the broker (one that restarted, or one the subscriber
//                       moved to, that is behind): connects again after reconnect_interval, by
//                       which time the broker has usually caught up.
//   Aborted             fenced: a process with a higher epoch holds the subscription. Never
//                       reconnects (two processes reconnecting on it would fence each other in
//                       turn); this process should stop.
//   InvalidArgument, NotFound, DataLoss: the application's to handle (a bad selector or CT, a
//                       CT naming a pubend the broker does not serve, a subscription that another
//                       selector holds, an event that does not match); no reconnection.
//
// Thread-safety: owned by one thread (the one that drives its channel and timers).

#ifndef GRYPH_DURABLE_SUBSCRIBER_H_
#define GRYPH_DURABLE_SUBSCRIBER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gryph/channel.h"
#include "gryph/checkpoint_token.h"
#include "gryph/message.h"
#include "gryph/subscription.h"

namespace gryph {

struct DurableSubscriberOptions {
  std::string subscription;  // the durable subscription's name at the broker
  std::string selector;      // JMS selector; empty matches every event
  std::string topic_filter;  // empty: every topic
  std::string broker;        // the broker's channel name (ConnectTo changes it)
  // Where to resume: the CT the application stored (empty for a new subscription, which starts
  // where the broker is now).
  CheckpointToken checkpoint;
  // Increase it on every connection of a new process, so that it fences an older session.
  uint64_t epoch = 1;
  absl::Duration ack_interval = absl::Milliseconds(250);
  // With nothing to ack for this long, the current CT is sent anyway: a keepalive, to which a
  // broker that lost the session (it restarted) answers with an error, prompting a reconnect.
  absl::Duration keepalive_interval = absl::Seconds(1);
  // A connection request unanswered for this long is sent again (by OnTimer). A retry starts a
  // new session from the CT of the moment, so if the first answer was only late, the broker
  // sends again what that session delivered (dropped here as duplicates): keep it well above
  // the time a busy broker takes to answer.
  absl::Duration connect_retry_interval = absl::Seconds(10);
  // Connect again by itself after the errors that always call for it (see the file comment),
  // reconnect_interval after the error, then twice as long after each error that follows, up to
  // connect_retry_interval, until a connection succeeds (a broker that stays stopped or behind
  // is not flooded).
  bool auto_reconnect = true;
  absl::Duration reconnect_interval = absl::Milliseconds(200);
  // Acks carry only what Stored() reported (at first `checkpoint`), never the CT of messages
  // handled since; leave it false when the handler's own transaction stores the CT.
  bool ack_stored_only = false;
};

class DurableSubscriber {
 public:
  // Receives the messages, in order per pubend. Runs on the subscriber's thread.
  class Handler {
   public:
    virtual ~Handler() = default;
    virtual void OnEvent(PubendId p, Tick t, const EventRef& event) = 0;
    virtual void OnSilence(PubendId p, Tick t) { (void)p, (void)t; }
    virtual void OnGap(PubendId p, Tick t) = 0;
    // The broker accepted the connection; delivery resumes after `start`.
    virtual void OnConnected(const CheckpointToken& start) { (void)start; }
    // The broker refused or ended the session, or sent something inconsistent.
    virtual void OnError(const absl::Status& status) = 0;
  };

  // Validates the options (InvalidArgument naming the option): a subscription name of 1 to
  // kMaxSubscriptionNameBytes bytes, a broker, positive intervals, a selector and topic filter
  // that parse, a channel and a handler. `channel` and `handler` must outlive the subscriber; it
  // does not set itself as the channel's receiver: pass messages to HandleMessage.
  static absl::StatusOr<std::unique_ptr<DurableSubscriber>> Create(DurableSubscriberOptions options,
                                                                   Channel* channel,
                                                                   Handler* handler);

  // Sends the connection request with the current CT; OnTimer repeats it every
  // connect_retry_interval until the broker answers.
  absl::Status Connect();
  // Connects to `broker` instead, from the current CT (reconnect anywhere): a broker that never
  // hosted the subscription serves it by refiltering what it missed. A session with the
  // previous broker is left to end there (it is disconnected first when connected); messages
  // from it are ignored from now on. InvalidArgument for an empty name.
  absl::Status ConnectTo(absl::string_view broker);
  // Sends a final ack, then ends the session (the subscription stays, catching up later). A
  // connection request still unanswered is withdrawn: the broker ends the session it starts, and
  // its answer is ignored.
  absl::Status Disconnect();
  // Deletes the durable subscription at the broker (an unanswered connection request too).
  absl::Status Unsubscribe();

  // Handles a message from the broker. Messages from other peers are ignored.
  void HandleMessage(absl::string_view from, const Message& message);
  // Sends an ack when the CT to ack moved and ack_interval passed since the last one, or a
  // keepalive; repeats an unanswered connection request; reconnects after an error that calls
  // for it (auto_reconnect). Call it at least every keepalive_interval, also while handlers are
  // busy with a backlog: a broker ends a session it has not heard from for its session_timeout.
  void OnTimer(absl::Time now);
  // When OnTimer should next run at the latest: the next ack, keepalive, connection retry or
  // reconnection due (at `now` when one waits for OnTimer to set its time).
  absl::Time NextDeadline(absl::Time now) const;
  // The application stored `ct` (a checkpoint() it had); with ack_stored_only, acks carry it.
  // InvalidArgument, changing nothing, for a CT ahead of checkpoint() at some pubend.
  absl::Status Stored(const CheckpointToken& ct);

  // The CT after every message handled so far.
  const CheckpointToken& checkpoint() const { return checkpoint_; }
  bool connected() const { return connected_; }
  // A connection request awaits its answer (Connected accepts only such an answer).
  bool connecting() const { return connecting_; }
  uint64_t duplicates_dropped() const { return duplicates_; }
  // Reconnections after a message of the session was found missing.
  uint64_t resyncs() const { return resyncs_; }
  const DurableSubscriberOptions& options() const { return options_; }
  // The broker it connects to: options().broker, or the last ConnectTo.
  const std::string& broker() const { return broker_; }
  // Reconnections auto_reconnect made.
  uint64_t reconnects() const { return reconnects_; }
  // Why the subscriber gave up its connection: the broker's error after which it does not
  // connect again by itself although the application wanted a connection (Aborted,
  // InvalidArgument, NotFound, DataLoss; any error without auto_reconnect). Nothing more arrives
  // until the application calls Connect or ConnectTo, which clear it. OK otherwise: connected,
  // connecting, waiting to reconnect, or stopped by the application (Disconnect, Unsubscribe).
  // For a supervisor that polls its subscribers rather than watching OnError.
  const absl::Status& stopped() const { return stopped_; }

 private:
  DurableSubscriber(DurableSubscriberOptions options, Subscription subscription, Channel* channel,
                    Handler* handler);
  void Deliver(const DeliveryMessage& d);

  const DurableSubscriberOptions options_;
  const Subscription subscription_;
  Channel* const channel_;
  Handler* const handler_;
  // What acks carry: checkpoint_, or with ack_stored_only what Stored() reported.
  const CheckpointToken& ackable() const {
    return options_.ack_stored_only ? stored_ : checkpoint_;
  }

  std::string broker_;
  CheckpointToken checkpoint_;
  CheckpointToken stored_;  // the last CT Stored() reported
  CheckpointToken acked_;
  absl::Time last_ack_ = absl::InfinitePast();
  bool connected_ = false;
  // A connection request is outstanding; it was last sent at connect_sent_ (InfinitePast until
  // the first OnTimer after Connect()).
  bool connecting_ = false;
  absl::Time connect_sent_ = absl::InfinitePast();
  // The application wants a connection (Connect or ConnectTo, until Disconnect or Unsubscribe).
  bool want_connected_ = false;
  // An error called for a reconnection: due at reconnect_at_ (InfinitePast until the first
  // OnTimer after the error, which sets it).
  bool reconnect_pending_ = false;
  absl::Time reconnect_at_ = absl::InfinitePast();
  absl::Duration reconnect_delay_;  // the next one; reset by a successful connection
  absl::Status stopped_;
  uint64_t duplicates_ = 0;
  uint64_t resyncs_ = 0;
  uint64_t reconnects_ = 0;
};

}  // namespace gryph

#endif  // GRYPH_DURABLE_SUBSCRIBER_H_
