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
//      (orders keyed by account) and a subscriber hosting broker, both on LMDB, connected by an
//      InProcessNetwork. An order gateway publishes --orders orders at --rate.
//   2. It forks the audit application, which reaches the broker over a socketpair (each message
//      encoded with EncodeMessage and length-prefixed).
//   3. Once --kill_after of the orders are published, the parent kills the application with
//      SIGKILL while it is inside a transaction (the application spends --work_ms per batch in
//      its transaction, as if it called another system there).
//   4. Orders keep flowing while it is dead; after --down_ms the parent forks it again. The new
//      process reopens the ledger, connects with the stored CT and a higher epoch, catches up
//      from the broker's persistent filtering log and carries on.
//   5. When the application has acknowledged the last matching order, the parent closes the
//      connection, the application exits, and the parent reads the ledger and compares it with
//      the orders that were published and match the audit's selector. Any difference (or a Gap,
//      which the ledger would also record) makes the program exit 1.
//
//   trading_audit [--orders=3000] [--rate=1500] [--kill_after=0.4] [--down_ms=300]
//                 [--work_ms=3] [--seed=1] [--data_dir=DIR]

#include <lmdb.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
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
#include "absl/time/clock.h"
#include "gryph/durable_subscriber.h"
#include "gryph/in_process_channel.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/storage.h"
#include "gryph/subscriber_hosting_broker.h"
#include "gryph/subscription.h"

ABSL_FLAG(int, orders, 3000, "orders the gateway publishes");
ABSL_FLAG(double, rate, 1500, "orders published per second");
ABSL_FLAG(double, kill_after, 0.4,
          "fraction of the orders published before the application is killed");
ABSL_FLAG(int, down_ms, 300, "milliseconds the application stays dead while orders keep flowing");
ABSL_FLAG(int, work_ms, 3, "milliseconds the application works inside each transaction");
ABSL_FLAG(uint64_t, seed, 1, "seed for the orders");
ABSL_FLAG(std::string, data_dir, "", "where the stores go (kept); default: a temp dir, removed");

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

// ===== The wire between the processes: [4-byte big-endian length][EncodeMessage bytes] =====

constexpr uint32_t kMaxFrameBytes = 64 << 20;

// Writes one frame, blocking until it is all written. Unavailable when the peer is gone.
absl::Status WriteFrame(int fd, const Message& message) {
  const std::string body = EncodeMessage(message);
  const uint32_t n = static_cast<uint32_t>(body.size());
  std::string frame = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 8), static_cast<char>(n)};
  frame += body;
  for (size_t done = 0; done < frame.size();) {
    // MSG_NOSIGNAL: a peer that died makes this fail with EPIPE rather than kill us.
    const ssize_t w = send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    done += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// Reassembles frames from a stream socket.
class FrameReader {
 public:
  // Reads what `fd` has without blocking and appends the complete messages to *out. Fails with
  // Unavailable once the peer closed the connection (after appending what came before), and
  // DataLoss for a frame that does not decode.
  absl::Status ReadAvailable(int fd, std::vector<Message>* out) {
    absl::Status status;
    char chunk[64 << 10];
    for (;;) {
      const ssize_t r = recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
      if (r > 0) {
        buffer_.append(chunk, static_cast<size_t>(r));
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        status = absl::UnavailableError("the peer closed the connection");
      }
      break;
    }
    size_t at = 0;
    while (buffer_.size() - at >= 4) {
      const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + at);
      const uint32_t n = uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
      if (n > kMaxFrameBytes) return absl::DataLossError("oversized frame");
      if (buffer_.size() - at - 4 < n) break;
      absl::StatusOr<Message> m = DecodeMessage(absl::string_view(buffer_).substr(at + 4, n));
      if (!m.ok()) return absl::DataLossError(m.status().message());
      out->push_back(*std::move(m));
      at += 4 + n;
    }
    buffer_.erase(0, at);
    return status;
  }

 private:
  std::string buffer_;  // bytes of incomplete frames
};

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
struct Progress {
  std::atomic<uint64_t> handled{0};  // orders applied to transactions, committed or not
  std::atomic<uint64_t> commits{0};  // transactions committed
  std::atomic<bool> working{false};  // inside a transaction, doing the application's own work
};

// The application's Channel: its one peer, the broker, is at the other end of the socket.
class SocketChannel final : public Channel {
 public:
  SocketChannel(int fd, std::string broker) : fd_(fd), broker_(std::move(broker)) {}

  const std::string& name() const override { return name_; }
  absl::Status Send(absl::string_view peer, Message message) override {
    if (peer != broker_) return absl::UnavailableError(absl::StrCat("no route to ", peer));
    return WriteFrame(fd_, message);
  }
  void SetReceiver(Receiver receiver) override { receiver_ = std::move(receiver); }

  // Hands every message that has arrived to the receiver. Unavailable once the broker's side
  // closed the connection.
  absl::Status Pump() {
    std::vector<Message> arrived;
    const absl::Status status = reader_.ReadAvailable(fd_, &arrived);
    for (Message& m : arrived) {
      if (receiver_) receiver_(broker_, std::move(m));
    }
    return status;
  }

 private:
  const int fd_;
  const std::string broker_;
  const std::string name_ = "audit-app";
  FrameReader reader_;
  Receiver receiver_;
};

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

// The audit application's process: runs until the trading system closes the connection `fd`.
// Returns the exit code.
int RunAuditApplication(int incarnation, const std::string& ledger_dir, int fd, Progress* progress,
                        absl::Duration work) {
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

  SocketChannel channel(fd, "shb");
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
    pollfd wait_for_input{fd, POLLIN, 0};
    (void)poll(&wait_for_input, 1, 10);
    // One batch: every message that has arrived, applied in ONE transaction that also stores the
    // CT after them. A crash anywhere before Commit returns loses the batch and its CT together.
    absl::StatusOr<Ledger::Txn> txn = (*ledger)->Begin();
    if (!txn.ok()) return 1;
    auditor.Begin(&*txn);
    const uint64_t handled_before = progress->handled.load();
    const absl::Status arrived = channel.Pump();
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
    if (absl::IsUnavailable(arrived)) {
      Say("  audit app %d: the trading system closed the connection; exiting\n", incarnation);
      return 0;
    }
    if (!arrived.ok()) return 1;
    if (auditor.wants_reconnect() && absl::Now() - last_connect > absl::Milliseconds(200)) {
      auditor.reconnecting();
      last_connect = absl::Now();
      (void)ds.Connect();
    }
  }
}

// ===== The trading system (the parent process) =====

// The trading system's end of one application connection: an endpoint of the in-process network,
// named after the connection, whose messages go down the socket; what comes up the socket is
// sent to the broker from that endpoint, so the broker sees the connection as one peer.
class AppConnection {
 public:
  AppConnection(std::unique_ptr<Channel> endpoint, pid_t pid, int fd)
      : endpoint_(std::move(endpoint)), pid_(pid), fd_(fd) {
    // A message to an application that died is lost; the protocol needs nothing more.
    endpoint_->SetReceiver([this](absl::string_view, Message m) {
      if (std::holds_alternative<ConnectedMessage>(m)) connected_ = true;
      (void)WriteFrame(fd_, m);
    });
  }
  ~AppConnection() {
    endpoint_.reset();
    close(fd_);
  }

  // Forwards what the application sent to the broker. Unavailable once it closed the connection.
  absl::Status Pump() {
    std::vector<Message> arrived;
    const absl::Status status = reader_.ReadAvailable(fd_, &arrived);
    for (Message& m : arrived) {
      if (const auto* ack = std::get_if<AckMessage>(&m)) acked_ = ack->checkpoint;
      (void)endpoint_->Send("shb", std::move(m));
    }
    return status;
  }
  // The broker accepted the application's subscription.
  bool connected() const { return connected_; }
  // The last CT the application acknowledged: its ledger holds everything up to it.
  const CheckpointToken& acked() const { return acked_; }
  pid_t pid() const { return pid_; }
  int fd() const { return fd_; }

 private:
  std::unique_ptr<Channel> endpoint_;
  const pid_t pid_;
  const int fd_;
  FrameReader reader_;
  bool connected_ = false;
  CheckpointToken acked_;
};

// Forks the audit application, connected to us by a socketpair; returns our end of it.
absl::StatusOr<std::unique_ptr<AppConnection>> SpawnAuditApplication(InProcessNetwork& net,
                                                                     int incarnation,
                                                                     const std::string& ledger_dir,
                                                                     Progress* progress,
                                                                     absl::Duration work) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  progress->handled = 0;
  progress->commits = 0;
  progress->working = false;
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // The child uses nothing of the parent's (its LMDB environments belong to the parent) and
    // leaves with _exit, running no destructor of the parent's objects.
    close(fds[0]);
    _exit(RunAuditApplication(incarnation, ledger_dir, fds[1], progress, work));
  }
  close(fds[1]);
  absl::StatusOr<std::unique_ptr<Channel>> endpoint =
      net.Connect(absl::StrCat("audit-app/", incarnation));
  if (!endpoint.ok()) return endpoint.status();
  return std::make_unique<AppConnection>(*std::move(endpoint), pid, fds[0]);
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
  InProcessNetwork net;
  std::unique_ptr<Channel> phb_endpoint = *net.Connect("phb");
  std::unique_ptr<Channel> shb_endpoint = *net.Connect("shb");
  PublisherHostingBrokerOptions po;
  po.pubends = {PubendOptions{PubendId{1}}, PubendOptions{PubendId{2}}};
  po.downstream = {"shb"};
  po.commit_thread = false;  // this loop drives everything: fork() wants a single thread
  po.group_commit.max_delay = absl::Milliseconds(1);
  absl::StatusOr<std::unique_ptr<PublisherHostingBroker>> phb =
      PublisherHostingBroker::Open(po, phb_storage->get(), phb_endpoint.get());
  SubscriberHostingBrokerOptions so;
  so.pubends = {{PubendId{1}, "phb"}, {PubendId{2}, "phb"}};
  absl::StatusOr<std::unique_ptr<SubscriberHostingBroker>> shb =
      SubscriberHostingBroker::Open(so, shb_storage->get(), shb_endpoint.get());
  if (!phb.ok() || !shb.ok()) {
    Say("opening the brokers failed\n");
    return 1;
  }

  void* shared =
      mmap(nullptr, sizeof(Progress), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 1;
  Progress* progress = new (shared) Progress;
  const std::string ledger_dir = dir + "/audit-ledger";

  Say("gryph trading audit: %d orders at %.0f/s over 2 pubends; the audit subscribes to\n"
      "  %s\n",
      total_orders, absl::GetFlag(FLAGS_rate), kAuditSelector);
  const absl::Duration work = absl::Milliseconds(absl::GetFlag(FLAGS_work_ms));
  int incarnation = 1;
  absl::StatusOr<std::unique_ptr<AppConnection>> spawned =
      SpawnAuditApplication(net, incarnation, ledger_dir, progress, work);
  if (!spawned.ok()) return 1;
  std::unique_ptr<AppConnection> app = *std::move(spawned);

  const Subscription audit = *Subscription::Create(kAuditSelector);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::vector<Published> published;
  CheckpointToken last_audited;  // per pubend, the tick of the last published order that matches
  int sent = 0;
  bool killed = false;
  absl::Time restart_at = absl::InfiniteFuture();
  // The gateway starts once the audit's subscription exists (a durable subscription gets what
  // is published from its creation on), and the ledger must hold every matching order.
  absl::Time start = absl::InfiniteFuture();
  const absl::Time deadline = absl::Now() + interval * total_orders + absl::Seconds(60);
  absl::Time last_timer;
  // Done when the application, after its crash, acknowledged the last order it audits: its
  // ledger holds everything up to the CT it acknowledged.
  auto app_has_everything = [&] {
    return killed && app != nullptr && static_cast<int>(published.size()) == total_orders &&
           last_audited <= app->acked();
  };

  while (!app_has_everything()) {
    const absl::Time now = absl::Now();
    if (now > deadline) {
      Say("timed out\n");
      return 1;
    }
    if (start == absl::InfiniteFuture() && app != nullptr && app->connected()) start = now;
    // The order gateway: publishes on schedule; `done` runs once the order is durable.
    while (sent < total_orders && now >= start + interval * sent) {
      ++sent;
      EventRef order = MakeEventRef(MakeOrder(rng));
      const std::string account = std::get<std::string>(*order->Find("account"));
      const PubendId p = PubendForKey(account, (*phb)->pubend_ids());
      (*phb)->Publish(p, "order-gateway", static_cast<uint64_t>(sent), order,
                      [&, p, order](absl::StatusOr<Tick> t) {
                        if (!t.ok()) return;  // not logged: the gateway would retry it
                        published.push_back({p, *t, order});
                        if (audit.Matches(*order)) last_audited.Set(p, *t);
                      });
    }
    // The brokers: commits, messages (the application's among them), deliveries, timers; and
    // what they sent goes out (down the socket, for the application).
    (*phb)->OnTimer(now);
    if (app != nullptr) (void)app->Pump();
    net.DeliverAll();
    (*shb)->Flush();
    if (now - last_timer >= absl::Milliseconds(5)) {
      last_timer = now;
      (*shb)->OnTimer(now);
    }
    net.DeliverAll();
    // The crash, once enough has been published: watch the application for a moment (it has
    // just been sent messages) and kill it the instant it works inside a transaction that holds
    // applied orders.
    bool kill_now = false;
    if (!killed && sent >= total_orders * absl::GetFlag(FLAGS_kill_after)) {
      for (absl::Time until = absl::Now() + absl::Milliseconds(20); absl::Now() < until;) {
        kill_now = progress->working && progress->commits > 0;
        if (kill_now) break;
      }
    }
    if (kill_now) {
      kill(app->pid(), SIGKILL);
      int status = 0;
      waitpid(app->pid(), &status, 0);
      app.reset();
      killed = true;
      restart_at = now + absl::Milliseconds(absl::GetFlag(FLAGS_down_ms));
      // What survived is what the ledger says (the kill may also land just after a commit).
      absl::StatusOr<int64_t> kept = CountLedgerOrders(ledger_dir);
      if (!kept.ok()) return 1;
      const int64_t applied = static_cast<int64_t>(progress->handled.load());
      Say("  trading system: SIGKILL to audit app %d after %d orders were published; it had\n"
          "    applied %d orders, its ledger holds %d: %d died with an open transaction\n",
          incarnation, sent, applied, *kept, applied - *kept);
    }
    if (app == nullptr && now >= restart_at) {
      spawned = SpawnAuditApplication(net, ++incarnation, ledger_dir, progress, work);
      if (!spawned.ok()) return 1;
      app = *std::move(spawned);
    }
    pollfd wait_for_app{app != nullptr ? app->fd() : -1, POLLIN, 0};
    (void)poll(&wait_for_app, 1, 1);
  }
  Say("  trading system: all %d orders published; the audit acknowledged the last one it audits\n",
      total_orders);

  // Closing the connection ends the application; its ledger is then final.
  const pid_t pid = app->pid();
  app.reset();
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Say("audit app %d failed\n", incarnation);
    return 1;
  }

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
  const bool keep = !dir.empty();
  if (!keep) {
    dir = (std::filesystem::temp_directory_path() / "gryph-audit-XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) return 1;
  }
  const int rc = RunTradingSystem(dir);
  if (!keep) std::filesystem::remove_all(dir);
  return rc;
}
