// gryph_process_node: one gryph node as a process of its own, over the ZeroMQ channel with
// CURVE, driven by the Runtime — for the process-level tests (tests/process/*.sh), which start
// several, SIGKILL and restart them, and check exactly-once delivery afterwards.
//
// Roles (--role):
//   keygen  writes a CURVE key pair per --names into --keys_dir (NAME.secret: the Z85 secret
//           key; the public key is derived from it). Every node of a test reads its own and its
//           peers' keys from there.
//   phb     a PHB with --pubends pubends and the application that publishes beside it: events
//           1..--events at --rate per second, at most Pubend::kSequenceWindow unacknowledged,
//           idempotent across its own restarts (it keeps the sequence acknowledged through in
//           --data_dir/acked, and publishes again from there). Writes --data_dir/published
//           once every event is acknowledged. With --start_file, it publishes once that file
//           exists (a new subscription starts where its broker is when it connects).
//   shb     an SHB fed by the PHB (--upstream=NAME@ENDPOINT).
//   sub     a durable subscriber (--broker=NAME@ENDPOINT, --selector) that stores every event
//           it receives together with its CT in one LMDB transaction (the exactly-once
//           pattern), and on restart resumes from the stored CT with a higher epoch.
//   check   compares the subscriber's store (--sub_dir) with what the pubends acknowledged to
//           the application (--phb_dir; the application checks that a retry gets the tick of
//           the first publish): every event 1..--events acknowledged, and for every pubend the
//           acknowledged events that match --selector, in tick order, once each, and nothing
//           else, at the subscriber. With --wait, retries until it holds or --wait passes.
//           Exit 0 when it holds.
// Listening nodes write the endpoint they bound to --endpoint_file, and bind it again on
// restart when the file exists (so that their peers find them at the same address).

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gryph/runtime.h"
#include "gryph/selector.h"
#include "gryph/storage.h"
#include "gryph/zmq_channel.h"
#include "lib/util/pubend_prefix.h"

ABSL_FLAG(std::string, role, "", "keygen, phb, shb, sub or check");
ABSL_FLAG(std::string, keys_dir, "", "where the CURVE keys are (NAME.secret)");
ABSL_FLAG(std::string, names, "", "keygen: the names to make keys for, comma-separated");
ABSL_FLAG(std::string, name, "", "this node's endpoint name");
ABSL_FLAG(std::string, data_dir, "", "the node's data directory");
ABSL_FLAG(std::string, listen, "tcp://127.0.0.1:*", "where to listen (first start)");
ABSL_FLAG(std::string, endpoint_file, "", "where the bound endpoint is kept");
ABSL_FLAG(std::string, allowed, "", "client names whose keys may connect, comma-separated");
ABSL_FLAG(std::string, downstream, "", "phb: the downstream node");
ABSL_FLAG(std::string, upstream, "", "shb: NAME@ENDPOINT of the PHB");
ABSL_FLAG(std::string, broker, "", "sub: NAME@ENDPOINT of the SHB");
ABSL_FLAG(std::string, selector, "", "sub, check: the subscription's selector");
ABSL_FLAG(int, pubends, 2, "phb, shb: the number of pubends");
ABSL_FLAG(int, events, 1000, "phb, check: how many events are published");
ABSL_FLAG(double, rate, 500, "phb: events per second");
ABSL_FLAG(std::string, phb_dir, "", "check: the PHB's data directory");
ABSL_FLAG(std::string, sub_dir, "", "check: the subscriber's data directory");
ABSL_FLAG(double, wait, 0, "check: seconds to keep retrying");
ABSL_FLAG(std::string, start_file, "", "phb: publish once this file exists");
ABSL_FLAG(std::string, connected_file, "", "sub: written once connected");

namespace gryph {
namespace {

using internal::ParsePubendKey64;
using internal::PubendEnd;
using internal::PubendKey64;
using internal::PubendPrefix;

constexpr absl::string_view kSubEvents = "app.events";
constexpr absl::string_view kSubMeta = "app.meta";
constexpr absl::string_view kAcks = "app.acks";
constexpr const char* kPublisher = "app";

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gryph_process_node (%s): %s\n", absl::GetFlag(FLAGS_role).c_str(),
               what.c_str());
  std::exit(2);
}

template <typename T>
T Must(absl::StatusOr<T> v, absl::string_view what) {
  if (!v.ok()) Die(absl::StrCat(what, ": ", v.status().ToString()));
  return *std::move(v);
}
void Must(const absl::Status& s, absl::string_view what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Written whole or not at all: a SIGKILL leaves the old content or the new.
void WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
    if (!out) Die("writing " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

std::string Secret(const std::string& name) {
  std::string s = ReadFile(absl::GetFlag(FLAGS_keys_dir) + "/" + name + ".secret");
  if (s.empty()) Die("no key for " + name);
  return s;
}
std::string PublicKey(const std::string& name) {
  return Must(CurvePublicKey(Secret(name)), "public key of " + name);
}

// The channel of this node: CURVE keys from --keys_dir, the listening endpoint from
// --endpoint_file when it exists.
std::unique_ptr<ZmqChannel> OpenChannel(bool listen, const std::string& peer_spec) {
  ZmqChannelOptions o;
  o.name = absl::GetFlag(FLAGS_name);
  o.curve = true;
  o.keys.secret_key = Secret(o.name);
  o.keys.public_key = PublicKey(o.name);
  o.reconnect_interval = absl::Milliseconds(50);
  o.reconnect_interval_max = absl::Milliseconds(500);
  const std::string file = absl::GetFlag(FLAGS_endpoint_file);
  if (listen) {
    o.listen = absl::GetFlag(FLAGS_listen);
    if (!file.empty() && std::filesystem::exists(file)) o.listen = ReadFile(file);
    for (absl::string_view n :
         absl::StrSplit(absl::GetFlag(FLAGS_allowed), ',', absl::SkipEmpty())) {
      o.allowed_clients.push_back({PublicKey(std::string(n)), std::string(n)});
    }
  }
  if (!peer_spec.empty()) {
    std::vector<std::string> parts = absl::StrSplit(peer_spec, absl::MaxSplits('@', 1));
    if (parts.size() != 2) Die("a peer is NAME@ENDPOINT: " + peer_spec);
    o.peers.push_back({parts[0], parts[1], PublicKey(parts[0])});
  }
  // A restarted node may find its port still held for a moment.
  for (int attempt = 0;; ++attempt) {
    auto c = ZmqChannel::Create(o);
    if (c.ok()) {
      if (listen && !file.empty()) WriteFileAtomically(file, (*c)->bound_endpoint());
      return *std::move(c);
    }
    if (!absl::IsUnavailable(c.status()) || attempt == 100) Must(c.status(), "channel");
    absl::SleepFor(absl::Milliseconds(100));
  }
}

std::unique_ptr<Storage> OpenStore(const std::string& dir, Durability durability) {
  std::filesystem::create_directories(dir);
  StorageOptions so;
  so.path = dir;
  so.durability = durability;
  return Must(OpenLmdbStorage(so), "opening " + dir);
}

std::vector<PubendId> Pubends() {
  std::vector<PubendId> ids;
  for (int i = 1; i <= absl::GetFlag(FLAGS_pubends); ++i) {
    ids.push_back(PubendId{static_cast<uint32_t>(i)});
  }
  return ids;
}

EventRef MakeOrder(int64_t id) {
  Event e;
  e.SetTopic("orders").SetInt64("id", id).SetInt64("k", id % 10).SetPayload(std::string(100, 'o'));
  return MakeEventRef(std::move(e));
}

int Keygen() {
  const std::string dir = absl::GetFlag(FLAGS_keys_dir);
  std::filesystem::create_directories(dir);
  for (absl::string_view n : absl::StrSplit(absl::GetFlag(FLAGS_names), ',', absl::SkipEmpty())) {
    CurveKeyPair keys = Must(GenerateCurveKeyPair(), "keygen");
    WriteFileAtomically(absl::StrCat(dir, "/", n, ".secret"), keys.secret_key);
  }
  return 0;
}

// The application beside the PHB: what it has published and what is acknowledged.
struct App {
  // Every acknowledgement: sequence -> "pubend tick" (app.acks), which the check compares with
  // what the subscriber got (the pubend's log itself is released as subscribers acknowledge).
  std::unique_ptr<Storage> acks;
  absl::Mutex mu;
  std::map<int64_t, bool> outstanding ABSL_GUARDED_BY(mu);  // sequence -> acknowledged
  int64_t through ABSL_GUARDED_BY(mu) = 0;                  // acknowledged through
  absl::CondVar answered;                                   // an acknowledgement came
  std::atomic<bool> stop{false};
};

int RunPhb() {
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  App app;  // before the runtime: the last answers (at its destruction) find it
  app.acks = OpenStore(dir + "/app", Durability::kNoSync);
  std::unique_ptr<Storage> storage = OpenStore(dir + "/store", Durability::kSync);
  std::unique_ptr<ZmqChannel> channel = OpenChannel(true, "");
  std::unique_ptr<Runtime> runtime = Must(Runtime::Create(), "runtime");
  runtime->AddSource(channel.get());
  PublisherHostingBrokerOptions po;
  for (PubendId p : Pubends()) {
    PubendOptions o{p};
    o.heartbeat = absl::Milliseconds(20);
    po.pubends.push_back(o);
  }
  po.downstream = {absl::GetFlag(FLAGS_downstream)};
  PublisherHostingBroker* phb =
      Must(runtime->OpenPublisherHostingBroker(po, storage.get(), channel.get()), "PHB");
  Must(runtime->ShutdownOnSignals(), "signals");

  // Sequence s is event s, on pubend 1 + s % pubends; after a restart the application publishes
  // again from what it knew acknowledged (retries within the window get their original ticks).
  const std::string acked_file = dir + "/acked";
  int64_t acked = 0;
  if (std::filesystem::exists(acked_file)) (void)absl::SimpleAtoi(ReadFile(acked_file), &acked);
  {
    absl::MutexLock lock(&app.mu);
    app.through = acked;
  }
  const int64_t events = absl::GetFlag(FLAGS_events);
  std::thread publisher([&] {
    const std::string start_file = absl::GetFlag(FLAGS_start_file);
    while (!start_file.empty() && !std::filesystem::exists(start_file) && !app.stop.load()) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    const absl::Duration interval = absl::Seconds(1) / absl::GetFlag(FLAGS_rate);
    absl::Time next = absl::Now();
    int64_t written = acked;
    for (int64_t s = acked + 1; !app.stop.load();) {
      {
        absl::MutexLock lock(&app.mu);
        // Retries within the window are recognised, so at most that many are outstanding.
        auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(app.mu) {
          return app.outstanding.size() < Pubend::kSequenceWindow;
        };
        // A CondVar, not a Condition: only this thread reads the state (tsan_absl_mutex.cc).
        if (!room()) app.answered.WaitWithTimeout(&app.mu, absl::Milliseconds(50));
        if (app.through != written) {
          WriteFileAtomically(acked_file, absl::StrCat(app.through));
          written = app.through;
          if (written == events) WriteFileAtomically(dir + "/published", "done");
        }
        if (s > events || !room()) continue;
        app.outstanding[s] = false;
      }
      const PubendId p{static_cast<uint32_t>(1 + s % absl::GetFlag(FLAGS_pubends))};
      phb->Publish(
          p, kPublisher, static_cast<uint64_t>(s), MakeOrder(s),
          [&app, s, p](absl::StatusOr<Tick> t) {
            if (!t.ok()) {
              if (app.stop.load()) return;  // closing: published again at restart
              std::fprintf(stderr, "publish %lld: %s\n", static_cast<long long>(s),
                           t.status().ToString().c_str());
              std::exit(3);  // the test wants to know
            }
            // A retry (after a restart) must get the tick the first publish got.
            const std::string key = absl::StrCat(s);
            const std::string row = absl::StrCat(p.value, " ", *t);
            auto before = Must(app.acks->Get(kAcks, key), "reading an ack");
            if (before.has_value() && *before != row) {
              Die(absl::StrCat("publish ", s, " acknowledged as ", *before, " and as ", row));
            }
            WriteBatch wb;
            wb.Put(kAcks, key, row);
            Must(app.acks->Commit(wb), "storing an ack");
            absl::MutexLock lock(&app.mu);
            app.outstanding[s] = true;
            while (!app.outstanding.empty() && app.outstanding.begin()->second) {
              app.through = app.outstanding.begin()->first;
              app.outstanding.erase(app.outstanding.begin());
            }
          });
      ++s;
      next += interval;
      absl::SleepFor(next - absl::Now());
    }
  });
  Must(runtime->Run(), "run");
  app.stop = true;
  publisher.join();
  return 0;
}

int RunShb() {
  std::unique_ptr<Storage> storage =
      OpenStore(absl::GetFlag(FLAGS_data_dir) + "/store", Durability::kSync);
  const std::string upstream = absl::GetFlag(FLAGS_upstream);
  std::unique_ptr<ZmqChannel> channel = OpenChannel(true, upstream);
  std::unique_ptr<Runtime> runtime = Must(Runtime::Create(), "runtime");
  runtime->AddSource(channel.get());
  SubscriberHostingBrokerOptions so;
  const std::string phb = upstream.substr(0, upstream.find('@'));
  for (PubendId p : Pubends()) so.pubends.push_back({p, phb});
  so.session_timeout = absl::Seconds(5);
  Must(runtime->OpenSubscriberHostingBroker(so, storage.get(), channel.get()), "SHB");
  Must(runtime->ShutdownOnSignals(), "signals");
  Must(runtime->Run(), "run");
  return 0;
}

// Stores each event with the CT after it, in one transaction.
class StoringHandler : public DurableSubscriber::Handler {
 public:
  explicit StoringHandler(Storage* storage) : storage_(storage) {}
  void set_subscriber(DurableSubscriber* s) { subscriber_ = s; }
  void OnEvent(PubendId p, Tick t, const EventRef& e) override {
    const auto* id = std::get_if<int64_t>(e->Find("id"));
    if (id == nullptr) Die("an event without id");
    CheckpointToken ct = subscriber_->checkpoint();
    ct.Set(p, t);  // what the CT becomes once this returns
    WriteBatch wb;
    wb.Put(kSubEvents, PubendKey64(p, t), absl::StrCat(*id));
    wb.Put(kSubMeta, "ct", ct.Encode());
    Must(storage_->Commit(wb), "storing an event");
  }
  void OnConnected(const CheckpointToken&) override {
    const std::string file = absl::GetFlag(FLAGS_connected_file);
    if (!file.empty()) WriteFileAtomically(file, "connected");
  }
  void OnGap(PubendId p, Tick t) override {
    Die(absl::StrCat("a gap at pubend ", p.value, " tick ", t, ": nothing was released early"));
  }
  void OnError(const absl::Status& s) override {
    std::fprintf(stderr, "gryph_process_node (sub): %s\n", s.ToString().c_str());
    if (absl::IsAborted(s) || absl::IsInvalidArgument(s) || absl::IsDataLoss(s)) std::exit(4);
  }

 private:
  Storage* const storage_;
  DurableSubscriber* subscriber_ = nullptr;
};

int RunSub() {
  // A SIGKILL loses no commit that returned: the page cache keeps it (no fsync needed).
  std::unique_ptr<Storage> storage =
      OpenStore(absl::GetFlag(FLAGS_data_dir) + "/store", Durability::kNoSync);
  const std::string broker = absl::GetFlag(FLAGS_broker);
  std::unique_ptr<ZmqChannel> channel = OpenChannel(false, broker);
  StoringHandler handler(storage.get());  // outlives the runtime, which holds the subscriber
  std::unique_ptr<Runtime> runtime = Must(Runtime::Create(), "runtime");
  runtime->AddSource(channel.get());
  DurableSubscriberOptions o;
  o.subscription = "s1";
  o.selector = absl::GetFlag(FLAGS_selector);
  o.broker = broker.substr(0, broker.find('@'));
  o.ack_interval = absl::Milliseconds(50);
  o.connect_retry_interval = absl::Seconds(2);
  o.reconnect_interval = absl::Milliseconds(100);
  // Resume: the stored CT, and an epoch above every earlier process's.
  uint64_t epoch = 0;
  if (auto e = Must(storage->Get(kSubMeta, "epoch"), "reading the epoch")) {
    (void)absl::SimpleAtoi(*e, &epoch);
  }
  if (auto ct = Must(storage->Get(kSubMeta, "ct"), "reading the CT")) {
    o.checkpoint = Must(CheckpointToken::Decode(*ct), "stored CT");
  }
  o.epoch = epoch + 1;
  WriteBatch wb;
  wb.Put(kSubMeta, "epoch", absl::StrCat(o.epoch));
  Must(storage->Commit(wb), "storing the epoch");
  DurableSubscriber* sub = Must(runtime->OpenDurableSubscriber(o, channel.get(), &handler), "sub");
  handler.set_subscriber(sub);
  Must(runtime->ShutdownOnSignals(), "signals");
  Must(runtime->Run(), "run");
  return 0;
}

// The check's verdict: empty when it holds.
std::string Check() {
  const Selector selector = Must(Selector::Parse(absl::GetFlag(FLAGS_selector)), "selector");
  std::unique_ptr<Storage> acks =
      OpenStore(absl::GetFlag(FLAGS_phb_dir) + "/app", Durability::kSync);
  std::unique_ptr<Storage> sub =
      OpenStore(absl::GetFlag(FLAGS_sub_dir) + "/store", Durability::kSync);
  // What the pubends acknowledged, per pubend in tick order: the matching events.
  std::map<PubendId, std::vector<std::pair<Tick, int64_t>>> expected;
  const int64_t events = absl::GetFlag(FLAGS_events);
  for (int64_t id = 1; id <= events; ++id) {
    absl::StatusOr<std::optional<std::string>> row = acks->Get(kAcks, absl::StrCat(id));
    if (!row.ok()) return "reading the acknowledgements: " + row.status().ToString();
    if (!row->has_value()) return absl::StrCat("event ", id, " was never acknowledged");
    std::vector<std::string> f = absl::StrSplit(**row, ' ');
    uint32_t p = 0;
    uint64_t t = 0;
    if (f.size() != 2 || !absl::SimpleAtoi(f[0], &p) || !absl::SimpleAtoi(f[1], &t)) {
      return "a damaged acknowledgement: " + **row;
    }
    if (selector.Matches(*MakeOrder(id))) expected[PubendId{p}].push_back({t, id});
  }
  for (auto& [p, list] : expected) std::sort(list.begin(), list.end());
  for (PubendId p : Pubends()) {
    std::vector<std::pair<Tick, int64_t>> got;
    absl::Status s = sub->Scan(kSubEvents, PubendPrefix(p), PubendEnd(p),
                               [&](absl::string_view key, absl::string_view value) {
                                 uint64_t t;
                                 int64_t id = 0;
                                 if (ParsePubendKey64(key, p, &t) && absl::SimpleAtoi(value, &id)) {
                                   got.push_back({t, id});
                                 }
                                 return true;
                               });
    if (!s.ok()) return "reading the subscriber's store: " + s.ToString();
    if (got != expected[p]) {
      const auto& want = expected[p];
      size_t i = 0;
      while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
      auto at = [](const std::vector<std::pair<Tick, int64_t>>& v, size_t k) {
        return k < v.size() ? absl::StrCat("event ", v[k].second, " at tick ", v[k].first)
                            : std::string("nothing");
      };
      return absl::StrCat("pubend ", p.value, ": the subscriber holds ", got.size(),
                          " events, the pubend acknowledged ", want.size(),
                          " matching ones; the first difference, at #", i, ": the subscriber has ",
                          at(got, i), ", the pubend ", at(want, i));
    }
  }
  return "";
}

int RunCheck() {
  const absl::Time end = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_wait));
  for (;;) {
    const std::string verdict = Check();
    if (verdict.empty()) {
      std::printf(
          "exactly once: every event acknowledged, every match once at the subscriber, "
          "in tick order\n");
      return 0;
    }
    if (absl::Now() >= end) {
      std::fprintf(stderr, "check failed: %s\n", verdict.c_str());
      return 1;
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
}

}  // namespace
}  // namespace gryph

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role == "keygen") return gryph::Keygen();
  if (role == "phb") return gryph::RunPhb();
  if (role == "shb") return gryph::RunShb();
  if (role == "sub") return gryph::RunSub();
  if (role == "check") return gryph::RunCheck();
  std::fprintf(stderr, "--role must be keygen, phb, shb, sub or check\n");
  return 2;
}
