#include "gryph/remote_publisher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gryph/pubend.h"

namespace gryph {

namespace {

// Refusals that a resend of the same sequence would only repeat: the publish ends with them.
// Every other error may be gone by the next resend (a full store released, a PHB reopened), and
// only a resend can tell whether the first attempt was logged.
bool Final(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kUnimplemented: return true;
    default: return false;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<RemotePublisher>> RemotePublisher::Create(
    RemotePublisherOptions options, Channel* channel) {
  if (options.phb.empty()) return absl::InvalidArgumentError("RemotePublisher option phb is empty");
  if (options.resend_interval <= absl::ZeroDuration() ||
      options.resend_interval == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        "RemotePublisher option resend_interval must be positive and finite");
  }
  if (channel == nullptr) return absl::InvalidArgumentError("a RemotePublisher needs a channel");
  return std::unique_ptr<RemotePublisher>(new RemotePublisher(std::move(options), channel));
}

absl::Status RemotePublisher::Publish(uint64_t sequence, PubendId p, EventRef event, Done done) {
  if (p.value == 0) {
    return absl::InvalidArgumentError("pubend 0 is named by key only: use PublishByKey");
  }
  return Take(PublishMessage{sequence, p, "", std::move(event)}, std::move(done));
}

absl::Status RemotePublisher::PublishByKey(uint64_t sequence, absl::string_view key, EventRef event,
                                           Done done) {
  return Take(PublishMessage{sequence, PubendId{0}, std::string(key), std::move(event)},
              std::move(done));
}

absl::Status RemotePublisher::Take(PublishMessage message, Done done) {
  const uint64_t sequence = message.sequence;
  if (sequence == 0) {
    return absl::InvalidArgumentError("sequence 0 has no idempotency: a resend would log it again");
  }
  if (sequence <= last_sequence_) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", sequence, " is not above the last one, ", last_sequence_));
  }
  if (message.event == nullptr) return absl::InvalidArgumentError("publish of a null event");
  if (!kept_.empty() && sequence - kept_.begin()->first >= Pubend::kSequenceWindow) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sequence ", sequence, " is ", Pubend::kSequenceWindow,
        " or more above the oldest unanswered, ", kept_.begin()->first, ": wait for its answer"));
  }
  last_sequence_ = sequence;
  Kept& kept = kept_[sequence];
  kept.message = std::move(message);
  kept.done = std::move(done);
  Send(kept.message);
  return absl::OkStatus();
}

void RemotePublisher::Send(const PublishMessage& message) {
  (void)channel_->Send(options_.phb, message);  // a refused send is a lost message: resent
}

void RemotePublisher::HandleMessage(absl::string_view from, const Message& message) {
  const auto* answer = std::get_if<PublishedMessage>(&message);
  if (answer == nullptr || from != options_.phb) return;
  auto it = kept_.find(answer->sequence);
  if (it == kept_.end()) {
    ++ignored_answers_;
    return;
  }
  if (!answer->result.ok() && !Final(answer->result.status().code())) {
    last_error_ = answer->result.status();
    return;
  }
  // Out of the map before `done` runs: it may publish again.
  Done done = std::move(it->second.done);
  kept_.erase(it);
  std::move(done)(answer->result);
}

void RemotePublisher::OnTimer(absl::Time now) {
  for (auto& [sequence, kept] : kept_) {
    if (kept.sent == absl::InfinitePast()) {
      kept.sent = now;
    } else if (now - kept.sent >= options_.resend_interval) {
      kept.sent = now;
      ++resends_;
      Send(kept.message);
    }
  }
}

absl::Time RemotePublisher::NextDeadline(absl::Time now) const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [sequence, kept] : kept_) {
    if (kept.sent == absl::InfinitePast()) return now;
    next = std::min(next, kept.sent + options_.resend_interval);
  }
  return next;
}

void RemotePublisher::Resend() {
  for (auto& [sequence, kept] : kept_) {
    kept.sent = absl::InfinitePast();
    ++resends_;
    Send(kept.message);
  }
}

}  // namespace gryph
