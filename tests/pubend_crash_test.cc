// A real crash: a child process publishes durably on LMDB and is killed with SIGKILL mid-publish;
// the parent reopens the store and checks that every acknowledged event is there.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include "gryph/in_process_channel.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/storage.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP{1};

PublisherHostingBrokerOptions Options() {
  PublisherHostingBrokerOptions o;
  o.pubends = {PubendOptions{kP}};
  o.group_commit.max_records = 64;
  o.group_commit.max_delay = absl::Microseconds(200);
  return o;
}

[[noreturn]] void PublishForever(const std::string& path, int ack_fd) {
  StorageOptions so;
  so.path = path;
  so.initial_map_bytes = 1 << 20;  // small, so that the map also grows mid-run
  auto storage = OpenLmdbStorage(so);
  if (!storage.ok()) _exit(2);
  InProcessNetwork net;
  auto channel = net.Connect("phb");
  auto phb = PublisherHostingBroker::Open(Options(), storage->get(), channel->get());
  if (!phb.ok()) _exit(3);
  for (uint64_t seq = 1;; ++seq) {
    Event e;
    e.SetInt64("seq", static_cast<int64_t>(seq)).SetPayload(std::string(250, 'p'));
    (*phb)->Publish(kP, "child", seq, MakeEventRef(std::move(e)), [ack_fd](absl::StatusOr<Tick> t) {
      if (!t.ok()) _exit(4);
      const Tick v = *t;
      if (write(ack_fd, &v, sizeof v) != sizeof v) _exit(5);
    });
    if (seq % 32 == 0) usleep(100);
  }
}

TEST_CASE("a publisher killed with SIGKILL loses no acknowledged event", "[pubend][crash]") {
  testing::TempDir dir;
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    PublishForever(dir.path().string(), fds[1]);
  }
  close(fds[1]);
  std::set<Tick> acked;
  Tick t;
  while (acked.size() < 5000 && read(fds[0], &t, sizeof t) == sizeof t) acked.insert(t);
  REQUIRE(kill(child, SIGKILL) == 0);
  while (read(fds[0], &t, sizeof t) == sizeof t) acked.insert(t);  // acks already in the pipe
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(acked.size() >= 5000);

  StorageOptions so;
  so.path = dir.path().string();
  auto storage = OpenLmdbStorage(so);
  REQUIRE_OK(storage);
  std::set<Tick> stored;
  int64_t previous_seq = 0;
  absl::Status scanned =
      (*storage)->Scan("pubend.events", "", "", [&](absl::string_view k, absl::string_view v) {
        Tick tick = 0;
        for (int i = 4; i < 12; ++i) tick = (tick << 8) | static_cast<uint8_t>(k[i]);
        stored.insert(tick);
        absl::StatusOr<Event> e = Event::Decode(v);
        REQUIRE_OK(e);  // nothing half-written
        const int64_t seq = std::get<int64_t>(*e->Find("seq"));
        REQUIRE(seq == previous_seq + 1);  // a prefix of the publishes, in order
        previous_seq = seq;
        return true;
      });
  REQUIRE_OK(scanned);
  for (Tick a : acked) REQUIRE(stored.contains(a));
  InProcessNetwork net;
  auto channel = net.Connect("phb");
  auto phb = PublisherHostingBroker::Open(Options(), storage->get(), channel->get());
  REQUIRE_OK(phb);
  REQUIRE((*phb)->pubend(kP)->committed_tick() == *stored.rbegin());
  // The child's next sequence after its last logged one is new; the last one is a retry.
  std::optional<absl::StatusOr<Tick>> retry;
  (*phb)->Publish(kP, "child", static_cast<uint64_t>(previous_seq), MakeEventRef(Event()),
                  [&](absl::StatusOr<Tick> r) { retry = r; });
  REQUIRE(retry.has_value());
  REQUIRE(**retry == *stored.rbegin());
}

}  // namespace
}  // namespace gryph
