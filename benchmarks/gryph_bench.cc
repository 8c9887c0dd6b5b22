// gryph_bench: the scenario driver behind scripts/bench, in the style of leveldb's db_bench.
//
// Usage: gryph_bench [--workloads=a,b,...] [--seconds=S] [--scratch_dir=DIR]
// Prints one JSON object per line on stdout: {"workload": "<name>", ...figures...}.
//
// Workloads (keys in parentheses):
//   knowledge_update   KnowledgeStream updates per second on a stream of 1,000,000 ticks with
//                      interleaved S ranges and D ticks, in order and shuffled in windows
//                      (updates_per_s, ticks, order)
//   lmdb_append        raw LMDB: sync appends of 250-byte values, 8-byte big-endian keys, 1,000
//                      per transaction (records_per_s, bytes_per_record)
//   lmdb_commit        raw LMDB: one record per sync transaction (p50_us, p99_us, commits_per_s)
//   lmdb_group_commit_latency  raw LMDB group commit fed one record at a time at 10,000/s, the
//                      floor under a publish's latency (offered_per_s, p50_us, p99_us)
//   e2e_floor          the same, each group then handed through two more sleeping threads, as
//                      knowledge and deliveries are: the floor under e2e_latency (offered_per_s,
//                      hops, p50_us, p99_us)
//   storage_append     lmdb_append through gryph's Storage, with the raw figure of the same run
//                      (records_per_s, bytes_per_record, lmdb_records_per_s, overhead_pct)
//   storage_commit     lmdb_commit through Storage::Commit, alternating with raw commits
//                      (p50_us, p99_us, lmdb_p50_us, lmdb_p99_us)
//   storage_group_commit  one record per GroupCommitter::Submit, background thread, two
//                      submitters (records_per_s, records_per_group, ack_p50_us, ack_p99_us)
//   (one file per subsystem: benchmarks/*_workloads.cc)
//   pfs_write          PFS records for events matching 1%, 10%, 50% of 1,000 durable subscribers,
//                      1,000 events per sync LMDB transaction (match_fraction, events_per_s,
//                      bytes_per_event, written_bytes_per_event)
//   subscriber_queue_write  the same events copied into a queue per matching subscriber, the
//                      design the PFS replaces (same keys as pfs_write)
//   pfs_read           batch reads of a subscriber that missed 100,000 events matching 10%
//                      (ticks_per_s, q_ticks, buffer_ticks)
//   pfs_records        PFS records with n = 1, 10, 100 subscribers each, beside a raw LMDB append
//                      of 250-byte values (n, records_per_s, bytes_per_record,
//                      written_bytes_per_record, baseline_records_per_s, ratio_to_baseline)
//   pfs_open           PFS::Open (restart) time with 1,000 or 100,000 subscribers and 10,000 or
//                      100,000 records (subscribers, records, tail_records, open_ms)
//   publish_sync       durable publish throughput, 250-byte payloads, 1 and 4 pubends, sync
//                      (events_per_s, pubends)
//   publish_nosync     the same with Durability::kNoSync (events_per_s, pubends)
//   publish_latency    publish -> durable ack at a fixed offered load of 10,000 and 100,000/s
//                      (offered_per_s, p50_us, p99_us, p999_us)
//   nack_answer        a pubend answering nacks for ranges of 1,000 events (events_per_s)
//   shb_steady         4 pubends -> SHB -> 400 durable subscribers, each event matching 100 of
//                      them, no disconnections (deliveries_per_s)
//   shb_churn          the same while subscribers disconnect and catch up in turn
//   shb_all_catchup    the same with every subscriber disconnected, then catching up at once
//   shb_recovery       an SHB back from a crash catching up a 100,000-event backlog by nacks,
//                      the pubend answering at most 1 GiB (the whole), 64 MiB, 1 MiB, 64 KiB or
//                      4 KiB a nack (max_nack_answer_bytes, backlog_events, events_per_s,
//                      ratio_to_whole, nacks_sent, nacks_followed_up)
//   restart            process start to serving again as state grows: an SHB with 10^4..10^6
//                      content subscriptions at 4 pubends and 10^6, 10^7 PFS records; a PHB
//                      retaining 10^6, 10^7 events of 10^5 publishers (open_ms and its split;
//                      the keys are listed in benchmarks/restart_workloads.cc)
//   reconnect_storm    100 caught-up subscribers at 10,000 events/s, then the same while 1,000
//                      other subscriptions reconnect at once from CTs a phase old
//                      (steady_deliveries_per_s, storm_deliveries_per_s, steady_p99_us,
//                      storm_p99_us), on the Runtime
//   e2e_latency        publish -> deliver latency at 10,000 events/s through PHB and SHB, sync
//                      at both (offered_per_s, deliveries, p50_us, p99_us; acked_p50_us: the
//                      PHB's acknowledgement, the part before the SHB; subscribers)
//   e2e_latency_fanout10  the same with 40 subscribers, each event matching 10 of them
//   thread_wake_latency  one thread waking another that sleeps, on the other CPU and on its own:
//                      what each hop of the e2e path costs on this machine (cross_cpu_p50_us,
//                      cross_cpu_p99_us, same_cpu_p50_us)
//   match_one_topic    Matcher: 20,000 subscribers on one topic: add, match, remove
//   match_flat         Matcher: 1,000,000 topics on one level, one subscriber each
//   match_deep         Matcher: 500,000 subscriptions on 4-level topics, 10% with '+' or '#'
//   match_content      Matcher: 1,000,000 selectors over 10 attributes, events matching ~0.1%
//   match_concurrent   Matcher: 1 and 2 reader threads while a writer makes 100,000 changes/s
//   match_ranges       Matcher: 10^5 and 10^6 conjunctions of 5 BETWEEN ranges over 20 integer
//                      attributes, range widths 0.1, 0.25, 0.5, events with 20 or 10 attributes,
//                      checked against a scan (events_per_s, inserts_per_s, parses_per_s,
//                      bytes_per_subscription, matches_per_event, exact)
//   match_ranges_scan  the brute-force scan of the same predicates, match_ranges' baseline
//                      (events_per_s)
//                      (the matcher keys are listed in benchmarks/matcher_workloads.cc)
//   zmq_channel        two processes over TCP loopback: Delivery messages of 250-byte events
//                      through ZmqChannel (msgs_per_s) against raw ZeroMQ frames of the same
//                      size between the same processes (zmq_raw_msgs_per_s), and their ratio
//   net_fanout         the durable fan-out with every node a process of its own over ZeroMQ TCP
//                      loopback: PHB, SHB (sync at both), a publisher process, 100 subscribers
//                      in two client processes, 10 topics, each event matching 10; phase 1 all
//                      online (as fast as the publishers go, then latency at half that rate),
//                      phase 2 half away while 100,000 events are published and the SHB is
//                      SIGKILLed, phase 3 their return (deliveries_per_s, p50_us, p99_us,
//                      catchup_s, lost, duplicated, zmq_raw_msgs_per_s: raw ZeroMQ frames of a
//                      delivery's size from one process to 100 DEALERs in two others)
//   net_scaleout       one PHB and 1, 2, 4 SHB processes with 50 subscribers each, 4,000 events/s
//                      (400/s per subscriber whatever the SHBs), without and with churn (shbs,
//                      churn, deliveries_per_s, shb_cpu_s_per_million, p50_us, p99_us, lost,
//                      duplicated)
//
// Every figure is the median of several runs; compare figures against the baselines printed in
// the same run, since this machine is small and shared.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "benchmarks/workload.h"

ABSL_FLAG(std::string, workloads, "", "comma-separated workloads to run; empty runs all");
ABSL_FLAG(double, seconds, 2.0, "target measuring time per figure, in seconds");
ABSL_FLAG(std::string, scratch_dir, "", "directory for on-disk workloads; default: a temp dir");
ABSL_FLAG(bool, list, false, "print the workload names and exit");
ABSL_FLAG(bool, mutex_deadlock_detection, false,
          "keep absl::Mutex's deadlock detection on (a debugging aid that records every lock "
          "order; Abseil builds without NDEBUG, such as Debian's, enable it by default)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("gryph's scenario benchmarks; prints JSON lines");
  absl::ParseCommandLine(argc, argv);
  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  auto& registry = gryph::bench::Registry();
  if (absl::GetFlag(FLAGS_list)) {
    for (const auto& [name, fn] : registry) std::printf("%s\n", name.c_str());
    return 0;
  }
  std::vector<std::string> names;
  const std::string wanted = absl::GetFlag(FLAGS_workloads);
  if (wanted.empty()) {
    for (const auto& [name, fn] : registry) names.push_back(name);
  } else {
    names = absl::StrSplit(wanted, ',', absl::SkipEmpty());
  }
  for (const std::string& name : names) {
    if (!registry.contains(name)) {
      std::fprintf(stderr, "unknown workload '%s'; known: ", name.c_str());
      for (const auto& [n, fn] : registry) std::fprintf(stderr, "%s ", n.c_str());
      std::fprintf(stderr, "\n");
      return 2;
    }
  }
  std::string scratch = absl::GetFlag(FLAGS_scratch_dir);
  bool remove_scratch = false;
  if (scratch.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gryph-bench-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    scratch = tmpl;
    remove_scratch = true;
  }
  for (const std::string& name : names) {
    gryph::bench::Context ctx;
    ctx.seconds = absl::GetFlag(FLAGS_seconds);
    ctx.scratch_dir = (std::filesystem::path(scratch) / name).string();
    std::filesystem::create_directories(ctx.scratch_dir);
    registry.at(name)(ctx);
    std::filesystem::remove_all(ctx.scratch_dir);
  }
  if (remove_scratch) std::filesystem::remove_all(scratch);
  return 0;
}
