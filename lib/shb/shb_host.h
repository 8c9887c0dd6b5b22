// Internal: the subscriber hosting broker as SubscriberHostingBroker::Open returns it — the
// broker's state (SubscriberHostingBrokerImpl), read again from storage when a commit finds the
// store full.
//
// A failed commit leaves the broker's state in memory ahead of what is stored: constream
// positions, PFS records and deliveries of the round that failed. Rather than undo that piece
// by piece, the host does what a restart would, the path recovery after a crash already takes:
// it drops the state (ending every session), reads it again from storage and lets the new state
// wait for room (SubscriberHostingBrokerImpl::WaitForRoom), its constreams holding still while
// acks, chops and catchups go on. Every other failure stops the broker, as before.
//
// The wait's least length backs off: full_store_wait, doubled (up to 64 times) while each full
// store follows the previous reopen within four of its waits, so that a store that fills again at
// once is not read again and again.
//
// The host is the channel's receiver and passes every message on; it reopens only in Flush and
// OnTimer (never inside a receiver's call, where the channel may be in the middle of a delivery).
//
// Thread-safety: as SubscriberHostingBroker.

#ifndef GRYPH_LIB_SHB_SHB_HOST_H_
#define GRYPH_LIB_SHB_SHB_HOST_H_

#include <memory>
#include <string>
#include <vector>

#include "gryph/subscriber_hosting_broker.h"
#include "lib/shb/subscriber_hosting_broker_impl.h"

namespace gryph::internal {

class ShbHost final : public SubscriberHostingBroker {
 public:
  // Reads the broker's state (SubscriberHostingBroker::Open, whose checks the options passed).
  static absl::StatusOr<std::unique_ptr<ShbHost>> Open(SubscriberHostingBrokerOptions options,
                                                       Storage* storage, Channel* channel);
  ~ShbHost() override;

  void HandleMessage(absl::string_view from, const Message& message) override {
    broker_->HandleMessage(from, message);
  }
  bool Flush() override;
  void OnTimer(absl::Time now) override;
  absl::Time NextDeadline(absl::Time now) const override;
  Tick latest_delivered(PubendId p) const override { return broker_->latest_delivered(p); }
  size_t subscription_count() const override { return broker_->subscription_count(); }
  size_t catching_up() const override { return broker_->catching_up(); }
  const Stats& stats() const override { return broker_->stats(); }
  const Recovery& recovery() const override { return broker_->recovery(); }
  std::vector<SubscriptionStatus> Subscriptions() const override {
    return broker_->Subscriptions();
  }
  absl::StatusOr<SubscriptionStatus> FindSubscription(absl::string_view name) const override {
    return broker_->FindSubscription(name);
  }
  absl::StatusOr<uint64_t> BacklogEvents(absl::string_view name, PubendId p) override {
    return broker_->BacklogEvents(name, p);
  }
  absl::Status DeleteSubscription(absl::string_view name) override {
    return broker_->DeleteSubscription(name);
  }
  // OK while a full store waits to be reopened (the next Flush or OnTimer does it).
  const absl::Status& status() const override;
  bool waiting_for_room() const override { return broker_->waiting_for_room() || reopen_due(); }
  GroupCommitter& committer() override { return broker_->committer(); }

 private:
  ShbHost(SubscriberHostingBrokerOptions options, Storage* storage, Channel* channel)
      : options_(std::move(options)), storage_(storage), channel_(channel) {}

  bool reopen_due() const { return broker_->store_full() && !reopen_failed_; }
  // Reads the state again if a commit found the store full; returns whether it did.
  bool ReopenIfFull();

  const SubscriberHostingBrokerOptions options_;
  Storage* const storage_;
  Channel* const channel_;
  std::unique_ptr<SubscriberHostingBrokerImpl> broker_;
  bool reopen_failed_ = false;  // then broker_ is stopped with the reason
  absl::Duration least_wait_ = absl::ZeroDuration();
  absl::Time last_reopen_ = absl::InfinitePast();
};

}  // namespace gryph::internal

#endif  // GRYPH_LIB_SHB_SHB_HOST_H_
