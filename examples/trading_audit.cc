// trading_audit: the exactly-once pattern of paper §2 — an application that stores its checkpoint
// token in the same transaction as its own state — across a real crash of the application.
//
// The audit application keeps a ledger of the orders it has seen (per account: orders, shares,
// notional) in its own LMDB environment, written with the LMDB C API as any application would. It
// consumes a durable subscription through a DurableSubscriber and, for each batch of messages,
// commits ONE LMDB transaction holding the batch's ledger updates AND the checkpoint token (CT)
// after the batch. Only after that commit may the broker hear the CT (the ack). Hence the ledger
// and the CT never disagree: after a crash the application reopens its ledger, reconnects with
// the CT stored in it, and the broker resumes exactly after it. Nothing is counted twice, nothing
// is missed.
//
// What the program does:
//   1. The parent process is the trading system: a publisher hosting broker with two pubends
//      (orders keyed by account) and a subscriber hosting broker, both on LMDB, each with a
//      ZmqChannel listening on loopback TCP, driven by a Runtime. An order gateway publishes
//      --orders orders at --rate.
//   2. It starts the audit application: this program again (fork and exec), as a process of its
//      own, which reaches the subscriber hosting broker through a ZmqChannel of its own.
//   3. Once --kill_after of the orders are published, the parent kills the application with
//      SIGKILL while it is inside a transaction (the application spends --work_ms per batch in
//      its transaction, as if it called another system there).
//   4. Orders keep flowing while it is dead; after --down_ms the parent starts it again. The new
//      process reopens the ledger, connects with the stored CT and a higher epoch, catches up
//      from the broker's persistent filtering log and carries on.
//   5. When the broker reports that the application acknowledged the last matching order, the
//      parent stops it with SIGTERM (it ends its batch and exits), then reads the ledger and
//      compares it with the orders that were published and match the audit's selector. Any
//      difference (or a Gap, which the ledger would also record) makes the program exit 1.
//
//   trading_audit [--orders=3000] [--rate=1500] [--kill_after=0.4] [--down_ms=300]
//                 [--work_ms=3] [--seed=1] [--data_dir=DIR]

#include <fcntl.h>
#include <lmdb.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gryph/durable_subscriber.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/runtime.h"
#include "gryph/storage.h"
#include "gryph/subscriber_hosting_broker.h"
#include "gryph/subscription.h"
#include "gryph/zmq_channel.h"

ABSL_FLAG(int, orders, 3000, "orders the gateway publishes");
ABSL_FLAG(double, rate, 1500, "orders published per second");
ABSL_FLAG(double, kill_after, 0.4,
          "fraction of the orders published before the application is killed");
ABSL_FLAG(int, down_ms, 300, "milliseconds the application stays dead while orders keep flowing");
ABSL_FLAG(int, work_ms, 3, "milliseconds the application works inside each transaction");
ABSL_FLAG(uint64_t, seed, 1, "seed for the orders");
ABSL_FLAG(std::string, data_dir, "", "where the stores go (kept); default: a temp dir, removed");
// Set by the trading system when it starts the audit application (this program again).
ABSL_FLAG(int, audit_app, 0, "internal: run as the audit application, incarnation N");
ABSL_FLAG(std::string, broker, "", "internal: the audit application's broker endpoint");

namespace {

using namespace gryph;  // NOLINT: an example reads better without the prefix

// What the auditors audit: every order of a hedge-fund account, and every large order.
constexpr char kAuditSelector[] = "account LIKE 'HF-%' OR quantity >= 2500";
const char* const kAccounts[] = {"HF-ALPHA", "HF-BETA", "PB-001", "PB-002", "RETAIL-7", "MM-3"};
const char* const kSymbols[] = {"IBM", "MSFT", "AAPL", "ORCL"};

// Prints a line at once: parent and child share the terminal, and a killed child flushes nothing.
template <typename... Args>
void Say(const absl::FormatSpec<Args...>& format, const Args&... args) {
  std::fputs(absl::StrFormat(format, args...).c_str(), stdout);
  std::fflush(stdout);
}

// A node's channel: listening on a port of 127.0.0.1 the system chooses (unless it only dials),
// dialing `peers` (name, endpoint). Plain TCP on loopback; across hosts, CURVE keys
// (ZmqChannelOptions::curve).
absl::StatusOr<std::unique_ptr<ZmqChannel>> OpenChannel(
    const std::string& name, bool listens,
    const std::vector<std::pair<std::string, std::string>>& peers) {
  ZmqChannelOptions o;
  o.name = name;
  if (listens) o.listen = "tcp://127.0.0.1:*";
  for (const auto& [peer, endpoint] : peers) o.peers.push_back({peer, endpoint, ""});
  return ZmqChannel::Create(std::move(o));
}

// ===== The audit application's database: its own LMDB environment =====

// Per account: what the ledger has seen. Stored as three native int64s (the file never leaves
// this machine).
struct Totals {
  int64_t orders = 0;
  int64_t shares = 0;
  int64_t notional_cents = 0;
  friend bool operator==(const Totals&, const Totals&) = default;
};

absl::Status LmdbStatus(const char* operation, int rc) {
  return absl::InternalError(absl::StrCat(operation, ": ", mdb_strerror(rc)));
}

// The ledger: one LMDB environment, one unnamed database, keys
//   "acct:<account>" -> Totals        "ct" -> CheckpointToken::Encode()
//   "epoch" -> uint64 (the latest process's epoch)        "gaps" -> uint64 (Gaps received)
// Owned by one thread.
class Ledger {
 public:
  // One transaction; destroyed without Commit(), it is aborted and leaves no trace in the file.
  class Txn {
   public:
    Txn(Txn&& other) noexcept : txn_(std::exchange(other.txn_, nullptr)), dbi_(other.dbi_) {}
    Txn& operator=(Txn&&) = delete;
    ~Txn() {
      if (txn_ != nullptr) mdb_txn_abort(txn_);
    }

    std::optional<std::string> Get(absl::string_view key) const {
      MDB_val k{key.size(), const_cast<char*>(key.data())};
      MDB_val v;
      if (mdb_get(txn_, dbi_, &k, &v) != 0) return std::nullopt;
      return std::string(static_cast<const char*>(v.mv_data), v.mv_size);
    }
    absl::Status Put(absl::string_view key, absl::string_view value) {
      MDB_val k{key.size(), const_cast<char*>(key.data())};
      MDB_val v{value.size(), const_cast<char*>(value.data())};
      const int rc = mdb_put(txn_, dbi_, &k, &v, 0);
      return rc == 0 ? absl::OkStatus() : LmdbStatus("mdb_put", rc);
    }
    // Durable when it returns OK (LMDB's default: fsync at commit). REQUIRES: not committed.
    absl::Status Commit() {
      const int rc = mdb_txn_commit(std::exchange(txn_, nullptr));
      return rc == 0 ? absl::OkStatus() : LmdbStatus("mdb_txn_commit", rc);
    }

    uint64_t GetU64(absl::string_view key) const {
      uint64_t v = 0;
      if (std::optional<std::string> s = Get(key); s && s->size() == sizeof v) {
        std::memcpy(&v, s->data(), sizeof v);
      }
      return v;
    }
    absl::Status PutU64(absl::string_view key, uint64_t v) {
      return Put(key, absl::string_view(reinterpret_cast<const char*>(&v), sizeof v));
    }
    Totals GetTotals(absl::string_view account) const {
      Totals t;
      if (std::optional<std::string> s = Get(absl::StrCat("acct:", account));
          s && s->size() == sizeof t) {
        std::memcpy(&t, s->data(), sizeof t);
      }
      return t;
    }
    absl::Status PutTotals(absl::string_view account, const Totals& t) {
      return Put(absl::StrCat("acct:", account),
                 absl::string_view(reinterpret_cast<const char*>(&t), sizeof t));
    }
    // Every account's totals, by account.
    std::map<std::string, Totals> AllTotals() const {
      std::map<std::string, Totals> all;
      MDB_cursor* c = nullptr;
      if (mdb_cursor_open(txn_, dbi_, &c) != 0) return all;
      MDB_val k;
      MDB_val v;
      for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
           rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        const absl::string_view key(static_cast<const char*>(k.mv_data), k.mv_size);
        if (key.substr(0, 5) == "acct:" && v.mv_size == sizeof(Totals)) {
          std::memcpy(&all[std::string(key.substr(5))], v.mv_data, sizeof(Totals));
        }
      }
      mdb_cursor_close(c);
      return all;
    }
    // The orders of every account.
    int64_t TotalOrders() const {
      int64_t orders = 0;
      for (const auto& [account, t] : AllTotals()) orders += t.orders;
      return orders;
    }

   private:
    friend class Ledger;
    Txn(MDB_txn* txn, MDB_dbi dbi) : txn_(txn), dbi_(dbi) {}
    MDB_txn* txn_;
    MDB_dbi dbi_;
  };

  // Opens (creating) the ledger in directory `dir`.
  static absl::StatusOr<std::unique_ptr<Ledger>> Open(const std::string& dir) {
    std::filesystem::create_directories(dir);
    std::unique_ptr<Ledger> ledger(new Ledger);
    int rc = mdb_env_create(&ledger->env_);
    if (rc == 0) rc = mdb_env_set_mapsize(ledger->env_, size_t{64} << 20);
    if (rc == 0) rc = mdb_env_open(ledger->env_, dir.c_str(), 0, 0644);
    if (rc != 0) return LmdbStatus("mdb_env_open", rc);
    // The database handle, opened once in a committed transaction, serves every later one.
    MDB_txn* txn = nullptr;
    if ((rc = mdb_txn_begin(ledger->env_, nullptr, 0, &txn)) != 0) {
      return LmdbStatus("mdb_txn_begin", rc);
    }
    if ((rc = mdb_dbi_open(txn, nullptr, 0, &ledger->dbi_)) != 0) {
      mdb_txn_abort(txn);
      return LmdbStatus("mdb_dbi_open", rc);
    }
    if ((rc = mdb_txn_commit(txn)) != 0) return LmdbStatus("mdb_txn_commit", rc);
    return ledger;
  }
  ~Ledger() { mdb_env_close(env_); }

  // A read-write transaction (LMDB runs one at a time per environment).
  absl::StatusOr<Txn> Begin() {
    MDB_txn* txn = nullptr;
    const int rc = mdb_txn_begin(env_, nullptr, 0, &txn);
    if (rc != 0) return LmdbStatus("mdb_txn_begin", rc);
    return Txn(txn, dbi_);
  }

 private:
  Ledger() = default;
  MDB_env* env_ = nullptr;
  MDB_dbi dbi_ = 0;
};

// ===== The audit application (a child process) =====

// What the parent can see of the application through shared memory, only to aim the kill at an
// open transaction and to report what it destroyed. Not part of the pattern: the application's
// truth is its ledger.
// It lives in a file both processes map (MAP_SHARED), in the data directory.
struct Progress {
  std::atomic<uint64_t> handled{0};  // orders applied to transactions, committed or not
  std::atomic<uint64_t> commits{0};  // transactions committed
  std::atomic<bool> working{false};  // inside a transaction, doing the application's own work
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "Progress is shared between processes: its atomics must not use locks");

// Maps the Progress file under `dir`, creating it zeroed when `create`. Null on failure.
Progress* MapProgress(const std::string& dir, bool create) {
  const std::string path = dir + "/progress";
  const int fd = open(path.c_str(), create ? O_RDWR | O_CREAT | O_TRUNC : O_RDWR, 0600);
  if (fd < 0) return nullptr;
  if (create && ftruncate(fd, sizeof(Progress)) != 0) {
    close(fd);
    return nullptr;
  }
  void* shared = mmap(nullptr, sizeof(Progress), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (shared == MAP_FAILED) return nullptr;
  return create ? new (shared) Progress : static_cast<Progress*>(shared);
}

// The application proper. The main loop opens a transaction, then the DurableSubscriber calls
// these methods for the messages that arrived; each writes its effect into that transaction.
class Auditor : public DurableSubscriber::Handler {
 public:
  Auditor(int incarnation, Progress* progress) : incarnation_(incarnation), progress_(progress) {}

  void Begin(Ledger::Txn* txn) { txn_ = txn; }
  // OK unless a write failed; then the transaction must be abandoned (see the main loop).
  const absl::Status& status() const { return status_; }
  bool wants_reconnect() const { return wants_reconnect_; }
  void reconnecting() { wants_reconnect_ = false; }

  // Every order carries account, quantity and price_cents (the gateway's schema).
  void OnEvent(PubendId, Tick, const EventRef& order) override {
    const std::string& account = std::get<std::string>(*order->Find("account"));
    const int64_t quantity = std::get<int64_t>(*order->Find("quantity"));
    Totals t = txn_->GetTotals(account);
    t.orders += 1;
    t.shares += quantity;
    t.notional_cents += quantity * std::get<int64_t>(*order->Find("price_cents"));
    status_.Update(txn_->PutTotals(account, t));
    progress_->handled.fetch_add(1);
  }
  // Nothing matched up to t: nothing to record, but the CT moves, and commits with the batch.
  void OnSilence(PubendId, Tick) override {}
  // Retention discarded orders the ledger may lack: an auditor must know (and reconcile).
  void OnGap(PubendId p, Tick t) override {
    Say("  audit app %d: Gap on pubend %u up to %d: the ledger may be incomplete\n", incarnation_,
        p.value, t);
    status_.Update(txn_->PutU64("gaps", txn_->GetU64("gaps") + 1));
  }
  void OnConnected(const CheckpointToken& start) override {
    Say("  audit app %d: connected; the broker resumes after CT %s\n", incarnation_,
        start.ToString());
  }
  void OnError(const absl::Status& status) override {
    Say("  audit app %d: %s\n", incarnation_, status.ToString());
    wants_reconnect_ = true;
  }

 private:
  const int incarnation_;
  Progress* const progress_;
  Ledger::Txn* txn_ = nullptr;
  absl::Status status_;
  bool wants_reconnect_ = false;
};

// SIGTERM received: the audit application ends after its current batch.
volatile std::sig_atomic_t g_terminate = 0;
extern "C" void OnTerminate(int) { g_terminate = 1; }

// The audit application's process: runs until SIGTERM. Returns the exit code.
int RunAuditApplication(int incarnation, const std::string& dir, const std::string& broker,
                        absl::Duration work) {
  std::signal(SIGTERM, OnTerminate);
  Progress* const progress = MapProgress(dir, false);
  if (progress == nullptr) {
    Say("  audit app %d: cannot map %s/progress\n", incarnation, dir);
    return 1;
  }
  const std::string ledger_dir = dir + "/audit-ledger";
  absl::StatusOr<std::unique_ptr<Ledger>> ledger = Ledger::Open(ledger_dir);
  if (!ledger.ok()) {
    Say("  audit app %d: %s\n", incarnation, ledger.status().ToString());
    return 1;
  }
  // Recovery is reading two rows: the CT, and the epoch, which goes up with every process so
  // that our session fences any stale one of an earlier process.
  CheckpointToken stored;
  uint64_t epoch = 0;
  {
    absl::StatusOr<Ledger::Txn> txn = (*ledger)->Begin();
    if (!txn.ok()) return 1;
    if (std::optional<std::string> ct = txn->Get("ct")) {
      absl::StatusOr<CheckpointToken> decoded = CheckpointToken::Decode(*ct);
      if (!decoded.ok()) return 1;
      stored = *decoded;
    }
    epoch = txn->GetU64("epoch") + 1;
    Say("  audit app %d (pid %d) opened its ledger: %d orders, CT %s\n"
        "    connecting with that CT and epoch %d\n",
        incarnation, getpid(), txn->TotalOrders(), stored.ToString(), epoch);
    if (!txn->PutU64("epoch", epoch).ok() || !txn->Commit().ok()) return 1;
  }

  // The application dials the subscriber hosting broker; a restarted process takes its name over.
  absl::StatusOr<std::unique_ptr<ZmqChannel>> opened =
      OpenChannel("audit-app", false, {{"shb", broker}});
  if (!opened.ok()) {
    Say("  audit app %d: %s\n", incarnation, opened.status().ToString());
    return 1;
  }
  ZmqChannel& channel = **opened;
  Auditor auditor(incarnation, progress);
  DurableSubscriberOptions options;
  options.subscription = "audit";
  options.selector = kAuditSelector;
  options.broker = "shb";
  options.checkpoint = stored;
  options.epoch = epoch;
  options.ack_interval = absl::Milliseconds(20);
  // The CT is stored after each batch, not in the handler: acks carry only what was stored. An
  // ack ahead of the commit would let the broker release, and chop from its filtering log, what
  // a crash would make us ask for again.
  options.ack_stored_only = true;
  absl::StatusOr<std::unique_ptr<DurableSubscriber>> subscriber =
      DurableSubscriber::Create(options, &channel, &auditor);
  if (!subscriber.ok()) return 1;
  DurableSubscriber& ds = **subscriber;
  channel.SetReceiver([&ds](absl::string_view from, Message m) { ds.HandleMessage(from, m); });
  (void)ds.Connect();
  absl::Time last_connect = absl::Now();

  for (;;) {
    if (g_terminate) {
      Say("  audit app %d: SIGTERM after its last batch committed; exiting\n", incarnation);
      return 0;
    }
    // ZeroMQ's descriptor signals edges: the channel is dispatched below however the poll ends.
    std::vector<pollfd> fds;
    for (int fd : channel.WaitFds()) fds.push_back(pollfd{fd, POLLIN, 0});
    (void)poll(fds.data(), fds.size(), 10);
    // One batch: every message that has arrived, applied in ONE transaction that also stores the
    // CT after them. A crash anywhere before Commit returns loses the batch and its CT together.
    absl::StatusOr<Ledger::Txn> txn = (*ledger)->Begin();
    if (!txn.ok()) return 1;
    auditor.Begin(&*txn);
    const uint64_t handled_before = progress->handled.load();
    (void)channel.Dispatch(4096);
    // A failed write: abandon the transaction and the process. The DurableSubscriber's CT has
    // moved past the batch, but the stored one has not; the next process starts from it.
    if (!auditor.status().ok()) return 1;
    if (!(ds.checkpoint() == stored)) {
      // The application's own work inside its transaction (say, a call to a risk system): the
      // window in which the parent's SIGKILL lands.
      if (progress->handled.load() > handled_before) {
        progress->working = true;
        absl::SleepFor(work);
        progress->working = false;
      }
      if (!txn->Put("ct", ds.checkpoint().Encode()).ok() || !txn->Commit().ok()) return 1;
      stored = ds.checkpoint();
      if (!ds.Stored(stored).ok()) return 1;
      progress->commits.fetch_add(1);
    }
    ds.OnTimer(absl::Now());
    if (auditor.wants_reconnect() && absl::Now() - last_connect > absl::Milliseconds(200)) {
      auditor.reconnecting();
      last_connect = absl::Now();
      (void)ds.Connect();
    }
  }
}

// ===== The trading system (the parent process) =====

// Starts the audit application: this program again, as a process of its own (fork and exec, so
// that it inherits none of the trading system's threads, sockets or LMDB environments). Returns
// its pid.
absl::StatusOr<pid_t> StartAuditApplication(int incarnation, const std::string& dir,
                                            const std::string& broker) {
  // Everything the child needs is built before fork: after it, the child only calls execv.
  std::vector<std::string> args = {
      "/proc/self/exe", absl::StrCat("--audit_app=", incarnation), absl::StrCat("--data_dir=", dir),
      absl::StrCat("--broker=", broker), absl::StrCat("--work_ms=", absl::GetFlag(FLAGS_work_ms))};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// The orders in the ledger at `dir`. REQUIRES: no process has it open for writing.
absl::StatusOr<int64_t> CountLedgerOrders(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Ledger>> ledger = Ledger::Open(dir);
  if (!ledger.ok()) return ledger.status();
  absl::StatusOr<Ledger::Txn> txn = (*ledger)->Begin();
  if (!txn.ok()) return txn.status();
  return txn->TotalOrders();
}

// A published order and where it was logged.
struct Published {
  PubendId pubend;
  Tick tick;
  EventRef order;
};

Event MakeOrder(std::mt19937_64& rng) {
  Event e;
  e.SetTopic("orders")
      .SetString("account", kAccounts[rng() % std::size(kAccounts)])
      .SetString("symbol", kSymbols[rng() % std::size(kSymbols)])
      .SetString("side", rng() % 2 ? "BUY" : "SELL")
      .SetInt64("quantity", static_cast<int64_t>(100 * (1 + rng() % 30)))
      .SetInt64("price_cents", static_cast<int64_t>(5000 + rng() % 20000));
  return e;
}

int RunTradingSystem(const std::string& dir) {
  const int total_orders = std::max(1, absl::GetFlag(FLAGS_orders));
  const absl::Duration interval = absl::Seconds(1) / std::max(1.0, absl::GetFlag(FLAGS_rate));
  auto open = [&](const std::string& name) {
    StorageOptions so;
    so.path = dir + "/" + name;
    return OpenLmdbStorage(so);
  };
  absl::StatusOr<std::unique_ptr<Storage>> phb_storage = open("phb");
  absl::StatusOr<std::unique_ptr<Storage>> shb_storage = open("shb");
  if (!phb_storage.ok() || !shb_storage.ok()) {
    Say("opening the brokers' stores failed\n");
    return 1;
  }
  // The brokers listen on loopback; the SHB dials the PHB. One runtime drives both, committing on
  // their commit threads.
  absl::StatusOr<std::unique_ptr<ZmqChannel>> phb_channel = OpenChannel("phb", true, {});
  if (!phb_channel.ok()) return 1;
  absl::StatusOr<std::unique_ptr<ZmqChannel>> shb_channel =
      OpenChannel("shb", true, {{"phb", (*phb_channel)->bound_endpoint()}});
  if (!shb_channel.ok()) return 1;
  const std::string broker = (*shb_channel)->bound_endpoint();
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create();
  if (!runtime.ok()) return 1;
  (*runtime)->AddSource(phb_channel->get());
  (*runtime)->AddSource(shb_channel->get());
  PublisherHostingBrokerOptions po;
  po.pubends = {PubendOptions{PubendId{1}}, PubendOptions{PubendId{2}}};
  po.downstream = {"shb"};
  po.group_commit.max_delay = absl::Milliseconds(1);
  absl::StatusOr<PublisherHostingBroker*> phb =
      (*runtime)->OpenPublisherHostingBroker(po, phb_storage->get(), phb_channel->get());
  SubscriberHostingBrokerOptions so;
  so.pubends = {{PubendId{1}, "phb"}, {PubendId{2}, "phb"}};
  absl::StatusOr<SubscriberHostingBroker*> shb =
      (*runtime)->OpenSubscriberHostingBroker(so, shb_storage->get(), shb_channel->get());
  if (!phb.ok() || !shb.ok() || !(*runtime)->Start().ok()) {
    Say("opening the brokers failed\n");
    return 1;
  }
  // What the subscriber hosting broker says of the audit's subscription: whether a session is
  // connected, and the CT its subscriber acknowledged (released(s,p) at each pubend).
  struct AuditSeen {
    bool connected = false;
    CheckpointToken acked;
  };
  auto audit_seen = [&] {
    AuditSeen seen;
    (*runtime)->Call([&] {
      absl::StatusOr<SubscriptionStatus> st = (*shb)->FindSubscription("audit");
      if (!st.ok()) return;
      seen.connected = st->state != SubscriptionStatus::State::kDisconnected;
      for (const SubscriptionStatus::AtPubend& p : st->pubends)
        seen.acked.Set(p.pubend, p.released);
    });
    return seen;
  };

  Progress* progress = MapProgress(dir, true);
  if (progress == nullptr) return 1;
  const std::string ledger_dir = dir + "/audit-ledger";

  Say("gryph trading audit: %d orders at %.0f/s over 2 pubends; the audit subscribes to\n"
      "  %s\n",
      total_orders, absl::GetFlag(FLAGS_rate), kAuditSelector);
  int incarnation = 1;
  absl::StatusOr<pid_t> app = StartAuditApplication(incarnation, dir, broker);
  if (!app.ok()) return 1;

  const Subscription audit = *Subscription::Create(kAuditSelector);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  // Filled by `done`, which runs on the PHB's commit thread.
  absl::Mutex mu;
  std::vector<Published> published;
  CheckpointToken last_audited;  // per pubend, the tick of the last published order that matches
  auto published_count = [&] {
    absl::MutexLock l(&mu);
    return static_cast<int>(published.size());
  };
  int sent = 0;
  bool killed = false;
  bool running = true;  // the application's process is alive
  absl::Time restart_at = absl::InfiniteFuture();
  // The gateway starts once the audit's subscription exists (a durable subscription gets what
  // is published from its creation on), and the ledger must hold every matching order.
  absl::Time start = absl::InfiniteFuture();
  const absl::Time deadline = absl::Now() + interval * total_orders + absl::Seconds(60);
  absl::Time last_look;
  // Done when the application, after its crash, acknowledged the last order it audits: its
  // ledger holds everything up to the CT it acknowledged.
  auto app_has_everything = [&] {
    if (!killed || !running || published_count() != total_orders) return false;
    const CheckpointToken acked = audit_seen().acked;
    absl::MutexLock l(&mu);
    return last_audited <= acked;
  };

  for (;;) {
    const absl::Time now = absl::Now();
    if (now > deadline) {
      Say("timed out\n");
      return 1;
    }
    // Every 5 ms, a look at the broker: has the application connected, has it everything?
    if (now - last_look >= absl::Milliseconds(5)) {
      last_look = now;
      if (start == absl::InfiniteFuture() && audit_seen().connected) start = now;
      if (app_has_everything()) break;
    }
    // The order gateway: publishes on schedule; `done` runs once the order is durable.
    while (sent < total_orders && now >= start + interval * sent) {
      ++sent;
      EventRef order = MakeEventRef(MakeOrder(rng));
      const std::string account = std::get<std::string>(*order->Find("account"));
      const PubendId p = PubendForKey(account, (*phb)->pubend_ids());
      (*phb)->Publish(p, "order-gateway", static_cast<uint64_t>(sent), order,
                      [&, p, order](absl::StatusOr<Tick> t) {
                        if (!t.ok()) return;  // not logged: the gateway would retry it
                        absl::MutexLock l(&mu);
                        published.push_back({p, *t, order});
                        if (audit.Matches(*order)) last_audited.Set(p, *t);
                      });
    }
    // The crash, once enough has been published: watch the application for a moment and kill it
    // the instant it works inside a transaction that holds applied orders.
    bool kill_now = false;
    if (!killed && sent >= total_orders * absl::GetFlag(FLAGS_kill_after)) {
      for (absl::Time until = absl::Now() + absl::Milliseconds(20); absl::Now() < until;) {
        kill_now = progress->working && progress->commits > 0;
        if (kill_now) break;
      }
    }
    if (kill_now) {
      kill(*app, SIGKILL);
      int status = 0;
      waitpid(*app, &status, 0);
      running = false;
      killed = true;
      restart_at = now + absl::Milliseconds(absl::GetFlag(FLAGS_down_ms));
      // What survived is what the ledger says (the kill may also land just after a commit).
      absl::StatusOr<int64_t> kept = CountLedgerOrders(ledger_dir);
      if (!kept.ok()) return 1;
      const int64_t applied = static_cast<int64_t>(progress->handled.load());
      Say("  trading system: SIGKILL to audit app %d after %d orders were published; it had\n"
          "    applied %d orders, its ledger holds %d: %d died with an open transaction\n",
          incarnation, sent, applied, *kept, applied - *kept);
      progress->handled = 0;
      progress->commits = 0;
      progress->working = false;
    }
    if (!running && now >= restart_at) {
      app = StartAuditApplication(++incarnation, dir, broker);
      if (!app.ok()) return 1;
      running = true;
    }
    absl::SleepFor(absl::Microseconds(200));
  }
  Say("  trading system: all %d orders published; the audit acknowledged the last one it audits\n",
      total_orders);

  // SIGTERM ends the application after its batch; its ledger is then final. The brokers stop
  // too: every publish has been answered, so `published` changes no more.
  kill(*app, SIGTERM);
  int status = 0;
  waitpid(*app, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Say("audit app %d failed\n", incarnation);
    return 1;
  }
  (*runtime)->Shutdown();

  // The verdict: the ledger against the published orders that match the selector.
  std::map<std::string, Totals> expected;
  int64_t expected_orders = 0;
  for (const Published& p : published) {
    if (!audit.Matches(*p.order)) continue;
    const auto& o = *p.order;
    Totals& t = expected[std::get<std::string>(*o.Find("account"))];
    const int64_t quantity = std::get<int64_t>(*o.Find("quantity"));
    t.orders += 1;
    t.shares += quantity;
    t.notional_cents += quantity * std::get<int64_t>(*o.Find("price_cents"));
    ++expected_orders;
  }
  absl::StatusOr<std::unique_ptr<Ledger>> ledger = Ledger::Open(ledger_dir);
  if (!ledger.ok()) return 1;
  absl::StatusOr<Ledger::Txn> txn = (*ledger)->Begin();
  if (!txn.ok()) return 1;
  const std::map<std::string, Totals> actual = txn->AllTotals();
  const uint64_t gaps = txn->GetU64("gaps");
  auto dollars = [](int64_t cents) { return absl::StrFormat("%d.%02d", cents / 100, cents % 100); };
  Say("\n  %-9s %17s %21s %31s\n", "account", "orders", "shares", "notional $");
  Say("  %-9s %8s %8s %10s %10s %15s %15s\n", "", "ledger", "expected", "ledger", "expected",
      "ledger", "expected");
  for (const char* account : kAccounts) {
    const Totals a = actual.contains(account) ? actual.at(account) : Totals{};
    const Totals e = expected.contains(account) ? expected.at(account) : Totals{};
    Say("  %-9s %8d %8d %10d %10d %15s %15s%s\n", account, a.orders, e.orders, a.shares, e.shares,
        dollars(a.notional_cents), dollars(e.notional_cents), a == e ? "" : "  DIFFERS");
  }
  Say("  (expected: the published orders that match the selector)\n");
  const bool exact = actual == expected && gaps == 0;
  if (gaps > 0) Say("  the ledger recorded %d Gap(s)\n", gaps);
  Say("\n  %s: the ledger %s the %d published orders that match the selector%s\n",
      exact ? "exactly once" : "VIOLATED", exact ? "equals" : "does NOT equal", expected_orders,
      exact ? ":\n  none missing, none counted twice, across the kill" : "");
  return exact ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "An application storing its checkpoint token in its own LMDB transaction survives SIGKILL "
      "with an exact ledger.");
  absl::ParseCommandLine(argc, argv);
  std::string dir = absl::GetFlag(FLAGS_data_dir);
  if (const int incarnation = absl::GetFlag(FLAGS_audit_app); incarnation > 0) {
    return RunAuditApplication(incarnation, dir, absl::GetFlag(FLAGS_broker),
                               absl::Milliseconds(absl::GetFlag(FLAGS_work_ms)));
  }
  const bool keep = !dir.empty();
  if (!keep) {
    dir = (std::filesystem::temp_directory_path() / "gryph-audit-XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) return 1;
  }
  const int rc = RunTradingSystem(dir);
  if (!keep) std::filesystem::remove_all(dir);
  return rc;
}
