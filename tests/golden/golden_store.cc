#include "tests/golden/golden_store.h"

#include <lmdb.h>

#include <memory>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gryph/durable_subscriber.h"
#include "gryph/testing/topology.h"
#include "lib/util/status_macros.h"

namespace gryph::testing {
namespace {

// A subscriber that keeps only its errors: the brokers' state is what the golden store records.
struct Ignore : DurableSubscriber::Handler {
  void OnEvent(PubendId, Tick, const EventRef&) override {}
  void OnSilence(PubendId, Tick) override {}
  void OnGap(PubendId, Tick) override {}
  void OnError(const absl::Status& status) override { error.Update(status); }
  absl::Status error;
};

EventRef Order(absl::string_view symbol, int64_t qty) {
  Event e;
  e.SetTopic(absl::StrCat("orders/", symbol)).SetString("symbol", symbol).SetInt64("qty", qty);
  return MakeEventRef(std::move(e));
}

absl::Status LmdbError(absl::string_view what, int rc) {
  return absl::InternalError(absl::StrCat(what, ": ", mdb_strerror(rc)));
}

}  // namespace

absl::Status WriteGoldenStore(const std::string& dir) {
  // Ticks are the virtual clock's microseconds: small, and the same on every run.
  TopologyOptions to;
  to.pubends = {PubendId{1}, PubendId{2}};
  to.start = absl::FromUnixMicros(1000);
  to.storage_dir = dir;
  to.shb_options = [](SubscriberHostingBrokerOptions& so) {
    so.pfs_checkpoint_interval = 2;  // so that the PFS writes checkpoints
  };
  GRYPH_ASSIGN_OR_RETURN(std::unique_ptr<Topology> t, Topology::Create(std::move(to)));

  // "audit" never stores a checkpoint, so it acks nothing and holds every event it matched in
  // the pubends' logs; "all" acks what it receives, so it has positions above its start.
  Ignore handler;
  for (const auto& [name, selector, ack_stored_only] :
       {std::tuple{"audit", "qty > 10", true}, std::tuple{"all", "", false}}) {
    DurableSubscriberOptions o;
    o.subscription = name;
    o.selector = selector;
    o.topic_filter = "orders/#";
    o.broker = "shb";
    o.ack_stored_only = ack_stored_only;
    GRYPH_RETURN_IF_ERROR(t->StartSubscriber(std::move(o), &handler).status());
  }

  absl::Status published;
  auto publish = [&](PubendId p, absl::string_view publisher, uint64_t sequence, EventRef e) {
    t->Publish(p, publisher, sequence, std::move(e), [&published](absl::StatusOr<Tick> tick) {
      if (!tick.ok()) published.Update(tick.status());
    });
  };
  t->Run(absl::Milliseconds(20));
  publish(PubendId{1}, "gw-a", 1, Order("IBM", 5));
  publish(PubendId{1}, "gw-a", 2, Order("IBM", 15));
  publish(PubendId{2}, "gw-b", 1, Order("MSFT", 25));
  t->Run(absl::Milliseconds(20));
  publish(PubendId{1}, "gw-a", 3, Order("IBM", 35));
  publish(PubendId{2}, "gw-b", 2, Order("MSFT", 3));
  publish(PubendId{1}, "gw-b", 1, Order("SAP", 45));
  t->Run(absl::Milliseconds(400));
  GRYPH_RETURN_IF_ERROR(published);
  GRYPH_RETURN_IF_ERROR(handler.error);
  GRYPH_RETURN_IF_ERROR(t->phb().Flush());
  GRYPH_RETURN_IF_ERROR(t->shb("shb").status());
  return absl::OkStatus();
}

absl::StatusOr<std::string> ListRawRows(const std::string& env_dir) {
  MDB_env* env = nullptr;
  int rc = mdb_env_create(&env);
  if (rc != 0) return LmdbError("mdb_env_create", rc);
  std::unique_ptr<MDB_env, void (*)(MDB_env*)> closer(env, mdb_env_close);
  mdb_env_set_maxdbs(env, 64);
  rc = mdb_env_open(env, env_dir.c_str(), MDB_RDONLY | MDB_NOLOCK, 0644);
  if (rc != 0) return LmdbError(absl::StrCat("mdb_env_open ", env_dir), rc);
  MDB_txn* txn = nullptr;
  rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  if (rc != 0) return LmdbError("mdb_txn_begin", rc);
  std::unique_ptr<MDB_txn, void (*)(MDB_txn*)> aborter(txn, mdb_txn_abort);

  auto walk = [&](MDB_dbi dbi, auto visit) -> absl::Status {
    MDB_cursor* c = nullptr;
    int r = mdb_cursor_open(txn, dbi, &c);
    if (r != 0) return LmdbError("mdb_cursor_open", r);
    MDB_val k, v;
    for (r = mdb_cursor_get(c, &k, &v, MDB_FIRST); r == 0;
         r = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
      visit(absl::string_view(static_cast<const char*>(k.mv_data), k.mv_size),
            absl::string_view(static_cast<const char*>(v.mv_data), v.mv_size));
    }
    mdb_cursor_close(c);
    return r == MDB_NOTFOUND ? absl::OkStatus() : LmdbError("mdb_cursor_get", r);
  };

  MDB_dbi main_dbi;
  rc = mdb_dbi_open(txn, nullptr, 0, &main_dbi);
  if (rc != 0) return LmdbError("mdb_dbi_open", rc);
  std::vector<std::string> tables;
  GRYPH_RETURN_IF_ERROR(
      walk(main_dbi, [&](absl::string_view k, absl::string_view) { tables.emplace_back(k); }));
  std::string out;
  for (const std::string& table : tables) {
    MDB_dbi dbi;
    rc = mdb_dbi_open(txn, table.c_str(), 0, &dbi);
    if (rc != 0) return LmdbError(absl::StrCat("mdb_dbi_open ", table), rc);
    GRYPH_RETURN_IF_ERROR(walk(dbi, [&](absl::string_view k, absl::string_view v) {
      absl::StrAppend(&out, table, " ", absl::BytesToHexString(k), " ", absl::BytesToHexString(v),
                      "\n");
    }));
  }
  return out;
}

absl::StatusOr<std::string> ListGoldenStore(const std::string& dir) {
  GRYPH_ASSIGN_OR_RETURN(std::string phb, ListRawRows(dir + "/phb"));
  GRYPH_ASSIGN_OR_RETURN(std::string shb, ListRawRows(dir + "/shb"));
  return absl::StrCat("[phb]\n", phb, "[shb]\n", shb);
}

}  // namespace gryph::testing
