#include "gryph/in_process_channel.h"

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace gryph {

class InProcessNetwork::Endpoint final : public Channel {
 public:
  Endpoint(InProcessNetwork* network, std::string name)
      : network_(network), name_(std::move(name)) {}
  ~Endpoint() override { network_->Disconnect(name_); }

  const std::string& name() const override { return name_; }

  absl::Status Send(absl::string_view peer, Message message) override {
    absl::StatusOr<size_t> woken;
    {
      absl::MutexLock lock(&network_->mu_);
      woken = network_->EnqueueLocked(name_, peer, std::move(message));
    }
    if (!woken.ok()) return woken.status();
    if (*woken != kNoLane) network_->RunArrivalHook(*woken);
    return absl::OkStatus();
  }

  size_t SendMany(absl::Span<Outgoing> messages) override {
    return network_->SendMany(name_, messages);
  }

  void SetReceiver(Receiver receiver) override {
    network_->SetReceiver(name_, std::move(receiver));
  }

 private:
  InProcessNetwork* const network_;
  const std::string name_;
};

InProcessNetwork::InProcessNetwork(size_t lanes) {
  absl::MutexLock lock(&mu_);
  queues_.resize(lanes);
  for (size_t i = 0; i < lanes; ++i) {
    outboxes_.push_back(std::make_unique<Outbox>());
    arrived_.push_back(std::make_unique<absl::CondVar>());
    lanes_.push_back(std::make_unique<LaneState>());
  }
}

InProcessNetwork::~InProcessNetwork() = default;

absl::StatusOr<std::unique_ptr<Channel>> InProcessNetwork::Connect(absl::string_view name,
                                                                   size_t lane) {
  absl::MutexLock lock(&mu_);
  if (lane >= queues_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("lane ", lane, " of a network with ", queues_.size(), " lanes"));
  }
  if (receivers_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("an endpoint named '", name, "' is connected"));
  }
  const uint64_t id = next_id_++;
  Peer& peer = receivers_[name];
  peer = Peer{id, lane, nullptr};
  by_id_[id] = &peer;
  return std::unique_ptr<Channel>(std::make_unique<Endpoint>(this, std::string(name)));
}

void InProcessNetwork::SetReceiver(const std::string& name, Channel::Receiver receiver) {
  auto shared = std::make_shared<const Channel::Receiver>(std::move(receiver));
  absl::MutexLock lock(&mu_);
  auto it = receivers_.find(name);
  if (it == receivers_.end()) return;
  it->second.receiver = std::move(shared);
  generation_.fetch_add(1, std::memory_order_release);
}

void InProcessNetwork::Disconnect(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = receivers_.find(name);
  if (it == receivers_.end()) return;
  // Its queued messages stay in the queue and are dropped when their turn comes (a scan here
  // would make closing n endpoints cost n times the queue).
  live_ -= it->second.queued;
  by_id_.erase(it->second.id);
  receivers_.erase(it);
  generation_.fetch_add(1, std::memory_order_release);
}

absl::StatusOr<size_t> InProcessNetwork::EnqueueLocked(absl::string_view from, absl::string_view to,
                                                       Message message) {
  auto it = receivers_.find(to);
  if (it == receivers_.end()) {
    return absl::UnavailableError(absl::StrCat("no endpoint named '", to, "'"));
  }
  Peer& peer = it->second;
  ++peer.queued;
  ++live_;
  std::vector<Envelope>& queue = queues_[peer.lane];
  const bool was_empty = queue.empty();
  if (was_empty) arrived_[peer.lane]->Signal();
  queue.emplace_back(from, peer.id, std::move(message));
  lanes_[peer.lane]->queued.store(queue.size(), std::memory_order_release);
  return was_empty ? peer.lane : kNoLane;
}

void InProcessNetwork::RunArrivalHook(size_t lane) {
  LaneState& state = *lanes_[lane];
  absl::ReaderMutexLock lock(&state.hook_mu);
  if (state.hook) state.hook();
}

void InProcessNetwork::SetArrivalHook(size_t lane, std::function<void()> hook) {
  LaneState& state = *lanes_.at(lane);
  absl::MutexLock lock(&state.hook_mu);  // waits for a running hook to end
  state.hook = std::move(hook);
}

bool InProcessNetwork::Wait(size_t lane, absl::Duration timeout) {
  {
    Outbox& outbox = *outboxes_.at(lane);
    absl::MutexLock deliver_lock(&outbox.mu);
    if (outbox.next < outbox.batch.size()) return true;
  }
  // Without mu_: a sender may hold it for a long batch. A message queued after this read wakes
  // the caller through the lane's hook or condition.
  if (lanes_[lane]->queued.load(std::memory_order_acquire) > 0) return true;
  if (timeout <= absl::ZeroDuration()) return false;
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (queues_[lane].empty()) {
    if (arrived_[lane]->WaitWithDeadline(&mu_, deadline)) return !queues_[lane].empty();
  }
  return true;
}

size_t InProcessNetwork::SendMany(absl::string_view from, absl::Span<Channel::Outgoing> messages) {
  size_t accepted = 0;
  absl::InlinedVector<size_t, 4> woken;  // lanes whose queue this made non-empty
  // A chunk at a time under mu_, so that a long batch does not hold every lane's thread.
  for (size_t begin = 0; begin < messages.size(); begin += kSendChunk) {
    absl::MutexLock lock(&mu_);
    for (Channel::Outgoing& m : messages.subspan(begin, kSendChunk)) {
      absl::StatusOr<size_t> lane = EnqueueLocked(from, m.peer, std::move(m.message));
      m.accepted = lane.ok();
      accepted += m.accepted ? 1 : 0;
      if (lane.ok() && *lane != kNoLane) woken.push_back(*lane);
    }
  }
  for (size_t lane : woken) RunArrivalHook(lane);
  return accepted;
}

void InProcessNetwork::ResolveLocked(Outbox& outbox, size_t end, bool take) {
  outbox.receivers.resize(outbox.batch.size());
  for (size_t i = outbox.next; i < end; ++i) {
    const Envelope& e = outbox.batch[i];
    SharedReceiver& r = outbox.receivers[i];
    // By connection id: a later endpoint of the same name is another connection.
    auto it = by_id_.find(e.to_id);
    Peer* peer = it != by_id_.end() ? it->second : nullptr;
    if (take && peer != nullptr) {
      --peer->queued;
      --live_;
    }
    if (!take && r == nullptr) continue;  // dropped already
    SharedReceiver now =
        peer != nullptr && peer->receiver != nullptr && *peer->receiver ? peer->receiver : nullptr;
    if (r == nullptr && now != nullptr) in_hand_.fetch_add(1, std::memory_order_relaxed);
    if (r != nullptr && now == nullptr) in_hand_.fetch_sub(1, std::memory_order_relaxed);
    r = std::move(now);
  }
  if (take) outbox.resolved = end;
  outbox.generation = generation_.load(std::memory_order_acquire);
}

size_t InProcessNetwork::Deliver(size_t max_messages, size_t lane) {
  Outbox& outbox = *outboxes_.at(lane);
  absl::MutexLock deliver_lock(&outbox.mu);
  size_t delivered = 0;
  while (delivered < max_messages) {
    if (outbox.next == outbox.batch.size()) {
      outbox.batch.clear();
      outbox.receivers.clear();
      outbox.next = outbox.resolved = 0;
      absl::MutexLock lock(&mu_);
      if (queues_[lane].empty()) break;
      outbox.batch.swap(queues_[lane]);  // the queue keeps the old batch's capacity
      lanes_[lane]->queued.store(0, std::memory_order_release);
    }
    if (outbox.next == outbox.resolved) {
      // A chunk at a time: senders wait for mu_ meanwhile, and a batch may be long.
      absl::MutexLock lock(&mu_);
      ResolveLocked(outbox, std::min(outbox.batch.size(), outbox.next + kResolveChunk),
                    /*take=*/true);
    } else if (generation_.load(std::memory_order_acquire) != outbox.generation) {
      // An endpoint went or replaced its receiver while this chunk was out.
      absl::MutexLock lock(&mu_);
      ResolveLocked(outbox, outbox.resolved, /*take=*/false);
    }
    const size_t i = outbox.next++;
    // Shared: the receiver may replace itself (or close its endpoint) while running.
    SharedReceiver receiver = std::move(outbox.receivers[i]);
    if (receiver == nullptr) continue;
    in_hand_.fetch_sub(1, std::memory_order_relaxed);
    Envelope& e = outbox.batch[i];
    (*receiver)(e.from, std::move(e.message));
    ++delivered;
  }
  return delivered;
}

size_t InProcessNetwork::pending() const {
  absl::MutexLock lock(&mu_);
  return live_ + in_hand_.load(std::memory_order_relaxed);
}

}  // namespace gryph
