// Runtime: one event-loop thread that drives a process's gryph nodes.
//
// The nodes (PublisherHostingBroker, IntermediateBroker, SubscriberHostingBroker,
// DurableSubscriber, RemotePublisher) are single-threaded state machines: messages in, messages and
// storage writes out. The simulator drives them on virtual time; the Runtime drives the same code
// on real time and real I/O. Its loop, on one thread:
//   1. runs what other threads posted (Post, Call);
//   2. lets every EventSource (a channel endpoint) hand its arrived messages to their receivers,
//      which are the nodes' HandleMessage;
//   3. lets every node deliver what those messages allow (the SHB's Flush);
//   4. fires the timers of the nodes whose deadline has come, and asks each for its next one;
//   5. sleeps in ppoll(2) on the sources' descriptors and its own wake-up descriptor until the
//      earliest deadline, unless a source or a node has more to do at once. There is no fixed
//      polling interval: an idle process wakes only for a message, a post or a deadline.
// Storage commits never run on the loop: each broker's group commit runs on its own commit
// thread (the node's commit_thread option, which the runtime sets), and the commit thread wakes
// the loop, which picks the completion up in step 3. So no fsync delays a message handler.
//
// Nodes opened through the runtime (Open* below) belong to it: they are driven by its loop and
// destroyed with it, in the reverse order of opening. Their methods must only be called on the
// loop thread — from a posted function or Call — except PublisherHostingBroker::Publish and
// PublishByKey, which are thread-safe.
//
// Shutdown (Shutdown(), or SIGTERM/SIGINT after ShutdownOnSignals): the loop stops handing out
// messages, the PHB commits what is pending — each publish's `done` runs with its result —,
// subscribers send a final ack, and the loop ends. Nodes stay valid (and idle) until the runtime
// is destroyed; an SHB commits what it submitted when it is destroyed.
//
// Timers: the PHB runs its pubends' timers (heartbeats, early release) at least every 10 ms; the
// other nodes say exactly when theirs are due.
//
// Thread-safety: Post, Call, Wake and Shutdown are thread-safe. Open*, AddSource, Start and Run
// are called by the owner before Start (or Run), or on the loop thread. Call and Shutdown wait
// for the loop: never call them from a callback a node runs on its commit thread (a publish's
// `done`, on_commit), which the loop may be waiting for; Post from there instead (a posted
// Shutdown ends the loop after that pass).

#ifndef GRYPH_RUNTIME_H_
#define GRYPH_RUNTIME_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gryph/channel.h"
#include "gryph/durable_subscriber.h"
#include "gryph/in_process_channel.h"
#include "gryph/intermediate_broker.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/remote_publisher.h"
#include "gryph/storage.h"
#include "gryph/subscriber_hosting_broker.h"

namespace gryph {

// Something the loop waits on and lets work: a channel endpoint whose messages arrive from
// outside the loop thread (a network socket, an in-process lane).
class EventSource {
 public:
  virtual ~EventSource() = default;

  // Called once, on attaching: `wake` (thread-safe, cheap) makes the loop run a pass soon. A
  // source whose work arrives on another thread (a queue filled by a commit thread, a lane of an
  // in-process network) calls it; one whose descriptors say so need not. Called again with an
  // empty function when the runtime goes: from then on the source must not call the old one.
  virtual void Attach(std::function<void()> wake) = 0;
  // Descriptors that become readable when Dispatch may have work. The loop polls them; it does
  // not read them. May be empty.
  virtual std::vector<int> WaitFds() const = 0;
  // On the loop thread: hands up to `max` arrived messages to the channel's receiver, sends what
  // was queued for sending from other threads. Returns whether more work is ready already.
  virtual bool Dispatch(size_t max) = 0;
  // On the loop thread, just before it sleeps: whether work is ready that the descriptors will
  // not announce (ZeroMQ's descriptors are edge-triggered, and a send may consume the edge).
  virtual bool Ready() = 0;
};

// A lane of an InProcessNetwork as an EventSource: the runtime delivers the lane's messages.
// The lane must be driven by this source alone. REQUIRES: `network` outlives it.
class InProcessLane final : public EventSource {
 public:
  InProcessLane(InProcessNetwork* network, size_t lane) : network_(network), lane_(lane) {}
  ~InProcessLane() override;
  void Attach(std::function<void()> wake) override;
  std::vector<int> WaitFds() const override { return {}; }
  bool Dispatch(size_t max) override;
  bool Ready() override;

 private:
  InProcessNetwork* const network_;
  const size_t lane_;
};

struct RuntimeOptions {
  // Messages one source hands out per pass of the loop, at most: a flood on one source then
  // leaves room for the others and for timers.
  size_t max_messages_per_pass = 4096;
  // The time source for the nodes' timers; absl::Now when empty.
  std::function<absl::Time()> clock;
};

class Runtime {
 public:
  static absl::StatusOr<std::unique_ptr<Runtime>> Create(RuntimeOptions options = {});
  // Shuts down (if running), then destroys the nodes in the reverse order of opening.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Opens a node driven by this runtime (the node's Open or Create, with its driving options
  // set: commit_thread on and its wake-up to this loop, the clock to the runtime's). The
  // channel's receiver becomes the node. Storage, channel and handler must outlive the runtime.
  absl::StatusOr<PublisherHostingBroker*> OpenPublisherHostingBroker(
      PublisherHostingBrokerOptions options, Storage* storage, Channel* channel);
  absl::StatusOr<SubscriberHostingBroker*> OpenSubscriberHostingBroker(
      SubscriberHostingBrokerOptions options, Storage* storage, Channel* channel);
  absl::StatusOr<IntermediateBroker*> OpenIntermediateBroker(IntermediateBrokerOptions options,
                                                             Channel* channel);
  // Creates the subscriber and calls its Connect().
  absl::StatusOr<DurableSubscriber*> OpenDurableSubscriber(DurableSubscriberOptions options,
                                                           Channel* channel,
                                                           DurableSubscriber::Handler* handler);

  // A publisher of this process to a PHB in another (its resends run on the loop's timers).
  absl::StatusOr<RemotePublisher*> OpenRemotePublisher(RemotePublisherOptions options,
                                                       Channel* channel);

  // Makes the loop drive `source`. REQUIRES: it outlives the runtime.
  void AddSource(EventSource* source);

  // Runs `fn` on the loop thread at its next pass. Functions posted after Shutdown began are
  // dropped (destroyed without running).
  void Post(absl::AnyInvocable<void() &&> fn);
  // Runs `fn` on the loop thread and returns when it has run (at once when called on the loop
  // thread or when the loop is not running).
  void Call(absl::FunctionRef<void()> fn);
  // Makes the loop run a pass soon. Thread-safe and async-signal-safe.
  void Wake();

  // Runs the loop on a thread of its own. FailedPrecondition if it already ran.
  absl::Status Start();
  // Runs the loop on the calling thread until Shutdown. FailedPrecondition if it already ran.
  absl::Status Run();
  // Stops the loop cleanly (see the file comment) and waits for it, unless called on the loop
  // thread, which returns at once and ends the loop after the current pass. Idempotent.
  void Shutdown();
  // From now on SIGTERM and SIGINT shut this runtime down. One runtime per process may do this;
  // FailedPrecondition for a second.
  absl::Status ShutdownOnSignals();

  // Passes of the loop so far (for tests: an idle runtime makes few).
  uint64_t passes() const;

 private:
  class Impl;
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gryph

#endif  // GRYPH_RUNTIME_H_
