// gryph-broker: one gryph broker as a process, over ZeroMQ (CURVE with --keys_dir).
//
//   --role=phb  a publisher hosting broker: the pubends 1..--pubends, logged in --data_dir;
//               publishers reach it with Publish messages (gryph-pub); knowledge goes to the
//               --downstream nodes (SHBs or intermediates), which dial it.
//   --role=ib   an intermediate broker: dials --upstream (the PHB or another intermediate),
//               forwards to --downstream; keeps nothing on disk.
//   --role=shb  a subscriber hosting broker: dials --upstream, hosts durable subscriptions
//               (gryph-sub) in --data_dir.
// Each listens on --listen. SIGTERM or SIGINT stops it cleanly: what the PHB holds is
// committed and answered, the SHB commits what it submitted. Every --stats_interval it prints
// one line of figures on standard error and, with --metrics_file, replaces that file with its
// metrics in the Prometheus text format (for node_exporter's textfile collector; metrics.h says
// why a file). With --admin it answers gryph-admin on that endpoint (broker_admin.h lists the
// commands: subscriptions and their lag, deleting one, stats). What an operator must know as it
// happens (a Gap and to whom, a fenced session, damaged data, a stop) is logged on standard
// error, one line each, with the time.
//
//   gryph-broker --genkey --name=NAME --keys_dir=DIR   writes DIR/NAME.key and DIR/NAME.pub
//
// Exit status: 0 after a clean stop, 2 for a bad flag, key or data directory, 1 for a failure
// while running: a storage error that stopped the SHB or failed a pubend (a commit that failed,
// an fsync's EIO say). What such a broker holds in memory is no longer known to match the disk,
// and it would answer nothing more, so it stops (within 100 ms, logging why) and leaves the
// restart to its supervisor (systemd's Restart=on-failure): the restart reopens the store and
// recovers from what was durable, and publishers publish again what was not acknowledged.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gryph/runtime.h"
#include "programs/admin_server.h"
#include "programs/broker_admin.h"
#include "programs/metrics.h"
#include "programs/program_support.h"

ABSL_FLAG(std::string, role, "", "phb, ib or shb");
ABSL_FLAG(std::string, name, "", "this broker's name, as its peers address it (default: the role)");
ABSL_FLAG(std::string, data_dir, "", "phb, shb: the directory of the broker's store");
ABSL_FLAG(std::string, listen, "", "where to listen, e.g. tcp://10.0.0.1:7100 or tcp://*:7100");
ABSL_FLAG(std::string, upstream, "",
          "ib, shb: NAME@ENDPOINT of the broker upstream (the PHB or an intermediate)");
ABSL_FLAG(std::string, downstream, "",
          "phb, ib: the names of the brokers downstream, comma-separated");
ABSL_FLAG(std::string, pubends, "1",
          "the pubends: a count N (pubends 1..N) or ids, comma-separated (e.g. 1,2,7)");
ABSL_FLAG(std::string, keys_dir, "",
          "CURVE keys: NAME.key for this broker, NAME.pub for each peer allowed in or dialed; "
          "empty: plain TCP, for a trusted network only");
ABSL_FLAG(bool, genkey, false, "write a key pair for --name into --keys_dir and exit");
ABSL_FLAG(std::string, durability, "sync", "phb, shb: sync (fsync per commit) or nosync");
ABSL_FLAG(absl::Duration, max_retain, absl::InfiniteDuration(),
          "phb: release events older than this even if unacknowledged (subscribers get a Gap)");
ABSL_FLAG(absl::Duration, session_timeout, absl::Seconds(30),
          "shb: end a session not heard from for this long");
ABSL_FLAG(absl::Duration, subscription_expiry, absl::InfiniteDuration(),
          "shb: delete a subscription whose subscriber stayed away this long (if it returns, "
          "it gets a Gap for what upstream released meanwhile); inf: never");
ABSL_FLAG(double, catchup_share, 1.0,
          "shb: while caught-up subscribers are connected, catchups take at most this share of "
          "the broker's time, in (0, 1]; below 1 favours the caught-up subscribers' latency over "
          "the catchups' speed (1: catchups never rest)");
ABSL_FLAG(absl::Duration, stats_interval, absl::Seconds(10),
          "print one line of figures on stderr this often (0: never)");
ABSL_FLAG(std::string, metrics_file, "",
          "replace this file every --stats_interval with the broker's metrics in the Prometheus "
          "text format (e.g. /var/lib/node_exporter/textfile/gryph-shb.prom)");
ABSL_FLAG(std::string, admin, "",
          "answer gryph-admin on this endpoint, e.g. ipc:///run/gryph/shb.admin (whoever "
          "reaches it may delete subscriptions: keep it in a directory only operators enter)");

namespace gryph::programs {
namespace {

// "N" -> pubends 1..N; "1,2,7" -> those.
std::vector<PubendId> ParsePubends(const std::string& flag) {
  std::vector<PubendId> ids;
  uint32_t n = 0;
  if (flag.find(',') == std::string::npos && absl::SimpleAtoi(flag, &n)) {
    if (n == 0 || n > 4096) Die(absl::StrCat("--pubends=", flag, ": 1 to 4096 pubends"));
    for (uint32_t i = 1; i <= n; ++i) ids.push_back(PubendId{i});
    return ids;
  }
  for (absl::string_view part : absl::StrSplit(flag, ',', absl::SkipEmpty())) {
    uint32_t id = 0;
    if (!absl::SimpleAtoi(part, &id) || id == 0) {
      Die(absl::StrCat("--pubends is a count or ids (1 or more), comma-separated, not '", flag,
                       "'"));
    }
    ids.push_back(PubendId{id});
  }
  if (ids.empty()) Die("--pubends names no pubend");
  return ids;
}

template <typename T>
T Must(absl::StatusOr<T> v, int code = kExitUsage) {
  if (!v.ok()) Die(v.status().ToString(), code);
  return *std::move(v);
}
void Must(const absl::Status& s, int code = kExitUsage) {
  if (!s.ok()) Die(s.ToString(), code);
}

std::string ChannelStats(const ZmqChannel& c) {
  const ZmqChannel::Stats s = c.stats();
  return absl::StrCat("sent ", s.sent, " received ", s.received, " dropped ", s.dropped_full,
                      " unreachable ", s.unreachable, " malformed ", s.malformed + s.oversized,
                      " corrupted ", s.corrupted, " denied ", s.denied + s.impersonations);
}

int Run() {
  const std::string role = absl::GetFlag(FLAGS_role);
  std::string name = absl::GetFlag(FLAGS_name);
  if (name.empty()) name = role;
  const std::string keys_dir = absl::GetFlag(FLAGS_keys_dir);
  if (absl::GetFlag(FLAGS_genkey)) {
    if (name.empty() || keys_dir.empty()) Die("--genkey needs --name and --keys_dir");
    Must(GenerateKeys(keys_dir, name));
    std::printf("%s/%s.key and %s/%s.pub written\n", keys_dir.c_str(), name.c_str(),
                keys_dir.c_str(), name.c_str());
    return 0;
  }
  if (role != "phb" && role != "ib" && role != "shb") {
    Die(role.empty() ? "--role is required: phb, ib or shb (see --help)"
                     : absl::StrCat("--role is phb, ib or shb, not '", role, "'"));
  }
  const std::vector<PubendId> pubends = ParsePubends(absl::GetFlag(FLAGS_pubends));
  const std::string upstream = absl::GetFlag(FLAGS_upstream);
  const std::vector<std::string> downstream =
      absl::StrSplit(absl::GetFlag(FLAGS_downstream), ',', absl::SkipEmpty());
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  const Durability durability = Must(ParseDurability(absl::GetFlag(FLAGS_durability)));
  if (absl::GetFlag(FLAGS_listen).empty()) Die("--listen is required (e.g. tcp://*:7100)");
  if (role != "ib" && data_dir.empty()) Die(absl::StrCat("--role=", role, " needs --data_dir"));
  if (role != "phb" && upstream.empty()) Die(absl::StrCat("--role=", role, " needs --upstream"));
  if (const double share = absl::GetFlag(FLAGS_catchup_share); !(share > 0 && share <= 1)) {
    Die(absl::StrCat("--catchup_share=", share, ": a share of the broker's time, in (0, 1]"));
  }
  if (role == "phb" && !upstream.empty()) Die("a PHB has no --upstream");
  if (role != "shb" && downstream.empty()) {
    Die(absl::StrCat("--role=", role, " needs --downstream"));
  }
  const std::string upstream_name = upstream.empty() ? "" : Must(PeerName(upstream));

  std::unique_ptr<Storage> storage;
  if (role != "ib") storage = Must(OpenStore(data_dir, durability));
  // A restarted broker may find its port still held for a moment by the process it replaces.
  absl::StatusOr<std::unique_ptr<ZmqChannel>> opened;
  for (int attempt = 0;; ++attempt) {
    opened = OpenChannel({name, absl::GetFlag(FLAGS_listen), upstream, keys_dir});
    if (opened.ok() || !absl::IsUnavailable(opened.status()) || attempt == 100) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::unique_ptr<ZmqChannel> channel = Must(std::move(opened));
  std::unique_ptr<AdminServer> admin;  // a source of the runtime: outlives it
  std::unique_ptr<Runtime> runtime = Must(Runtime::Create());
  runtime->AddSource(channel.get());

  std::function<std::string()> stats;
  AdminServer::Handler answer;
  std::function<void(MetricsText*)> metrics;
  // The error that stopped the broker or failed one of its pubends (OK while it serves).
  std::function<absl::Status()> failure = [] { return absl::OkStatus(); };
  SubscriberHostingBroker* shb = nullptr;
  if (role == "phb") {
    PublisherHostingBrokerOptions po;
    for (PubendId p : pubends) {
      PubendOptions o{p};
      o.max_retain = absl::GetFlag(FLAGS_max_retain);
      po.pubends.push_back(o);
    }
    po.downstream = downstream;
    po.log = StderrLogSink();
    PublisherHostingBroker* phb =
        Must(runtime->OpenPublisherHostingBroker(po, storage.get(), channel.get()));
    stats = [phb, c = channel.get()] {
      std::string s = "phb";
      for (PubendId p : phb->pubend_ids()) {
        const Pubend* pubend = phb->pubend(p);
        absl::StrAppend(&s, " pubend ", p.value, " tick ", pubend->committed_tick(), " L ",
                        pubend->l_prefix(), " released ", pubend->released_min());
        if (!pubend->status().ok()) absl::StrAppend(&s, " FAILED: ", pubend->status().ToString());
      }
      return absl::StrCat(s, " | ", ChannelStats(*c));
    };
    answer = [phb, c = channel.get()](const std::string& r) { return AnswerPhb(*phb, *c, r); };
    metrics = [phb](MetricsText* m) { AddPhbMetrics(*phb, m); };
    failure = [phb] {
      for (PubendId p : phb->pubend_ids()) {
        if (absl::Status st = phb->pubend(p)->status(); !st.ok()) {
          return absl::Status(st.code(),
                              absl::StrCat("pubend ", p.value, " failed: ", st.message()));
        }
      }
      return absl::OkStatus();
    };
  } else if (role == "ib") {
    IntermediateBrokerOptions io;
    for (PubendId p : pubends) io.pubends.push_back({p, upstream_name});
    for (const std::string& d : downstream) io.downstream.push_back({d, {}});
    IntermediateBroker* ib = Must(runtime->OpenIntermediateBroker(io, channel.get()));
    stats = [ib, c = channel.get()] {
      const IntermediateBroker::Stats& s = ib->stats();
      return absl::StrCat("ib knowledge in ", s.knowledge_received, " out ", s.knowledge_sent,
                          " nacks in ", s.nacks_received, " up ", s.nacks_sent,
                          " answered from cache ", s.ticks_answered_from_cache, " | ",
                          ChannelStats(*c));
    };
    answer = [ib, c = channel.get()](const std::string& r) { return AnswerIb(*ib, *c, r); };
    metrics = [ib](MetricsText* m) { AddIbMetrics(*ib, m); };
  } else {
    SubscriberHostingBrokerOptions so;
    for (PubendId p : pubends) so.pubends.push_back({p, upstream_name});
    so.session_timeout = absl::GetFlag(FLAGS_session_timeout);
    so.subscription_expiry = absl::GetFlag(FLAGS_subscription_expiry);
    so.catchup_share = absl::GetFlag(FLAGS_catchup_share);
    so.log = StderrLogSink();
    shb = Must(runtime->OpenSubscriberHostingBroker(so, storage.get(), channel.get()));
    stats = [shb, c = channel.get()] {
      const SubscriberHostingBroker::Stats& s = shb->stats();
      std::string line =
          absl::StrCat("shb subscriptions ", shb->subscription_count(), " catching up ",
                       shb->catching_up(), " delivered ", s.events_delivered, " gaps ",
                       s.gaps_delivered, " nacks ", s.nacks_sent, " commits ", s.commits);
      if (shb->waiting_for_room()) {
        absl::StrAppend(&line, " WAITING FOR ROOM (the store is full; full-store reopens ",
                        s.full_store_reopens, ")");
      }
      if (!shb->status().ok()) absl::StrAppend(&line, " STOPPED: ", shb->status().ToString());
      return absl::StrCat(line, " | ", ChannelStats(*c));
    };
    answer = [shb, c = channel.get()](const std::string& r) { return AnswerShb(*shb, *c, r); };
    metrics = [shb](MetricsText* m) { AddShbMetrics(*shb, m); };
    failure = [shb] {
      const absl::Status st = shb->status();
      return st.ok() ? st
                     : absl::Status(st.code(), absl::StrCat("the SHB stopped: ", st.message()));
    };
  }
  if (const std::string endpoint = absl::GetFlag(FLAGS_admin); !endpoint.empty()) {
    admin = Must(AdminServer::Create(endpoint, answer));
    runtime->AddSource(admin.get());
  }
  const std::string metrics_file = absl::GetFlag(FLAGS_metrics_file);
  if (!metrics_file.empty()) {
    // Once at start, so that a bad path is a bad flag, not a line every interval.
    Must(WriteFileAtomically(metrics_file, MetricsText().Text()));
    stats = [stats, metrics, metrics_file, c = channel.get()] {
      MetricsText m;
      metrics(&m);
      AddChannelMetrics(*c, &m);
      if (absl::Status st = WriteFileAtomically(metrics_file, m.Text()); !st.ok()) {
        return absl::StrCat(stats(), " | metrics: ", st.ToString());
      }
      return stats();
    };
  }
  Must(runtime->ShutdownOnSignals());
  std::fprintf(stderr, "gryph-broker: %s %s listening on %s%s\n", role.c_str(), name.c_str(),
               channel->bound_endpoint().c_str(), keys_dir.empty() ? " (plain TCP)" : " (CURVE)");
  absl::Status run;
  absl::Status failed;
  {
    const std::unique_ptr<Repeater> printer =
        PrintStats(runtime.get(), absl::GetFlag(FLAGS_stats_interval), stats);
    // A failed broker stops: see the file comment.
    const Repeater watch(runtime.get(), absl::Milliseconds(100), [&] {
      if (!failed.ok()) return;
      failed = failure();
      if (!failed.ok()) runtime->Shutdown();
    });
    run = runtime->Run();
  }
  if (!run.ok()) Die(run.ToString(), kExitFailure);
  if (failed.ok()) failed = failure();
  if (!failed.ok()) {
    Die(absl::StrCat(failed.ToString(), "; exiting, to be restarted on the reopened store"),
        kExitFailure);
  }
  return 0;
}

}  // namespace
}  // namespace gryph::programs

int main(int argc, char** argv) {
  gryph::programs::SetProgramName("gryph-broker");
  absl::SetProgramUsageMessage(
      "one gryph broker (PHB, intermediate or SHB) over ZeroMQ.\n"
      "  gryph-broker --role=phb --data_dir=/var/lib/gryph/phb --listen=tcp://*:7100 "
      "--downstream=shb\n"
      "  gryph-broker --role=shb --data_dir=/var/lib/gryph/shb --listen=tcp://*:7300 "
      "--upstream=phb@tcp://10.0.0.1:7100\n"
      "  gryph-broker --genkey --name=phb --keys_dir=/etc/gryph/keys");
  std::vector<char*> rest = gryph::programs::ParseFlags(argc, argv, "gryph_broker.cc");
  if (rest.size() > 1) {
    gryph::programs::Die(absl::StrCat("unexpected argument '", rest[1], "' (see --help)"));
  }
  return gryph::programs::Run();
}
