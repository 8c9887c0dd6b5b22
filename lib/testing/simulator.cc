#include "gryph/testing/simulator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/util/fnv1a.h"

namespace gryph {

// A node's endpoint: encodes each message (so that every simulated hop exercises the wire
// format) and hands it to the simulator's links.
class Simulator::SimChannel final : public Channel {
 public:
  SimChannel(Simulator* sim, std::string name, uint64_t incarnation)
      : sim_(sim), name_(std::move(name)), incarnation_(incarnation) {}

  const std::string& name() const override { return name_; }

  absl::Status Send(absl::string_view peer, Message message) override {
    if (!sim_->nodes_.contains(peer)) {
      return absl::UnavailableError(absl::StrCat("no simulated node named '", peer, "'"));
    }
    sim_->Transmit(name_, incarnation_, peer, message);
    return absl::OkStatus();
  }

  void SetReceiver(Receiver receiver) override { receiver_ = std::move(receiver); }

  Receiver receiver_;

 private:
  Simulator* const sim_;
  const std::string name_;
  const uint64_t incarnation_;
};

SimContext::SimContext(Simulator* sim, std::string name, uint64_t incarnation)
    : sim_(sim), name_(std::move(name)), incarnation_(incarnation) {}

absl::Time SimContext::Now() const { return sim_->now_; }

uint64_t SimContext::Random() { return sim_->rng_(); }

void SimContext::After(absl::Duration delay, std::function<void()> fn) {
  Simulator* sim = sim_;
  const std::string name = name_;
  const uint64_t incarnation = incarnation_;
  sim->Push(sim->now_ + std::max(delay, absl::ZeroDuration()),
            [sim, name, incarnation, fn = std::move(fn)] {
              auto it = sim->nodes_.find(name);
              if (it == sim->nodes_.end() || it->second.incarnation != incarnation) return;
              sim->Mix(absl::StrCat("timer ", name));
              fn();
            });
}

Simulator::Simulator(uint64_t seed, LinkProfile default_link, absl::Time start)
    : seed_(seed),
      default_link_(default_link),
      rng_(seed),
      now_(start),
      trace_hash_(internal::kFnv1aOffsetBasis) {}

Simulator::~Simulator() {
  // Nodes first: their destructors may still use their channels and contexts.
  for (auto& [name, slot] : nodes_) slot.node.reset();
}

void Simulator::Mix(uint64_t v) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  trace_hash_ = internal::Fnv1a64(trace_hash_, absl::string_view(bytes, 8));
}

void Simulator::Mix(absl::string_view bytes) {
  Mix(static_cast<uint64_t>(absl::ToUnixMicros(now_)));
  trace_hash_ = internal::Fnv1a64(trace_hash_, bytes);
}

double Simulator::Uniform01() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

void Simulator::Push(absl::Time at, std::function<void()> run) {
  queue_.push(Pending{at, next_seq_++, std::move(run)});
}

absl::Status Simulator::AddNode(absl::string_view name, NodeFactory factory) {
  if (nodes_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("a node named '", name, "' exists"));
  }
  NodeSlot& slot = nodes_[std::string(name)];
  slot.factory = std::move(factory);
  Start(std::string(name), slot);
  return absl::OkStatus();
}

void Simulator::Start(const std::string& name, NodeSlot& slot) {
  ++slot.incarnation;
  slot.context.reset(new SimContext(this, name, slot.incarnation));
  slot.context->channel_ = std::make_unique<SimChannel>(this, name, slot.incarnation);
  slot.node = slot.factory(*slot.context);
}

SimNode* Simulator::node(absl::string_view name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : it->second.node.get();
}

void Simulator::SetLink(absl::string_view from, absl::string_view to, LinkProfile profile) {
  links_[{std::string(from), std::string(to)}] = profile;
}

const LinkProfile& Simulator::Link(const std::string& from, const std::string& to) const {
  auto it = links_.find({from, to});
  return it == links_.end() ? default_link_ : it->second;
}

void Simulator::Partition(absl::string_view a, absl::string_view b) {
  partitioned_[{std::string(a), std::string(b)}] = true;
  partitioned_[{std::string(b), std::string(a)}] = true;
}

void Simulator::Heal(absl::string_view a, absl::string_view b) {
  partitioned_.erase({std::string(a), std::string(b)});
  partitioned_.erase({std::string(b), std::string(a)});
}

void Simulator::Crash(absl::string_view name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end() || it->second.node == nullptr) return;
  NodeSlot& slot = it->second;
  slot.node.reset();
  slot.context.reset();
  ++slot.incarnation;  // in-flight messages and timers of the old incarnation die
  ++stats_.crashes;
  Mix(absl::StrCat("crash ", name));
}

void Simulator::Restart(absl::string_view name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end() || it->second.node != nullptr) return;
  Mix(absl::StrCat("restart ", name));
  Start(it->first, it->second);
}

void Simulator::Schedule(absl::Duration delay, std::function<void()> fn) {
  Push(now_ + std::max(delay, absl::ZeroDuration()), std::move(fn));
}

void Simulator::Transmit(const std::string& from, uint64_t from_incarnation, absl::string_view to,
                         const Message& message) {
  ++stats_.sent;
  const std::string to_name(to);
  if (partitioned_.contains({from, to_name})) {
    ++stats_.lost;
    return;
  }
  const LinkProfile& link = Link(from, to_name);
  if (link.loss > 0 && Uniform01() < link.loss) {
    ++stats_.lost;
    return;
  }
  int copies = 1;
  if (link.duplicate > 0 && Uniform01() < link.duplicate) {
    copies = 2;
    ++stats_.duplicated;
  }
  auto bytes = std::make_shared<const std::string>(EncodeMessage(message));
  const uint64_t to_incarnation = nodes_.at(to_name).incarnation;
  for (int c = 0; c < copies; ++c) {
    const int64_t span = absl::ToInt64Microseconds(link.max_delay - link.min_delay);
    absl::Duration delay = link.min_delay;
    if (span > 0) delay += absl::Microseconds(static_cast<int64_t>(rng_() % (span + 1)));
    absl::Time at = now_ + delay;
    if (link.fifo) {
      absl::Time& last = link_last_arrival_[{from, to_name}];
      at = std::max(at, last);
      last = at;
    }
    Push(at, [this, from, from_incarnation, to_name, to_incarnation, bytes] {
      auto sender = nodes_.find(from);
      auto receiver = nodes_.find(to_name);
      // A crash of either end since the send breaks the connection the message was on.
      if (sender->second.incarnation != from_incarnation ||
          receiver->second.incarnation != to_incarnation || receiver->second.node == nullptr ||
          partitioned_.contains({from, to_name})) {
        ++stats_.lost;
        return;
      }
      absl::StatusOr<Message> decoded = DecodeMessage(*bytes);
      if (!decoded.ok()) {
        ++stats_.lost;  // cannot happen for messages we encoded; counted rather than crashing
        return;
      }
      auto* channel = static_cast<SimChannel*>(&receiver->second.context->channel());
      Mix(absl::StrCat("deliver ", from, ">", to_name, " ", *bytes));
      ++stats_.delivered;
      if (channel->receiver_) channel->receiver_(from, *std::move(decoded));
    });
  }
}

bool Simulator::Step() {
  if (queue_.empty()) return false;
  // Copy out before running: the action may push new events.
  Pending next = queue_.top();
  queue_.pop();
  now_ = std::max(now_, next.at);
  next.run();
  return true;
}

uint64_t Simulator::RunFor(absl::Duration d) {
  const absl::Time end = now_ + d;
  uint64_t steps = 0;
  while (!queue_.empty() && queue_.top().at <= end) {
    Step();
    ++steps;
  }
  now_ = std::max(now_, end);
  return steps;
}

bool Simulator::RunUntil(const std::function<bool()>& done, absl::Duration limit) {
  const absl::Time end = now_ + limit;
  while (!done()) {
    if (queue_.empty() || queue_.top().at > end) return done();
    Step();
  }
  return true;
}

std::string Simulator::ReproduceHint() const {
  return absl::StrCat("seed ", seed_, ": rerun with GRYPH_SEED=", seed_);
}

}  // namespace gryph
