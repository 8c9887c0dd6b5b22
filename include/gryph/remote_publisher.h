// RemotePublisher: the client side of publishing to a publisher hosting broker in another process,
// over a Channel (docs/format.md, "Messages": Publish and Published).
//
// Each publish goes to the PHB as a PublishMessage and is kept until the PHB's PublishedMessage
// for its sequence arrives; then its `done` runs with the tick. A publish still unanswered is sent
// again, unchanged, resend_interval after it was last sent (OnTimer), or at once on Resend(). The
// PHB takes (this endpoint's channel name, sequence) for the idempotency key and answers a retry
// with the tick it logged, also after it restarted, so a lost Publish, a lost Published or a PHB
// crash in between costs a resend, never a second copy of the event. Answers to publishes no
// longer kept (duplicates, late answers to resends) are ignored.
//
// Sequences are the caller's: strictly increasing (gaps allowed), 0 excluded. A publisher process
// that restarts publishes what it had not seen answered again under the same sequences, before
// anything new (so it keeps them, with the events, wherever it keeps what it publishes). From the
// oldest unanswered publish to the newest at most Pubend::kSequenceWindow sequences are spanned
// (beyond that, the pubend could no longer tell whether the oldest was logged): Publish refuses
// one further with ResourceExhausted, and the caller waits for answers.
//
// What `done` receives: the tick once the event is durably logged, or a refusal that a resend
// would only repeat, after which the event is not logged by this publish: NotFound (no such
// pubend), InvalidArgument (a publisher name too long, or a sequence the pubend never logged
// that is below one it did, as when this publish was lost and a later one arrived: publish the
// event again under a new sequence), AlreadyExists (older than the pubend's window: only if the
// rule above was broken, it may have been logged), PermissionDenied, Unauthenticated,
// Unimplemented. Any other error (ResourceExhausted for a full store, Aborted from a PHB closing,
// the status of a failed pubend) leaves the publish kept and resent: a retry of the same
// sequence is the one way to learn whether it was logged, once the PHB can answer again.
// last_error() tells the latest of those.
//
// Thread-safety: owned by one thread (the one that drives its channel and timers); `done` runs on
// it, inside HandleMessage, and may call Publish.

#ifndef GRYPH_REMOTE_PUBLISHER_H_
#define GRYPH_REMOTE_PUBLISHER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gryph/channel.h"
#include "gryph/event.h"
#include "gryph/message.h"
#include "gryph/tick.h"

namespace gryph {

struct RemotePublisherOptions {
  std::string phb;  // the PHB's channel name
  // An unanswered publish is sent again this long after it was last sent. Keep it above the
  // PHB's commit latency: a resend while the first is being committed is harmless (the PHB
  // answers both with one tick) but costs a message each way.
  absl::Duration resend_interval = absl::Seconds(1);
};

class RemotePublisher {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<Tick>) &&>;

  // Validates the options (InvalidArgument naming the option: an empty phb, a resend_interval
  // that is not positive and finite, no channel). `channel` must outlive the publisher; it does
  // not set itself as the channel's receiver: pass the messages to HandleMessage.
  static absl::StatusOr<std::unique_ptr<RemotePublisher>> Create(RemotePublisherOptions options,
                                                                 Channel* channel);

  // Sends `event` to pubend `p` under `sequence` and keeps it until answered (`done` then runs,
  // never inside this call). Fails, sending nothing and dropping `done`, with InvalidArgument for
  // sequence 0, a sequence not above the last one taken, a null event or pubend 0 (which a
  // Publish message reads as "by key": use PublishByKey), and ResourceExhausted when `sequence`
  // is kSequenceWindow or more above the oldest unanswered one. A send the channel refused
  // (Unavailable) is not a failure: the publish is kept and resent like a lost one.
  absl::Status Publish(uint64_t sequence, PubendId p, EventRef event, Done done);
  // As Publish, to the pubend the PHB picks for `key` (PublisherHostingBroker::PublishByKey);
  // the answer's tick is that pubend's.
  absl::Status PublishByKey(uint64_t sequence, absl::string_view key, EventRef event, Done done);

  // Handles a message from the channel: a PublishedMessage from the PHB for a kept publish ends
  // it (or, for a transient error, records it in last_error()). Messages from other peers, other
  // kinds and answers to no kept publish are ignored.
  void HandleMessage(absl::string_view from, const Message& message);
  // Resends every kept publish last sent resend_interval or more before `now`, in sequence order.
  // A publish taken since the previous call counts as sent at `now`.
  void OnTimer(absl::Time now);
  // When OnTimer should next run at the latest: the next resend due (`now` when a publish waits
  // for OnTimer to set its time; InfiniteFuture with nothing kept).
  absl::Time NextDeadline(absl::Time now) const;
  // Resends every kept publish at once, in sequence order (after the application learned that the
  // PHB is back, say); the next resend is resend_interval after the following OnTimer.
  void Resend();

  // Publishes taken and not answered yet.
  size_t outstanding() const { return kept_.size(); }
  // Publish messages sent again, and answers ignored for naming no kept publish.
  uint64_t resends() const { return resends_; }
  uint64_t ignored_answers() const { return ignored_answers_; }
  // The latest error answer that left a publish kept (OK when none).
  const absl::Status& last_error() const { return last_error_; }
  const RemotePublisherOptions& options() const { return options_; }

 private:
  struct Kept {
    PublishMessage message;
    Done done;
    absl::Time sent = absl::InfinitePast();  // InfinitePast until an OnTimer stamps it
  };

  RemotePublisher(RemotePublisherOptions options, Channel* channel)
      : options_(std::move(options)), channel_(channel) {}
  absl::Status Take(PublishMessage message, Done done);
  void Send(const PublishMessage& message);

  const RemotePublisherOptions options_;
  Channel* const channel_;
  std::map<uint64_t, Kept> kept_;  // by sequence: at most kSequenceWindow
  uint64_t last_sequence_ = 0;     // the last one taken
  uint64_t resends_ = 0;
  uint64_t ignored_answers_ = 0;
  absl::Status last_error_;
};

}  // namespace gryph

#endif  // GRYPH_REMOTE_PUBLISHER_H_
