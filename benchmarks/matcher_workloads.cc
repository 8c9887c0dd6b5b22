// Workloads for the matcher (see gryph_bench.cc for the list).
//
// Every workload parses its subscriptions before timing anything: parsing a selector is not part
// of an insert. Inserts are timed as Add of the pre-parsed subscriptions (moved in) followed by
// the Publish that makes them visible, so the figure includes both index copies' work; removes
// likewise. inserts_per_s fills a fresh matcher (growing its tables and memory);
// refill_inserts_per_s fills it again after everything was removed (the steady state of churn).
// Matching is timed on a pool of pre-built events. Each figure is the median of three runs.
//
//   match_one_topic   20,000 subscribers on one topic, no selector: every event matches all
//   match_flat        1,000,000 topics on one level ("<n>-mainTopic"), one subscriber each
//   match_deep        500,000 subscriptions on 4-level topics (10 x 20 x 50 x 100 values per
//                     level), 7% with one '+' level, 3% ending with '#' after 2 or 3 levels
//   match_content     1,000,000 selectors over 10 attributes (content_world.h), no topic filter;
//                     events match about 0.1% of them
//   match_concurrent  150,000 content selectors; 1 or 2 reader threads match while a writer adds
//                     and removes 100,000 subscriptions per second (50 + 50 each millisecond,
//                     then TryPublish: the writer never blocks on a preempted reader)
//   match_ranges      the standard workload of the content-matching literature (RangesWorld
//                     below): 10^5 and 10^6 selectors, each 5 BETWEEN ranges on distinct
//                     attributes out of 20, each range `width` (0.1, 0.25, 0.5) of the integer
//                     domain [0, 10^6); events carry all 20 attributes or 10 of them; every
//                     parameter set is one line, checked exactly against a brute-force scan
//   match_ranges_scan the brute-force baseline of match_ranges on the same predicates: a flat
//                     array of (attribute, lo, hi) triples scanned per event
//
// Keys: subscriptions, inserts_per_s, removes_per_s, events_per_s (Match calls per second, all
// readers together), ns_per_event, matches_per_event, refill_inserts_per_s; the same rates per
// second of the thread's CPU time (inserts_per_cpu_s, removes_per_cpu_s, events_per_cpu_s: on a
// shared machine these exclude the time other tenants held the core); rss_mb (resident set of the
// whole process after the inserts of the last run, benchmark data included); matcher_mb (heap in
// use after a fill minus before it: the matcher's records, both index copies and their tables, and
// the subscriptions' topic filters it took over — not the parsed selectors, which the benchmark's
// own copies share); loadavg (1-minute load average
// when the workload started); readers, changes_per_s and publishes_per_s (match_concurrent,
// whose events_per_cpu_s sums each reader's events per second of its own CPU time).
//
// match_ranges keys (one run per parameter set, to keep 10^6 within a couple of minutes):
// subscriptions, width, event_attributes, parses_per_s (Subscription::Create of the selector
// texts), inserts_per_s (Add of the parsed subscriptions, moved in, and the Publish; and
// inserts_per_cpu_s, per second of the thread's CPU time),
// removes_per_s, decodes_per_s (Selector::Decode of the Selector::Encode of the first 10^5
// selectors, or all when fewer), encoded_bytes_per_selector (their mean encoded size),
// events_per_s, events_per_cpu_s, ns_per_event, matches_per_event,
// bytes_per_subscription (heap in use after the fill minus before parsing, the benchmark's own
// array of Subscription handles excluded, per subscription: the matcher's records, both index
// copies and the compiled selectors it keeps, which nothing else shares here),
// matcher_bytes_per_subscription (heap in use after the fill minus after parsing: what the fill
// added; it can be below bytes_per_subscription by what the matcher frees of the parsed
// subscriptions, such as their texts), exact (the ids of
// each checked event equal the scan's; the workload exits with status 1 when false),
// checked_events, loadavg. match_ranges_scan: subscriptions, width, event_attributes,
// events_per_s, events_per_cpu_s, matches_per_event.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "benchmarks/content_world.h"
#include "benchmarks/workload.h"
#include "gryph/broker/matcher.h"

ABSL_FLAG(std::string, ranges_subscriptions, "100000,1000000",
          "match_ranges and match_ranges_scan: the subscription counts to run, comma-separated");
ABSL_FLAG(std::string, ranges_widths, "0.1,0.25,0.5",
          "match_ranges and match_ranges_scan: the range widths to run, comma-separated");

namespace gryph::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU time of the calling thread, in seconds: on a shared machine, wall-clock rates also measure
// the other tenants; CPU-time rates measure the matcher alone (both are reported).
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Heap bytes in use (malloc'd and mmap'd by malloc), for the matcher's own footprint: the
// difference across a fill (0 without glibc).
double HeapBytes() {
#if defined(__GLIBC__)
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<double>(mi.uordblks + mi.hblkhd);
#else
  return 0;
#endif
}

// The 1-minute load average, stated with every figure (0 when unavailable).
double LoadAverage() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : 0;
}

// Resident set size of this process in MiB (0 when /proc is unavailable).
double RssMb() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long pages = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<double>(resident) * 4096.0 / (1024.0 * 1024.0);
}

void MustOk(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::abort();
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Wall-clock and CPU-time stopwatch for the calling thread.
struct Stopwatch {
  Clock::time_point wall = Clock::now();
  double cpu = ThreadCpuSeconds();
  void Add(double* wall_total, double* cpu_total) const {
    *wall_total += SecondsSince(wall);
    *cpu_total += ThreadCpuSeconds() - cpu;
  }
};

// Runs `runs` times, each `rounds` times on a fresh matcher: insert everything (cold: the
// matcher grows its tables and memory), remove everything, insert everything again (refill: into
// tables and memory the first fill left), and, in the last round, match between the first fill
// and the removal. Reports the medians over runs. `rounds` > 1 makes small sets last long enough
// to time.
void RunTimed(const char* name, const std::vector<Subscription>& subs,
              const std::vector<Event>& events, double match_seconds, int rounds = 1,
              int runs = 3) {
  std::vector<double> inserts, removes, refills, rates, cpu_inserts, cpu_removes, cpu_rates,
      matches;
  double rss = 0, matcher_mb = 0;
  const double load = LoadAverage();
  for (int run = 0; run < runs; ++run) {
    double insert_s = 0, remove_s = 0, refill_s = 0, insert_cpu = 0, remove_cpu = 0, refill_cpu = 0;
    uint64_t calls = 0, matched = 0;
    double elapsed = 0, elapsed_cpu = 0;
    for (int round = 0; round < rounds; ++round) {
      std::vector<Subscription> batch = subs;  // copies made before timing; Add moves them in
      const double heap_before = HeapBytes();
      Matcher m;
      Stopwatch sw;
      for (size_t i = 0; i < batch.size(); ++i) MustOk(m.Add(SubscriberId{i}, std::move(batch[i])));
      m.Publish();
      sw.Add(&insert_s, &insert_cpu);
      if (round + 1 == rounds) {
        rss = RssMb();
        matcher_mb = (HeapBytes() - heap_before) / (1024.0 * 1024.0);
        Stopwatch mw;
        while (elapsed < match_seconds) {
          for (int k = 0; k < 64; ++k) {
            m.Match(events[calls % events.size()], [&matched](SubscriberId) { ++matched; });
            ++calls;
          }
          elapsed = SecondsSince(mw.wall);
        }
        elapsed_cpu = ThreadCpuSeconds() - mw.cpu;
      }
      Stopwatch rw;
      for (size_t i = 0; i < subs.size(); ++i) MustOk(m.Remove(SubscriberId{i}));
      m.Publish();
      rw.Add(&remove_s, &remove_cpu);
      batch = subs;
      Stopwatch fw;
      for (size_t i = 0; i < batch.size(); ++i) MustOk(m.Add(SubscriberId{i}, std::move(batch[i])));
      m.Publish();
      fw.Add(&refill_s, &refill_cpu);
    }
    const double n = static_cast<double>(subs.size()) * rounds;
    inserts.push_back(n / insert_s);
    removes.push_back(n / remove_s);
    refills.push_back(n / refill_s);
    cpu_inserts.push_back(n / insert_cpu);
    cpu_removes.push_back(n / remove_cpu);
    rates.push_back(static_cast<double>(calls) / elapsed);
    cpu_rates.push_back(static_cast<double>(calls) / elapsed_cpu);
    matches.push_back(static_cast<double>(matched) / static_cast<double>(calls));
  }
  const double rate = Median(rates);
  Report(name)
      .Add("subscriptions", static_cast<int64_t>(subs.size()))
      .Add("inserts_per_s", Median(inserts))
      .Add("removes_per_s", Median(removes))
      .Add("events_per_s", rate)
      .Add("ns_per_event", 1e9 / rate)
      .Add("matches_per_event", Median(matches))
      .Add("refill_inserts_per_s", Median(refills))
      .Add("inserts_per_cpu_s", Median(cpu_inserts))
      .Add("removes_per_cpu_s", Median(cpu_removes))
      .Add("events_per_cpu_s", Median(cpu_rates))
      .Add("rss_mb", rss)
      .Add("matcher_mb", matcher_mb)
      .Add("loadavg", load)
      .Print();
}

// ---------------------------------------------------------------------------------------------
// Ranges: the standard workload of the content-matching literature (as in the evaluations of
// REIN, OpIndex, TAMA, H-Tree): kAttributes integer attributes a0..a19 over [0, kDomain); each
// subscription is a conjunction of kConjuncts `aK BETWEEN lo AND lo + W - 1` on distinct
// attributes, W = width * kDomain values, lo uniform; events carry uniform values for all
// attributes or for `event_attributes` of them, chosen at random. A conjunct holds with
// probability `width`, so a subscription matches a fraction width^5 of the events that carry
// its attributes (~0.1% for width 0.25).
class RangesWorld {
 public:
  static constexpr int kAttributes = 20;
  static constexpr int kConjuncts = 5;
  static constexpr int64_t kDomain = 1'000'000;

  // One subscription as the scan keeps it.
  struct Predicate {
    uint8_t attr[kConjuncts];
    int32_t lo[kConjuncts];
    int32_t hi[kConjuncts];
  };
  // One event as the scan reads it: a value per attribute, -1 when missing (outside every range).
  struct Values {
    int64_t v[kAttributes];
  };

  RangesWorld(uint64_t seed, double width, int event_attributes)
      : r_(seed),
        width_(static_cast<int64_t>(width * kDomain)),
        event_attributes_(event_attributes) {}

  Predicate NextPredicate() {
    Predicate p;
    int attrs[kAttributes];
    for (int i = 0; i < kAttributes; ++i) attrs[i] = i;
    for (int k = 0; k < kConjuncts; ++k) {  // a partial Fisher-Yates: distinct attributes
      std::swap(attrs[k], attrs[k + r_.Uniform(kAttributes - k)]);
      p.attr[k] = static_cast<uint8_t>(attrs[k]);
      p.lo[k] = static_cast<int32_t>(r_.Uniform(kDomain - width_ + 1));
      p.hi[k] = static_cast<int32_t>(p.lo[k] + width_ - 1);
    }
    return p;
  }

  static std::string SelectorOf(const Predicate& p) {
    std::string s;
    for (int k = 0; k < kConjuncts; ++k) {
      absl::StrAppend(&s, k > 0 ? " AND " : "", "a", p.attr[k], " BETWEEN ", p.lo[k], " AND ",
                      p.hi[k]);
    }
    return s;
  }

  std::vector<Predicate> Predicates(size_t n) {
    std::vector<Predicate> out(n);
    for (Predicate& p : out) p = NextPredicate();
    return out;
  }

  void NextEvent(Event* e, Values* values) {
    int attrs[kAttributes];
    for (int i = 0; i < kAttributes; ++i) {
      attrs[i] = i;
      values->v[i] = -1;
    }
    *e = Event();
    e->SetTopic("ranges");
    for (int k = 0; k < event_attributes_; ++k) {
      std::swap(attrs[k], attrs[k + r_.Uniform(kAttributes - k)]);
      const int64_t v = static_cast<int64_t>(r_.Uniform(kDomain));
      values->v[attrs[k]] = v;
      e->SetInt64(absl::StrCat("a", attrs[k]), v);
    }
  }

  // Appends the indexes of the predicates `values` satisfies, in order.
  static void Scan(const std::vector<Predicate>& preds, const Values& values,
                   std::vector<uint64_t>* out) {
    const size_t n = preds.size();
    for (size_t i = 0; i < n; ++i) {
      const Predicate& p = preds[i];
      bool ok = true;
      for (int k = 0; k < kConjuncts && ok; ++k) {
        const int64_t v = values.v[p.attr[k]];
        ok = v >= p.lo[k] && v <= p.hi[k];
      }
      if (ok) out->push_back(i);
    }
  }

 private:
  Rand r_;
  int64_t width_;
  int event_attributes_;
};

struct RangesParams {
  size_t subscriptions;
  double width;
  int event_attributes;
  uint64_t seed() const {
    return 1000 + subscriptions / 1000 + static_cast<uint64_t>(width * 100) * 7 +
           static_cast<uint64_t>(event_attributes) * 13;
  }
};

// The parameter sets the flags select (all 12 by default).
std::vector<RangesParams> AllRangesParams() {
  std::vector<RangesParams> out;
  for (absl::string_view ns :
       absl::StrSplit(absl::GetFlag(FLAGS_ranges_subscriptions), ',', absl::SkipWhitespace())) {
    size_t n = 0;
    if (!absl::SimpleAtoi(ns, &n)) continue;
    for (absl::string_view ws :
         absl::StrSplit(absl::GetFlag(FLAGS_ranges_widths), ',', absl::SkipWhitespace())) {
      double width = 0;
      if (!absl::SimpleAtod(ws, &width) || !(width > 0 && width <= 1)) continue;
      for (int attrs : {20, 10}) out.push_back(RangesParams{n, width, attrs});
    }
  }
  return out;
}

// Events of a ranges world: Event objects for the matcher and the scan's value arrays.
struct RangesEvents {
  std::vector<Event> events;
  std::vector<RangesWorld::Values> values;
};

RangesEvents MakeRangesEvents(RangesWorld& world, size_t n) {
  RangesEvents out;
  out.events.resize(n);
  out.values.resize(n);
  for (size_t i = 0; i < n; ++i) world.NextEvent(&out.events[i], &out.values[i]);
  return out;
}

constexpr size_t kRangesEvents = 256;
// decodes_per_s is measured on the encodings of at most this many of the selectors.
constexpr size_t kRangesDecodes = 100000;

}  // namespace

GRYPH_WORKLOAD(match_ranges) {
  for (const RangesParams& params : AllRangesParams()) {
    const double load = LoadAverage();
    RangesWorld world(params.seed(), params.width, params.event_attributes);
    const std::vector<RangesWorld::Predicate> preds = world.Predicates(params.subscriptions);
    const RangesEvents ev = MakeRangesEvents(world, kRangesEvents);
    std::vector<std::string> texts;
    texts.reserve(preds.size());
    for (const RangesWorld::Predicate& p : preds) texts.push_back(RangesWorld::SelectorOf(p));
    const size_t n = preds.size();

    // Parse, then fill: the parsed selectors are moved into the matcher, which alone keeps them.
    const double heap_start = HeapBytes();
    // The handles are constructed (their pages touched) before the clock starts: the benchmark's
    // own array is not part of a parse.
    std::vector<Subscription> subs(n, MustCreate("", ""));
    const double handles = static_cast<double>(subs.capacity() * sizeof(Subscription));
    Stopwatch parse;
    for (size_t i = 0; i < n; ++i) subs[i] = MustCreate(texts[i], "");
    double parse_s = 0, parse_cpu = 0;
    parse.Add(&parse_s, &parse_cpu);
    const double heap_parsed = HeapBytes();
    auto m = std::make_unique<Matcher>();
    Stopwatch insert;
    for (size_t i = 0; i < n; ++i) MustOk(m->Add(SubscriberId{i}, std::move(subs[i])));
    m->Publish();
    double insert_s = 0, insert_cpu = 0;
    insert.Add(&insert_s, &insert_cpu);
    const double heap_filled = HeapBytes();
    subs.clear();

    // Exactness: every checked event's ids against the scan's, within a bounded time.
    bool exact = true;
    size_t checked = 0;
    std::vector<uint64_t> got, want;
    const auto check_start = Clock::now();
    for (size_t i = 0; i < kRangesEvents && exact; ++i) {
      if (i >= 8 && SecondsSince(check_start) > ctx.seconds / 3) break;
      got.clear();
      want.clear();
      m->Match(ev.events[i], [&got](SubscriberId id) { got.push_back(id.value); });
      RangesWorld::Scan(preds, ev.values[i], &want);
      std::sort(got.begin(), got.end());
      exact = got == want;
      if (!exact) {
        std::fprintf(stderr, "match_ranges: event %zu: the matcher found %zu ids, the scan %zu\n",
                     i, got.size(), want.size());
      }
      ++checked;
    }

    // Matching, timed on the pool of events (at least one pass of 8 events).
    uint64_t calls = 0, matched = 0;
    Stopwatch mw;
    double elapsed = 0;
    while (elapsed < ctx.seconds / 3 || calls < 8) {
      for (int k = 0; k < 4; ++k) {
        m->Match(ev.events[calls % kRangesEvents], [&matched](SubscriberId) { ++matched; });
        ++calls;
      }
      elapsed = SecondsSince(mw.wall);
    }
    const double elapsed_cpu = ThreadCpuSeconds() - mw.cpu;

    Stopwatch remove;
    for (size_t i = 0; i < n; ++i) MustOk(m->Remove(SubscriberId{i}));
    m->Publish();
    double remove_s = 0, remove_cpu = 0;
    remove.Add(&remove_s, &remove_cpu);
    m.reset();

    // Decoding: the encodings of (up to) the first kRangesDecodes selectors, decoded again.
    std::vector<std::string> encoded;
    encoded.reserve(std::min(n, kRangesDecodes));
    for (size_t i = 0; i < std::min(n, kRangesDecodes); ++i) {
      encoded.push_back(MustCreate(texts[i], "").selector().Encode());
    }
    double encoded_bytes = 0;
    for (const std::string& e : encoded) encoded_bytes += static_cast<double>(e.size());
    std::vector<Selector> decoded;
    decoded.reserve(encoded.size());
    Stopwatch decode;
    for (const std::string& e : encoded) {
      absl::StatusOr<Selector> s = Selector::Decode(e);
      if (!s.ok()) {
        std::fprintf(stderr, "match_ranges: %s\n", s.status().ToString().c_str());
        std::exit(1);
      }
      decoded.push_back(*std::move(s));
    }
    double decode_s = 0, decode_cpu = 0;
    decode.Add(&decode_s, &decode_cpu);
    const double decodes = static_cast<double>(decoded.size());
    decoded.clear();

    const double rate = static_cast<double>(calls) / elapsed;
    const double count = static_cast<double>(n);
    Report("match_ranges")
        .Add("subscriptions", static_cast<int64_t>(n))
        .Add("width", params.width)
        .Add("event_attributes", int64_t{params.event_attributes})
        .Add("events_per_s", rate)
        .Add("events_per_cpu_s", static_cast<double>(calls) / elapsed_cpu)
        .Add("ns_per_event", 1e9 / rate)
        .Add("matches_per_event", static_cast<double>(matched) / static_cast<double>(calls))
        .Add("inserts_per_s", count / insert_s)
        .Add("inserts_per_cpu_s", count / insert_cpu)
        .Add("removes_per_s", count / remove_s)
        .Add("parses_per_s", count / parse_s)
        .Add("decodes_per_s", decodes / decode_s)
        .Add("encoded_bytes_per_selector", encoded_bytes / decodes)
        .Add("bytes_per_subscription", (heap_filled - heap_start - handles) / count)
        .Add("matcher_bytes_per_subscription", (heap_filled - heap_parsed) / count)
        .AddBool("exact", exact)
        .Add("checked_events", static_cast<int64_t>(checked))
        .Add("loadavg", load)
        .Print();
    if (!exact) {
      std::fprintf(stderr, "match_ranges: the matcher's answer differs from the scan's\n");
      std::exit(1);
    }
  }
}

GRYPH_WORKLOAD(match_ranges_scan) {
  for (const RangesParams& params : AllRangesParams()) {
    RangesWorld world(params.seed(), params.width, params.event_attributes);
    const std::vector<RangesWorld::Predicate> preds = world.Predicates(params.subscriptions);
    const RangesEvents ev = MakeRangesEvents(world, kRangesEvents);
    uint64_t calls = 0, matched = 0;
    std::vector<uint64_t> ids;
    const auto start = Clock::now();
    const double cpu_start = ThreadCpuSeconds();
    double elapsed = 0;
    while (elapsed < ctx.seconds / 3 || calls < 8) {
      ids.clear();
      RangesWorld::Scan(preds, ev.values[calls % kRangesEvents], &ids);
      matched += ids.size();
      ++calls;
      elapsed = SecondsSince(start);
    }
    Report("match_ranges_scan")
        .Add("subscriptions", static_cast<int64_t>(preds.size()))
        .Add("width", params.width)
        .Add("event_attributes", int64_t{params.event_attributes})
        .Add("events_per_s", static_cast<double>(calls) / elapsed)
        .Add("events_per_cpu_s", static_cast<double>(calls) / (ThreadCpuSeconds() - cpu_start))
        .Add("matches_per_event", static_cast<double>(matched) / static_cast<double>(calls))
        .Print();
  }
}

GRYPH_WORKLOAD(match_one_topic) {
  std::vector<Subscription> subs;
  for (int i = 0; i < 20000; ++i) subs.push_back(MustCreate("", "orders/us/IBM"));
  Event e;
  e.SetTopic("orders/us/IBM");
  RunTimed("match_one_topic", subs, {e}, ctx.seconds / 3, /*rounds=*/20);
}

GRYPH_WORKLOAD(match_flat) {
  constexpr size_t kTopics = 1'000'000;
  std::vector<Subscription> subs;
  subs.reserve(kTopics);
  for (size_t i = 0; i < kTopics; ++i)
    subs.push_back(MustCreate("", absl::StrCat(i, "-mainTopic")));
  Rand r(1);
  std::vector<Event> events(4096);
  for (Event& e : events) e.SetTopic(absl::StrCat(r.Uniform(kTopics), "-mainTopic"));
  RunTimed("match_flat", subs, events, ctx.seconds / 3);
}

GRYPH_WORKLOAD(match_deep) {
  constexpr size_t kSubscriptions = 500'000;
  constexpr uint64_t kFanout[] = {10, 20, 50, 100};
  Rand r(2);
  // A topic or filter of 4 levels; level `plus` (if < 4) is '+'; with `keep` < 4, only the first
  // `keep` levels are kept and '#' follows.
  auto make = [&](size_t plus, size_t keep) {
    std::string out;
    for (size_t l = 0; l < std::size(kFanout) && l < keep; ++l) {
      if (l > 0) out += '/';
      out += l == plus ? std::string("+") : absl::StrCat("l", l, "-", r.Uniform(kFanout[l]));
    }
    if (keep < std::size(kFanout)) out += "/#";
    return out;
  };
  std::vector<Subscription> subs;
  subs.reserve(kSubscriptions);
  for (size_t i = 0; i < kSubscriptions; ++i) {
    const uint64_t x = r.Uniform(100);
    std::string filter;
    if (x < 7) {
      filter = make(r.Uniform(4), 4);
    } else if (x < 10) {
      filter = make(4, 2 + r.Uniform(2));  // "l0-3/l1-7/#" or "l0-3/l1-7/l2-9/#"
    } else {
      filter = make(4, 4);
    }
    subs.push_back(MustCreate("", filter));
  }
  std::vector<Event> events(4096);
  for (Event& e : events) e.SetTopic(make(4, 4));
  RunTimed("match_deep", subs, events, ctx.seconds / 3);
}

GRYPH_WORKLOAD(match_content) {
  ContentWorld world(3);
  const std::vector<Subscription> subs = world.Subscriptions(1'000'000);
  const std::vector<Event> events = world.Events(4096);
  RunTimed("match_content", subs, events, ctx.seconds / 3);
}

GRYPH_WORKLOAD(match_concurrent) {
  constexpr size_t kBase = 100'000;
  constexpr size_t kWindow = 50'000;  // churned subscriptions present at any time
  constexpr size_t kChurnPool = 100'000;
  constexpr int kPerMillisecond = 50;  // adds, and as many removes: 100,000 changes per second
  ContentWorld world(4);
  const std::vector<Subscription> base = world.Subscriptions(kBase);
  const std::vector<Subscription> pool = world.Subscriptions(kChurnPool);
  const std::vector<Event> events = world.Events(4096);
  for (int readers : {1, 2}) {
    std::vector<double> rates, cpu_rates, churn_rates, publish_rates;
    const double load = LoadAverage();
    for (int run = 0; run < 3; ++run) {
      // Publication is the writer's TryPublish each millisecond; no automatic publication.
      Matcher m(MatcherOptions{.max_unpublished = size_t{1} << 30});
      for (size_t i = 0; i < kBase; ++i) MustOk(m.Add(SubscriberId{i}, base[i]));
      // Ids kBase + k: the churned ones; a window of kWindow of them is present at any time.
      uint64_t next = 0, oldest = 0;
      for (; next < kWindow; ++next) MustOk(m.Add(SubscriberId{kBase + next}, pool[next]));
      m.Publish();
      std::atomic<bool> stop{false};
      std::atomic<uint64_t> changes{0};
      std::atomic<uint64_t> publishes{0};
      std::thread writer([&] {
        auto tick = Clock::now();
        while (!stop.load(std::memory_order_relaxed)) {
          for (int k = 0; k < kPerMillisecond; ++k, ++next) {
            MustOk(m.Add(SubscriberId{kBase + next}, pool[next % kChurnPool]));
            MustOk(m.Remove(SubscriberId{kBase + oldest++}));
          }
          if (m.TryPublish()) publishes.fetch_add(1, std::memory_order_relaxed);
          changes.fetch_add(2 * kPerMillisecond, std::memory_order_relaxed);
          tick += std::chrono::milliseconds(1);
          std::this_thread::sleep_until(tick);
        }
      });
      std::vector<uint64_t> calls(readers, 0);
      std::vector<double> cpu(readers, 0);
      std::vector<std::thread> threads;
      const auto start = Clock::now();
      for (int t = 0; t < readers; ++t) {
        threads.emplace_back([&, t] {
          const double cpu_start = ThreadCpuSeconds();
          uint64_t n = 0, sink = 0;
          size_t i = static_cast<size_t>(t) * 997;
          while (!stop.load(std::memory_order_relaxed)) {
            for (int k = 0; k < 16; ++k) {
              m.Match(events[i++ % events.size()], [&sink](SubscriberId id) { sink += id.value; });
              ++n;
            }
          }
          calls[t] = n;
          cpu[t] = ThreadCpuSeconds() - cpu_start;
          if (sink == 42) std::printf(" ");  // keep the work observable
        });
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(ctx.seconds / 3));
      stop.store(true);
      for (std::thread& t : threads) t.join();
      writer.join();
      const double secs = SecondsSince(start);
      double total = 0, per_cpu = 0;
      for (int t = 0; t < readers; ++t) {
        total += static_cast<double>(calls[t]);
        per_cpu += static_cast<double>(calls[t]) / cpu[t];
      }
      rates.push_back(total / secs);
      cpu_rates.push_back(per_cpu);
      churn_rates.push_back(static_cast<double>(changes.load()) / secs);
      publish_rates.push_back(static_cast<double>(publishes.load()) / secs);
    }
    const double rate = Median(rates);
    Report("match_concurrent")
        .Add("readers", int64_t{readers})
        .Add("subscriptions", static_cast<int64_t>(kBase + kWindow))
        .Add("changes_per_s", Median(churn_rates))
        .Add("publishes_per_s", Median(publish_rates))
        .Add("events_per_s", rate)
        .Add("ns_per_event", 1e9 / rate)
        // Each reader's events per second of its own CPU time, summed over the readers: what
        // the readers would reach with a core each, free of other tenants.
        .Add("events_per_cpu_s", Median(cpu_rates))
        .Add("loadavg", load)
        .Print();
  }
}

}  // namespace gryph::bench
