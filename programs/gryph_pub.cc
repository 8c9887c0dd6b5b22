// gryph-pub: a publisher as a process, publishing to a PHB over ZeroMQ (CURVE with --keys_dir).
//
// It publishes JSON lines read from standard input (programs/event_json.h; a line's "key" picks
// the pubend, else --pubend does) or, with --rate, generated events ({"seq": N, "k": N % 10}
// and a --payload_bytes payload, N = 1, 2, ... across restarts) at that rate, --count of them
// (0: until stopped). An event the PHB says it never logged under its sequence (that publish
// was lost while a later one arrived) is published again under a new one. The PHB knows
// it by its channel name (--name; under CURVE, the name its key is allowed as), and takes
// (name, sequence) for the idempotency key.
//
// Idempotent across its own restarts: every event is journaled under its sequence in
// --state_dir (an LMDB store, fsynced) before it is sent, and removed once the PHB has answered
// it. A restarted gryph-pub first publishes what its journal still holds, under the same
// sequences (the PHB answers each with the tick it logged, if it did), then goes on. So a
// SIGKILL at any instant neither loses an event it took nor logs one twice.
//
// --print_acks prints each answer as a JSON line on standard output:
//   {"sequence":7,"pubend":1,"tick":1733140000123456}   or   {"sequence":7,"error":"..."}
// It exits 0 once every event is answered (end of input, or --count), or at SIGTERM/SIGINT
// (what is unanswered stays journaled); 2 for a bad flag or an unusable state directory; 1 when
// an event was refused for good (its answer is printed on standard error) or on a failure.

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gryph/message.h"
#include "gryph/pubend.h"
#include "gryph/runtime.h"
#include "lib/util/coding.h"
#include "nlohmann/json.hpp"
#include "programs/event_json.h"
#include "programs/program_support.h"

ABSL_FLAG(std::string, phb, "", "NAME@ENDPOINT of the PHB, e.g. phb@tcp://10.0.0.1:7100");
ABSL_FLAG(std::string, name, "pub",
          "this publisher's name: its endpoint name at the PHB and, with --keys_dir, NAME.key");
ABSL_FLAG(std::string, state_dir, "", "where the publisher journals what it publishes (required)");
ABSL_FLAG(uint32_t, pubend, 1, "the pubend of events without a \"key\"");
ABSL_FLAG(double, rate, 0, "generate events at this rate per second (0: read JSON lines)");
ABSL_FLAG(int64_t, count, 0,
          "with --rate: how many events in all, across restarts (0: until stopped)");
ABSL_FLAG(int64_t, payload_bytes, 100, "with --rate: the payload size of each event");
ABSL_FLAG(bool, print_acks, false, "print each answer as a JSON line on stdout");
ABSL_FLAG(std::string, keys_dir, "",
          "CURVE keys: NAME.key for this publisher, PHB.pub for the PHB; empty: plain TCP");
ABSL_FLAG(absl::Duration, stats_interval, absl::Seconds(10),
          "print one line of figures on stderr this often (0: never)");

namespace gryph::programs {
namespace {

constexpr absl::string_view kJournal = "pub.journal";  // sequence (8 bytes, big-endian) -> entry
constexpr absl::string_view kMeta = "pub.meta";
constexpr absl::string_view kNextSequence = "next_sequence";  // 8 bytes, big-endian
// With --rate: the number of the next generated event (its "seq"), 8 bytes, big-endian.
constexpr absl::string_view kNextGenerated = "next_generated";

// One journaled publish: the Publish message itself, in its wire encoding (docs/format.md).
struct Entry {
  uint64_t sequence = 0;
  uint32_t pubend = 0;  // 0: by key
  std::string key;
  EventRef event;
  uint64_t generated = 0;  // with --rate: the event's number (not journaled: its Send stores it)

  std::string Encode() const {
    return EncodeMessage(PublishMessage{sequence, PubendId{pubend}, key, event});
  }
  static absl::StatusOr<Entry> Decode(uint64_t sequence, absl::string_view in) {
    absl::StatusOr<Message> m = DecodeMessage(in);
    const PublishMessage* p = m.ok() ? std::get_if<PublishMessage>(&*m) : nullptr;
    if (p == nullptr || p->sequence != sequence) {
      return absl::DataLossError(
          absl::StrCat("journal entry ", sequence, " is damaged",
                       m.ok() ? "" : absl::StrCat(": ", m.status().message())));
    }
    return Entry{sequence, p->pubend.value, p->key, p->event};
  }
};

// What the producer thread and the loop share.
struct Shared {
  absl::Mutex mu;
  std::set<uint64_t> unanswered ABSL_GUARDED_BY(mu);   // the sequences sent, not answered
  std::vector<uint64_t> answered ABSL_GUARDED_BY(mu);  // to remove from the journal
  bool refused ABSL_GUARDED_BY(mu) = false;            // an event refused for good
  // Events the pubend says it never logged under their sequence (their publish was lost while a
  // later one arrived): published again under new sequences, before anything new.
  std::deque<Entry> again ABSL_GUARDED_BY(mu);
  absl::CondVar changed;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> acked{0};
};

std::string AnswerJson(uint64_t sequence, const absl::StatusOr<Tick>& t, uint32_t pubend) {
  nlohmann::json j = nlohmann::json::object();
  j["sequence"] = sequence;
  if (t.ok()) {
    j["pubend"] = pubend;
    j["tick"] = *t;
  } else {
    j["error"] = t.status().ToString();
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Standard input, line by line, without blocking past a stop (std::getline would wait for
// input that may never come while SIGTERM asks the process to end).
class LineReader {
 public:
  // The next line without its newline; false at the end of input or once `stop` is set.
  bool Next(std::string* line, const std::atomic<bool>& stop) {
    for (;;) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        line->assign(buffer_, 0, nl);
        buffer_.erase(0, nl + 1);
        return true;
      }
      if (eof_) {
        if (buffer_.empty()) return false;
        line->swap(buffer_);  // a last line without a newline
        buffer_.clear();
        return true;
      }
      if (stop.load()) return false;
      pollfd fd{STDIN_FILENO, POLLIN, 0};
      if (::poll(&fd, 1, 100) <= 0) continue;
      char chunk[1 << 16];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        eof_ = true;
      } else {
        buffer_.append(chunk, static_cast<size_t>(n));
      }
    }
  }

 private:
  std::string buffer_;
  bool eof_ = false;
};

// Takes events from standard input or the generator, journals them, and hands them to the
// loop, at most Pubend::kSequenceWindow unanswered at a time (the pubend's retry window).
class Producer {
 public:
  Producer(Storage* journal, Runtime* runtime, RemotePublisher* publisher, Shared* shared)
      : journal_(journal), runtime_(runtime), publisher_(publisher), shared_(shared) {}

  // On the producer's thread. Returns when everything is answered (or on stop).
  // `next_generated`: with --rate, the number of the next event to generate. A republished event
  // takes a new sequence, so sequences and event numbers part: the count is of events.
  void Run(std::deque<Entry> recovered, uint64_t next_sequence, uint64_t next_generated) {
    for (Entry& e : recovered) {
      if (!Send(std::move(e))) return;
    }
    const double rate = absl::GetFlag(FLAGS_rate);
    const int64_t count = absl::GetFlag(FLAGS_count);
    const absl::Time start = absl::Now();
    std::string line;
    for (int64_t i = 0; !shared_->stop.load(); ++i) {
      if (!SendAgain(next_sequence)) return;
      Entry e;
      e.sequence = next_sequence++;
      e.pubend = absl::GetFlag(FLAGS_pubend);
      if (rate > 0) {
        // Events 1..count in all, across restarts (a restart goes on where the last stopped).
        e.generated = next_generated++;
        if (count > 0 && e.generated > static_cast<uint64_t>(count)) break;
        absl::SleepFor(start + absl::Seconds(static_cast<double>(i) / rate) - absl::Now());
        Event ev;
        ev.SetInt64("seq", static_cast<int64_t>(e.generated))
            .SetInt64("k", static_cast<int64_t>(e.generated % 10))
            .SetPayload(std::string(static_cast<size_t>(absl::GetFlag(FLAGS_payload_bytes)), 'x'));
        e.event = MakeEventRef(std::move(ev));
      } else {
        if (!lines_.Next(&line, shared_->stop)) break;
        if (line.empty()) {
          --next_sequence;
          continue;
        }
        absl::StatusOr<Event> ev = EventFromJson(line, &e.key);
        if (!ev.ok()) {
          std::fprintf(stderr, "gryph-pub: line skipped (%s): %s\n",
                       std::string(ev.status().message()).c_str(), line.c_str());
          --next_sequence;
          continue;
        }
        if (!e.key.empty()) e.pubend = 0;
        e.event = MakeEventRef(*std::move(ev));
      }
      if (!Send(std::move(e))) return;
    }
    // Everything taken is sent: wait for the answers.
    for (;;) {
      if (!SendAgain(next_sequence)) return;
      absl::MutexLock lock(&shared_->mu);
      Forget(lock);
      if (shared_->stop.load()) return;
      if (shared_->unanswered.empty() && shared_->again.empty()) return;
      shared_->changed.WaitWithTimeout(&shared_->mu, absl::Milliseconds(50));
    }
  }

 private:
  // Sends what came back as never logged, each under the next sequence. False on stop.
  bool SendAgain(uint64_t& next_sequence) {
    for (;;) {
      std::optional<Entry> e;
      {
        absl::MutexLock lock(&shared_->mu);
        if (shared_->again.empty()) return true;
        e = std::move(shared_->again.front());
        shared_->again.pop_front();
      }
      e->sequence = next_sequence++;  // the old sequence's row went with its answer
      if (!Send(*std::move(e))) return false;
    }
  }

  // Journals `e` (with the answers to forget), then hands it to the loop. False on stop.
  bool Send(Entry e) {
    {
      absl::MutexLock lock(&shared_->mu);
      // The pubend's retry window spans kSequenceWindow sequences from the oldest unanswered
      // one (RemotePublisher refuses a publish beyond it).
      while (!shared_->unanswered.empty() &&
             e.sequence - *shared_->unanswered.begin() >= Pubend::kSequenceWindow) {
        if (shared_->stop.load()) return false;
        shared_->changed.WaitWithTimeout(&shared_->mu, absl::Milliseconds(50));
      }
      shared_->unanswered.insert(e.sequence);
    }
    WriteBatch wb;
    wb.Put(kJournal, internal::Fixed64BE(e.sequence), e.Encode());
    // The next process goes on above every sequence ever used, also once the journal is empty:
    // a sequence used again would be answered as the retry of the old one, and not logged.
    wb.Put(kMeta, kNextSequence, internal::Fixed64BE(e.sequence + 1));
    if (e.generated > 0) wb.Put(kMeta, kNextGenerated, internal::Fixed64BE(e.generated + 1));
    TakeAnswered(wb);
    if (absl::Status s = journal_->Commit(wb); !s.ok()) {
      Die(absl::StrCat("journaling: ", s.ToString()), kExitFailure);
    }
    RemotePublisher* publisher = publisher_;
    Shared* shared = shared_;
    runtime_->Post([publisher, shared, e = std::move(e)]() mutable {
      const uint64_t seq = e.sequence;
      auto done = [shared, e](absl::StatusOr<Tick> t) {
        // InvalidArgument for a non-null event from a name of at most 255 bytes: never logged.
        const bool again = absl::IsInvalidArgument(t.status());
        if (absl::GetFlag(FLAGS_print_acks) || (!t.ok() && !again)) {
          std::fprintf(t.ok() ? stdout : stderr, "%s\n",
                       AnswerJson(e.sequence, t, e.pubend).c_str());
        }
        if (t.ok()) shared->acked.fetch_add(1, std::memory_order_relaxed);
        absl::MutexLock lock(&shared->mu);
        shared->unanswered.erase(e.sequence);
        shared->answered.push_back(e.sequence);
        if (again) {
          shared->again.push_back(e);
        } else if (!t.ok()) {
          shared->refused = true;
        }
        shared->changed.Signal();
      };
      absl::Status s = e.pubend != 0
                           ? publisher->Publish(seq, PubendId{e.pubend}, e.event, std::move(done))
                           : publisher->PublishByKey(seq, e.key, e.event, std::move(done));
      if (!s.ok()) Die(absl::StrCat("publish ", seq, ": ", s.ToString()), kExitFailure);
    });
    return true;
  }

  void TakeAnswered(WriteBatch& wb) {
    absl::MutexLock lock(&shared_->mu);
    TakeAnsweredLocked(wb);
  }
  void TakeAnsweredLocked(WriteBatch& wb) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_->mu) {
    for (uint64_t seq : shared_->answered) wb.Delete(kJournal, internal::Fixed64BE(seq));
    shared_->answered.clear();
  }

  // Removes what was answered from the journal (under the lock, at the end).
  void Forget(absl::MutexLock&) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_->mu) {
    if (shared_->answered.empty()) return;
    WriteBatch wb;
    TakeAnsweredLocked(wb);
    if (absl::Status s = journal_->Commit(wb); !s.ok()) {
      Die(absl::StrCat("journaling: ", s.ToString()), kExitFailure);
    }
  }

  LineReader lines_;
  Storage* const journal_;
  Runtime* const runtime_;
  RemotePublisher* const publisher_;
  Shared* const shared_;
};

int Run() {
  const std::string phb = absl::GetFlag(FLAGS_phb);
  if (phb.empty()) Die("--phb is required (NAME@ENDPOINT of the PHB)");
  absl::StatusOr<std::string> phb_name = PeerName(phb);
  if (!phb_name.ok()) Die(phb_name.status().message());
  const std::string state_dir = absl::GetFlag(FLAGS_state_dir);
  if (state_dir.empty()) Die("--state_dir is required");
  if (absl::GetFlag(FLAGS_rate) < 0) Die("--rate must be 0 or more");
  if (absl::GetFlag(FLAGS_payload_bytes) < 0) Die("--payload_bytes must be 0 or more");
  if (absl::GetFlag(FLAGS_pubend) == 0) Die("--pubend is 1 or more");

  absl::StatusOr<std::unique_ptr<Storage>> journal_or = OpenStore(state_dir, Durability::kSync);
  if (!journal_or.ok()) Die(journal_or.status().ToString());
  std::unique_ptr<Storage> journal = *std::move(journal_or);
  // What a previous process took and never saw answered, in sequence order.
  std::deque<Entry> recovered;
  uint64_t next_sequence = 1;
  absl::Status bad;
  absl::Status scan =
      journal->Scan(kJournal, "", "", [&](absl::string_view k, absl::string_view v) {
        if (k.size() != 8) {
          bad = absl::DataLossError("a journal key is not 8 bytes");
          return false;
        }
        absl::StatusOr<Entry> e = Entry::Decode(internal::DecodeFixed64BE(k.data()), v);
        if (!e.ok()) {
          bad = e.status();
          return false;
        }
        next_sequence = e->sequence + 1;
        recovered.push_back(*std::move(e));
        return true;
      });
  if (!scan.ok()) Die(absl::StrCat(state_dir, ": ", scan.ToString()));
  if (!bad.ok()) Die(absl::StrCat(state_dir, ": ", bad.ToString()));
  // Sequences keep growing across restarts, also when the journal is empty: the next one is kept.
  auto stored_counter = [&](absl::string_view key) -> uint64_t {
    absl::StatusOr<std::optional<std::string>> v = journal->Get(kMeta, key);
    if (!v.ok()) Die(v.status().ToString());
    if (!v->has_value()) return 1;
    if ((*v)->size() != 8) Die(absl::StrCat(state_dir, ": the ", key, " row is damaged"));
    return internal::DecodeFixed64BE((*v)->data());
  };
  next_sequence = std::max(next_sequence, stored_counter(kNextSequence));
  const uint64_t next_generated = stored_counter(kNextGenerated);
  if (!recovered.empty()) {
    std::fprintf(stderr, "gryph-pub: publishing again %zu unanswered events from %s\n",
                 recovered.size(), state_dir.c_str());
  }

  absl::StatusOr<std::unique_ptr<ZmqChannel>> channel_or =
      OpenChannel({absl::GetFlag(FLAGS_name), "", phb, absl::GetFlag(FLAGS_keys_dir)});
  if (!channel_or.ok()) Die(channel_or.status().ToString());
  std::unique_ptr<ZmqChannel> channel = *std::move(channel_or);
  absl::StatusOr<std::unique_ptr<Runtime>> runtime_or = Runtime::Create();
  if (!runtime_or.ok()) Die(runtime_or.status().ToString(), kExitFailure);
  std::unique_ptr<Runtime> runtime = *std::move(runtime_or);
  runtime->AddSource(channel.get());
  RemotePublisherOptions ro;
  ro.phb = *phb_name;
  ro.resend_interval = absl::Milliseconds(500);
  absl::StatusOr<RemotePublisher*> publisher = runtime->OpenRemotePublisher(ro, channel.get());
  if (!publisher.ok()) Die(publisher.status().ToString());
  if (absl::Status s = runtime->ShutdownOnSignals(); !s.ok()) Die(s.ToString(), kExitFailure);

  Shared shared;
  {
    const std::unique_ptr<Repeater> printer =
        PrintStats(runtime.get(), absl::GetFlag(FLAGS_stats_interval), [&shared, p = *publisher] {
          return absl::StrCat(
              "acknowledged ", shared.acked.load(), " outstanding ", p->outstanding(), " resends ",
              p->resends(),
              p->last_error().ok() ? "" : absl::StrCat(" last error ", p->last_error().ToString()));
        });
    Producer producer(journal.get(), runtime.get(), *publisher, &shared);
    std::thread producing([&] {
      producer.Run(std::move(recovered), next_sequence, next_generated);
      runtime->Post([rt = runtime.get()] { rt->Shutdown(); });
    });
    // The loop runs here until SIGTERM or the producer's end stops it.
    const absl::Status run = runtime->Run();
    shared.stop = true;
    producing.join();
    if (!run.ok()) Die(run.ToString(), kExitFailure);
  }
  absl::MutexLock lock(&shared.mu);
  return shared.refused ? kExitFailure : 0;
}

}  // namespace
}  // namespace gryph::programs

int main(int argc, char** argv) {
  gryph::programs::SetProgramName("gryph-pub");
  absl::SetProgramUsageMessage(
      "publishes events to a gryph PHB, exactly once across its own restarts.\n"
      "  echo '{\"topic\":\"orders\",\"attributes\":{\"price\":120}}' | gryph-pub "
      "--phb=phb@tcp://10.0.0.1:7100 --state_dir=/var/lib/gryph/pub --print_acks\n"
      "  gryph-pub --phb=phb@tcp://10.0.0.1:7100 --state_dir=/var/lib/gryph/pub --rate=1000 "
      "--count=100000");
  std::vector<char*> rest = gryph::programs::ParseFlags(argc, argv, "gryph_pub.cc");
  if (rest.size() > 1) {
    gryph::programs::Die(absl::StrCat("unexpected argument '", rest[1], "' (see --help)"));
  }
  return gryph::programs::Run();
}
