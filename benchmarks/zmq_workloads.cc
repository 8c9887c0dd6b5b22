// The ZeroMQ channel between two processes (see gryph_bench.cc).
//
// zmq_channel: the benchmark forks; the child listens, the parent dials it over TCP loopback
// and sends for the measuring time, then an end marker; the child counts what it received
// between the first message and the marker, and reports the rate through a pipe. Two runs in
// the same pair of processes' lifetimes, back to back, alternating three times (medians):
//   - gryph: Delivery messages carrying a 250-byte event, sent with ZmqChannel::SendMany in
//     batches of 64 (as an SHB sends a round), received, decoded and handed to a receiver;
//   - raw: frames of the same size (the encoded Delivery message) sent one zmq_send each from a
//     DEALER to a ROUTER with blocking sends, received with zmq_msg_recv: the floor.

#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/workload.h"
#include "gryph/zmq_channel.h"

namespace gryph::bench {
namespace {

using Clock = std::chrono::steady_clock;

Message Delivery(Tick t) {
  Event e;
  e.SetInt64("pubend", 1).SetPayload(std::string(250, 'x'));
  return DeliveryMessage{"sub-1", PubendId{1}, DeliveryKind::kEvent, t, MakeEventRef(std::move(e)),
                         t - 1};
}

bool IsEnd(const Message& m) {
  const auto* d = std::get_if<DisconnectMessage>(&m);
  return d != nullptr && d->subscription == "end";
}

// The receiving side, in the child: returns messages per second between the first and the end.
double ReceiveGryph(int ready_fd) {
  ZmqChannelOptions o;
  o.name = "receiver";
  o.listen = "tcp://127.0.0.1:*";
  auto channel = ZmqChannel::Create(o);
  if (!channel.ok()) return -1;
  const std::string endpoint = (*channel)->bound_endpoint();
  if (write(ready_fd, endpoint.data(), endpoint.size()) < 0) return -1;
  uint64_t count = 0;
  bool done = false;
  Clock::time_point first;
  Clock::time_point last;
  (*channel)->SetReceiver([&](absl::string_view, Message m) {
    if (IsEnd(m)) {
      done = true;
      return;
    }
    if (count++ == 0) first = Clock::now();
    last = Clock::now();
  });
  while (!done) {
    if (!(*channel)->Dispatch(4096)) {
      // Sleep on the descriptors as the runtime would.
      std::vector<zmq_pollitem_t> items;
      for (int fd : (*channel)->WaitFds()) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
      if (!(*channel)->Ready()) zmq_poll(items.data(), static_cast<int>(items.size()), 100);
    }
  }
  return static_cast<double>(count - 1) / std::chrono::duration<double>(last - first).count();
}

double ReceiveRaw(int ready_fd) {
  void* ctx = zmq_ctx_new();
  void* router = zmq_socket(ctx, ZMQ_ROUTER);
  zmq_bind(router, "tcp://127.0.0.1:*");
  char buf[256];
  size_t size = sizeof(buf);
  zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, buf, &size);
  if (write(ready_fd, buf, size - 1) < 0) return -1;
  uint64_t count = 0;
  Clock::time_point first;
  Clock::time_point last;
  zmq_msg_t id;
  zmq_msg_t body;
  for (;;) {
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    zmq_msg_recv(&id, router, 0);
    zmq_msg_recv(&body, router, 0);
    const bool end = zmq_msg_size(&body) == 0;
    zmq_msg_close(&id);
    zmq_msg_close(&body);
    if (end) break;
    if (count++ == 0) first = Clock::now();
    last = Clock::now();
  }
  zmq_close(router);
  zmq_ctx_term(ctx);
  return static_cast<double>(count - 1) / std::chrono::duration<double>(last - first).count();
}

void SendGryph(const std::string& endpoint, double seconds, const std::function<void()>& wait) {
  ZmqChannelOptions o;
  o.name = "sender";
  o.peers = {{"receiver", endpoint, ""}};
  auto channel = *ZmqChannel::Create(o);
  constexpr size_t kBatch = 64;
  std::vector<Message> messages;
  for (Tick t = 1; t <= kBatch; ++t) messages.push_back(Delivery(1000 + t));
  std::vector<Channel::Outgoing> batch(kBatch);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    for (size_t i = 0; i < kBatch; ++i) batch[i] = {"receiver", messages[i]};
    if (channel->SendMany(absl::MakeSpan(batch)) == kBatch) continue;
    // The queue was full: wait for room, as a sender under flow control would.
    for (size_t i = 0; i < kBatch; ++i) {
      while (!batch[i].accepted && !channel->Send("receiver", messages[i]).ok()) usleep(50);
    }
  }
  while (!channel->Send("receiver", DisconnectMessage{"end"}).ok()) usleep(50);
  wait();  // the socket stays open until the backlog and the marker are through
}

void SendRaw(const std::string& endpoint, double seconds, size_t bytes,
             const std::function<void()>& wait) {
  void* ctx = zmq_ctx_new();
  void* dealer = zmq_socket(ctx, ZMQ_DEALER);
  zmq_connect(dealer, endpoint.c_str());
  const std::string frame(bytes, 'x');
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    for (int i = 0; i < 64; ++i) zmq_send(dealer, frame.data(), frame.size(), 0);
  }
  zmq_send(dealer, "", 0, 0);
  wait();
  zmq_close(dealer);
  zmq_ctx_term(ctx);
}

// One run in a forked receiver; returns its rate.
double RunPair(bool raw, double seconds) {
  int ready[2];
  int result[2];
  if (pipe(ready) != 0 || pipe(result) != 0) return -1;
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    close(result[0]);
    const double rate = raw ? ReceiveRaw(ready[1]) : ReceiveGryph(ready[1]);
    if (write(result[1], &rate, sizeof(rate)) < 0) _exit(1);
    _exit(0);
  }
  close(ready[1]);
  close(result[1]);
  char buf[256];
  const ssize_t n = read(ready[0], buf, sizeof(buf));
  if (n <= 0) return -1;
  const std::string endpoint(buf, static_cast<size_t>(n));
  double rate = -1;
  auto wait = [&] {
    if (read(result[0], &rate, sizeof(rate)) != sizeof(rate)) rate = -1;
  };
  if (raw) {
    SendRaw(endpoint, seconds, EncodeMessage(Delivery(1001)).size(), wait);
  } else {
    SendGryph(endpoint, seconds, wait);
  }
  waitpid(child, nullptr, 0);
  close(ready[0]);
  close(result[0]);
  return rate;
}

}  // namespace

GRYPH_WORKLOAD(zmq_channel) {
  std::vector<double> gryph;
  std::vector<double> raw;
  for (int round = 0; round < 3; ++round) {
    gryph.push_back(RunPair(false, ctx.seconds));
    raw.push_back(RunPair(true, ctx.seconds));
  }
  std::sort(gryph.begin(), gryph.end());
  std::sort(raw.begin(), raw.end());
  Report("zmq_channel")
      .Add("message_bytes", static_cast<int64_t>(EncodeMessage(Delivery(1001)).size()))
      .Add("msgs_per_s", gryph[1])
      .Add("zmq_raw_msgs_per_s", raw[1])
      .Add("ratio", gryph[1] / raw[1])
      .Print();
}

}  // namespace gryph::bench
