// gryph-sub: a durable subscriber as a process, over ZeroMQ (CURVE with --keys_dir).
//
// It connects to the SHB --broker with --subscription, --selector and --topic, and writes every
// event it receives as a JSON line (programs/event_json.h) to --out, or only counts them
// (--count). Its state — the checkpoint token (CT), the epoch, how many events and how many
// bytes of --out it has consumed — lives in --state_dir/state, replaced atomically and fsynced
// every --sync_interval after the output it covers is fsynced; the broker is acknowledged only
// what that file holds. So a SIGKILL at any instant followed by a restart loses nothing and,
// with --out naming a file, repeats nothing: the restart cuts the file back to the length its
// state records and resumes from its CT. (Standard output cannot be cut back: written there,
// a crash may repeat the lines of its last interval.)
//
// On SIGTERM or SIGINT it stores its state, acknowledges it and disconnects (the subscription
// stays at the broker and catches up when it returns); --unsubscribe deletes the subscription
// instead. It exits after --exit_after events when that is set.
//
// Exit status: 0 after a clean stop, 2 for a bad flag or an unusable state directory, 3 when
// the broker refused the subscription for good (a bad selector, another process holding it), 1
// for another failure.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gryph/runtime.h"
#include "programs/event_json.h"
#include "programs/program_support.h"

ABSL_FLAG(std::string, broker, "",
          "NAME@ENDPOINT of the SHB, e.g. shb@tcp://10.0.0.3:7300; several, comma-separated: "
          "the first, then the next when one stays unreachable (reconnect anywhere)");
ABSL_FLAG(absl::Duration, failover_after, absl::Seconds(10),
          "with several --broker: move to the next when nothing came from one for this long");
ABSL_FLAG(std::string, name, "",
          "this subscriber's endpoint name (default: the subscription's); with --keys_dir, "
          "its key is NAME.key");
ABSL_FLAG(std::string, subscription, "", "the durable subscription's name");
ABSL_FLAG(std::string, selector, "", "a JMS selector; empty matches every event");
ABSL_FLAG(std::string, topic, "", "a topic filter (orders, orders.*, orders.#); empty: all");
ABSL_FLAG(std::string, state_dir, "", "where the subscriber keeps its state (required)");
ABSL_FLAG(std::string, out, "-", "the file events are appended to as JSON lines; - for stdout");
ABSL_FLAG(bool, count, false, "only count the events (no output)");
ABSL_FLAG(std::string, keys_dir, "",
          "CURVE keys: NAME.key for this subscriber, BROKER.pub for its broker; empty: plain TCP");
ABSL_FLAG(absl::Duration, sync_interval, absl::Milliseconds(20),
          "how often the output and the state are made durable (and acknowledged)");
ABSL_FLAG(int64_t, exit_after, 0, "stop after this many events in all (0: run until signalled)");
ABSL_FLAG(bool, unsubscribe, false, "delete the subscription at the broker, then exit");
ABSL_FLAG(absl::Duration, stats_interval, absl::Seconds(10),
          "print one line of figures on stderr this often (0: never)");

namespace gryph::programs {
namespace {

constexpr int kExitRefused = 3;

// What --state_dir/state holds: one "key value" per line.
struct State {
  std::string subscription;
  uint64_t epoch = 0;
  CheckpointToken ct;
  uint64_t events = 0;
  uint64_t out_bytes = 0;

  std::string Encode() const {
    return absl::StrCat("gryph-sub state 1\nsubscription ", subscription, "\nepoch ", epoch,
                        "\nct ", absl::Base64Escape(ct.Encode()), "\nevents ", events,
                        "\nout_bytes ", out_bytes, "\n");
  }
  static absl::StatusOr<State> Decode(absl::string_view text) {
    State s;
    bool header = false;
    int fields = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      if (line == "gryph-sub state 1") {
        header = true;
        continue;
      }
      const std::vector<absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
      const absl::string_view v = kv.size() == 2 ? kv[1] : "";
      bool ok = kv.size() == 2;
      if (ok && kv[0] == "subscription") {
        s.subscription = std::string(v);
      } else if (ok && kv[0] == "epoch") {
        ok = absl::SimpleAtoi(v, &s.epoch);
      } else if (ok && kv[0] == "ct") {
        std::string bytes;
        ok = absl::Base64Unescape(v, &bytes);
        absl::StatusOr<CheckpointToken> ct =
            ok ? CheckpointToken::Decode(bytes) : absl::InvalidArgumentError("");
        ok = ct.ok();
        if (ok) s.ct = *std::move(ct);
      } else if (ok && kv[0] == "events") {
        ok = absl::SimpleAtoi(v, &s.events);
      } else if (ok && kv[0] == "out_bytes") {
        ok = absl::SimpleAtoi(v, &s.out_bytes);
      } else {
        ok = false;
      }
      if (!ok) return absl::DataLossError(absl::StrCat("a damaged line: '", line, "'"));
      ++fields;
    }
    if (!header || fields != 5) return absl::DataLossError("not a gryph-sub state file");
    return s;
  }
};

// The subscriber's consumption: events are formatted into a buffer as they arrive; Sync()
// writes the buffer to the output, fsyncs it, then stores the state that covers it.
class Consumer : public DurableSubscriber::Handler {
 public:
  Consumer(State state, std::string state_path, int out_fd, bool fsync_out, bool count_only)
      : state_(std::move(state)),
        state_path_(std::move(state_path)),
        out_fd_(out_fd),
        fsync_out_(fsync_out),
        count_only_(count_only) {}

  void set_subscriber(DurableSubscriber* s) { subscriber_ = s; }
  void set_on_limit(std::function<void()> f) { on_limit_ = std::move(f); }
  const State& state() const { return state_; }
  uint64_t gaps() const { return gaps_; }
  uint64_t consumed() const { return consumed_; }

  void OnEvent(PubendId p, Tick t, const EventRef& event) override {
    heard_ = absl::Now();
    ++consumed_;
    if (!count_only_) {
      buffer_ += EventToJson(p, t, *event);
      buffer_ += '\n';
    }
    const int64_t limit = absl::GetFlag(FLAGS_exit_after);
    if (limit > 0 && state_.events + consumed_ >= static_cast<uint64_t>(limit) && on_limit_) {
      on_limit_();
    }
    if (buffer_.size() >= (size_t{1} << 20)) Sync();
  }
  void OnSilence(PubendId, Tick) override { heard_ = absl::Now(); }
  void OnGap(PubendId p, Tick t) override {
    heard_ = absl::Now();
    ++gaps_;
    std::fprintf(stderr,
                 "gryph-sub: a Gap at pubend %u through tick %llu: events there were released "
                 "before this subscription acknowledged them\n",
                 p.value, static_cast<unsigned long long>(t));
    if (!count_only_) {
      buffer_ += GapToJson(p, t);
      buffer_ += '\n';
    }
  }
  void OnConnected(const CheckpointToken& start) override {
    heard_ = absl::Now();
    std::fprintf(stderr, "gryph-sub: connected to %s at %s\n", subscriber_->broker().c_str(),
                 start.ToString().c_str());
    Sync();  // a new subscription's start CT, so that a restart resumes there
  }
  void OnError(const absl::Status& status) override {
    std::fprintf(stderr, "gryph-sub: %s\n", status.ToString().c_str());
    // The errors the subscriber does not recover from itself are this process's to end; so is a
    // delivery that does not match the selector (reported, not handed over).
    if ((subscriber_ != nullptr && !subscriber_->stopped().ok()) || absl::IsDataLoss(status)) {
      refused_ = true;
      if (on_limit_) on_limit_();
    }
  }
  bool refused() const { return refused_; }
  // When the broker was last heard from: a message delivered, or the connection answered. (A
  // broker sends a caught-up subscriber a Silence every silence_interval, a second by default.)
  absl::Time heard() const { return heard_; }

  // Makes everything consumed so far durable and acknowledgeable. Dies on an I/O error: what
  // was consumed is then redelivered to the next process.
  void Sync() {
    if (subscriber_ == nullptr) return;
    const CheckpointToken& ct = subscriber_->checkpoint();
    if (consumed_ == 0 && buffer_.empty() && ct == state_.ct) return;
    if (!buffer_.empty()) {
      absl::string_view rest = buffer_;
      while (!rest.empty()) {
        const ssize_t n = ::write(out_fd_, rest.data(), rest.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) Die(absl::StrCat("writing the output: ", std::strerror(errno)), kExitFailure);
        rest.remove_prefix(static_cast<size_t>(n));
      }
      if (fsync_out_ && ::fdatasync(out_fd_) != 0) {
        Die(absl::StrCat("syncing the output: ", std::strerror(errno)), kExitFailure);
      }
      state_.out_bytes += buffer_.size();
      buffer_.clear();
    }
    state_.ct = ct;
    state_.events += consumed_;
    consumed_ = 0;
    if (absl::Status s = WriteFileDurably(state_path_, state_.Encode()); !s.ok()) {
      Die(absl::StrCat("storing the state: ", s.ToString()), kExitFailure);
    }
    (void)subscriber_->Stored(state_.ct);  // a CT it had: always accepted
  }

 private:
  State state_;
  const std::string state_path_;
  const int out_fd_;
  const bool fsync_out_;
  const bool count_only_;
  DurableSubscriber* subscriber_ = nullptr;
  std::function<void()> on_limit_;
  std::string buffer_;
  uint64_t consumed_ = 0;  // events since the last Sync
  uint64_t gaps_ = 0;
  bool refused_ = false;
  absl::Time heard_ = absl::InfinitePast();
};

int Run() {
  const std::string broker = absl::GetFlag(FLAGS_broker);
  if (broker.empty()) Die("--broker is required (NAME@ENDPOINT of the SHB)");
  std::vector<std::string> brokers;
  for (absl::string_view spec : absl::StrSplit(broker, ',', absl::SkipEmpty())) {
    absl::StatusOr<std::string> name = PeerName(spec);
    if (!name.ok()) Die(name.status().message());
    brokers.push_back(*std::move(name));
  }
  if (brokers.empty()) Die("--broker names no broker");
  if (absl::GetFlag(FLAGS_failover_after) <= absl::ZeroDuration()) {
    Die("--failover_after must be positive");
  }
  const std::string subscription = absl::GetFlag(FLAGS_subscription);
  if (subscription.empty()) Die("--subscription is required");
  const std::string state_dir = absl::GetFlag(FLAGS_state_dir);
  if (state_dir.empty()) Die("--state_dir is required");
  std::string name = absl::GetFlag(FLAGS_name);
  if (name.empty()) name = subscription;
  if (absl::GetFlag(FLAGS_sync_interval) <= absl::ZeroDuration()) {
    Die("--sync_interval must be positive");
  }

  // The state: resume from it, or start a new subscription.
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) Die(absl::StrCat("--state_dir ", state_dir, ": ", ec.message()));
  const std::string state_path = state_dir + "/state";
  State state;
  if (absl::StatusOr<std::string> text = ReadFile(state_path); text.ok()) {
    absl::StatusOr<State> s = State::Decode(*text);
    if (!s.ok()) Die(absl::StrCat(state_path, ": ", s.status().message()));
    state = *std::move(s);
    if (state.subscription != subscription) {
      Die(absl::StrCat(state_path, " holds subscription '", state.subscription, "', not '",
                       subscription, "': use another --state_dir"));
    }
  } else if (absl::IsNotFound(text.status())) {
    state.subscription = subscription;
  } else {
    Die(text.status().message());
  }
  // A higher epoch than every earlier process's, durable before it is used: it fences them.
  ++state.epoch;
  if (absl::Status s = WriteFileDurably(state_path, state.Encode()); !s.ok()) {
    Die(absl::StrCat("--state_dir: ", s.message()));
  }

  // The output, cut back to what the state covers.
  const std::string out = absl::GetFlag(FLAGS_out);
  const bool count_only = absl::GetFlag(FLAGS_count);
  int out_fd = STDOUT_FILENO;
  bool file = false;
  if (!count_only && out != "-") {
    out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (out_fd < 0) Die(absl::StrCat("--out ", out, ": ", std::strerror(errno)));
    const off_t size = ::lseek(out_fd, 0, SEEK_END);
    if (size < static_cast<off_t>(state.out_bytes)) {
      Die(absl::StrCat("--out ", out, " is shorter (", size, " bytes) than the ", state.out_bytes,
                       " bytes this subscriber wrote to it: not its file"));
    }
    if (::ftruncate(out_fd, static_cast<off_t>(state.out_bytes)) != 0 ||
        ::lseek(out_fd, 0, SEEK_END) < 0) {
      Die(absl::StrCat("--out ", out, ": ", std::strerror(errno)));
    }
    file = true;
  }

  std::unique_ptr<ZmqChannel> channel = [&] {
    absl::StatusOr<std::unique_ptr<ZmqChannel>> c =
        OpenChannel({name, "", broker, absl::GetFlag(FLAGS_keys_dir)});
    if (!c.ok()) Die(c.status().ToString());
    return *std::move(c);
  }();
  Consumer consumer(state, state_path, out_fd, file, count_only);  // outlives the runtime
  absl::StatusOr<std::unique_ptr<Runtime>> runtime_or = Runtime::Create();
  if (!runtime_or.ok()) Die(runtime_or.status().ToString(), kExitFailure);
  std::unique_ptr<Runtime> runtime = *std::move(runtime_or);
  runtime->AddSource(channel.get());

  DurableSubscriberOptions o;
  o.subscription = subscription;
  o.selector = absl::GetFlag(FLAGS_selector);
  o.topic_filter = absl::GetFlag(FLAGS_topic);
  o.broker = brokers[0];
  o.checkpoint = state.ct;
  o.epoch = state.epoch;
  o.ack_stored_only = true;  // the broker hears only what the state file holds
  o.connect_retry_interval = absl::Seconds(2);
  absl::StatusOr<DurableSubscriber*> sub =
      runtime->OpenDurableSubscriber(o, channel.get(), &consumer);
  if (!sub.ok()) Die(sub.status().ToString());
  DurableSubscriber* ds = *sub;
  consumer.set_subscriber(ds);
  Runtime* rt = runtime.get();
  consumer.set_on_limit([rt] { rt->Post([rt] { rt->Shutdown(); }); });
  if (absl::Status s = runtime->ShutdownOnSignals(); !s.ok()) Die(s.ToString(), kExitFailure);

  // The runtime has sent the connection request; --unsubscribe withdraws it and deletes the
  // subscription instead, and stops once that has gone out (the broker does not answer it).
  const bool unsubscribe = absl::GetFlag(FLAGS_unsubscribe);
  if (unsubscribe) {
    runtime->Post([ds, rt] {
      if (absl::Status s = ds->Unsubscribe(); !s.ok()) Die(s.ToString(), kExitFailure);
      rt->Post([rt] { rt->Shutdown(); });
    });
  }
  absl::Status run;
  {
    // Reconnect anywhere: a broker not heard from for --failover_after (down, or cut off) hands
    // over to the next, which serves the subscription from its CT (by refiltering what it never
    // hosted).
    size_t current = 0;
    absl::Time moved = absl::Now();
    const absl::Duration failover_after = absl::GetFlag(FLAGS_failover_after);
    const Repeater sync(rt, absl::GetFlag(FLAGS_sync_interval), [&] {
      consumer.Sync();
      const absl::Time now = absl::Now();
      if (brokers.size() >= 2 && !consumer.refused() &&
          now - std::max(moved, consumer.heard()) >= failover_after) {
        moved = now;
        current = (current + 1) % brokers.size();
        std::fprintf(stderr, "gryph-sub: nothing from the broker for %s: moving to %s\n",
                     absl::FormatDuration(failover_after).c_str(), brokers[current].c_str());
        if (absl::Status s = ds->ConnectTo(brokers[current]); !s.ok()) {
          std::fprintf(stderr, "gryph-sub: %s\n", s.ToString().c_str());
        }
      }
    });
    const std::unique_ptr<Repeater> printer =
        PrintStats(rt, absl::GetFlag(FLAGS_stats_interval), [&consumer, ds] {
          const State& s = consumer.state();
          return absl::StrCat(ds->connected() ? "connected" : "not connected", " events ",
                              s.events + consumer.consumed(), " gaps ", consumer.gaps(), " ct ",
                              ds->checkpoint().ToString());
        });
    run = runtime->Run();
  }
  // The loop has ended (its final ack carried the last stored CT): store what came since.
  consumer.Sync();
  if (unsubscribe) {
    std::fprintf(stderr, "gryph-sub: unsubscribe sent for %s\n", subscription.c_str());
    (void)std::filesystem::remove(state_path, ec);
  }
  if (!run.ok()) Die(run.ToString(), kExitFailure);
  if (consumer.refused()) return kExitRefused;
  return 0;
}

}  // namespace
}  // namespace gryph::programs

int main(int argc, char** argv) {
  gryph::programs::SetProgramName("gryph-sub");
  absl::SetProgramUsageMessage(
      "a durable gryph subscriber: events as JSON lines, exactly once across restarts.\n"
      "  gryph-sub --broker=shb@tcp://10.0.0.3:7300 --subscription=audit "
      "--selector=\"price > 100\" --state_dir=/var/lib/gryph/audit --out=audit.jsonl");
  std::vector<char*> rest = gryph::programs::ParseFlags(argc, argv, "gryph_sub.cc");
  if (rest.size() > 1) {
    gryph::programs::Die(absl::StrCat("unexpected argument '", rest[1], "' (see --help)"));
  }
  return gryph::programs::Run();
}
