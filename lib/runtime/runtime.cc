#include "gryph/runtime.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace gryph {

InProcessLane::~InProcessLane() { network_->SetArrivalHook(lane_, nullptr); }

void InProcessLane::Attach(std::function<void()> wake) {
  network_->SetArrivalHook(lane_, std::move(wake));
}

bool InProcessLane::Dispatch(size_t max) {
  if (max > 0) network_->Deliver(max, lane_);
  return Ready();
}

bool InProcessLane::Ready() { return network_->Wait(lane_, absl::ZeroDuration()); }

namespace {

// The runtime whose loop SIGTERM and SIGINT stop (ShutdownOnSignals), and whether one came.
std::atomic<Runtime*> signal_runtime{nullptr};
std::atomic<bool> signal_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<Runtime*>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

void OnSignal(int) {
  const int saved = errno;
  signal_stop.store(true);
  if (Runtime* r = signal_runtime.load()) r->Wake();
  errno = saved;
}

}  // namespace

class Runtime::Impl {
 public:
  explicit Impl(RuntimeOptions options) : options_(std::move(options)) {
    if (!options_.clock) options_.clock = [] { return absl::Now(); };
  }
  ~Impl() {
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  absl::Status Init() {
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
    return absl::OkStatus();
  }

  // One node the loop drives.
  struct Node {
    std::function<bool()> after_messages;  // more to do at once?
    std::function<void(absl::Time)> on_timer;
    std::function<absl::Time(absl::Time)> next_deadline;
    std::function<void()> close;  // the clean shutdown's part for this node
    std::shared_ptr<void> owned;  // the node itself
    absl::Time deadline = absl::InfinitePast();
    // Set when a message reached the node since its deadline was last read (null: read it
    // every pass). A process may host many subscribers; a pass reads the deadline of those that
    // did something, not of every one.
    std::shared_ptr<bool> touched;
  };

  void Wake() {
    const uint64_t one = 1;
    // A full counter (never in practice) already wakes the loop.
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }

  bool OnLoopThread() const { return loop_thread_.load() == std::this_thread::get_id(); }

  void Post(absl::AnyInvocable<void() &&> fn) {
    {
      absl::MutexLock lock(&mu_);
      if (!accepting_) return;
      posted_.push_back(std::move(fn));
    }
    Wake();
  }

  void Call(absl::FunctionRef<void()> fn) {
    if (OnLoopThread()) {
      fn();
      return;
    }
    absl::Notification done;
    bool queued = false;
    {
      absl::MutexLock lock(&mu_);
      if (accepting_ && running_) {
        posted_.push_back([&] {
          fn();
          done.Notify();
        });
        queued = true;
      }
    }
    // Not queued: the loop is not running (not yet, or no more); the caller is the only one.
    if (!queued) {
      fn();
      return;
    }
    Wake();
    done.WaitForNotification();
  }

  absl::Status Begin() {
    absl::MutexLock lock(&mu_);
    if (ran_) return absl::FailedPreconditionError("the runtime's loop already ran");
    ran_ = true;
    running_ = true;
    return absl::OkStatus();
  }

  absl::Status Start() {
    if (absl::Status s = Begin(); !s.ok()) return s;
    thread_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  absl::Status Run() {
    if (absl::Status s = Begin(); !s.ok()) return s;
    Loop();
    return absl::OkStatus();
  }

  void Shutdown() {
    stop_.store(true);
    Wake();
    if (OnLoopThread()) return;
    bool close_here = false;
    {
      absl::MutexLock lock(&mu_);
      if (!ran_) ran_ = close_here = true;  // the loop will never run: close here
    }
    if (close_here) {
      Close();
      absl::MutexLock lock(&mu_);
      closed_ = true;
      closed_cv_.SignalAll();
      return;
    }
    {
      // Set by the loop, or by whoever closes here. (A CondVar, not a Condition: only the
      // waiting thread reads the flag; tests/tsan_absl_mutex.cc.)
      absl::MutexLock lock(&mu_);
      while (!closed_) closed_cv_.Wait(&mu_);
    }
    absl::MutexLock lock(&join_mu_);  // two callers must not both join
    if (thread_.joinable()) thread_.join();
  }

  void Loop() {
    loop_thread_.store(std::this_thread::get_id());
    while (!stop_.load() && !(on_signals_ && signal_stop.load())) Pass();
    Close();
    {
      absl::MutexLock lock(&mu_);
      running_ = false;
      closed_ = true;
      closed_cv_.SignalAll();
    }
  }

  // The clean shutdown, on the loop thread (or the owner's, when the loop never ran).
  void Close() {
    RunPosted();  // what was posted before the shutdown, with the nodes still running
    for (size_t i = nodes_.size(); i-- > 0;) {
      if (nodes_[i].close) nodes_[i].close();
    }
    // What was posted meanwhile runs (a Call waits for it; the nodes are idle now); once none is
    // left, nothing more is accepted.
    for (;;) {
      // What the nodes and those functions sent on the way out (final acks, the knowledge of the
      // last commits).
      for (size_t i = 0; i < sources_.size(); ++i) (void)sources_[i]->Dispatch(0);
      std::deque<absl::AnyInvocable<void() &&>> posted;
      {
        absl::MutexLock lock(&mu_);
        if (posted_.empty()) {
          accepting_ = false;
          return;
        }
        posted.swap(posted_);
      }
      for (auto& fn : posted) std::move(fn)();
    }
  }

  // Indexes, not iterators: a callback may add a source or a node.
  void Pass() {
    ++passes_;
    // Posted code may call any node: every deadline is read again after it, and at least every
    // kDeadlineRefresh (in case a node's handler called another node).
    bool read_all = RunPosted();
    for (; attached_ < sources_.size(); ++attached_)
      sources_[attached_]->Attach([this] { Wake(); });
    bool more = false;
    for (size_t i = 0; i < sources_.size(); ++i) {
      more |= sources_[i]->Dispatch(options_.max_messages_per_pass);
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].after_messages) more |= nodes_[i].after_messages();
    }
    const absl::Time now = options_.clock();
    if (now - deadlines_read_ >= kDeadlineRefresh) read_all = true;
    if (read_all) deadlines_read_ = now;
    absl::Time next = absl::InfiniteFuture();
    for (size_t i = 0; i < nodes_.size(); ++i) {
      Node& n = nodes_[i];
      if (!n.on_timer) continue;
      bool read = read_all || n.touched == nullptr || *n.touched;
      bool fired = false;
      if (now >= n.deadline) {
        n.on_timer(now);
        more |= static_cast<bool>(n.after_messages);  // what the timer made deliverable
        read = fired = true;
      }
      if (read) {
        // A deadline read again before it fired may come sooner, never later: a node that says
        // "within 10 ms" of every reading would otherwise never fire while messages keep the
        // loop busy (the PHB's reclaim stalled for as long as publishing went on).
        const absl::Time deadline = n.next_deadline(now);
        n.deadline = fired ? deadline : std::min(n.deadline, deadline);
        if (n.touched != nullptr) *n.touched = false;
      }
      next = std::min(next, n.deadline);
    }
    for (size_t i = 0; i < sources_.size(); ++i) more |= sources_[i]->Ready();
    {
      absl::MutexLock lock(&mu_);
      more |= !posted_.empty();
    }
    Sleep(more ? absl::ZeroDuration() : next - options_.clock());
  }

  // Returns whether anything ran.
  bool RunPosted() {
    std::deque<absl::AnyInvocable<void() &&>> posted;
    {
      absl::MutexLock lock(&mu_);
      posted.swap(posted_);
    }
    for (auto& fn : posted) std::move(fn)();
    return !posted.empty();
  }

  // Sleeps until a descriptor is readable, the wake-up fires, or `timeout` passed.
  void Sleep(absl::Duration timeout) {
    fds_.clear();
    fds_.push_back({wake_fd_, POLLIN, 0});
    for (EventSource* s : sources_) {
      for (int fd : s->WaitFds()) fds_.push_back({fd, POLLIN, 0});
    }
    timespec ts{};
    timespec* tsp = nullptr;
    if (timeout < absl::InfiniteDuration()) {
      ts = absl::ToTimespec(std::max(timeout, absl::ZeroDuration()));
      tsp = &ts;
    }
    const int n = ppoll(fds_.data(), fds_.size(), tsp, nullptr);
    if (n > 0 && (fds_[0].revents & POLLIN) != 0) {
      uint64_t count;
      [[maybe_unused]] ssize_t r = read(wake_fd_, &count, sizeof(count));
    }
  }

  RuntimeOptions options_;
  std::vector<Node> nodes_;
  static constexpr absl::Duration kDeadlineRefresh = absl::Milliseconds(10);
  absl::Time deadlines_read_ = absl::InfinitePast();  // when every deadline was last read
  std::vector<EventSource*> sources_;
  size_t attached_ = 0;  // sources_[0, attached_) have been attached
  std::vector<pollfd> fds_;
  int wake_fd_ = -1;
  std::atomic<std::thread::id> loop_thread_{};
  std::atomic<bool> stop_{false};
  std::atomic<bool> on_signals_{false};  // ShutdownOnSignals
  std::atomic<uint64_t> passes_{0};
  std::thread thread_;

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> posted_ ABSL_GUARDED_BY(mu_);
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool ran_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // Close() has finished
  absl::CondVar closed_cv_;
  absl::Mutex join_mu_;
};

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Runtime::~Runtime() {
  Shutdown();
  Runtime* self = this;
  if (signal_runtime.compare_exchange_strong(self, nullptr)) {
    for (int sig : {SIGTERM, SIGINT}) signal(sig, SIG_DFL);
  }
  // The sources outlive the runtime: they must not wake it once it is gone.
  for (size_t i = 0; i < impl_->attached_; ++i) impl_->sources_[i]->Attach(nullptr);
  // Nodes go in the reverse order of opening: subscribers before the brokers they talk to.
  while (!impl_->nodes_.empty()) impl_->nodes_.pop_back();
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(RuntimeOptions options) {
  if (options.max_messages_per_pass == 0) {
    return absl::InvalidArgumentError("runtime option max_messages_per_pass is 0");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

absl::StatusOr<PublisherHostingBroker*> Runtime::OpenPublisherHostingBroker(
    PublisherHostingBrokerOptions options, Storage* storage, Channel* channel) {
  options.commit_thread = true;
  options.clock = impl_->options_.clock;
  absl::StatusOr<std::unique_ptr<PublisherHostingBroker>> opened =
      PublisherHostingBroker::Open(std::move(options), storage, channel);
  if (!opened.ok()) return opened.status();
  std::shared_ptr<PublisherHostingBroker> phb = *std::move(opened);
  PublisherHostingBroker* raw = phb.get();
  Impl::Node n;
  n.on_timer = [raw](absl::Time now) { raw->OnTimer(now); };
  n.next_deadline = [raw](absl::Time now) { return raw->NextDeadline(now); };
  // Commits what is pending, running every `done`, and sends the knowledge it made durable.
  n.close = [raw] { raw->committer().Stop(); };
  n.owned = std::move(phb);
  impl_->nodes_.push_back(std::move(n));
  return raw;
}

absl::StatusOr<SubscriberHostingBroker*> Runtime::OpenSubscriberHostingBroker(
    SubscriberHostingBrokerOptions options, Storage* storage, Channel* channel) {
  options.commit_thread = true;
  options.on_commit = [impl = impl_.get(), then = std::move(options.on_commit)] {
    impl->Wake();
    if (then) then();
  };
  options.clock = impl_->options_.clock;
  absl::StatusOr<std::unique_ptr<SubscriberHostingBroker>> opened =
      SubscriberHostingBroker::Open(std::move(options), storage, channel);
  if (!opened.ok()) return opened.status();
  std::shared_ptr<SubscriberHostingBroker> shb = *std::move(opened);
  SubscriberHostingBroker* raw = shb.get();
  Impl::Node n;
  n.after_messages = [raw] { return raw->Flush(); };
  n.on_timer = [raw](absl::Time now) { raw->OnTimer(now); };
  n.next_deadline = [raw](absl::Time now) { return raw->NextDeadline(now); };
  n.close = [raw] { (void)raw->Flush(); };  // its destructor commits what was submitted
  n.owned = std::move(shb);
  impl_->nodes_.push_back(std::move(n));
  return raw;
}

absl::StatusOr<IntermediateBroker*> Runtime::OpenIntermediateBroker(
    IntermediateBrokerOptions options, Channel* channel) {
  absl::StatusOr<std::unique_ptr<IntermediateBroker>> opened =
      IntermediateBroker::Open(std::move(options), channel);
  if (!opened.ok()) return opened.status();
  std::shared_ptr<IntermediateBroker> ib = *std::move(opened);
  IntermediateBroker* raw = ib.get();
  Impl::Node n;
  n.on_timer = [raw](absl::Time now) { raw->OnTimer(now); };
  n.next_deadline = [raw](absl::Time now) { return raw->NextDeadline(now); };
  n.owned = std::move(ib);
  impl_->nodes_.push_back(std::move(n));
  return raw;
}

absl::StatusOr<RemotePublisher*> Runtime::OpenRemotePublisher(RemotePublisherOptions options,
                                                              Channel* channel) {
  absl::StatusOr<std::unique_ptr<RemotePublisher>> created =
      RemotePublisher::Create(std::move(options), channel);
  if (!created.ok()) return created.status();
  RemotePublisher* raw = created->get();
  auto touched = std::make_shared<bool>(true);
  channel->SetReceiver([raw, touched](absl::string_view from, Message m) {
    *touched = true;
    raw->HandleMessage(from, m);
  });
  // The receiver goes before the publisher.
  struct Hosted {
    Channel* channel = nullptr;
    std::unique_ptr<RemotePublisher> publisher;
    ~Hosted() {
      if (channel != nullptr) channel->SetReceiver(nullptr);
    }
  };
  auto hosted = std::make_shared<Hosted>();
  hosted->channel = channel;
  hosted->publisher = *std::move(created);
  Impl::Node n;
  n.on_timer = [raw](absl::Time now) { raw->OnTimer(now); };
  n.next_deadline = [raw](absl::Time now) { return raw->NextDeadline(now); };
  n.touched = std::move(touched);
  n.owned = std::move(hosted);
  impl_->nodes_.push_back(std::move(n));
  return raw;
}

absl::StatusOr<DurableSubscriber*> Runtime::OpenDurableSubscriber(
    DurableSubscriberOptions options, Channel* channel, DurableSubscriber::Handler* handler) {
  absl::StatusOr<std::unique_ptr<DurableSubscriber>> created =
      DurableSubscriber::Create(std::move(options), channel, handler);
  if (!created.ok()) return created.status();
  std::shared_ptr<DurableSubscriber> ds = *std::move(created);
  DurableSubscriber* raw = ds.get();
  auto touched = std::make_shared<bool>(true);
  channel->SetReceiver([raw, touched](absl::string_view from, Message m) {
    *touched = true;
    raw->HandleMessage(from, m);
  });
  // A request the channel could not send now (Unavailable) is a loss: OnTimer sends it again.
  if (absl::Status s = raw->Connect(); !s.ok() && !absl::IsUnavailable(s)) {
    channel->SetReceiver(nullptr);
    return s;
  }
  Impl::Node n;
  n.on_timer = [raw](absl::Time now) { raw->OnTimer(now); };
  n.next_deadline = [raw](absl::Time now) { return raw->NextDeadline(now); };
  n.close = [raw] { (void)raw->Disconnect(); };  // a final ack
  n.touched = std::move(touched);
  // The receiver goes before the subscriber.
  struct Hosted {
    Channel* channel = nullptr;
    std::shared_ptr<DurableSubscriber> subscriber;
    ~Hosted() {
      if (channel != nullptr) channel->SetReceiver(nullptr);
    }
  };
  auto hosted = std::make_shared<Hosted>();
  hosted->channel = channel;
  hosted->subscriber = std::move(ds);
  n.owned = std::move(hosted);
  impl_->nodes_.push_back(std::move(n));
  return raw;
}

void Runtime::AddSource(EventSource* source) { impl_->sources_.push_back(source); }
void Runtime::Post(absl::AnyInvocable<void() &&> fn) { impl_->Post(std::move(fn)); }
void Runtime::Call(absl::FunctionRef<void()> fn) { impl_->Call(fn); }
void Runtime::Wake() { impl_->Wake(); }
absl::Status Runtime::Start() { return impl_->Start(); }
absl::Status Runtime::Run() { return impl_->Run(); }
void Runtime::Shutdown() { impl_->Shutdown(); }
uint64_t Runtime::passes() const { return impl_->passes_.load(); }

absl::Status Runtime::ShutdownOnSignals() {
  Runtime* expected = nullptr;
  if (!signal_runtime.compare_exchange_strong(expected, this) && expected != this) {
    return absl::FailedPreconditionError("another runtime already shuts down on signals");
  }
  signal_stop.store(false);
  impl_->on_signals_ = true;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT}) {
    if (sigaction(sig, &sa, nullptr) != 0) {
      return absl::InternalError(absl::StrCat("sigaction: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace gryph
