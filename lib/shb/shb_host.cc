#include "lib/shb/shb_host.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/util/status_macros.h"

namespace gryph::internal {

namespace {

// The longest wait, in full_store_wait.
constexpr int kLongestWait = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<ShbHost>> ShbHost::Open(SubscriberHostingBrokerOptions options,
                                                       Storage* storage, Channel* channel) {
  std::unique_ptr<ShbHost> host(new ShbHost(std::move(options), storage, channel));
  host->broker_ = std::make_unique<SubscriberHostingBrokerImpl>(host->options_, storage, channel);
  GRYPH_RETURN_IF_ERROR(host->broker_->Recover());
  host->broker_->Start();
  ShbHost* raw = host.get();
  channel->SetReceiver([raw](absl::string_view from, Message m) { raw->HandleMessage(from, m); });
  return host;
}

ShbHost::~ShbHost() { channel_->SetReceiver(nullptr); }

bool ShbHost::Flush() {
  const bool reopened = ReopenIfFull();
  const bool more = broker_->Flush();
  return ReopenIfFull() || reopened || more;
}

void ShbHost::OnTimer(absl::Time now) {
  ReopenIfFull();
  broker_->OnTimer(now);
  ReopenIfFull();
}

absl::Time ShbHost::NextDeadline(absl::Time now) const {
  return reopen_due() ? now : broker_->NextDeadline(now);
}

const absl::Status& ShbHost::status() const {
  static const absl::Status* const kOk = new absl::Status();
  return reopen_due() ? *kOk : broker_->status();
}

bool ShbHost::ReopenIfFull() {
  if (!reopen_due()) return false;
  const absl::Status full = broker_->status();
  const absl::Time now = options_.clock();
  // Full again soon after the last reopen: wait longer before the constreams try again.
  least_wait_ = now - last_reopen_ <= 4 * least_wait_
                    ? std::min(2 * least_wait_, kLongestWait * options_.full_store_wait)
                    : options_.full_store_wait;
  last_reopen_ = now;
  Stats stats = broker_->stats();
  ++stats.full_store_reopens;
  const std::vector<std::pair<std::string, absl::Time>> heard = broker_->LastHeard();
  // Its commit thread stops first: nothing after the failed commit is applied (the committer's
  // prefix rule), so the storage holds exactly what the new state is read from.
  broker_.reset();
  broker_ = std::make_unique<SubscriberHostingBrokerImpl>(options_, storage_, channel_);
  broker_->WaitForRoom(least_wait_);
  broker_->AdoptStats(stats);
  if (absl::Status st = broker_->Recover(); !st.ok()) {
    reopen_failed_ = true;
    broker_->Stop(absl::Status(
        st.code(), absl::StrCat("reading the state again after a full store: ", st.message())));
    return true;
  }
  broker_->AdoptLastHeard(heard);
  broker_->Start();
  if (options_.log) {
    options_.log(LogRecord{
        LogLevel::kWarning, "shb",
        absl::StrCat("the store is full (", full.message(),
                     "): the broker read its state again and waits for room, at least ",
                     absl::FormatDuration(least_wait_),
                     ", with its constreams holding still; sessions reconnect, catch up and "
                     "acknowledge, and the chops that follow make room")});
  }
  return true;
}

}  // namespace gryph::internal
