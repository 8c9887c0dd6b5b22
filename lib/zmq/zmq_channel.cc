#include "gryph/zmq_channel.h"

#include <poll.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "lib/util/coding.h"
#include "lib/util/crc32c.h"

namespace gryph {
namespace {

constexpr size_t kMaxNameBytes = 255;  // ZeroMQ's routing ids
constexpr size_t kChecksumBytes = 4;   // the CRC-32C that ends every frame
constexpr size_t kZ85KeyChars = 40;
constexpr size_t kBinaryKeyBytes = 32;
// The endpoint of the ZAP handler, fixed by ZeroMQ (RFC 27).
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

std::string ZmqError(absl::string_view what) {
  return absl::StrCat(what, ": ", zmq_strerror(zmq_errno()));
}

bool ValidZ85Key(const std::string& key) {
  if (key.size() != kZ85KeyChars) return false;
  uint8_t binary[kBinaryKeyBytes];
  return zmq_z85_decode(binary, key.c_str()) != nullptr;
}

absl::Status SetInt(void* socket, int option, int value, absl::string_view name) {
  if (zmq_setsockopt(socket, option, &value, sizeof(value)) != 0) {
    return absl::InternalError(ZmqError(absl::StrCat("setting ", name)));
  }
  return absl::OkStatus();
}

absl::Status SetBytes(void* socket, int option, absl::string_view value, absl::string_view name) {
  if (zmq_setsockopt(socket, option, value.data(), value.size()) != 0) {
    return absl::InternalError(ZmqError(absl::StrCat("setting ", name)));
  }
  return absl::OkStatus();
}

// A socket option's milliseconds; sub-millisecond durations round up to 1 (0 would turn the
// option off). The range is checked in Init.
int Millis(absl::Duration d) {
  return static_cast<int>(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(absl::Ceil(d, absl::Milliseconds(1)))));
}

// One received multipart message in a vector reused from one message to the next (no
// allocation per message); closes its frames.
struct Frames {
  explicit Frames(std::vector<zmq_msg_t>* storage) : parts(*storage) { parts.clear(); }
  Frames(const Frames&) = delete;
  Frames& operator=(const Frames&) = delete;
  ~Frames() {
    for (zmq_msg_t& m : parts) zmq_msg_close(&m);
    parts.clear();
  }
  absl::string_view view(size_t i) {
    return {static_cast<const char*>(zmq_msg_data(&parts[i])), zmq_msg_size(&parts[i])};
  }
  // Receives the whole of the next message of `socket`; false when none is waiting (or on error).
  bool Receive(void* socket, int flags) {
    for (;;) {
      parts.emplace_back();
      zmq_msg_t& m = parts.back();
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, socket, flags) < 0) {
        const int error = zmq_errno();
        zmq_msg_close(&m);
        parts.pop_back();
        errno = error;  // for the caller: EAGAIN (nothing waiting), EINTR
        return false;   // a part never fails once the first arrived
      }
      if (!zmq_msg_more(&m)) return true;
    }
  }
  std::vector<zmq_msg_t>& parts;
};

}  // namespace

absl::StatusOr<CurveKeyPair> GenerateCurveKeyPair() {
  if (!zmq_has("curve")) return absl::UnimplementedError("libzmq was built without CURVE");
  char pub[kZ85KeyChars + 1];
  char sec[kZ85KeyChars + 1];
  if (zmq_curve_keypair(pub, sec) != 0) return absl::InternalError(ZmqError("zmq_curve_keypair"));
  return CurveKeyPair{pub, sec};
}

absl::StatusOr<std::string> CurvePublicKey(const std::string& secret_key) {
  if (!ValidZ85Key(secret_key)) {
    return absl::InvalidArgumentError("a CURVE secret key is 40 characters of Z85");
  }
  char pub[kZ85KeyChars + 1];
  if (zmq_curve_public(pub, secret_key.c_str()) != 0) {
    return absl::InternalError(ZmqError("zmq_curve_public"));
  }
  return std::string(pub);
}

class ZmqChannel::Impl {
 public:
  explicit Impl(ZmqChannelOptions options) : options_(std::move(options)) {
    if (!options_.log) {
      options_.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    }
    owner_.store(std::this_thread::get_id());
  }

  ~Impl() {
    FlushOutbox();  // what other threads queued goes out within the linger
    if (router_ != nullptr) zmq_close(router_);
    for (Dialed& d : dialed_) zmq_close(d.socket);
    if (ctx_ != nullptr) {
      zmq_ctx_shutdown(ctx_);  // ends the ZAP handler's wait
      if (zap_thread_.joinable()) zap_thread_.join();
      zmq_ctx_term(ctx_);
    }
  }

  absl::Status Init() {
    const ZmqChannelOptions& o = options_;
    if (o.name.empty() || o.name.size() > kMaxNameBytes || o.name[0] == '\0') {
      return absl::InvalidArgumentError(absl::StrCat(
          "a ZeroMQ endpoint name is 1 to ", kMaxNameBytes, " bytes, not starting with NUL"));
    }
    if (o.send_queue_messages <= 0 || o.receive_queue_messages <= 0 || o.max_message_bytes == 0) {
      return absl::InvalidArgumentError("ZeroMQ channel queue and message limits must be > 0");
    }
    for (const auto& [d, name, zero_ok] :
         {std::tuple<absl::Duration, const char*, bool>{o.heartbeat_interval, "heartbeat_interval",
                                                        false},
          {o.heartbeat_timeout, "heartbeat_timeout", false},
          {o.reconnect_interval, "reconnect_interval", false},
          {o.reconnect_interval_max, "reconnect_interval_max", false},
          {o.linger, "linger", true},
          {o.log_interval, "log_interval", true}}) {
      if (d < absl::ZeroDuration() || (d == absl::ZeroDuration() && !zero_ok) ||
          d > absl::Hours(24 * 20)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ZeroMQ channel option ", name, " is ", absl::FormatDuration(d), "; it must be ",
            zero_ok ? "at least 0" : "positive", " and at most 20 days"));
      }
    }
    if (o.curve) {
      if (!zmq_has("curve")) return absl::UnimplementedError("libzmq was built without CURVE");
      if (!ValidZ85Key(o.keys.public_key) || !ValidZ85Key(o.keys.secret_key)) {
        return absl::InvalidArgumentError("the channel's CURVE keys are not 40 characters of Z85");
      }
      absl::StatusOr<std::string> pub = CurvePublicKey(o.keys.secret_key);
      if (!pub.ok()) return pub.status();
      if (*pub != o.keys.public_key) {
        return absl::InvalidArgumentError("the channel's CURVE public key is not its secret key's");
      }
      for (const auto& c : o.allowed_clients) {
        if (!ValidZ85Key(c.public_key)) {
          return absl::InvalidArgumentError(
              absl::StrCat("allowed client key '", c.public_key, "' is not 40 characters of Z85"));
        }
        allowed_[c.public_key] = c.name;
      }
    }
    ctx_ = zmq_ctx_new();
    if (ctx_ == nullptr) return absl::InternalError(ZmqError("zmq_ctx_new"));
    if (o.curve && !o.listen.empty()) {
      // The handler must be bound before the first connection reaches the server socket.
      void* zap = zmq_socket(ctx_, ZMQ_REP);
      if (zap == nullptr || zmq_bind(zap, kZapEndpoint) != 0) {
        if (zap != nullptr) zmq_close(zap);
        return absl::InternalError(ZmqError("binding the ZAP handler"));
      }
      zap_thread_ = std::thread([this, zap] { ZapLoop(zap); });
    }
    if (!o.listen.empty()) {
      router_ = zmq_socket(ctx_, ZMQ_ROUTER);
      if (router_ == nullptr) return absl::InternalError(ZmqError("zmq_socket"));
      if (absl::Status s = Configure(router_, nullptr); !s.ok()) return s;
      if (absl::Status s = SetInt(router_, ZMQ_ROUTER_MANDATORY, 1, "ROUTER_MANDATORY"); !s.ok())
        return s;
      // Plain: a restarted peer takes its name over at once. CURVE: the first connection under
      // a name keeps it until it closes (a killed process's socket closes with it; a vanished
      // host's after heartbeat_timeout), so that an allowed key cannot take another peer's
      // name, and with it the messages sent to that name, from a live connection.
      if (absl::Status s = SetInt(router_, ZMQ_ROUTER_HANDOVER, o.curve ? 0 : 1, "ROUTER_HANDOVER");
          !s.ok())
        return s;
      if (o.curve) {
        if (absl::Status s = SetInt(router_, ZMQ_CURVE_SERVER, 1, "CURVE_SERVER"); !s.ok())
          return s;
        if (absl::Status s =
                SetBytes(router_, ZMQ_CURVE_SECRETKEY, o.keys.secret_key, "CURVE_SECRETKEY");
            !s.ok())
          return s;
        if (absl::Status s = SetBytes(router_, ZMQ_ZAP_DOMAIN, "gryph", "ZAP_DOMAIN"); !s.ok())
          return s;
      }
      if (zmq_bind(router_, o.listen.c_str()) != 0) {
        const int err = zmq_errno();
        std::string msg = ZmqError(absl::StrCat("binding ", o.listen));
        if (err == EADDRINUSE) return absl::UnavailableError(msg);
        return absl::InvalidArgumentError(msg);
      }
    }
    for (const ZmqChannelOptions::Peer& p : o.peers) {
      if (absl::Status s = Dial(p); !s.ok()) return s;
    }
    RefreshFds();
    return absl::OkStatus();
  }

  absl::Status Dial(const ZmqChannelOptions::Peer& p) {
    if (p.name.empty() || p.name.size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer name '", p.name, "' is not 1 to ", kMaxNameBytes, " bytes"));
    }
    if (by_name_.contains(p.name)) {
      return absl::AlreadyExistsError(absl::StrCat("peer '", p.name, "' is dialed already"));
    }
    if (options_.curve && !ValidZ85Key(p.server_key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer '", p.name, "' needs a CURVE server key (40 characters of Z85)"));
    }
    void* s = zmq_socket(ctx_, ZMQ_DEALER);
    if (s == nullptr) return absl::InternalError(ZmqError("zmq_socket"));
    absl::Status st = Configure(s, &p);
    if (st.ok() && zmq_connect(s, p.endpoint.c_str()) != 0) {
      st = absl::InvalidArgumentError(ZmqError(absl::StrCat("connecting to ", p.endpoint)));
    }
    if (!st.ok()) {
      zmq_close(s);
      return st;
    }
    by_name_[p.name] = dialed_.size();
    dialed_.push_back(Dialed{p.name, s, true});
    return absl::OkStatus();
  }

  // The options every socket shares; `peer` for a dialing one.
  absl::Status Configure(void* s, const ZmqChannelOptions::Peer* peer) {
    const ZmqChannelOptions& o = options_;
    const int64_t max = static_cast<int64_t>(o.max_message_bytes + kChecksumBytes);
    if (zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof(max)) != 0) {
      return absl::InternalError(ZmqError("setting MAXMSGSIZE"));
    }
    for (const auto& [option, value, name] :
         {std::tuple<int, int, const char*>{ZMQ_SNDHWM, o.send_queue_messages, "SNDHWM"},
          {ZMQ_RCVHWM, o.receive_queue_messages, "RCVHWM"},
          {ZMQ_LINGER, o.linger == absl::ZeroDuration() ? 0 : Millis(o.linger), "LINGER"},
          {ZMQ_HEARTBEAT_IVL, Millis(o.heartbeat_interval), "HEARTBEAT_IVL"},
          {ZMQ_HEARTBEAT_TIMEOUT, Millis(o.heartbeat_timeout), "HEARTBEAT_TIMEOUT"},
          {ZMQ_RECONNECT_IVL, Millis(o.reconnect_interval), "RECONNECT_IVL"},
          {ZMQ_RECONNECT_IVL_MAX, Millis(o.reconnect_interval_max), "RECONNECT_IVL_MAX"}}) {
      if (absl::Status st = SetInt(s, option, value, name); !st.ok()) return st;
    }
    if (absl::Status st = SetBytes(s, ZMQ_ROUTING_ID, o.name, "ROUTING_ID"); !st.ok()) return st;
    if (peer != nullptr && o.curve) {
      for (const auto& [option, value, name] :
           {std::tuple<int, const std::string*, const char*>{ZMQ_CURVE_SERVERKEY, &peer->server_key,
                                                             "CURVE_SERVERKEY"},
            {ZMQ_CURVE_PUBLICKEY, &o.keys.public_key, "CURVE_PUBLICKEY"},
            {ZMQ_CURVE_SECRETKEY, &o.keys.secret_key, "CURVE_SECRETKEY"}}) {
        if (absl::Status st = SetBytes(s, option, *value, name); !st.ok()) return st;
      }
    }
    return absl::OkStatus();
  }

  void RefreshFds() {
    fds_.clear();
    auto add = [this](void* s) {
      int fd = -1;
      size_t size = sizeof(fd);
      // One per socket, in order (NoteSignalled); poll skips a negative one.
      fds_.push_back(zmq_getsockopt(s, ZMQ_FD, &fd, &size) == 0 ? fd : -1);
    };
    if (router_ != nullptr) add(router_);
    for (Dialed& d : dialed_) add(d.socket);
  }

  // The ZAP handler (RFC 27): admits a CURVE client whose key is allowed, naming it the user id
  // (the name it must speak as, or empty).
  void ZapLoop(void* zap) {
    std::vector<zmq_msg_t> storage;
    for (;;) {
      Frames request(&storage);
      if (!request.Receive(zap, 0)) {
        if (zmq_errno() == ETERM) break;
        continue;  // EINTR; nothing received, so the socket still waits for a request
      }
      // A REP socket must answer every request, or it takes no other: a malformed one (only
      // libzmq writes here) is refused.
      const std::string request_id(request.parts.size() > 1 ? request.view(1) : "");
      const absl::string_view mechanism = request.parts.size() > 5 ? request.view(5) : "";
      std::string status = "400";
      std::string text = "key not allowed";
      std::string user;
      if (mechanism == "CURVE" && request.parts.size() >= 7 &&
          request.view(6).size() == kBinaryKeyBytes) {
        char z85[kZ85KeyChars + 1];
        zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(request.view(6).data()),
                       kBinaryKeyBytes);
        auto it = allowed_.find(absl::string_view(z85, kZ85KeyChars));
        if (it != allowed_.end()) {
          status = "200";
          text = "OK";
          user = it->second;
        } else {
          denied_.fetch_add(1);
        }
      }
      const std::string reply[] = {"1.0", request_id, status, text, user, ""};
      for (size_t i = 0; i < 6; ++i) {
        zmq_send(zap, reply[i].data(), reply[i].size(), i + 1 < 6 ? ZMQ_SNDMORE : 0);
      }
    }
    zmq_close(zap);
  }

  bool OnOwnerThread() const { return owner_.load() == std::this_thread::get_id(); }

  // A problem with `peer`, reported at most once per log_interval per peer and kind.
  void Report(absl::string_view peer, absl::string_view kind, absl::string_view detail) {
    const absl::Time now = absl::Now();
    if (last_logged_.size() > 10'000) last_logged_.clear();  // hostile names do not grow it
    absl::Time& last = last_logged_[absl::StrCat(kind, "\x1f", peer)];
    if (last != absl::Time() && now - last < options_.log_interval) return;
    last = now;
    options_.log(absl::StrCat("gryph zmq channel '", options_.name, "': ", kind, " from '", peer,
                              "': ", detail, " (dropped; reported once per ",
                              absl::FormatDuration(options_.log_interval), ")"));
  }

  // Sends `parts` to `peer` as one multipart message, on the owner thread.
  absl::Status SendNow(absl::string_view peer, absl::Span<const std::string> parts) {
    void* socket;
    bool routed;
    // A send may consume the signal of a message that arrived meanwhile (NoteSignalled).
    if (auto it = by_name_.find(peer); it != by_name_.end()) {
      socket = dialed_[it->second].socket;
      dialed_[it->second].pending = true;
      routed = false;
    } else if (router_ != nullptr) {
      socket = router_;
      router_pending_ = true;
      routed = true;
    } else {
      unreachable_.fetch_add(parts.size());
      return absl::UnavailableError(absl::StrCat("no peer named '", peer, "' is dialed"));
    }
    auto failed = [&](size_t n) {
      if (zmq_errno() == EAGAIN) {
        dropped_full_.fetch_add(n);
        return absl::UnavailableError(absl::StrCat("the queue to '", peer, "' is full"));
      }
      unreachable_.fetch_add(n);
      return absl::UnavailableError(
          absl::StrCat("peer '", peer, "' is not connected: ", zmq_strerror(zmq_errno())));
    };
    if (routed && zmq_send(socket, peer.data(), peer.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
      return failed(parts.size());
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      const int flags = ZMQ_DONTWAIT | (i + 1 < parts.size() ? ZMQ_SNDMORE : 0);
      if (zmq_send(socket, parts[i].data(), parts[i].size(), flags) < 0) {
        return failed(parts.size() - i);  // ZeroMQ checks room at the first frame only
      }
    }
    sent_.fetch_add(parts.size());
    return absl::OkStatus();
  }

  // A frame: the encoded message, then the CRC-32C of its bytes (4 bytes, big-endian).
  bool Encode(const Message& m, std::string* out) {
    out->clear();
    EncodeMessage(m, out);
    if (out->size() > options_.max_message_bytes) {
      not_encodable_.fetch_add(1);
      return false;
    }
    internal::PutFixed32BE(out, internal::Crc32c(*out));
    return true;
  }

  absl::Status Send(absl::string_view peer, Message message) {
    const bool owner = OnOwnerThread();
    std::string bytes;
    if (!Encode(message, &bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("a ", MessageKindName(message),
                                                     " message is over max_message_bytes encoded"));
    }
    if (owner) {
      FlushOutbox();
      return SendNow(peer, absl::MakeConstSpan(&bytes, 1));
    }
    std::vector<std::string> parts;
    parts.push_back(std::move(bytes));
    Queue(peer, std::move(parts));
    return absl::OkStatus();
  }

  size_t SendMany(absl::Span<Outgoing> messages) {
    size_t accepted = 0;
    const bool owner = OnOwnerThread();
    if (owner) FlushOutbox();
    for (size_t i = 0; i < messages.size();) {
      // A run of messages for one peer: one multipart message.
      // On the owner thread the encoding buffers are reused (they keep their capacity).
      size_t j = i;
      std::vector<std::string> fresh;
      std::vector<std::string>& parts = owner ? encoded_ : fresh;
      size_t n = 0;
      for (; j < messages.size() && messages[j].peer == messages[i].peer; ++j) {
        if (parts.size() == n) parts.emplace_back();
        messages[j].accepted = Encode(messages[j].message, &parts[n]);
        n += messages[j].accepted ? 1 : 0;
      }
      bool ok = n > 0;
      if (ok) {
        if (owner) {
          ok = SendNow(messages[i].peer, absl::MakeConstSpan(parts.data(), n)).ok();
        } else {
          parts.resize(n);
          Queue(messages[i].peer, std::move(parts));
        }
      }
      for (size_t k = i; k < j; ++k) {
        messages[k].accepted = messages[k].accepted && ok;
        accepted += messages[k].accepted ? 1 : 0;
      }
      i = j;
    }
    return accepted;
  }

  void Queue(absl::string_view peer, std::vector<std::string> parts) {
    bool first;
    {
      absl::MutexLock lock(&mu_);
      first = outbox_.empty();
      outbox_.push_back({std::string(peer), std::move(parts)});
      queued_.store(true);
    }
    if (first) {
      absl::MutexLock lock(&wake_mu_);
      if (wake_) wake_();
    }
  }

  void FlushOutbox() {
    if (!queued_.load()) return;
    std::vector<Queued> out;
    {
      absl::MutexLock lock(&mu_);
      out.swap(outbox_);
      queued_.store(false);
    }
    for (Queued& q : out) (void)SendNow(q.peer, q.parts);
  }

  // Receives one message from `socket` and delivers its frames; false when none was waiting.
  // Every frame, delivered or dropped, counts toward the pass's limit in *received.
  bool ReceiveOne(void* socket, const std::string* dialed_name, const Receiver& receiver,
                  size_t* received) {
    Frames frames(&received_frames_);
    if (!frames.Receive(socket, ZMQ_DONTWAIT)) return false;
    size_t first = 0;
    std::string from;
    if (dialed_name != nullptr) {
      from = *dialed_name;
    } else {
      from = std::string(frames.view(0));
      first = 1;
      if (by_name_.contains(from)) {
        // A peer this node dials speaks on its own socket: this one claims its name.
        impersonations_.fetch_add(frames.parts.size() - 1);
        *received += frames.parts.size();
        Report(from, "impersonation", "a dialed peer's name on the listening socket");
        return true;
      }
      if (options_.curve && frames.parts.size() > 1) {
        // The name the key is bound to (the ZAP handler's user id), if any.
        const char* user = zmq_msg_gets(&frames.parts[1], "User-Id");
        if (user != nullptr && *user != '\0' && from != user) {
          impersonations_.fetch_add(frames.parts.size() - 1);
          *received += frames.parts.size();
          Report(from, "impersonation", absl::StrCat("its key belongs to '", user, "'"));
          return true;
        }
      }
    }
    *received += frames.parts.size() - first;
    for (size_t i = first; i < frames.parts.size(); ++i) {
      const absl::string_view frame = frames.view(i);
      if (frame.size() > options_.max_message_bytes + kChecksumBytes) {
        oversized_.fetch_add(1);
        Report(from, "oversized frame", absl::StrCat(frame.size(), " bytes"));
        continue;
      }
      const absl::string_view bytes = frame.substr(0, frame.size() - kChecksumBytes);
      if (frame.size() < kChecksumBytes ||
          internal::Crc32c(bytes) != internal::DecodeFixed32BE(frame.data() + bytes.size())) {
        corrupted_.fetch_add(1);
        Report(from, "corrupted frame",
               absl::StrCat(frame.size(), " bytes whose checksum does not match"));
        continue;
      }
      absl::StatusOr<Message> m = DecodeMessage(bytes);
      if (!m.ok()) {
        malformed_.fetch_add(1);
        Report(from, "malformed frame", m.status().message());
        continue;
      }
      ++delivered_in_pass_;
      if (receiver) receiver(from, *std::move(m));
    }
    return true;
  }

  bool Dispatch(size_t max) {
    owner_.store(std::this_thread::get_id());
    FlushOutbox();
    size_t delivered = 0;
    if (max > 0) {
      std::shared_ptr<const Receiver> receiver = receiver_;  // a receiver may replace it
      static const Receiver kNone;
      const Receiver& r = receiver ? *receiver : kNone;
      // Round robin over the sockets that may hold messages, one message each, so that no peer
      // starves the others.
      NoteSignalled();
      auto receive = [&](void* socket, const std::string* name, bool* pending) {
        if (!*pending) return false;
        if (ReceiveOne(socket, name, r, &delivered)) return true;
        *pending = zmq_errno() == EINTR;  // else drained: its descriptor signals the next one
        return false;
      };
      bool any = true;
      while (any && delivered < max) {
        any = false;
        if (router_ != nullptr) any |= receive(router_, nullptr, &router_pending_);
        for (size_t i = 0; i < dialed_.size() && delivered < max; ++i) {
          any |= receive(dialed_[i].socket, &dialed_[i].name, &dialed_[i].pending);
        }
      }
      FlushOutbox();  // what the receivers' sends queued from elsewhere meanwhile
      received_.fetch_add(delivered_in_pass_);
      delivered_in_pass_ = 0;
    }
    return Ready();
  }

  bool Ready() {
    if (queued_.load()) return true;
    auto any_pending = [this] {
      if (router_ != nullptr && router_pending_) return true;
      for (const Dialed& d : dialed_) {
        if (d.pending) return true;
      }
      return false;
    };
    if (any_pending()) return true;  // no system call while there is known work
    NoteSignalled();
    return any_pending();
  }

  // Which sockets to read. A socket's ZMQ_FD becomes readable when commands wait in its mailbox
  // (among them the news of a message arriving into an empty pipe); any call into the socket
  // that processes them (a receive, a send, a ZMQ_EVENTS query) consumes that signal, and each
  // such call on a socket with nothing to read is itself a system call. So a socket is marked
  // pending when its descriptor signals (one poll for all of them here), when a send on it may
  // have consumed a signal, and from its creation; it stays pending until a receive finds it
  // empty. A pass costs one system call for the idle sockets, not two or three each.
  void NoteSignalled() {
    poll_fds_.resize(fds_.size());
    for (size_t i = 0; i < fds_.size(); ++i) poll_fds_[i] = {fds_[i], POLLIN, 0};
    if (poll(poll_fds_.data(), poll_fds_.size(), 0) <= 0) return;
    size_t i = 0;
    if (router_ != nullptr) {
      if ((poll_fds_[i].revents & POLLIN) != 0) router_pending_ = true;
      ++i;
    }
    for (Dialed& d : dialed_) {
      if (i < poll_fds_.size() && (poll_fds_[i].revents & POLLIN) != 0) d.pending = true;
      ++i;
    }
  }

  std::string BoundEndpoint() const {
    if (router_ == nullptr) return "";
    char buf[1024];
    size_t size = sizeof(buf);
    if (zmq_getsockopt(router_, ZMQ_LAST_ENDPOINT, buf, &size) != 0) return "";
    return std::string(buf, size > 0 ? size - 1 : 0);
  }

  Stats GetStats() const {
    Stats s;
    s.sent = sent_.load();
    s.received = received_.load();
    s.dropped_full = dropped_full_.load();
    s.unreachable = unreachable_.load();
    s.malformed = malformed_.load();
    s.corrupted = corrupted_.load();
    s.oversized = oversized_.load();
    s.impersonations = impersonations_.load();
    s.not_encodable = not_encodable_.load();
    s.denied = denied_.load();
    return s;
  }

  struct Dialed {
    std::string name;
    void* socket;
    bool pending = true;  // see NoteSignalled
  };
  struct Queued {
    std::string peer;
    std::vector<std::string> parts;
  };

  ZmqChannelOptions options_;
  void* ctx_ = nullptr;
  void* router_ = nullptr;
  bool router_pending_ = true;  // see NoteSignalled
  std::vector<Dialed> dialed_;
  absl::flat_hash_map<std::string, size_t> by_name_;
  std::vector<int> fds_;          // the router's first, if any, then the dialed sockets' in order
  std::vector<pollfd> poll_fds_;  // NoteSignalled's, reused
  std::vector<zmq_msg_t> received_frames_;  // Dispatch's, reused
  uint64_t delivered_in_pass_ = 0;          // counted into received_ once per Dispatch
  std::vector<std::string> encoded_;        // SendMany's on the owner thread, reused
  // Allowed client keys (Z85) and the name each is bound to; constant once the ZAP thread runs.
  absl::flat_hash_map<std::string, std::string> allowed_;
  std::thread zap_thread_;
  std::atomic<uint64_t> denied_{0};
  std::shared_ptr<const Receiver> receiver_;
  std::atomic<std::thread::id> owner_;
  absl::flat_hash_map<std::string, absl::Time> last_logged_;

  absl::Mutex wake_mu_;
  std::function<void()> wake_ ABSL_GUARDED_BY(wake_mu_);
  absl::Mutex mu_;
  std::vector<Queued> outbox_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> queued_{false};  // outbox_ is not empty

  std::atomic<uint64_t> sent_{0}, received_{0}, dropped_full_{0}, unreachable_{0}, malformed_{0},
      corrupted_{0}, oversized_{0}, impersonations_{0}, not_encodable_{0};
};

ZmqChannel::ZmqChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ZmqChannel::~ZmqChannel() = default;

absl::StatusOr<std::unique_ptr<ZmqChannel>> ZmqChannel::Create(ZmqChannelOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<ZmqChannel>(new ZmqChannel(std::move(impl)));
}

absl::Status ZmqChannel::AddPeer(ZmqChannelOptions::Peer peer) {
  absl::Status s = impl_->Dial(peer);
  if (s.ok()) impl_->RefreshFds();
  return s;
}

const std::string& ZmqChannel::name() const { return impl_->options_.name; }
absl::Status ZmqChannel::Send(absl::string_view peer, Message message) {
  return impl_->Send(peer, std::move(message));
}
size_t ZmqChannel::SendMany(absl::Span<Outgoing> messages) { return impl_->SendMany(messages); }
void ZmqChannel::SetReceiver(Receiver receiver) {
  impl_->receiver_ = receiver ? std::make_shared<const Receiver>(std::move(receiver)) : nullptr;
}
void ZmqChannel::Attach(std::function<void()> wake) {
  if (wake) impl_->owner_.store(std::this_thread::get_id());
  absl::MutexLock lock(&impl_->wake_mu_);
  impl_->wake_ = std::move(wake);
}
std::vector<int> ZmqChannel::WaitFds() const { return impl_->fds_; }
bool ZmqChannel::Dispatch(size_t max) { return impl_->Dispatch(max); }
bool ZmqChannel::Ready() { return impl_->Ready(); }
std::string ZmqChannel::bound_endpoint() const { return impl_->BoundEndpoint(); }
ZmqChannel::Stats ZmqChannel::stats() const { return impl_->GetStats(); }

}  // namespace gryph
