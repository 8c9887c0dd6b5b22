// The stored layouts of docs/format.md, checked against stores checked into the tree:
// tests/data/store-v<N> was written by format version N (tests/golden/golden_store.h says how),
// with its listing (rows.txt: every row as LMDB holds it, read with LMDB itself). Two promises:
//
// - this version opens a store that version 2 or 3 wrote and reads what was written (the
//   brokers recover from it, a publisher's retry is still recognised, a subscriber resumes);
//   version 3 differs from 2 only in the SHB's subscription rows, which gained the selector's
//   program, and a version-2 store is upgraded at its first writable open (tests/storage_test.cc);
// - this version, given the same history, writes the same bytes as store-v3: any drift of a key,
//   a value, a checksum or a table name shows as a line of the listing.
//
// A deliberate format change bumps the storage format version, adds tests/data/store-v<N+1>
// (gryph_write_golden_store), and decides what becomes of the older stores (an upgrade that
// opens them, or a refusal this test then checks).

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gryph/in_process_channel.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/storage.h"
#include "gryph/subscriber_hosting_broker.h"
#include "tests/golden/golden_store.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

using testing::TempDir;

std::filesystem::path GoldenDir(int version) {
  return std::filesystem::path(GRYPH_TEST_DATA_DIR) / ("store-v" + std::to_string(version));
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The first line where two listings differ, for a failure that says which row drifted.
std::string FirstDifference(const std::string& want, const std::string& got) {
  std::istringstream a(want), b(got);
  std::string la, lb;
  for (int line = 1;; ++line) {
    const bool more_a = static_cast<bool>(std::getline(a, la));
    const bool more_b = static_cast<bool>(std::getline(b, lb));
    if (!more_a && !more_b) return "none";
    if (!more_a || !more_b || la != lb) {
      return "line " + std::to_string(line) + ":\n  golden:  " + (more_a ? la : "(end)") +
             "\n  written: " + (more_b ? lb : "(end)");
    }
  }
}

// What the golden history left, read off rows.txt (docs/format.md gives each layout):
constexpr Tick kGwA3 = 41000;        // pubend.publishers 1/"gw-a"/3 -> 02 a8c002
constexpr Tick kAnnounced = 441000;  // pubend.meta 1 'T' -> 0x6baa8
constexpr Tick kDelivered = 341000;  // shb.delivered 1 -> 0x53408
constexpr Tick kAllAcked1 = 41001;   // shb.positions 2/1 released -> 0xa029
constexpr Tick kAllAcked2 = 41000;   // shb.positions 2/2 released -> 0xa028

TEST_CASE("golden: a store written by format version 2 or 3 opens and reads as written",
          "[format][golden]") {
  const int version = GENERATE(2, 3);
  INFO("store-v" << version);
  TempDir tmp;
  // A copy: opening a store writes its lock file (and upgrades an older version).
  std::filesystem::copy(GoldenDir(version), tmp.path(), std::filesystem::copy_options::recursive);
  const std::string dir = tmp.path().string();
  absl::StatusOr<std::string> rows = testing::ListGoldenStore(dir);
  REQUIRE_OK(rows);
  REQUIRE(*rows == ReadFile(GoldenDir(version) / "rows.txt"));

  for (const char* name : {"/phb", "/shb"}) {
    absl::StatusOr<std::unique_ptr<Storage>> store = OpenLmdbStorage({.path = dir + name});
    REQUIRE_OK(store);
    absl::StatusOr<StorageVerifyReport> report = VerifyStorage(**store);
    REQUIRE_OK(report);
    CHECK(report->damaged.empty());
  }

  const absl::Time now = absl::FromUnixMicros(kAnnounced + 1000);
  InProcessNetwork net;
  auto phb_net = net.Connect("phb");
  auto shb_net = net.Connect("shb");
  auto app_net = net.Connect("app");
  REQUIRE_OK(phb_net);
  REQUIRE_OK(shb_net);
  REQUIRE_OK(app_net);

  SECTION("the publisher hosting broker recovers its pubends and publishers") {
    absl::StatusOr<std::unique_ptr<Storage>> store = OpenLmdbStorage({.path = dir + "/phb"});
    REQUIRE_OK(store);
    PublisherHostingBrokerOptions po;
    po.pubends = {{.id = PubendId{1}}, {.id = PubendId{2}}};
    po.commit_thread = false;
    po.clock = [now] { return now; };
    auto phb = PublisherHostingBroker::Open(po, store->get(), phb_net->get());
    REQUIRE_OK(phb);
    REQUIRE((*phb)->pubend(PubendId{1})->committed_tick() == kAnnounced);
    REQUIRE((*phb)->pubend(PubendId{1})->downstream() == std::vector<std::string>{"shb"});
    // gw-a's retry of its third publish is recognised: the tick it was logged at, not a new one.
    absl::StatusOr<Tick> tick = absl::UnknownError("not done");
    (*phb)->Publish(PubendId{1}, "gw-a", 3, MakeEventRef(Event()),
                    [&tick](absl::StatusOr<Tick> t) { tick = t; });
    REQUIRE_OK((*phb)->Flush());
    REQUIRE_OK(tick);
    REQUIRE(*tick == kGwA3);
  }

  SECTION("the subscriber hosting broker recovers its subscriptions and positions") {
    absl::StatusOr<std::unique_ptr<Storage>> store = OpenLmdbStorage({.path = dir + "/shb"});
    REQUIRE_OK(store);
    SubscriberHostingBrokerOptions so;
    so.pubends = {{PubendId{1}, "phb"}, {PubendId{2}, "phb"}};
    so.clock = [now] { return now; };
    auto shb = SubscriberHostingBroker::Open(so, store->get(), shb_net->get());
    REQUIRE_OK(shb);
    REQUIRE((*shb)->subscription_count() == 2);
    REQUIRE((*shb)->latest_delivered(PubendId{1}) == kDelivered);
    // "all" resumes from the CT it acked.
    CheckpointToken ct;
    ct.Set(PubendId{1}, kAllAcked1);
    ct.Set(PubendId{2}, kAllAcked2);
    std::vector<Message> replies;
    (*app_net)->SetReceiver([&](absl::string_view, Message m) { replies.push_back(std::move(m)); });
    REQUIRE_OK((*app_net)->Send("shb", ConnectMessage{"all", "", "orders/#", ct, 2, false}));
    net.DeliverAll();
    REQUIRE(!replies.empty());
    const auto* connected = std::get_if<ConnectedMessage>(&replies.front());
    REQUIRE(connected != nullptr);
    REQUIRE(connected->start == ct);
  }
}

TEST_CASE("golden: this version writes the golden store byte for byte", "[format][golden]") {
  TempDir tmp;
  REQUIRE_OK(testing::WriteGoldenStore(tmp.path().string()));
  absl::StatusOr<std::string> rows = testing::ListGoldenStore(tmp.path().string());
  REQUIRE_OK(rows);
  const std::string golden = ReadFile(GoldenDir(3) / "rows.txt");
  INFO("first difference: " << FirstDifference(golden, *rows));
  REQUIRE(*rows == golden);
}

}  // namespace
}  // namespace gryph
