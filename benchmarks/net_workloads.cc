// The durable fan-out over the network, with every node in a process of its own (see
// gryph_bench.cc): net_fanout and net_scaleout.
//
// The benchmark forks the processes and steers them through a line protocol on pipes:
//   - a PHB (one pubend, sync durability) listening on TCP loopback;
//   - one or more SHBs (sync durability), each dialing the PHB and listening for subscribers;
//   - a publisher process: kPublishers RemotePublishers, each on a ZeroMQ connection of its own
//     (a publisher keeps at most Pubend::kSequenceWindow publishes in flight, so one alone would
//     measure its round trip, not the brokers);
//   - client processes, each hosting durable subscribers, every one on a connection of its own.
// Events carry their publisher, sequence, phase and the steady-clock instant of their publish
// (CLOCK_MONOTONIC, one clock for every process of the host), a topic t0..t9 and a 250-byte
// payload; subscriber i takes topic t(i mod 10), so each event matches a tenth of them.
//
// What a subscriber checks: ticks strictly increasing, each (publisher, sequence) at most once
// (a bitmap per publisher, kept across its process's restarts in a state file with its CT), the
// topic its own. At the end every publish has been acknowledged by the PHB, so the expected
// events of a subscriber are known exactly: `lost` counts those it never got, `duplicated` the
// deliveries of something it had.
//
// The raw baseline (zmq_raw_msgs_per_s): a process in the SHB's place sends frames of an encoded
// delivery's size over one ROUTER to as many DEALERs, spread over as many client processes, as
// the subscribers of the gryph run, round-robin, blocking when a peer's queue is full; the
// clients count what arrives.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "benchmarks/workload.h"
#include "gryph/log.h"
#include "gryph/runtime.h"
#include "gryph/zmq_channel.h"

ABSL_FLAG(std::string, scaleout_shbs, "1,2,4",
          "net_scaleout: the SHB counts to run, comma-separated (each with and without churn)");
ABSL_FLAG(std::string, scaleout_churn, "no,yes",
          "net_scaleout: without churn (no), with it (yes), or both (no,yes)");
ABSL_FLAG(std::string, scaleout_churn_pattern, "100,500",
          "net_scaleout with churn: PERIOD_MS,AWAY_MS (each client sends one subscriber away "
          "every PERIOD_MS, for AWAY_MS)");

namespace gryph::bench {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NowNs() { return Clock::now().time_since_epoch() / std::chrono::nanoseconds(1); }

constexpr int kTopics = 10;
constexpr size_t kPayloadBytes = 250;
constexpr int kPublishers = 16;
constexpr PubendId kPubend{1};
// What the parent waits for one answer of a child, at most.
constexpr int kAnswerTimeoutMs = 180'000;

std::string Topic(int k) { return absl::StrCat("t", k); }
int TopicOf(int publisher, uint64_t sequence) {
  return static_cast<int>((sequence + static_cast<uint64_t>(publisher)) % kTopics);
}

// ---------------------------------------------------------------------------------------------
// Child processes.

// The processes alive, for Fail.
std::vector<pid_t>& LiveChildren() {
  static std::vector<pid_t> pids;
  return pids;
}

// A forked process steered by lines on two pipes.
class Child {
 public:
  using Body = std::function<int(FILE* in, FILE* out)>;

  // Forks; the child runs `body` with its ends of the pipes and exits with what it returns.
  static std::unique_ptr<Child> Spawn(const Body& body) {
    int down[2];
    int up[2];
    if (pipe(down) != 0 || pipe(up) != 0) return nullptr;
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) return nullptr;
    if (pid == 0) {
      close(down[1]);
      close(up[0]);
      FILE* in = fdopen(down[0], "r");
      FILE* out = fdopen(up[1], "w");
      const int code = body(in, out);
      std::fflush(out);
      _exit(code);
    }
    close(down[0]);
    close(up[1]);
    LiveChildren().push_back(pid);
    return std::unique_ptr<Child>(new Child(pid, down[1], up[0]));
  }

  ~Child() {
    Kill(SIGKILL);
    close(to_);
    close(from_);
  }

  void Send(absl::string_view line) {
    std::string s = absl::StrCat(line, "\n");
    if (write(to_, s.data(), s.size()) < 0) return;
  }

  // The next line (without its newline); empty when the child closed its end or stayed silent
  // for kAnswerTimeoutMs.
  std::string Receive() {
    for (;;) {
      if (size_t nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, kAnswerTimeoutMs) <= 0) return "";
      char chunk[65536];
      const ssize_t n = read(from_, chunk, sizeof(chunk));
      if (n <= 0) return "";
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // Sends `line`, returns the answer.
  std::string Ask(absl::string_view line) {
    Send(line);
    return Receive();
  }

  // Signals the process and reaps it (a no-op once reaped).
  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    waitpid(pid_, nullptr, 0);
    Reaped();
  }

  // Waits for the process to end by itself, for at most `timeout`; then kills it.
  void Join(std::chrono::milliseconds timeout) {
    const auto end = Clock::now() + timeout;
    while (pid_ > 0 && Clock::now() < end) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        Reaped();
        return;
      }
      usleep(10'000);
    }
    Kill(SIGKILL);
  }

  // User plus system CPU seconds the process has used so far (every thread).
  double CpuSeconds() const {
    std::ifstream stat(absl::StrCat("/proc/", pid_, "/stat"));
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close_paren = text.rfind(')');
    if (close_paren == std::string::npos) return 0;
    std::vector<std::string> fields = absl::StrSplit(text.substr(close_paren + 2), ' ');
    // Fields 14 and 15 of the file (utime, stime) are 11 and 12 after the command's name.
    if (fields.size() < 13) return 0;
    double utime = 0;
    double stime = 0;
    (void)absl::SimpleAtod(fields[11], &utime);
    (void)absl::SimpleAtod(fields[12], &stime);
    return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }

 private:
  Child(pid_t pid, int to, int from) : pid_(pid), to_(to), from_(from) {}
  void Reaped() {
    std::erase(LiveChildren(), pid_);
    pid_ = -1;
  }
  pid_t pid_;
  const int to_;
  const int from_;
  std::string buffer_;
};

// In a child: the next command line, empty at EOF.
std::string ReadCommand(FILE* in) {
  std::string line;
  for (int c = std::fgetc(in); c != EOF && c != '\n'; c = std::fgetc(in)) {
    line.push_back(static_cast<char>(c));
  }
  return line;
}

void Answer(FILE* out, absl::string_view line) {
  std::fprintf(out, "%.*s\n", static_cast<int>(line.size()), line.data());
  std::fflush(out);
}

// Fails the child with a message on stderr.
int ChildFailed(absl::string_view role, const absl::Status& status) {
  std::fprintf(stderr, "net workload %.*s: %s\n", static_cast<int>(role.size()), role.data(),
               status.ToString().c_str());
  return 1;
}

// Runs `runtime` until a "quit" line or EOF on `in`, answering other lines with `answer`, which
// runs on the loop thread.
void ServeCommands(Runtime* runtime, FILE* in, FILE* out,
                   const std::function<std::string(const std::string&)>& answer) {
  std::thread control([&] {
    for (;;) {
      const std::string command = ReadCommand(in);
      if (command.empty() || command == "quit") break;
      std::string reply;
      runtime->Call([&] { reply = answer(command); });
      Answer(out, reply);
    }
    runtime->Shutdown();
  });
  (void)runtime->Run();
  control.join();
}

ZmqChannelOptions ChannelOptions(std::string name, std::string listen) {
  ZmqChannelOptions o;
  o.name = std::move(name);
  o.listen = std::move(listen);
  o.log = [](const std::string&) {};  // peers restarting on purpose are not news here
  return o;
}

// A broker's warnings and errors, on standard error (what explains a run that went wrong).
LogSink WarningsToStderr() {
  return [sink = StderrLogSink()](const LogRecord& r) {
    if (r.level >= LogLevel::kWarning) sink(r);
  };
}

StorageOptions StoreOptions(const std::string& dir) {
  StorageOptions so;
  so.path = dir;
  so.durability = Durability::kSync;
  so.initial_map_bytes = uint64_t{1} << 30;
  return so;
}

// ---------------------------------------------------------------------------------------------
// The brokers.

// Answers "ready <endpoint>", then serves until "quit".
int PhbMain(const std::string& dir, std::vector<std::string> downstream, FILE* in, FILE* out) {
  auto storage = OpenLmdbStorage(StoreOptions(dir));
  if (!storage.ok()) return ChildFailed("phb", storage.status());
  auto channel = ZmqChannel::Create(ChannelOptions("phb", "tcp://127.0.0.1:*"));
  if (!channel.ok()) return ChildFailed("phb", channel.status());
  auto runtime = Runtime::Create();
  if (!runtime.ok()) return ChildFailed("phb", runtime.status());
  (*runtime)->AddSource(channel->get());
  PublisherHostingBrokerOptions po;
  po.pubends.push_back(PubendOptions{kPubend});
  po.downstream = std::move(downstream);
  po.log = WarningsToStderr();
  auto phb = (*runtime)->OpenPublisherHostingBroker(po, storage->get(), channel->get());
  if (!phb.ok()) return ChildFailed("phb", phb.status());
  Answer(out, absl::StrCat("ready ", (*channel)->bound_endpoint()));
  ServeCommands(runtime->get(), in, out, [](const std::string&) { return std::string("?"); });
  return 0;
}

// Listens on `listen` (a port of its own choosing for "tcp://127.0.0.1:*", the same again on a
// restart); answers "ready <endpoint>", then "delivered <n>" to "stats", until "quit".
int ShbMain(const std::string& name, const std::string& dir, const std::string& listen,
            const std::string& phb_endpoint, FILE* in, FILE* out) {
  auto storage = OpenLmdbStorage(StoreOptions(dir));
  if (!storage.ok()) return ChildFailed(name, storage.status());
  ZmqChannelOptions co = ChannelOptions(name, listen);
  co.peers = {{"phb", phb_endpoint, ""}};
  absl::StatusOr<std::unique_ptr<ZmqChannel>> channel;
  // A restarted SHB may find its port held for a moment by the process it replaces.
  for (int attempt = 0; attempt < 100; ++attempt) {
    channel = ZmqChannel::Create(co);
    if (channel.ok() || !absl::IsUnavailable(channel.status())) break;
    usleep(50'000);
  }
  if (!channel.ok()) return ChildFailed(name, channel.status());
  auto runtime = Runtime::Create();
  if (!runtime.ok()) return ChildFailed(name, runtime.status());
  (*runtime)->AddSource(channel->get());
  SubscriberHostingBrokerOptions so;
  so.pubends.push_back({kPubend, "phb"});
  so.session_timeout = absl::Seconds(5);
  so.log = WarningsToStderr();
  auto shb = (*runtime)->OpenSubscriberHostingBroker(so, storage->get(), channel->get());
  if (!shb.ok()) return ChildFailed(name, shb.status());
  Answer(out, absl::StrCat("ready ", (*channel)->bound_endpoint()));
  SubscriberHostingBroker* broker = *shb;
  ServeCommands(runtime->get(), in, out, [broker](const std::string&) {
    return absl::StrCat("delivered ", broker->stats().events_delivered, " status ",
                        broker->status().ok() ? "ok" : "stopped");
  });
  return broker->status().ok() ? 0 : ChildFailed(name, broker->status());
}

// ---------------------------------------------------------------------------------------------
// The publisher.

// kPublishers RemotePublishers on the loop. Commands:
//   "publish RATE COUNT PHASE": publishes COUNT events of PHASE at RATE events/s (0: as fast as
//     the publishers' windows allow), answers "done SENT ACKED ELAPSED_NS" once each is acked;
//   "sequences": answers the last sequence of each publisher.
class PublisherProcess {
 public:
  int Main(const std::string& phb_endpoint, FILE* in, FILE* out) {
    auto runtime = Runtime::Create();
    if (!runtime.ok()) return ChildFailed("publisher", runtime.status());
    runtime_ = std::move(*runtime);
    for (int i = 0; i < kPublishers; ++i) {
      ZmqChannelOptions co = ChannelOptions(absl::StrCat("pub-", i), "");
      co.peers = {{"phb", phb_endpoint, ""}};
      auto channel = ZmqChannel::Create(co);
      if (!channel.ok()) return ChildFailed("publisher", channel.status());
      runtime_->AddSource(channel->get());
      RemotePublisherOptions ro;
      ro.phb = "phb";
      auto publisher = runtime_->OpenRemotePublisher(ro, channel->get());
      if (!publisher.ok()) return ChildFailed("publisher", publisher.status());
      channels_.push_back(*std::move(channel));
      publishers_.push_back({*publisher});
    }
    if (absl::Status s = runtime_->Start(); !s.ok()) return ChildFailed("publisher", s);
    for (;;) {
      const std::string command = ReadCommand(in);
      if (command.empty() || command == "quit") break;
      std::vector<std::string> words = absl::StrSplit(command, ' ');
      if (words[0] == "sequences") {
        std::string reply = "sequences";
        runtime_->Call([&] {
          for (const Lane& lane : publishers_) absl::StrAppend(&reply, " ", lane.sequence);
        });
        Answer(out, reply);
      } else if (words[0] == "publish" && words.size() == 4) {
        double rate = 0;
        uint64_t count = 0;
        int64_t phase = 0;
        if (!absl::SimpleAtod(words[1], &rate) || !absl::SimpleAtoi(words[2], &count) ||
            !absl::SimpleAtoi(words[3], &phase)) {
          Answer(out, "error");
          continue;
        }
        Answer(out, Publish(rate, count, phase));
      } else {
        Answer(out, "error");
      }
    }
    runtime_->Shutdown();
    return 0;
  }

 private:
  struct Lane {
    RemotePublisher* publisher;
    uint64_t sequence = 0;  // the last one taken
  };

  // On the loop: publishes what `allowed` leaves room for, round-robin over the publishers,
  // each as far as its window goes.
  void Pump() {
    for (size_t spins = 0; sent_ < allowed_ && spins < publishers_.size(); ++spins) {
      const size_t i = next_lane_;
      next_lane_ = (next_lane_ + 1) % publishers_.size();
      Lane& lane = publishers_[i];
      while (sent_ < allowed_ && lane.publisher->outstanding() < Pubend::kSequenceWindow) {
        const uint64_t sequence = lane.sequence + 1;
        Event e;
        e.SetTopic(Topic(TopicOf(static_cast<int>(i), sequence)))
            .SetInt64("publisher", static_cast<int64_t>(i))
            .SetInt64("sequence", static_cast<int64_t>(sequence))
            .SetInt64("phase", phase_)
            .SetInt64("published_ns", NowNs())
            .SetPayload(payload_);
        absl::Status s = lane.publisher->Publish(sequence, kPubend, MakeEventRef(std::move(e)),
                                                 [this](absl::StatusOr<Tick> tick) {
                                                   if (tick.ok()) {
                                                     ++acked_;
                                                   } else {
                                                     ++refused_;
                                                   }
                                                   Pump();
                                                 });
        if (!s.ok()) break;
        lane.sequence = sequence;
        ++sent_;
        spins = 0;
      }
    }
  }

  std::string Publish(double rate, uint64_t count, int64_t phase) {
    runtime_->Call([&] {
      phase_ = phase;
      sent_ = acked_ = refused_ = 0;
      allowed_ = rate > 0 ? 0 : count;
      Pump();
    });
    const auto start = Clock::now();
    const auto give_up = start + std::chrono::seconds(120);
    for (;;) {
      bool done = false;
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      runtime_->Call([&] {
        if (rate > 0) {
          allowed_ = std::min<uint64_t>(count, static_cast<uint64_t>(rate * elapsed) + 1);
          Pump();
        }
        done = acked_ + refused_ == count;
      });
      if (done || Clock::now() > give_up) break;
      std::this_thread::sleep_for(std::chrono::microseconds(rate > 0 ? 200 : 2000));
    }
    uint64_t sent = 0;
    uint64_t acked = 0;
    runtime_->Call([&] {
      sent = sent_;
      acked = acked_;
    });
    return absl::StrCat("done ", sent, " ", acked, " ", (Clock::now() - start).count());
  }

  const std::string payload_ = std::string(kPayloadBytes, 'p');
  std::unique_ptr<Runtime> runtime_;
  std::vector<std::unique_ptr<ZmqChannel>> channels_;
  std::vector<Lane> publishers_;
  // On the loop thread.
  size_t next_lane_ = 0;
  int64_t phase_ = 0;
  uint64_t allowed_ = 0;  // events this publish may have sent by now
  uint64_t sent_ = 0;
  uint64_t acked_ = 0;
  uint64_t refused_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The subscribers.

// Latencies in microseconds, in buckets of 1 µs below 10 ms and of 100 µs up to 1 s.
class LatencyBuckets {
 public:
  static constexpr size_t kFine = 10'000;
  static constexpr size_t kBuckets = kFine + 9'900 + 1;

  void Add(int64_t micros) {
    size_t b = micros < 0 ? 0 : static_cast<size_t>(micros);
    if (b >= kFine) b = std::min(kBuckets - 1, kFine + (b - kFine) / 100);
    ++counts_[b];
  }
  static double Micros(size_t bucket) {
    return bucket < kFine ? static_cast<double>(bucket)
                          : static_cast<double>(kFine + (bucket - kFine) * 100);
  }
  // "i:n i:n ..." for the buckets in use.
  std::string Encode() const {
    std::string s;
    for (size_t b = 0; b < kBuckets; ++b) {
      if (counts_[b] != 0) absl::StrAppend(&s, s.empty() ? "" : " ", b, ":", counts_[b]);
    }
    return s;
  }
  void Merge(absl::string_view encoded) {
    for (absl::string_view item : absl::StrSplit(encoded, ' ', absl::SkipEmpty())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(item, ':');
      size_t b = 0;
      uint64_t n = 0;
      if (absl::SimpleAtoi(kv.first, &b) && absl::SimpleAtoi(kv.second, &n) && b < kBuckets) {
        counts_[b] += n;
      }
    }
  }
  double Percentile(double p) const {
    uint64_t total = 0;
    for (uint64_t c : counts_) total += c;
    if (total == 0) return 0;
    const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(p / 100.0 * total + 0.5));
    uint64_t seen = 0;
    for (size_t b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (seen >= rank) return Micros(b);
    }
    return Micros(kBuckets - 1);
  }

 private:
  std::vector<uint64_t> counts_ = std::vector<uint64_t>(kBuckets, 0);
};

// What one phase's events did at a client process.
struct PhaseFigures {
  uint64_t deliveries = 0;
  int64_t first_ns = 0;
  int64_t last_ns = 0;
  LatencyBuckets latency;
};

class ClientProcess;

// One durable subscriber and what it has seen.
class Subscriber final : public DurableSubscriber::Handler {
 public:
  Subscriber(ClientProcess* process, int index) : process_(process), index_(index) {}

  void OnEvent(PubendId p, Tick t, const EventRef& event) override;
  void OnGap(PubendId, Tick) override { ++gaps_; }
  // Counted by code, the first of each kept: most are retried by the DurableSubscriber itself,
  // the others end its reconnections (explain prints them).
  void OnError(const absl::Status& status) override {
    auto [it, first] = errors_.try_emplace(status.code(), 0, status.ToString());
    ++it->second.first;
  }

  int index() const { return index_; }
  int topic() const { return index_ % kTopics; }

  // The state file's line: "index CT-base64 last_tick b0 b1 ..." (b: the seen bitmaps, one per
  // publisher, in hex words).
  std::string Save(const CheckpointToken& ct) const;
  bool Load(absl::string_view line, CheckpointToken* ct);

  // Against the acknowledged publishes (last sequence per publisher): what is missing.
  uint64_t Lost(const std::vector<uint64_t>& last_sequences) const {
    uint64_t lost = 0;
    for (size_t p = 0; p < last_sequences.size(); ++p) {
      for (uint64_t s = 1; s <= last_sequences[p]; ++s) {
        if (TopicOf(static_cast<int>(p), s) == topic() && !Seen(p, s)) ++lost;
      }
    }
    return lost;
  }
  // "index lost L ..., first missing p:s ..., last tick T" for a report of what went wrong.
  std::string ExplainLost(const std::vector<uint64_t>& last_sequences) const {
    std::string missing;
    uint64_t lost = 0;
    for (size_t p = 0; p < last_sequences.size(); ++p) {
      for (uint64_t s = 1; s <= last_sequences[p]; ++s) {
        if (TopicOf(static_cast<int>(p), s) != topic() || Seen(p, s)) continue;
        if (++lost <= 5) absl::StrAppend(&missing, " ", p, ":", s);
      }
    }
    std::string errors;
    for (const auto& [code, e] : errors_) {
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", e.first, " x ", e.second);
    }
    return absl::StrCat("subscriber ", index_, " lost ", lost, ", first missing (publisher:seq)",
                        missing, ", last tick ", last_tick_, ", misdelivered ", misdelivered_,
                        ", errors: ", errors.empty() ? "none" : errors);
  }
  uint64_t duplicated() const { return duplicated_; }
  uint64_t misdelivered() const { return misdelivered_; }
  uint64_t gaps() const { return gaps_; }
  int64_t last_phase_ns(int64_t phase) const {
    return phase < static_cast<int64_t>(last_phase_ns_.size()) ? last_phase_ns_[phase] : 0;
  }

 private:
  bool Seen(size_t p, uint64_t s) const {
    return p < seen_.size() && s / 64 < seen_[p].size() && (seen_[p][s / 64] >> (s % 64)) & 1;
  }
  // Marks it; false when it was marked already.
  bool Mark(size_t p, uint64_t s) {
    if (seen_.size() <= p) seen_.resize(p + 1);
    std::vector<uint64_t>& bits = seen_[p];
    if (bits.size() <= s / 64) bits.resize(s / 64 + 1024, 0);
    const uint64_t bit = uint64_t{1} << (s % 64);
    if (bits[s / 64] & bit) return false;
    bits[s / 64] |= bit;
    return true;
  }

  ClientProcess* const process_;
  const int index_;
  Tick last_tick_ = 0;
  std::vector<std::vector<uint64_t>> seen_;
  std::vector<int64_t> last_phase_ns_;
  uint64_t duplicated_ = 0;
  uint64_t misdelivered_ = 0;
  uint64_t gaps_ = 0;
  std::map<absl::StatusCode, std::pair<uint64_t, std::string>> errors_;  // count, first
};

// A client process: durable subscribers `indexes`, each on a connection of its own to the SHB,
// resuming from the state file when it exists (which it writes when told to quit). Commands:
//   "report PHASE": "report START_NS DELIVERIES FIRST_NS LAST_NS BUCKETS" for that phase;
//   "check S0 S1 ...": against those last sequences per publisher, "check LOST DUPLICATED
//     MISDELIVERED GAPS CAUGHT_UP_NS", CAUGHT_UP_NS the latest last delivery of phase 2 among
//     the subscribers (0 if one is missing something);
//   "churn PERIOD_MS AWAY_MS": from now on, every PERIOD_MS the next subscriber (round-robin)
//     disconnects and connects again AWAY_MS later from its CT; "churn 0 0" stops that and
//     connects every one still away; answers "churning";
//   "explain S0 S1 ...": writes a line to standard error for each subscriber missing something
//     (what, and its connection and CT), answers "explained";
//   "quit": final acks, the state file, exit.
class ClientProcess {
 public:
  int Main(const std::string& shb_name, const std::string& shb_endpoint,
           const std::vector<int>& indexes, const std::string& state_file, FILE* in, FILE* out) {
    start_ns_ = NowNs();
    auto runtime = Runtime::Create();
    if (!runtime.ok()) return ChildFailed("client", runtime.status());
    std::vector<std::string> saved = LoadLines(state_file);
    std::vector<std::unique_ptr<ZmqChannel>> channels;
    for (size_t k = 0; k < indexes.size(); ++k) {
      subscribers_.push_back(std::make_unique<Subscriber>(this, indexes[k]));
      Subscriber* s = subscribers_.back().get();
      DurableSubscriberOptions o;
      o.subscription = absl::StrCat("sub-", s->index());
      o.topic_filter = Topic(s->topic());
      o.broker = shb_name;
      o.epoch = 1;
      if (k < saved.size()) {
        if (!s->Load(saved[k], &o.checkpoint)) {
          return ChildFailed("client", absl::DataLossError("unreadable state file"));
        }
        o.epoch = static_cast<uint64_t>(NowNs());  // a new process fences the old session
      }
      ZmqChannelOptions co = ChannelOptions(o.subscription, "");
      co.peers = {{shb_name, shb_endpoint, ""}};
      auto channel = ZmqChannel::Create(co);
      if (!channel.ok()) return ChildFailed("client", channel.status());
      (*runtime)->AddSource(channel->get());
      auto subscriber = (*runtime)->OpenDurableSubscriber(o, channel->get(), s);
      if (!subscriber.ok()) return ChildFailed("client", subscriber.status());
      durable_.push_back(*subscriber);
      channels.push_back(*std::move(channel));
    }
    runtime_ = runtime->get();
    Answer(out, "ready");
    ServeCommands(runtime_, in, out, [this](const std::string& c) { return Command(c); });
    StopChurn();
    std::string state;
    for (size_t k = 0; k < subscribers_.size(); ++k) {
      absl::StrAppend(&state, subscribers_[k]->Save(durable_[k]->checkpoint()), "\n");
    }
    std::ofstream(state_file, std::ios::trunc) << state;
    return 0;
  }

  // On the loop thread.
  void Delivered(int64_t phase, int64_t published_ns) {
    if (phase < 0 || phase >= 8) return;
    PhaseFigures& f = phases_[phase];
    const int64_t now = NowNs();
    if (f.deliveries++ == 0) f.first_ns = now;
    f.last_ns = now;
    f.latency.Add((now - published_ns) / 1000);
  }

 private:
  static std::vector<std::string> LoadLines(const std::string& file) {
    std::vector<std::string> lines;
    std::ifstream f(file);
    for (std::string line; std::getline(f, line);) {
      if (!line.empty()) lines.push_back(line);
    }
    return lines;
  }

  // Disconnections and reconnections, posted to the loop by a thread of their own.
  void StartChurn(absl::Duration period, absl::Duration away) {
    churning_.store(true);
    churn_ = std::thread([this, period, away] {
      struct Away {
        absl::Time back;
        size_t k;
      };
      std::vector<Away> gone;
      size_t next = 0;
      absl::Time due = absl::Now();
      while (churning_.load()) {
        absl::SleepFor(absl::Milliseconds(5));
        const absl::Time now = absl::Now();
        std::vector<size_t> back;
        while (!gone.empty() && gone.front().back <= now) {
          back.push_back(gone.front().k);
          gone.erase(gone.begin());
        }
        std::vector<size_t> leave;
        if (now >= due) {
          due += period;
          bool already = false;
          for (const Away& a : gone) already = already || a.k == next;
          if (!already) {
            leave.push_back(next);
            gone.push_back({now + away, next});
          }
          next = (next + 1) % durable_.size();
        }
        if (back.empty() && leave.empty()) continue;
        runtime_->Post([this, back, leave] {
          for (size_t k : leave) (void)durable_[k]->Disconnect();
          for (size_t k : back) (void)durable_[k]->Connect();
        });
      }
      runtime_->Post([this, gone] {
        for (const Away& a : gone) (void)durable_[a.k]->Connect();
      });
    });
  }
  void StopChurn() {
    churning_.store(false);
    if (churn_.joinable()) churn_.join();
  }

  std::string Command(const std::string& command) {
    std::vector<std::string> words = absl::StrSplit(command, ' ', absl::SkipEmpty());
    if (words.size() == 3 && words[0] == "churn") {
      int64_t period_ms = 0;
      int64_t away_ms = 0;
      if (!absl::SimpleAtoi(words[1], &period_ms) || !absl::SimpleAtoi(words[2], &away_ms)) {
        return "error";
      }
      // StopChurn joins a thread that only posts; it never waits for this loop.
      StopChurn();
      if (period_ms > 0) StartChurn(absl::Milliseconds(period_ms), absl::Milliseconds(away_ms));
      return "churning";
    }
    if (words.size() == 2 && words[0] == "report") {
      int64_t phase = 0;
      if (!absl::SimpleAtoi(words[1], &phase) || phase < 0 || phase >= 8) return "error";
      const PhaseFigures& f = phases_[phase];
      return absl::StrCat("report ", start_ns_, " ", f.deliveries, " ", f.first_ns, " ", f.last_ns,
                          " ", f.latency.Encode());
    }
    if (!words.empty() && words[0] == "check") {
      std::vector<uint64_t> last(words.size() - 1);
      for (size_t i = 1; i < words.size(); ++i) (void)absl::SimpleAtoi(words[i], &last[i - 1]);
      uint64_t lost = 0;
      uint64_t duplicated = 0;
      uint64_t misdelivered = 0;
      uint64_t gaps = 0;
      int64_t caught_up = 0;
      bool all = true;
      for (const auto& s : subscribers_) {
        const uint64_t l = s->Lost(last);
        lost += l;
        all = all && l == 0;
        duplicated += s->duplicated();
        misdelivered += s->misdelivered();
        gaps += s->gaps();
        caught_up = std::max(caught_up, s->last_phase_ns(2));
      }
      return absl::StrCat("check ", lost, " ", duplicated, " ", misdelivered, " ", gaps, " ",
                          all ? caught_up : 0);
    }
    if (!words.empty() && words[0] == "explain") {
      std::vector<uint64_t> last(words.size() - 1);
      for (size_t i = 1; i < words.size(); ++i) (void)absl::SimpleAtoi(words[i], &last[i - 1]);
      for (size_t k = 0; k < subscribers_.size(); ++k) {
        if (subscribers_[k]->Lost(last) == 0) continue;
        // Commands run on the loop thread (ServeCommands), which owns the subscribers.
        const std::string state =
            absl::StrCat(durable_[k]->connected() ? "connected" : "not connected",
                         durable_[k]->connecting() ? " (connecting)" : "", ", CT ",
                         durable_[k]->checkpoint().ToString(), ", reconnects ",
                         durable_[k]->reconnects(), ", resyncs ", durable_[k]->resyncs(),
                         durable_[k]->stopped().ok()
                             ? ""
                             : absl::StrCat(", gave up after ", durable_[k]->stopped().ToString()));
        std::fprintf(stderr, "net client: %s; %s\n", subscribers_[k]->ExplainLost(last).c_str(),
                     state.c_str());
      }
      return "explained";
    }
    return "error";
  }

  int64_t start_ns_ = 0;
  Runtime* runtime_ = nullptr;
  std::atomic<bool> churning_{false};
  std::thread churn_;
  std::vector<std::unique_ptr<Subscriber>> subscribers_;
  std::vector<DurableSubscriber*> durable_;
  PhaseFigures phases_[8];
};

void Subscriber::OnEvent(PubendId, Tick t, const EventRef& event) {
  const auto* publisher = std::get_if<int64_t>(event->Find("publisher"));
  const auto* sequence = std::get_if<int64_t>(event->Find("sequence"));
  const auto* phase = std::get_if<int64_t>(event->Find("phase"));
  const auto* published = std::get_if<int64_t>(event->Find("published_ns"));
  if (publisher == nullptr || sequence == nullptr || phase == nullptr || published == nullptr ||
      *publisher < 0 || *sequence <= 0 || event->topic() != Topic(topic()) || t <= last_tick_) {
    ++misdelivered_;
    return;
  }
  last_tick_ = t;
  if (!Mark(static_cast<size_t>(*publisher), static_cast<uint64_t>(*sequence))) {
    ++duplicated_;
    return;
  }
  if (static_cast<int64_t>(last_phase_ns_.size()) <= *phase) last_phase_ns_.resize(*phase + 1);
  last_phase_ns_[*phase] = NowNs();
  process_->Delivered(*phase, *published);
}

std::string Subscriber::Save(const CheckpointToken& ct) const {
  std::string line = absl::StrCat(index_, " ", absl::Base64Escape(ct.Encode()), " ", last_tick_);
  for (const std::vector<uint64_t>& bits : seen_) {
    absl::StrAppend(&line, " ");
    for (uint64_t w : bits) absl::StrAppend(&line, absl::Hex(w), ",");
  }
  return line;
}

bool Subscriber::Load(absl::string_view line, CheckpointToken* ct) {
  std::vector<std::string> words = absl::StrSplit(line, ' ');
  int index = 0;
  std::string bytes;
  if (words.size() < 3 || !absl::SimpleAtoi(words[0], &index) || index != index_ ||
      !absl::Base64Unescape(words[1], &bytes) || !absl::SimpleAtoi(words[2], &last_tick_)) {
    return false;
  }
  absl::StatusOr<CheckpointToken> decoded = CheckpointToken::Decode(bytes);
  if (!decoded.ok()) return false;
  *ct = *std::move(decoded);
  seen_.clear();
  for (size_t i = 3; i < words.size(); ++i) {
    std::vector<uint64_t>& bits = seen_.emplace_back();
    for (absl::string_view w : absl::StrSplit(words[i], ',', absl::SkipEmpty())) {
      uint64_t v = 0;
      if (!absl::SimpleHexAtoi(w, &v)) return false;
      bits.push_back(v);
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// The raw baseline.

// The size of one delivery's encoded message, as the SHB sends it.
size_t DeliveryFrameBytes() {
  Event e;
  e.SetTopic(Topic(3))
      .SetInt64("publisher", 7)
      .SetInt64("sequence", 123456)
      .SetInt64("phase", 1)
      .SetInt64("published_ns", NowNs())
      .SetPayload(std::string(kPayloadBytes, 'p'));
  return EncodeMessage(DeliveryMessage{"sub-42", kPubend, DeliveryKind::kEvent, 1'000'000,
                                       MakeEventRef(std::move(e)), 999'999})
      .size();
}

// The SHB's stand-in: "ready ENDPOINT", then on "send SECONDS BYTES ID..." sends frames of BYTES
// round-robin to the ids for SECONDS (each id first reached, then an empty frame to each at the
// end), answering "sent N".
int RawSenderMain(FILE* in, FILE* out) {
  void* ctx = zmq_ctx_new();
  void* router = zmq_socket(ctx, ZMQ_ROUTER);
  int one = 1;
  int hwm = 100'000;
  zmq_setsockopt(router, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
  zmq_setsockopt(router, ZMQ_SNDHWM, &hwm, sizeof(hwm));
  if (zmq_bind(router, "tcp://127.0.0.1:*") != 0) return 1;
  char endpoint[256];
  size_t size = sizeof(endpoint);
  zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &size);
  Answer(out, absl::StrCat("ready ", endpoint));
  std::vector<std::string> words = absl::StrSplit(ReadCommand(in), ' ', absl::SkipEmpty());
  double seconds = 0;
  size_t bytes = 0;
  if (words.size() < 4 || words[0] != "send" || !absl::SimpleAtod(words[1], &seconds) ||
      !absl::SimpleAtoi(words[2], &bytes)) {
    return 1;
  }
  const std::vector<std::string> ids(words.begin() + 3, words.end());
  auto send_to = [&](const std::string& id, const std::string& frame, int flags) {
    return zmq_send(router, id.data(), id.size(), ZMQ_SNDMORE | flags) >= 0 &&
           zmq_send(router, frame.data(), frame.size(), flags) >= 0;
  };
  const std::string frame(bytes, 'x');
  const std::string hello;
  // A DEALER that has not finished connecting is unknown to the ROUTER: retry until each is in.
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  for (const std::string& id : ids) {
    while (!send_to(id, frame, ZMQ_DONTWAIT) && Clock::now() < give_up) usleep(1000);
  }
  uint64_t sent = ids.size();
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    for (const std::string& id : ids) sent += send_to(id, frame, 0) ? 1 : 0;
  }
  for (const std::string& id : ids) send_to(id, hello, 0);
  Answer(out, absl::StrCat("sent ", sent));
  (void)ReadCommand(in);  // "quit", once the receivers are through
  zmq_close(router);
  zmq_ctx_term(ctx);
  return 0;
}

// A subscriber process's stand-in: one DEALER per id, each with a context of its own as each
// ZmqChannel has, connected to ENDPOINT; counts frames until each got its empty one, answering
// "received N FIRST_NS LAST_NS".
int RawReceiverMain(const std::string& endpoint, const std::vector<std::string>& ids, FILE*,
                    FILE* out) {
  struct Socket {
    void* ctx;
    void* dealer;
    bool done = false;
  };
  std::vector<Socket> sockets;
  for (const std::string& id : ids) {
    void* ctx = zmq_ctx_new();
    void* dealer = zmq_socket(ctx, ZMQ_DEALER);
    int hwm = 20'000;
    zmq_setsockopt(dealer, ZMQ_RCVHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(dealer, ZMQ_ROUTING_ID, id.data(), id.size());
    zmq_connect(dealer, endpoint.c_str());
    sockets.push_back({ctx, dealer});
  }
  Answer(out, "ready");
  uint64_t count = 0;
  int64_t first = 0;
  int64_t last = 0;
  size_t open = sockets.size();
  std::vector<zmq_pollitem_t> items;
  for (const Socket& s : sockets) items.push_back({s.dealer, 0, ZMQ_POLLIN, 0});
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  const auto give_up = Clock::now() + std::chrono::seconds(120);
  while (open > 0 && Clock::now() < give_up) {
    if (zmq_poll(items.data(), static_cast<int>(items.size()), 1000) <= 0) continue;
    for (size_t i = 0; i < sockets.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      while (zmq_msg_recv(&msg, sockets[i].dealer, ZMQ_DONTWAIT) >= 0) {
        if (zmq_msg_size(&msg) == 0) {
          if (!sockets[i].done) --open;
          sockets[i].done = true;
          break;
        }
        const int64_t now = NowNs();
        if (count++ == 0) first = now;
        last = now;
      }
    }
  }
  zmq_msg_close(&msg);
  for (Socket& s : sockets) {
    int zero = 0;
    zmq_setsockopt(s.dealer, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_close(s.dealer);
    zmq_ctx_term(s.ctx);
  }
  Answer(out, absl::StrCat("received ", count, " ", first, " ", last));
  return 0;
}

std::vector<std::string> Words(const std::string& line) {
  return absl::StrSplit(line, ' ', absl::SkipEmpty());
}

// `receivers` DEALERs over `processes` receiving processes: messages per second. -1 on failure.
double RawFanout(int receivers, int processes, double seconds) {
  std::unique_ptr<Child> sender = Child::Spawn(RawSenderMain);
  std::vector<std::string> ready = Words(sender->Receive());
  if (ready.size() != 2) return -1;
  std::vector<std::unique_ptr<Child>> clients;
  std::string all_ids;
  for (int c = 0; c < processes; ++c) {
    std::vector<std::string> ids;
    for (int i = c; i < receivers; i += processes) {
      ids.push_back(absl::StrCat("r-", i));
      absl::StrAppend(&all_ids, " ", ids.back());
    }
    const std::string endpoint = ready[1];
    clients.push_back(Child::Spawn(
        [endpoint, ids](FILE* in, FILE* out) { return RawReceiverMain(endpoint, ids, in, out); }));
    if (clients.back()->Receive() != "ready") return -1;
  }
  sender->Send(absl::StrCat("send ", seconds, " ", DeliveryFrameBytes(), all_ids));
  if (Words(sender->Receive()).size() != 2) return -1;
  uint64_t total = 0;
  int64_t first = INT64_MAX;
  int64_t last = 0;
  for (auto& c : clients) {
    std::vector<std::string> r = Words(c->Receive());
    uint64_t n = 0;
    int64_t f = 0;
    int64_t l = 0;
    if (r.size() != 4 || !absl::SimpleAtoi(r[1], &n) || !absl::SimpleAtoi(r[2], &f) ||
        !absl::SimpleAtoi(r[3], &l)) {
      return -1;
    }
    total += n;
    if (n > 0) first = std::min(first, f), last = std::max(last, l);
  }
  sender->Send("quit");
  sender->Join(std::chrono::seconds(10));
  if (total < 2 || last <= first) return -1;
  return static_cast<double>(total) / (static_cast<double>(last - first) / 1e9);
}

// ---------------------------------------------------------------------------------------------
// The topology.

// Ends the run: an "error" line, every child killed. A failed network workload leaves no
// process behind, and stops the driver (exit status 1).
[[noreturn]] void Fail(absl::string_view workload, const std::string& what) {
  for (pid_t pid : LiveChildren()) kill(pid, SIGKILL);
  Report(std::string(workload)).Add("error", what).Print();
  std::exit(1);
}
[[noreturn]] void Fail(const std::string& what) { Fail("net", what); }

std::string Expect(Child& child, absl::string_view first_word, const std::string& line) {
  std::vector<std::string> w = Words(line);
  if (w.empty() || w[0] != first_word) {
    Fail(absl::StrCat("expected '", first_word, "', got '", line.substr(0, 200), "'"));
  }
  (void)child;
  return line;
}

class Topology {
 public:
  explicit Topology(std::string dir) : dir_(std::move(dir)) {}

  void StartPhb(std::vector<std::string> downstream) {
    const std::string dir = dir_ + "/phb";
    phb_ = Child::Spawn(
        [dir, downstream](FILE* in, FILE* out) { return PhbMain(dir, downstream, in, out); });
    phb_endpoint_ = Words(Expect(*phb_, "ready", phb_->Receive()))[1];
  }

  // SHB `i` (named shb-i), on a port of its own the first time and the same one after.
  void StartShb(size_t i) {
    if (shbs_.size() <= i) shbs_.resize(i + 1), shb_endpoints_.resize(i + 1);
    const std::string name = ShbName(i);
    const std::string dir = absl::StrCat(dir_, "/", name);
    const std::string listen =
        shb_endpoints_[i].empty() ? std::string("tcp://127.0.0.1:*") : shb_endpoints_[i];
    const std::string phb = phb_endpoint_;
    shbs_[i] = Child::Spawn([name, dir, listen, phb](FILE* in, FILE* out) {
      return ShbMain(name, dir, listen, phb, in, out);
    });
    shb_endpoints_[i] = Words(Expect(*shbs_[i], "ready", shbs_[i]->Receive()))[1];
  }
  void KillShb(size_t i) { shbs_[i]->Kill(SIGKILL); }
  Child& shb(size_t i) { return *shbs_[i]; }
  static std::string ShbName(size_t i) { return absl::StrCat("shb-", i); }

  void StartPublisher() {
    const std::string phb = phb_endpoint_;
    publisher_ = Child::Spawn([phb](FILE* in, FILE* out) {
      PublisherProcess p;
      return p.Main(phb, in, out);
    });
  }

  struct Published {
    uint64_t sent = 0;
    uint64_t acked = 0;
    double seconds = 0;
  };
  void BeginPublish(double rate, uint64_t count, int64_t phase) {
    publisher_->Send(absl::StrCat("publish ", rate, " ", count, " ", phase));
  }
  Published EndPublish() {
    std::vector<std::string> w = Words(Expect(*publisher_, "done", publisher_->Receive()));
    Published p;
    int64_t ns = 0;
    if (w.size() != 4 || !absl::SimpleAtoi(w[1], &p.sent) || !absl::SimpleAtoi(w[2], &p.acked) ||
        !absl::SimpleAtoi(w[3], &ns)) {
      Fail("a malformed answer from the publisher");
    }
    p.seconds = static_cast<double>(ns) / 1e9;
    if (p.acked != p.sent) Fail(absl::StrCat(p.sent - p.acked, " publishes were refused"));
    return p;
  }
  Published Publish(double rate, uint64_t count, int64_t phase) {
    BeginPublish(rate, count, phase);
    return EndPublish();
  }
  // The last sequence of each publisher: with every publish acknowledged, what was logged.
  std::string Sequences() {
    std::string line = Expect(*publisher_, "sequences", publisher_->Ask("sequences"));
    return line.substr(std::string("sequences").size());
  }

  // A client process hosting `indexes` at SHB `shb`, keeping its state in client-C.state.
  size_t StartClient(size_t shb, std::vector<int> indexes) {
    const size_t c = clients_.size();
    clients_.emplace_back();
    client_shb_.push_back(shb);
    client_indexes_.push_back(std::move(indexes));
    RestartClient(c);
    return c;
  }
  void RestartClient(size_t c) {
    const std::string name = ShbName(client_shb_[c]);
    const std::string endpoint = shb_endpoints_[client_shb_[c]];
    const std::vector<int> indexes = client_indexes_[c];
    const std::string state = absl::StrCat(dir_, "/client-", c, ".state");
    clients_[c] = Child::Spawn([name, endpoint, indexes, state](FILE* in, FILE* out) {
      ClientProcess p;
      return p.Main(name, endpoint, indexes, state, in, out);
    });
    Expect(*clients_[c], "ready", clients_[c]->Receive());
  }
  // Ends client c cleanly: final acks, its state written.
  void StopClient(size_t c) {
    clients_[c]->Send("quit");
    clients_[c]->Join(std::chrono::seconds(30));
  }
  size_t clients() const { return clients_.size(); }
  Child& client(size_t c) { return *clients_[c]; }

  // Phase figures summed over clients `which`.
  struct Phase {
    uint64_t deliveries = 0;
    int64_t first_ns = INT64_MAX;
    int64_t last_ns = 0;
    int64_t client_start_ns = 0;  // the latest start among them
    LatencyBuckets latency;
    double seconds() const {
      return last_ns > first_ns ? static_cast<double>(last_ns - first_ns) / 1e9 : 0;
    }
  };
  Phase Report(int64_t phase, const std::vector<size_t>& which) {
    Phase f;
    for (size_t c : which) {
      const std::string line =
          Expect(*clients_[c], "report", clients_[c]->Ask(absl::StrCat("report ", phase)));
      std::vector<absl::string_view> w = absl::StrSplit(line, absl::MaxSplits(' ', 5));
      uint64_t n = 0;
      int64_t start = 0;
      int64_t first = 0;
      int64_t last = 0;
      if (w.size() < 5 || !absl::SimpleAtoi(w[1], &start) || !absl::SimpleAtoi(w[2], &n) ||
          !absl::SimpleAtoi(w[3], &first) || !absl::SimpleAtoi(w[4], &last)) {
        Fail("a malformed report");
      }
      f.client_start_ns = std::max(f.client_start_ns, start);
      f.deliveries += n;
      if (n > 0) f.first_ns = std::min(f.first_ns, first), f.last_ns = std::max(f.last_ns, last);
      if (w.size() == 6) f.latency.Merge(w[5]);
    }
    return f;
  }
  // Waits until clients `which` have `deliveries` of `phase` (or `timeout` passed).
  Phase AwaitDeliveries(int64_t phase, const std::vector<size_t>& which, uint64_t deliveries,
                        std::chrono::seconds timeout) {
    const auto end = Clock::now() + timeout;
    for (;;) {
      Phase f = Report(phase, which);
      if (f.deliveries >= deliveries || Clock::now() > end) return f;
      usleep(20'000);
    }
  }

  struct Check {
    uint64_t lost = 0;
    uint64_t duplicated = 0;
    uint64_t misdelivered = 0;
    uint64_t gaps = 0;
    int64_t caught_up_ns = 0;  // the latest among them; 0 if one is still missing something
  };
  Check CheckClients(const std::vector<size_t>& which, const std::string& sequences) {
    Check k;
    k.caught_up_ns = 0;
    bool all = true;
    for (size_t c : which) {
      std::vector<std::string> w =
          Words(Expect(*clients_[c], "check", clients_[c]->Ask(absl::StrCat("check", sequences))));
      uint64_t v[4] = {};
      int64_t caught_up = 0;
      if (w.size() != 6 || !absl::SimpleAtoi(w[1], &v[0]) || !absl::SimpleAtoi(w[2], &v[1]) ||
          !absl::SimpleAtoi(w[3], &v[2]) || !absl::SimpleAtoi(w[4], &v[3]) ||
          !absl::SimpleAtoi(w[5], &caught_up)) {
        Fail("a malformed check");
      }
      k.lost += v[0];
      k.duplicated += v[1];
      k.misdelivered += v[2];
      k.gaps += v[3];
      all = all && caught_up != 0;
      k.caught_up_ns = std::max(k.caught_up_ns, caught_up);
    }
    if (!all) k.caught_up_ns = 0;
    return k;
  }
  // Checks until nothing is lost (or `timeout` passed).
  Check AwaitComplete(const std::vector<size_t>& which, const std::string& sequences,
                      std::chrono::seconds timeout) {
    const auto end = Clock::now() + timeout;
    for (;;) {
      Check k = CheckClients(which, sequences);
      if (k.lost == 0) return k;
      if (Clock::now() > end) {
        // Still missing: each client says which of its subscribers miss what, on stderr.
        for (size_t c : which) {
          Expect(*clients_[c], "explained", clients_[c]->Ask(absl::StrCat("explain", sequences)));
        }
        return k;
      }
      usleep(50'000);
    }
  }

  // Ends every process cleanly, clients first.
  void Stop() {
    for (auto& c : clients_) {
      if (c) c->Send("quit");
    }
    for (auto& c : clients_) {
      if (c) c->Join(std::chrono::seconds(30));
    }
    if (publisher_) publisher_->Send("quit"), publisher_->Join(std::chrono::seconds(30));
    for (auto& s : shbs_) {
      if (s) s->Send("quit"), s->Join(std::chrono::seconds(30));
    }
    if (phb_) phb_->Send("quit"), phb_->Join(std::chrono::seconds(30));
  }

 private:
  const std::string dir_;
  std::unique_ptr<Child> phb_;
  std::string phb_endpoint_;
  std::vector<std::unique_ptr<Child>> shbs_;
  std::vector<std::string> shb_endpoints_;
  std::unique_ptr<Child> publisher_;
  std::vector<std::unique_ptr<Child>> clients_;
  std::vector<size_t> client_shb_;
  std::vector<std::vector<int>> client_indexes_;
};

std::vector<int> Range(int from, int to) {
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}

// ---------------------------------------------------------------------------------------------
// net_fanout.

constexpr int kFanoutSubscribers = 100;
constexpr uint64_t kAwayEvents = 100'000;

void NetFanout(const Context& ctx) {
  Report report("net_fanout");
  const double raw = RawFanout(kFanoutSubscribers, 2, ctx.seconds);
  Topology net(ctx.scratch_dir);
  net.StartPhb({Topology::ShbName(0)});
  net.StartShb(0);
  net.StartPublisher();
  // Client 0 stays; client 1 leaves in phase 2 and returns in phase 3. Each holds 5
  // subscribers of every topic.
  const size_t steady = net.StartClient(0, Range(0, kFanoutSubscribers / 2));
  const size_t away = net.StartClient(0, Range(kFanoutSubscribers / 2, kFanoutSubscribers));
  const std::vector<size_t> both = {steady, away};
  constexpr uint64_t kMatching = kFanoutSubscribers / kTopics;

  // Warm-up: every subscriber connected and receiving.
  const Topology::Published warm = net.Publish(5'000, 2'000, 0);
  net.AwaitDeliveries(0, both, warm.acked * kMatching, std::chrono::seconds(60));

  // Phase 1: as fast as the publishers' windows allow, for the measuring time.
  const uint64_t flat_out_count = 200'000;
  net.BeginPublish(0, flat_out_count, 1);
  const Topology::Published fast = net.EndPublish();
  const Topology::Phase p1 =
      net.AwaitDeliveries(1, both, fast.acked * kMatching, std::chrono::seconds(120));
  const double deliveries_per_s = static_cast<double>(p1.deliveries) / p1.seconds();
  const double events_per_s = deliveries_per_s / static_cast<double>(kMatching);

  // Latency at half that rate (phase 5 of the events, still all online).
  const double half = events_per_s / 2;
  const uint64_t latency_count = static_cast<uint64_t>(half * ctx.seconds);
  const Topology::Published slow = net.Publish(half, latency_count, 5);
  Topology::Phase p5 =
      net.AwaitDeliveries(5, both, slow.acked * kMatching, std::chrono::seconds(60));

  // Phase 2: half the subscribers away while 100,000 events are published at half the rate;
  // the SHB is SIGKILLed halfway through and restarted.
  net.StopClient(away);
  net.BeginPublish(half, kAwayEvents, 2);
  usleep(static_cast<useconds_t>(1e6 * static_cast<double>(kAwayEvents) / half / 2));
  net.KillShb(0);
  usleep(300'000);
  net.StartShb(0);
  net.EndPublish();

  // Phase 3: they return, from their stored CTs.
  net.RestartClient(away);
  const std::string sequences = net.Sequences();
  Topology::Check returned = net.AwaitComplete({away}, sequences, std::chrono::seconds(120));
  const Topology::Phase back = net.Report(2, {away});
  const double catchup_s =
      returned.caught_up_ns > 0
          ? static_cast<double>(returned.caught_up_ns - back.client_start_ns) / 1e9
          : -1;
  const Topology::Check all = net.AwaitComplete(both, sequences, std::chrono::seconds(60));
  net.Stop();

  report.Add("subscribers", int64_t{kFanoutSubscribers})
      .Add("matching_per_event", static_cast<int64_t>(kMatching))
      .Add("publishers", int64_t{kPublishers})
      .Add("deliveries_per_s", deliveries_per_s)
      .Add("published_per_s", static_cast<double>(fast.acked) / fast.seconds)
      .Add("latency_offered_per_s", half)
      .Add("p50_us", p5.latency.Percentile(50))
      .Add("p99_us", p5.latency.Percentile(99))
      .Add("catchup_events", static_cast<int64_t>(kAwayEvents))
      .Add("catchup_s", catchup_s)
      .Add("shb_kills", int64_t{1})
      .Add("lost", static_cast<int64_t>(all.lost))
      .Add("duplicated", static_cast<int64_t>(all.duplicated))
      .Add("misdelivered", static_cast<int64_t>(all.misdelivered))
      .Add("gaps", static_cast<int64_t>(all.gaps))
      .Add("zmq_raw_msgs_per_s", raw)
      .Add("ratio_to_raw", raw > 0 ? deliveries_per_s / raw : 0)
      .Print();
}

GRYPH_WORKLOAD(net_fanout) { NetFanout(ctx); }

// ---------------------------------------------------------------------------------------------
// net_scaleout.

constexpr int kScaleoutSubscribersPerShb = 50;
constexpr double kScaleoutEventsPerS = 4'000;

// One PHB, `shbs` SHBs with a client process of 50 subscribers each (5 per topic), events at a
// fixed rate: each subscriber gets the same rate whatever the number of SHBs.
void NetScaleout(const Context& ctx, size_t shbs, bool churn) {
  Topology net(absl::StrCat(ctx.scratch_dir, "/scaleout-", shbs, churn ? "-churn" : ""));
  std::vector<std::string> names;
  for (size_t i = 0; i < shbs; ++i) names.push_back(Topology::ShbName(i));
  net.StartPhb(names);
  std::vector<size_t> clients;
  for (size_t i = 0; i < shbs; ++i) {
    net.StartShb(i);
    const int first = static_cast<int>(i) * kScaleoutSubscribersPerShb;
    clients.push_back(net.StartClient(i, Range(first, first + kScaleoutSubscribersPerShb)));
  }
  net.StartPublisher();
  const uint64_t matching = shbs * kScaleoutSubscribersPerShb / kTopics;
  const Topology::Published warm = net.Publish(kScaleoutEventsPerS, 2'000, 0);
  net.AwaitDeliveries(0, clients, warm.acked * matching, std::chrono::seconds(60));

  if (churn) {
    // Each client: one subscriber away for 500 ms every 100 ms (about 5 of 50 at a time), by
    // default.
    const std::string pattern =
        absl::StrReplaceAll(absl::GetFlag(FLAGS_scaleout_churn_pattern), {{",", " "}});
    for (size_t c : clients) {
      Expect(net.client(c), "churning", net.client(c).Ask(absl::StrCat("churn ", pattern)));
    }
  }
  std::vector<double> cpu_before;
  for (size_t i = 0; i < shbs; ++i) cpu_before.push_back(net.shb(i).CpuSeconds());
  const uint64_t count = static_cast<uint64_t>(kScaleoutEventsPerS * ctx.seconds * 2);
  const Topology::Published run = net.Publish(kScaleoutEventsPerS, count, 1);
  if (churn) {
    for (size_t c : clients) Expect(net.client(c), "churning", net.client(c).Ask("churn 0 0"));
  }
  const Topology::Phase p1 =
      net.AwaitDeliveries(1, clients, run.acked * matching, std::chrono::seconds(120));
  double cpu = 0;
  for (size_t i = 0; i < shbs; ++i) cpu += net.shb(i).CpuSeconds() - cpu_before[i];
  const Topology::Check check =
      net.AwaitComplete(clients, net.Sequences(), std::chrono::seconds(60));
  net.Stop();

  const double deliveries_per_s = static_cast<double>(p1.deliveries) / p1.seconds();
  Report("net_scaleout")
      .Add("shbs", static_cast<int64_t>(shbs))
      .Add("churn", churn ? "yes" : "no")
      .Add("subscribers", static_cast<int64_t>(shbs * kScaleoutSubscribersPerShb))
      .Add("offered_per_s", kScaleoutEventsPerS)
      .Add("per_subscriber_per_s", kScaleoutEventsPerS / kTopics)
      .Add("deliveries_per_s", deliveries_per_s)
      .Add("shb_cpu_s_per_million", static_cast<double>(p1.deliveries) > 0
                                        ? cpu / static_cast<double>(p1.deliveries) * 1e6
                                        : 0)
      .Add("p50_us", p1.latency.Percentile(50))
      .Add("p99_us", p1.latency.Percentile(99))
      .Add("lost", static_cast<int64_t>(check.lost))
      .Add("duplicated", static_cast<int64_t>(check.duplicated))
      .Add("misdelivered", static_cast<int64_t>(check.misdelivered))
      .Add("gaps", static_cast<int64_t>(check.gaps))
      .Print();
}

GRYPH_WORKLOAD(net_scaleout) {
  std::vector<size_t> counts;
  for (absl::string_view w :
       absl::StrSplit(absl::GetFlag(FLAGS_scaleout_shbs), ',', absl::SkipWhitespace())) {
    size_t n = 0;
    if (!absl::SimpleAtoi(w, &n) || n == 0) Fail(absl::StrCat("--scaleout_shbs: bad count ", w));
    counts.push_back(n);
  }
  for (absl::string_view w :
       absl::StrSplit(absl::GetFlag(FLAGS_scaleout_churn), ',', absl::SkipWhitespace())) {
    if (w != "no" && w != "yes") Fail(absl::StrCat("--scaleout_churn: yes or no, not ", w));
    for (size_t shbs : counts) NetScaleout(ctx, shbs, w == "yes");
  }
}

}  // namespace
}  // namespace gryph::bench
