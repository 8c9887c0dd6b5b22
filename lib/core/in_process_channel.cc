#include "gryph/in_process_channel.h"

#include <optional>

#include "absl/strings/str_cat.h"

namespace gryph {

class InProcessNetwork::Endpoint final : public Channel {
 public:
  Endpoint(InProcessNetwork* network, std::string name)
      : network_(network), name_(std::move(name)) {}
  ~Endpoint() override { network_->Disconnect(name_); }

  const std::string& name() const override { return name_; }

  absl::Status Send(absl::string_view peer, Message message) override {
    return network_->Enqueue(name_, peer, std::move(message));
  }

  void SetReceiver(Receiver receiver) override {
    network_->SetReceiver(name_, std::move(receiver));
  }

 private:
  InProcessNetwork* const network_;
  const std::string name_;
};

absl::StatusOr<std::unique_ptr<Channel>> InProcessNetwork::Connect(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  if (receivers_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("an endpoint named '", name, "' is connected"));
  }
  receivers_[name] = Peer{next_id_++, nullptr};
  return std::unique_ptr<Channel>(std::make_unique<Endpoint>(this, std::string(name)));
}

void InProcessNetwork::SetReceiver(const std::string& name, Channel::Receiver receiver) {
  auto shared = std::make_shared<const Channel::Receiver>(std::move(receiver));
  absl::MutexLock lock(&mu_);
  auto it = receivers_.find(name);
  if (it != receivers_.end()) it->second.receiver = std::move(shared);
}

void InProcessNetwork::Disconnect(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = receivers_.find(name);
  if (it == receivers_.end()) return;
  // Its queued messages stay in the queue and are dropped when their turn comes (a scan here
  // would make closing n endpoints cost n times the queue).
  live_ -= it->second.queued;
  receivers_.erase(it);
}

absl::Status InProcessNetwork::Enqueue(absl::string_view from, absl::string_view to,
                                       Message message) {
  absl::MutexLock lock(&mu_);
  auto it = receivers_.find(to);
  if (it == receivers_.end()) {
    return absl::UnavailableError(absl::StrCat("no endpoint named '", to, "'"));
  }
  ++it->second.queued;
  ++live_;
  queue_.push_back(Envelope{std::string(from), it->first, it->second.id, std::move(message)});
  return absl::OkStatus();
}

size_t InProcessNetwork::Deliver(size_t max_messages) {
  absl::MutexLock deliver_lock(&deliver_mu_);
  size_t delivered = 0;
  while (delivered < max_messages) {
    std::optional<Envelope> envelope;
    std::shared_ptr<const Channel::Receiver> receiver;
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) break;
      envelope.emplace(std::move(queue_.front()));
      queue_.pop_front();
      auto it = receivers_.find(envelope->to);
      if (it == receivers_.end() || it->second.id != envelope->to_id) continue;  // closed since
      --it->second.queued;
      --live_;
      if (it->second.receiver == nullptr || !*it->second.receiver) continue;
      receiver = it->second.receiver;  // shared: the receiver may replace itself while running
    }
    (*receiver)(envelope->from, std::move(envelope->message));
    ++delivered;
  }
  return delivered;
}

size_t InProcessNetwork::pending() const {
  absl::MutexLock lock(&mu_);
  return live_;
}

}  // namespace gryph
