// Topology: a publisher hosting broker, subscriber hosting brokers and durable subscribers in one
// process, on one in-process network and one virtual clock, stepped by hand — the harness the
// tests, the golden store and the benchmarks share instead of each wiring its own.
//
//   TopologyOptions o;
//   o.pubends = {PubendId{1}};
//   auto t = Topology::Create(o).value();
//   DurableSubscriber* s = t->StartSubscriber(sub_options, &handler).value();
//   t->Publish(PubendId{1}, "gateway", 1, event);
//   t->Run(absl::Milliseconds(100));   // every node's timers and messages, 1 ms a step
//
// The PHB commits in its timer (manual mode) and every node runs on the topology's clock: a
// virtual one by default, so that a run is the same every time (what it stores and what it
// delivers depend only on what the test does), or the real clock for a benchmark
// (TopologyOptions::real_time). The storage is memory, or LMDB under TopologyOptions::storage_dir,
// where an SHB can be crashed and restarted on what it committed (RestartShb).
//
// Thread-safety: thread-compatible; one thread drives it.

#ifndef GRYPH_TESTING_TOPOLOGY_H_
#define GRYPH_TESTING_TOPOLOGY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gryph/durable_subscriber.h"
#include "gryph/in_process_channel.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/storage.h"
#include "gryph/subscriber_hosting_broker.h"

namespace gryph {

struct TopologyOptions {
  // The PHB's pubends; every SHB serves them all.
  std::vector<PubendId> pubends = {PubendId{1}};
  // The SHBs' channel names (the PHB's downstream nodes). The PHB is "phb".
  std::vector<std::string> shbs = {"shb"};
  // The virtual clock's start, and how far one step of Run moves it.
  absl::Time start = absl::FromUnixSeconds(1'900'000'000);
  absl::Duration step = absl::Milliseconds(1);
  // The real clock instead (absl::Now): a step moves it by what the step took.
  bool real_time = false;
  // Empty: each broker on its own MemoryStorage. Otherwise LMDB stores in storage_dir/phb and
  // storage_dir/<shb name> (created if absent), opened with `storage` (its path is set).
  std::string storage_dir;
  StorageOptions storage;
  // Adjust the nodes' options before they open. The topology then sets what is its own: the
  // pubends (each from pubend_options), the PHB's downstream and manual commits, the SHBs'
  // upstreams, and the clock. (An SHB may keep a commit thread: shb_options decides.)
  std::function<void(PubendOptions&)> pubend_options;
  std::function<void(PublisherHostingBrokerOptions&)> phb_options;
  std::function<void(SubscriberHostingBrokerOptions&)> shb_options;
};

class Topology {
 public:
  // InvalidArgument for no pubend or no SHB; otherwise the storage's and the brokers' errors.
  static absl::StatusOr<std::unique_ptr<Topology>> Create(TopologyOptions options);
  ~Topology();

  absl::Time now() const { return now_; }
  PublisherHostingBroker& phb() { return *phb_; }
  // REQUIRES: `name` is one of options.shbs.
  SubscriberHostingBroker& shb(const std::string& name) { return *shbs_.at(name).broker; }

  // A subscriber process on an endpoint of its own ("app-1", "app-2", ...), connected (its
  // Connect sent). `handler` must outlive it. The subscriber is the topology's until Crash.
  absl::StatusOr<DurableSubscriber*> StartSubscriber(DurableSubscriberOptions options,
                                                     DurableSubscriber::Handler* handler);
  // The process crashes: it sends nothing more and hears nothing more (its endpoint goes, with
  // what was queued for it). REQUIRES: `subscriber` came from StartSubscriber, not crashed.
  void Crash(DurableSubscriber* subscriber);

  // Publishes through the PHB; `done` (optional) runs when the event is durable.
  void Publish(PubendId p, absl::string_view publisher, uint64_t sequence, EventRef event,
               Pubend::PublishDone done = nullptr);

  // Runs every node for `d` of the clock, in steps.
  void Run(absl::Duration d);
  // One step: moves the clock (one `step`, or to the real time), then runs the PHB's timer (its
  // commits), each SHB's Flush until it has nothing more to send now and its timer, and the
  // subscribers' timers, delivering every message after each.
  void Step();

  // The SHB stops and a new one opens on the same storage: what the old one had submitted
  // commits as it closes (a crash at a quiet moment; the simulator's crashes lose commits in
  // flight too), and what was queued for it on the network is lost. On an error the SHB stays
  // gone. REQUIRES: storage_dir is set (memory does not outlive the broker).
  absl::Status RestartShb(const std::string& name);
  // The stop alone: the SHB is gone until RestartShb. Its name must not be used meanwhile.
  void CrashShb(const std::string& name);

 private:
  struct Shb {
    std::unique_ptr<Channel> channel;
    std::unique_ptr<Storage> storage;
    std::unique_ptr<SubscriberHostingBroker> broker;
  };
  struct Process {
    std::string endpoint;
    std::unique_ptr<Channel> channel;
    std::unique_ptr<DurableSubscriber> subscriber;
  };
  explicit Topology(TopologyOptions options);
  absl::Status Open();
  absl::Status OpenShb(const std::string& name);
  absl::StatusOr<std::unique_ptr<Storage>> NewStorage(const std::string& name) const;

  const TopologyOptions options_;
  absl::Time now_;
  InProcessNetwork net_;
  std::unique_ptr<Channel> phb_channel_;
  std::unique_ptr<Storage> phb_storage_;
  std::unique_ptr<PublisherHostingBroker> phb_;
  std::map<std::string, Shb> shbs_;
  std::vector<Process> processes_;  // in start order: the order Run steps them in
  int started_ = 0;
};

}  // namespace gryph

#endif  // GRYPH_TESTING_TOPOLOGY_H_
