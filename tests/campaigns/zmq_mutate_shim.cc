// libgryph_zmq_mutate.so: an LD_PRELOAD library that mutates a share of the ZeroMQ frames a
// process sends (#17, campaign 5, "live"): what a faulty link, a buggy peer or a middlebox
// would hand the receiving node.
//
//   LD_PRELOAD=libgryph_zmq_mutate.so GRYPH_MUTATE_ONE_IN=1000 gryph-broker ...
//
// It interposes zmq_send (what ZmqChannel sends each frame with) on ROUTER and DEALER sockets,
// leaving alone the routing-id part that starts a ROUTER's message and every other socket (the
// ZAP handler's). One frame in GRYPH_MUTATE_ONE_IN (default 1000) is, with equal chances:
//   - flipped: one to three random bits;
//   - truncated: cut to a random shorter length (possibly empty);
//   - extended: one to sixteen random bytes appended;
//   - overwritten: four bytes at a random place set to 0xFF (absurd lengths and varints);
//   - replayed: sent as it is, preceded by a frame this process sent earlier (to any peer).
// The mutation happens before ZeroMQ frames and encrypts the message, so under CURVE too the
// receiver's channel gets the mutated bytes. GRYPH_MUTATE_SEED seeds the choices (default: the
// process id); with GRYPH_MUTATE_LOG=FILE each mutation appends a line naming its kind.

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <zmq.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using SendFn = int (*)(void*, const void*, size_t, int);

struct State {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  SendFn real = nullptr;
  uint64_t one_in = 1000;
  std::mt19937_64 rng;
  std::unordered_map<void*, bool> in_message;  // socket -> the last part sent had SNDMORE
  std::vector<std::string> sent;               // earlier frames, for replays
  size_t next_slot = 0;
  const char* log = nullptr;
};

State& state() {
  static State* s = [] {
    auto* st = new State();
    st->real = reinterpret_cast<SendFn>(dlsym(RTLD_NEXT, "zmq_send"));
    if (const char* n = std::getenv("GRYPH_MUTATE_ONE_IN"); n != nullptr && std::atoll(n) > 0) {
      st->one_in = static_cast<uint64_t>(std::atoll(n));
    }
    const char* seed = std::getenv("GRYPH_MUTATE_SEED");
    st->rng.seed(seed != nullptr ? std::strtoull(seed, nullptr, 10)
                                 : static_cast<uint64_t>(getpid()));
    st->log = std::getenv("GRYPH_MUTATE_LOG");
    return st;
  }();
  return *s;
}

void Log(const State& st, const char* kind) {
  if (st.log == nullptr) return;
  const int fd = open(st.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  const std::string line = std::string(kind) + "\n";
  (void)!write(fd, line.data(), line.size());
  close(fd);
}

}  // namespace

extern "C" int zmq_send(void* socket, const void* buf, size_t len, int flags) {
  State& st = state();
  int type = 0;
  size_t type_size = sizeof(type);
  if (zmq_getsockopt(socket, ZMQ_TYPE, &type, &type_size) != 0 ||
      (type != ZMQ_ROUTER && type != ZMQ_DEALER)) {
    return st.real(socket, buf, len, flags);
  }
  pthread_mutex_lock(&st.mu);
  // References to the map's elements stay valid as it grows. Updated once a part has gone out.
  bool& more = st.in_message[socket];
  const bool routing_id = type == ZMQ_ROUTER && !more;
  auto sent = [&more, flags](int rc) {
    if (rc >= 0) more = (flags & ZMQ_SNDMORE) != 0;
    return rc;
  };
  if (routing_id || st.rng() % st.one_in != 0) {
    if (!routing_id && st.sent.size() < 64) {
      st.sent.emplace_back(static_cast<const char*>(buf), len);
    } else if (!routing_id && st.rng() % 16 == 0) {
      st.sent[st.next_slot++ % st.sent.size()].assign(static_cast<const char*>(buf), len);
    }
    pthread_mutex_unlock(&st.mu);
    return sent(st.real(socket, buf, len, flags));
  }
  std::string frame(static_cast<const char*>(buf), len);
  std::string replay;
  const char* kind = "";
  switch (st.rng() % 5) {
    case 0: {
      kind = "flip";
      if (frame.empty()) break;
      const int bits = 1 + static_cast<int>(st.rng() % 3);
      for (int i = 0; i < bits; ++i) {
        const uint64_t bit = st.rng() % (frame.size() * 8);
        frame[bit / 8] = static_cast<char>(frame[bit / 8] ^ (1 << (bit % 8)));
      }
      break;
    }
    case 1:
      kind = "truncate";
      frame.resize(frame.empty() ? 0 : st.rng() % frame.size());
      break;
    case 2: {
      kind = "extend";
      const int n = 1 + static_cast<int>(st.rng() % 16);
      for (int i = 0; i < n; ++i) frame.push_back(static_cast<char>(st.rng()));
      break;
    }
    case 3:
      kind = "overwrite";
      if (frame.size() >= 4) {
        std::memset(frame.data() + st.rng() % (frame.size() - 3), 0xFF, 4);
      }
      break;
    default:
      kind = "replay";
      if (!st.sent.empty()) replay = st.sent[st.rng() % st.sent.size()];
      break;
  }
  Log(st, kind);
  pthread_mutex_unlock(&st.mu);
  if (!replay.empty()) {
    if (st.real(socket, replay.data(), replay.size(), flags | ZMQ_SNDMORE) < 0) return -1;
  }
  const int rc = sent(st.real(socket, frame.data(), frame.size(), flags));
  // The caller's length: it checks what it sent, not what the link made of it.
  return rc < 0 ? rc : static_cast<int>(len);
}
