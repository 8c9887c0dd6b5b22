// knowledge_repair: gryph's knowledge and curiosity streams repairing a lossy link, in the
// deterministic simulator.
//
// A source node owns one pubend's stream: every millisecond it publishes a few ticks (an order
// event at some, silence at the rest) and sends them downstream as knowledge. The link loses,
// duplicates and delays messages. The sink accumulates what arrives in a KnowledgeStream,
// delivers events strictly in tick order up to the doubt horizon, and nacks the Q ranges below
// what it has seen through a CuriosityStream; the source answers nacks from its log. At the end
// the sink must have delivered every event exactly once, in order.
//
//   knowledge_repair [--seed=N] [--loss=0.2] [--seconds=5]

#include <cstdio>
#include <map>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "gryph/broker/curiosity_stream.h"
#include "gryph/broker/knowledge_stream.h"
#include "gryph/testing/simulator.h"

ABSL_FLAG(uint64_t, seed, 1, "simulation seed; the same seed replays the same run");
ABSL_FLAG(double, loss, 0.2, "probability that the link drops a message (each direction)");
ABSL_FLAG(double, seconds, 5, "virtual seconds of publishing");

namespace {

using namespace gryph;  // NOLINT: an example reads better without the prefix

constexpr PubendId kPubend{1};

// The publishing side: the log of every tick and its event.
class Source : public SimNode {
 public:
  explicit Source(SimContext& ctx) : ctx_(ctx) {
    ctx_.channel().SetReceiver([this](absl::string_view from, Message m) {
      if (auto* nack = std::get_if<CuriosityMessage>(&m)) Answer(from, *nack);
    });
    Publish();
  }

  const std::map<Tick, EventRef>& log() const { return log_; }
  uint64_t nacks_answered() const { return nacks_answered_; }
  void Stop() { stopped_ = true; }

 private:
  void Publish() {
    if (stopped_) return;
    KnowledgeMessage k{kPubend, {}};
    // Ten ticks a millisecond; about one in four carries an order.
    for (int i = 0; i < 10; ++i) {
      const Tick t = ++last_;
      if (ctx_.Random() % 4 == 0) {
        Event e;
        e.SetTopic("orders").SetInt64("order_id", static_cast<int64_t>(log_.size()) + 1);
        log_[t] = MakeEventRef(std::move(e));
        k.spans.push_back(KnowledgeSpan::Data(t, log_[t]));
      } else if (!k.spans.empty() && k.spans.back().value == TickValue::kS) {
        k.spans.back().range.last = t;
      } else {
        k.spans.push_back(KnowledgeSpan::Silence({t, t}));
      }
    }
    (void)ctx_.channel().Send("sink", std::move(k));
    ctx_.After(absl::Milliseconds(1), [this] { Publish(); });
  }

  void Answer(absl::string_view to, const CuriosityMessage& nack) {
    ++nacks_answered_;
    KnowledgeMessage k{kPubend, {}};
    for (TickRange r : nack.ranges) {
      Tick t = r.first;
      const Tick end = std::min(r.last, last_);
      for (auto it = log_.lower_bound(t); t <= end; ++it) {
        const Tick next_d = it == log_.end() ? end + 1 : std::min(it->first, end + 1);
        if (next_d > t) k.spans.push_back(KnowledgeSpan::Silence({t, next_d - 1}));
        if (next_d > end) break;
        k.spans.push_back(KnowledgeSpan::Data(next_d, it->second));
        t = next_d + 1;
      }
    }
    (void)ctx_.channel().Send(to, std::move(k));
  }

  SimContext& ctx_;
  Tick last_ = 0;
  bool stopped_ = false;
  uint64_t nacks_answered_ = 0;
  std::map<Tick, EventRef> log_;
};

// The receiving side: accumulate, deliver in order, nack what is missing.
class Sink : public SimNode {
 public:
  explicit Sink(SimContext& ctx) : ctx_(ctx) {
    ctx_.channel().SetReceiver([this](absl::string_view, Message m) {
      if (auto* k = std::get_if<KnowledgeMessage>(&m)) Receive(*k);
    });
    NackLoop();
  }

  std::vector<Tick> delivered;
  uint64_t nacks_sent = 0;

  bool CaughtUp(Tick last) const { return horizon_ >= last; }

 private:
  void Receive(const KnowledgeMessage& k) {
    for (const KnowledgeSpan& s : k.spans) {
      if (!knowledge_.Accumulate(s).ok()) std::abort();  // a contradiction would be a bug
      highest_seen_ = std::max(highest_seen_, s.range.last);
    }
    curiosity_.Prune(knowledge_);
    const Tick h = knowledge_.DoubtHorizon(horizon_);
    knowledge_.ForEachData({horizon_ + 1, h}, [this](Tick t, const EventRef&) {
      delivered.push_back(t);
      return true;
    });
    horizon_ = h;
  }

  // Every 5 ms: nack the Q ranges between the horizon and the highest tick seen.
  void NackLoop() {
    if (highest_seen_ > horizon_) {
      CuriosityMessage nack{kPubend, knowledge_.QRanges({horizon_ + 1, highest_seen_}, 64)};
      for (TickRange r : nack.ranges) curiosity_.Add("self", r);
      ++nacks_sent;
      (void)ctx_.channel().Send("source", std::move(nack));
    }
    ctx_.After(absl::Milliseconds(5), [this] { NackLoop(); });
  }

  SimContext& ctx_;
  KnowledgeStream knowledge_;
  CuriosityStream curiosity_;
  Tick horizon_ = 0;
  Tick highest_seen_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Repairs a lossy link with gryph's knowledge and curiosity streams in the simulator.");
  absl::ParseCommandLine(argc, argv);
  LinkProfile link;
  link.min_delay = absl::Microseconds(200);
  link.max_delay = absl::Milliseconds(3);
  link.loss = absl::GetFlag(FLAGS_loss);
  link.duplicate = 0.05;
  link.fifo = false;
  Simulator sim(absl::GetFlag(FLAGS_seed), link);
  if (!sim.AddNode("source", [](SimContext& c) { return std::make_unique<Source>(c); }).ok() ||
      !sim.AddNode("sink", [](SimContext& c) { return std::make_unique<Sink>(c); }).ok()) {
    return 1;
  }
  auto* source = sim.node_as<Source>("source");
  auto* sink = sim.node_as<Sink>("sink");
  sim.RunFor(absl::Seconds(absl::GetFlag(FLAGS_seconds)));
  source->Stop();
  const Tick last = source->log().empty() ? 0 : source->log().rbegin()->first;
  const bool caught_up = sim.RunUntil([&] { return sink->CaughtUp(last); }, absl::Seconds(30));

  std::vector<Tick> want;
  for (const auto& [t, e] : source->log()) want.push_back(t);
  const bool exact = sink->delivered == want;
  std::printf("gryph knowledge repair, seed %llu (--seed replays it)\n",
              static_cast<unsigned long long>(sim.seed()));
  std::printf("  %-34s %12llu\n", "events published", static_cast<unsigned long long>(want.size()));
  std::printf("  %-34s %12llu\n", "messages sent",
              static_cast<unsigned long long>(sim.stats().sent));
  std::printf("  %-34s %12llu\n", "messages lost",
              static_cast<unsigned long long>(sim.stats().lost));
  std::printf("  %-34s %12llu\n", "messages duplicated",
              static_cast<unsigned long long>(sim.stats().duplicated));
  std::printf("  %-34s %12llu\n", "nacks sent", static_cast<unsigned long long>(sink->nacks_sent));
  std::printf("  %-34s %12llu\n", "nacks answered",
              static_cast<unsigned long long>(source->nacks_answered()));
  std::printf("  %-34s %12llu\n", "events delivered",
              static_cast<unsigned long long>(sink->delivered.size()));
  std::printf("  %-34s %12s\n", "exactly once, in order", exact && caught_up ? "yes" : "NO");
  return exact && caught_up ? 0 : 1;
}
