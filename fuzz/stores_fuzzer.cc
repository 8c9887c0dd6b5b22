// libFuzzer target for the readers of data directories: a PHB's and an SHB's stored state,
// damaged and made inconsistent in every way the input says, then opened and run. What a disk,
// an operator's tool or a bug could leave must never crash a broker: Open fails with a clear
// error, or the broker opens and serves (answering what it cannot with errors of its own).
//
// The base: the stores a short run leaves (a PHB with one pubend and a publisher's window, an
// SHB with two subscriptions, their positions and PFS records, events released and not), made
// once on LMDB and read back into rows. Each input is a sequence of edits of those rows, each
// op (u8), store (u8: the PHB's or the SHB's), row (u16 BE, modulo the rows), length (u8) and
// that many bytes:
//   0 the row's value becomes the bytes        3 a bit of the value flipped (bytes[0..1] BE)
//   1 the row's key becomes the bytes          4 a new row in the row's table: key, value split
//   2 the row is deleted                         at the first byte's count
//                                              5 the value cut to the length
// The edited rows go into memory storages, and the PHB and the SHB open on them: a subscriber
// connects with a CT from the base run, events are published, the whole history is nacked and
// the timers run. Then VerifyStorage walks both stores.

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "gryph/in_process_channel.h"
#include "gryph/memory_storage.h"
#include "gryph/message.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/storage.h"
#include "gryph/subscriber_hosting_broker.h"
#include "gryph/testing/topology.h"

namespace {

using gryph::fuzz::Fail;

constexpr gryph::PubendId kP{1};
const absl::Time kStart = absl::FromUnixSeconds(1'900'000'000);

struct Row {
  std::string table;
  std::string key;
  std::string value;
};

struct Base {
  std::vector<Row> stores[2];  // the PHB's, the SHB's
  gryph::CheckpointToken ct;   // where the base run's subscriber stood
};

struct Quiet : gryph::DurableSubscriber::Handler {
  void OnEvent(gryph::PubendId p, gryph::Tick t, const gryph::EventRef&) override { ct.Set(p, t); }
  void OnSilence(gryph::PubendId p, gryph::Tick t) override { ct.Set(p, t); }
  void OnGap(gryph::PubendId p, gryph::Tick t) override { ct.Set(p, t); }
  void OnError(const absl::Status&) override {}
  gryph::CheckpointToken ct;
};

std::vector<Row> ReadRows(const std::string& path) {
  gryph::StorageOptions so;
  so.path = path;
  auto storage = gryph::OpenLmdbStorage(so);
  if (!storage.ok()) Fail("the base store does not open", storage.status().message());
  std::vector<Row> rows;
  auto tables = (*storage)->ListTables();
  if (!tables.ok()) Fail("the base store lists no tables", tables.status().message());
  for (const std::string& table : *tables) {
    const absl::Status st =
        (*storage)->Scan(table, "", "", [&](absl::string_view k, absl::string_view v) {
          rows.push_back({table, std::string(k), std::string(v)});
          return true;
        });
    if (!st.ok()) Fail("the base store does not scan", st.message());
  }
  return rows;
}

// The stores of a short run, made once.
const Base& TheBase() {
  static const Base* const base = [] {
    auto* b = new Base();
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("gryph-stores-fuzzer-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    {
      gryph::TopologyOptions o;
      o.pubends = {kP};
      o.start = kStart;
      o.storage_dir = dir.string();
      o.storage.durability = gryph::Durability::kNoSync;
      o.shb_options = [](gryph::SubscriberHostingBrokerOptions& so) {
        so.pfs_checkpoint_interval = 4;
      };
      auto t = gryph::Topology::Create(o);
      if (!t.ok()) Fail("the base topology does not open", t.status().message());
      Quiet handlers[2];
      for (int i = 0; i < 2; ++i) {
        gryph::DurableSubscriberOptions so;
        so.subscription = i == 0 ? "a" : "b";
        so.selector = i == 0 ? "x > 3" : "x < 8 OR tag LIKE 'q%'";
        so.broker = "shb";
        auto sub = (*t)->StartSubscriber(so, &handlers[i]);
        if (!sub.ok()) Fail("the base subscriber does not start", sub.status().message());
      }
      (*t)->Run(absl::Milliseconds(20));
      for (int i = 1; i <= 24; ++i) {
        gryph::Event e;
        e.SetInt64("x", i % 11).SetString("tag", i % 3 == 0 ? "quux" : "plain").SetPayload("p");
        (*t)->Publish(kP, i % 2 == 0 ? "gw-1" : "gw-2", static_cast<uint64_t>(i),
                      gryph::MakeEventRef(e));
        (*t)->Run(absl::Milliseconds(5));
      }
      (*t)->Run(absl::Milliseconds(300));
      b->ct = handlers[0].ct;
    }
    b->stores[0] = ReadRows((dir / "phb").string());
    b->stores[1] = ReadRows((dir / "shb").string());
    std::filesystem::remove_all(dir);
    // Publisher windows, events, subscriptions, positions, PFS records: or the edits miss them.
    if (b->stores[0].size() < 20 || b->stores[1].size() < 10 || b->ct.empty()) {
      Fail("the base run stored too little");
    }
    return b;
  }();
  return *base;
}

void Edit(std::vector<Row>& rows, uint8_t op, size_t index, absl::string_view bytes) {
  if (rows.empty()) return;
  Row& row = rows[index % rows.size()];
  switch (op % 6) {
    case 0: row.value = std::string(bytes); break;
    case 1: row.key = std::string(bytes); break;
    case 2: rows.erase(rows.begin() + static_cast<std::ptrdiff_t>(index % rows.size())); break;
    case 3:
      if (!row.value.empty() && bytes.size() >= 2) {
        const size_t bit =
            ((static_cast<uint8_t>(bytes[0]) << 8) | static_cast<uint8_t>(bytes[1])) %
            (row.value.size() * 8);
        row.value[bit / 8] = static_cast<char>(row.value[bit / 8] ^ (1 << (bit % 8)));
      }
      break;
    case 4:
      if (!bytes.empty()) {
        const size_t split = static_cast<uint8_t>(bytes[0]) % bytes.size();
        rows.push_back({row.table, std::string(bytes.substr(1, split)),
                        std::string(bytes.substr(1 + std::min(split, bytes.size() - 1)))});
      }
      break;
    case 5: row.value.resize(std::min(row.value.size(), bytes.size())); break;
  }
}

std::unique_ptr<gryph::Storage> Store(const std::vector<Row>& rows) {
  auto storage = std::make_unique<gryph::MemoryStorage>();
  gryph::WriteBatch batch;
  for (const Row& r : rows) {
    // The storage's own table (gryph.meta) is not the brokers' to write; keys as LMDB takes them.
    if (r.table.rfind("gryph.", 0) == 0 || r.key.empty() || r.key.size() > 511) continue;
    batch.Put(r.table, r.key, r.value);
  }
  if (absl::Status st = storage->Commit(batch); !st.ok()) {
    Fail("the edited rows do not commit to memory", st.message());
  }
  return storage;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Base& base = TheBase();
  std::vector<Row> stores[2] = {base.stores[0], base.stores[1]};
  for (size_t at = 0; at + 5 <= size;) {
    const uint8_t op = data[at];
    const uint8_t which = data[at + 1] % 2;
    const size_t index = (static_cast<size_t>(data[at + 2]) << 8) | data[at + 3];
    const size_t n = std::min<size_t>(data[at + 4], size - at - 5);
    Edit(stores[which], op, index, {reinterpret_cast<const char*>(data) + at + 5, n});
    at += 5 + n;
  }
  auto phb_storage = Store(stores[0]);
  auto shb_storage = Store(stores[1]);

  gryph::InProcessNetwork net;
  auto phb_channel = net.Connect("phb");
  auto shb_channel = net.Connect("shb");
  auto app = net.Connect("app");
  if (!phb_channel.ok() || !shb_channel.ok() || !app.ok()) Fail("the network does not connect");
  (*app)->SetReceiver([](absl::string_view, gryph::Message) {});
  absl::Time now = kStart + absl::Seconds(10);
  auto clock = [&now] { return now; };

  gryph::PublisherHostingBrokerOptions po;
  po.pubends = {gryph::PubendOptions{kP}};
  po.downstream = {"shb"};
  po.commit_thread = false;
  po.clock = clock;
  auto phb = gryph::PublisherHostingBroker::Open(po, phb_storage.get(), phb_channel->get());
  gryph::SubscriberHostingBrokerOptions so;
  so.pubends = {{kP, "phb"}};
  so.clock = clock;
  auto shb = gryph::SubscriberHostingBroker::Open(so, shb_storage.get(), shb_channel->get());

  auto step = [&] {
    now += absl::Milliseconds(5);
    for (int i = 0; i < 20 && net.DeliverAll() > 0; ++i) {
      if (shb.ok()) (void)(*shb)->Flush();
    }
    if (phb.ok()) {
      (*phb)->OnTimer(now);
      (void)(*phb)->Flush();
    }
    if (shb.ok()) (*shb)->OnTimer(now);
  };
  // The base run's subscriber comes back, another arrives, events flow and history is nacked.
  (void)(*app)->Send("shb", gryph::ConnectMessage{"a", "x > 3", "", base.ct, 2, true});
  (void)(*app)->Send("shb", gryph::ConnectMessage{"c", "x = 1", "", {}, 1, true});
  step();
  for (int i = 0; i < 4; ++i) {
    if (phb.ok()) {
      gryph::Event e;
      e.SetInt64("x", 4 + i);
      (*phb)->Publish(kP, i % 2 == 0 ? "gw-1" : "gw-3", static_cast<uint64_t>(25 + i),
                      gryph::MakeEventRef(e), [](absl::StatusOr<gryph::Tick>) {});
    }
    step();
  }
  if (phb.ok()) {
    (void)(*phb)->HandleMessage("shb", gryph::CuriosityMessage{kP, {{1, gryph::kMaxTick - 1}}});
  }
  (void)(*app)->Send("shb", gryph::AckMessage{"a", base.ct});
  for (int i = 0; i < 40; ++i) step();
  if (shb.ok()) {
    (void)(*shb)->Subscriptions();
    (void)(*shb)->BacklogEvents("a", kP);
  }
  (void)gryph::VerifyStorage(*phb_storage);
  (void)gryph::VerifyStorage(*shb_storage);
  return 0;
}
