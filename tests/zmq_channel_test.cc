#include "gryph/zmq_channel.h"

#include <poll.h>
#include <zmq.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "lib/util/coding.h"
#include "lib/util/crc32c.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP{1};

struct Received {
  std::string from;
  Message message;
};

// A channel whose received messages are kept, and whose log lines too.
struct Endpoint {
  explicit Endpoint(ZmqChannelOptions o) {
    o.log = [this](const std::string& line) { log.push_back(line); };
    auto c = ZmqChannel::Create(std::move(o));
    REQUIRE_OK(c);
    channel = *std::move(c);
    channel->SetReceiver([this](absl::string_view from, Message m) {
      received.push_back({std::string(from), std::move(m)});
    });
  }
  std::unique_ptr<ZmqChannel> channel;
  std::vector<Received> received;
  std::vector<std::string> log;
};

// Drives the endpoints (this thread owns them) until `done` or `timeout`; returns `done()`.
bool PumpUntil(std::vector<Endpoint*> endpoints, const std::function<bool()>& done,
               absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time end = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > end) return false;
    bool more = false;
    for (Endpoint* e : endpoints) more |= e->channel->Dispatch(1000);
    if (!more) absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// Drives them for `d` (for checking that nothing arrives).
void PumpFor(std::vector<Endpoint*> endpoints, absl::Duration d) {
  (void)PumpUntil(
      endpoints, [] { return false; }, d);
}

ZmqChannelOptions Listening(const std::string& name) {
  ZmqChannelOptions o;
  o.name = name;
  o.listen = "tcp://127.0.0.1:*";
  return o;
}

ZmqChannelOptions Dialing(const std::string& name, const std::string& peer,
                          const std::string& endpoint, const std::string& server_key = "") {
  ZmqChannelOptions o;
  o.name = name;
  o.peers = {{peer, endpoint, server_key}};
  o.reconnect_interval = absl::Milliseconds(20);
  o.reconnect_interval_max = absl::Milliseconds(100);
  return o;
}

Message Nack(Tick first, Tick last) { return CuriosityMessage{kP, {{first, last}}}; }

// What ZmqChannel puts in a frame: the encoded message, then its CRC-32C, big-endian.
std::string Frame(const Message& m) {
  std::string frame = EncodeMessage(m);
  internal::PutFixed32BE(&frame, internal::Crc32c(frame));
  return frame;
}

TEST_CASE("zmq channel: messages flow both ways between a dialer and a listener", "[zmq]") {
  Endpoint phb(Listening("phb"));
  Endpoint shb(Dialing("shb", "phb", phb.channel->bound_endpoint()));
  // The dialer queues while it connects: the first message is not lost.
  REQUIRE_OK(shb.channel->Send("phb", Nack(1, 10)));
  REQUIRE(PumpUntil({&phb, &shb}, [&] { return phb.received.size() == 1; }));
  CHECK(phb.received[0].from == "shb");
  CHECK(phb.received[0].message == Nack(1, 10));
  // The listener answers by the name the dialer announced.
  REQUIRE_OK(phb.channel->Send("shb", ReleaseMessage{{{kP, 3, 5}}}));
  REQUIRE(PumpUntil({&phb, &shb}, [&] { return shb.received.size() == 1; }));
  CHECK(shb.received[0].from == "phb");
  CHECK(shb.received[0].message == Message(ReleaseMessage{{{kP, 3, 5}}}));
  CHECK(phb.channel->stats().received == 1);
  CHECK(shb.channel->stats().sent == 1);
}

TEST_CASE("zmq channel: SendMany sends a batch for one peer as one message, in order", "[zmq]") {
  Endpoint phb(Listening("phb"));
  Endpoint shb(Dialing("shb", "phb", phb.channel->bound_endpoint()));
  std::vector<Channel::Outgoing> batch;
  for (Tick t = 1; t <= 200; ++t) batch.push_back({"phb", Nack(t, t)});
  CHECK(shb.channel->SendMany(absl::MakeSpan(batch)) == 200);
  for (const auto& o : batch) CHECK(o.accepted);
  REQUIRE(PumpUntil({&phb, &shb}, [&] { return phb.received.size() == 200; }));
  for (Tick t = 1; t <= 200; ++t) CHECK(phb.received[t - 1].message == Nack(t, t));
}

// Drives `endpoints` as a runtime does (runtime.cc): Dispatch each, then sleep on their
// descriptors while none is Ready, for at most `wait`. Returns `done()` once it holds, or false
// after `timeout`.
bool RunLikeRuntime(std::vector<Endpoint*> endpoints, const std::function<bool()>& done,
                    absl::Duration timeout, absl::Duration wait = absl::Seconds(1)) {
  const absl::Time end = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > end) return false;
    bool ready = false;
    for (Endpoint* e : endpoints) ready |= e->channel->Dispatch(1000);
    for (Endpoint* e : endpoints) ready |= e->channel->Ready();
    if (ready) continue;
    std::vector<pollfd> fds;
    for (Endpoint* e : endpoints) {
      for (int fd : e->channel->WaitFds()) fds.push_back({fd, POLLIN, 0});
    }
    (void)poll(fds.data(), fds.size(), static_cast<int>(absl::ToInt64Milliseconds(wait)));
  }
  return true;
}

TEST_CASE("zmq channel: a loop that sleeps on the descriptors misses no message", "[zmq]") {
  // Each side answers as soon as it receives: its send (which may take the signal of a message
  // arriving meanwhile) comes between two receives. A missed signal leaves a message in a socket
  // while its descriptor stays quiet, and the ping-pong stops for good.
  Endpoint phb(Listening("phb"));
  ZmqChannelOptions so = Dialing("shb", "phb", phb.channel->bound_endpoint());
  Endpoint shb(so);
  Endpoint other(Dialing("other", "phb", phb.channel->bound_endpoint()));
  constexpr Tick kRounds = 3000;
  Tick shb_got = 0;
  Tick phb_got = 0;
  shb.channel->SetReceiver([&](absl::string_view, Message m) {
    const auto& c = std::get<CuriosityMessage>(m);
    shb_got = c.ranges[0].first;
    if (shb_got < kRounds) (void)shb.channel->Send("phb", Nack(shb_got + 1, shb_got + 1));
  });
  phb.channel->SetReceiver([&](absl::string_view from, Message m) {
    const auto& c = std::get<CuriosityMessage>(m);
    if (from != "shb") return;
    phb_got = c.ranges[0].first;
    (void)phb.channel->Send("shb", Nack(phb_got, phb_got));
    // And a message the other way on a socket of its own, so that more than one socket moves.
    (void)other.channel->Send("phb", Nack(phb_got, phb_got));
  });
  // The first message goes once the connection is up (a send before that is a loss).
  REQUIRE(PumpUntil({&phb, &shb, &other}, [&] {
    (void)shb.channel->Send("phb", Nack(1, 1));
    return phb_got >= 1;
  }));
  // A sleep that runs out means a message nobody was told of: 1 s each, over the whole run.
  const absl::Time start = absl::Now();
  REQUIRE(RunLikeRuntime(
      {&phb, &shb, &other}, [&] { return shb_got >= kRounds; }, absl::Seconds(60)));
  CHECK(absl::Now() - start < absl::Seconds(30));
}

TEST_CASE("zmq channel: a send to a peer that is not connected fails as a loss", "[zmq]") {
  Endpoint phb(Listening("phb"));
  absl::Status s = phb.channel->Send("nobody", Nack(1, 1));
  REQUIRE_CODE(s, absl::StatusCode::kUnavailable);
  CHECK(phb.channel->stats().unreachable == 1);
}

TEST_CASE("zmq channel: malformed and oversized frames are dropped, counted and logged once",
          "[zmq]") {
  ZmqChannelOptions o = Listening("shb");
  o.max_message_bytes = 4096;
  Endpoint shb(o);
  // A hostile peer speaking raw ZeroMQ.
  void* ctx = zmq_ctx_new();
  void* raw = zmq_socket(ctx, ZMQ_DEALER);
  const std::string id = "mallory";
  zmq_setsockopt(raw, ZMQ_ROUTING_ID, id.data(), id.size());
  int linger = 0;
  zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof(linger));
  REQUIRE(zmq_connect(raw, shb.channel->bound_endpoint().c_str()) == 0);
  const std::string good = Frame(Nack(1, 2));
  std::string truncated = EncodeMessage(Nack(1, 2));
  truncated.pop_back();
  internal::PutFixed32BE(&truncated, internal::Crc32c(truncated));
  std::string garbage = "\xff\x01garbage";
  internal::PutFixed32BE(&garbage, internal::Crc32c(garbage));
  // One multipart message: garbage, a good frame, a truncated one, a good one. The good ones
  // arrive; nothing of the bad ones does.
  zmq_send(raw, garbage.data(), garbage.size(), ZMQ_SNDMORE);
  zmq_send(raw, good.data(), good.size(), ZMQ_SNDMORE);
  zmq_send(raw, truncated.data(), truncated.size(), ZMQ_SNDMORE);
  zmq_send(raw, good.data(), good.size(), 0);
  // Twenty more garbage frames: counted, not logged again.
  for (int i = 0; i < 20; ++i) zmq_send(raw, garbage.data(), garbage.size(), 0);
  REQUIRE(PumpUntil({&shb}, [&] { return shb.channel->stats().malformed == 22; }));
  CHECK(shb.received.size() == 2);
  for (const Received& r : shb.received) CHECK(r.message == Nack(1, 2));
  CHECK(shb.log.size() == 1);
  CHECK(shb.log[0].find("malformed") != std::string::npos);
  CHECK(shb.log[0].find("mallory") != std::string::npos);
  // A frame over max_message_bytes: ZeroMQ drops the peer; the channel goes on.
  const std::string big(8192, 'x');
  zmq_send(raw, big.data(), big.size(), 0);
  PumpFor({&shb}, absl::Milliseconds(200));
  CHECK(shb.received.size() == 2);
  Endpoint honest(Dialing("honest", "shb", shb.channel->bound_endpoint()));
  REQUIRE_OK(honest.channel->Send("shb", Nack(7, 7)));
  REQUIRE(PumpUntil({&shb, &honest}, [&] { return shb.received.size() == 3; }));
  CHECK(shb.received[2].from == "honest");
  // And a message too large to send is refused before it leaves.
  ZmqChannelOptions small = Dialing("small", "shb", shb.channel->bound_endpoint());
  small.max_message_bytes = EncodeMessage(Nack(1, 2)).size();
  Endpoint tiny(small);
  REQUIRE_CODE(tiny.channel->Send("shb", Nack(1, 2)), absl::StatusCode::kOk);
  REQUIRE_CODE(tiny.channel->Send("shb", CuriosityMessage{kP, {{1, 2}, {5, 6}, {8, 9}}}),
               absl::StatusCode::kInvalidArgument);
  CHECK(tiny.channel->stats().not_encodable == 1);
  zmq_close(raw);
  zmq_ctx_term(ctx);
}

TEST_CASE("zmq channel: a frame whose checksum does not match is dropped and counted", "[zmq]") {
  // The frame of a Nack of ticks 1 to 2 on pubend 1, as docs/format.md gives it.
  CHECK(absl::BytesToHexString(Frame(Nack(1, 2))) == "0102010100014257730e");
  Endpoint shb(Listening("shb"));
  void* ctx = zmq_ctx_new();
  void* raw = zmq_socket(ctx, ZMQ_DEALER);
  const std::string id = "link";
  zmq_setsockopt(raw, ZMQ_ROUTING_ID, id.data(), id.size());
  int linger = 0;
  zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof(linger));
  REQUIRE(zmq_connect(raw, shb.channel->bound_endpoint().c_str()) == 0);
  // What a damaged link hands over: one bit of the tick flipped (the message still decodes:
  // before, a Nack of other ticks arrived), a byte cut, a byte added, no checksum at all.
  const std::string good = Frame(Nack(1, 2));
  std::string flipped = good;
  flipped[4] = static_cast<char>(flipped[4] ^ 0x10);
  REQUIRE_OK(DecodeMessage(absl::string_view(flipped).substr(0, flipped.size() - 4)));
  const std::string cut = good.substr(0, good.size() - 1);
  const std::string added = good + "x";
  const std::string bare = EncodeMessage(Nack(1, 2));
  for (const std::string* f :
       std::vector<const std::string*>{&flipped, &cut, &added, &bare, &good}) {
    zmq_send(raw, f->data(), f->size(), 0);
  }
  REQUIRE(PumpUntil({&shb}, [&] { return shb.received.size() == 1; }));
  PumpFor({&shb}, absl::Milliseconds(100));
  CHECK(shb.received.size() == 1);
  CHECK(shb.received[0].message == Nack(1, 2));
  CHECK(shb.channel->stats().corrupted + shb.channel->stats().malformed == 4);
  CHECK(shb.channel->stats().corrupted >= 3);
  REQUIRE(!shb.log.empty());
  CHECK(shb.log[0].find("corrupted frame") != std::string::npos);
  zmq_close(raw);
  zmq_ctx_term(ctx);
}

TEST_CASE("zmq channel: a dialer reconnects by itself after the listener restarts", "[zmq]") {
  auto phb = std::make_unique<Endpoint>(Listening("phb"));
  const std::string endpoint = phb->channel->bound_endpoint();
  Endpoint shb(Dialing("shb", "phb", endpoint));
  REQUIRE_OK(shb.channel->Send("phb", Nack(1, 1)));
  REQUIRE(PumpUntil({phb.get(), &shb}, [&] { return phb->received.size() == 1; }));
  phb.reset();
  ZmqChannelOptions again;
  again.name = "phb";
  again.listen = endpoint;  // the same port
  phb = std::make_unique<Endpoint>(again);
  // Messages sent while it was down may be lost (the protocol repairs that); later ones arrive.
  REQUIRE(PumpUntil({phb.get(), &shb}, [&] {
    (void)shb.channel->Send("phb", Nack(2, 2));
    return !phb->received.empty();
  }));
  CHECK(phb->received.back().message == Nack(2, 2));
  // And the restarted listener reaches the dialer by name again.
  REQUIRE(PumpUntil({phb.get(), &shb}, [&] {
    (void)phb->channel->Send("shb", Nack(3, 3));
    return !shb.received.empty();
  }));
}

TEST_CASE("zmq channel: a peer claiming the name of a node this one dials is dropped", "[zmq]") {
  Endpoint phb(Listening("phb"));
  ZmqChannelOptions so = Dialing("shb", "phb", phb.channel->bound_endpoint());
  so.listen = "tcp://127.0.0.1:*";
  Endpoint shb(so);
  Endpoint fake(Dialing("phb", "shb", shb.channel->bound_endpoint()));  // calls itself "phb"
  REQUIRE_OK(fake.channel->Send("shb", KnowledgeMessage{kP, {}, {}}));
  REQUIRE(PumpUntil({&shb, &fake}, [&] { return shb.channel->stats().impersonations == 1; }));
  // The real one, once its connection is up (a send to a peer not yet connected is a loss).
  REQUIRE(PumpUntil({&shb, &phb, &fake}, [&] {
    return phb.channel->Send("shb", KnowledgeMessage{kP, {}, {}}).ok();
  }));
  REQUIRE(PumpUntil({&shb, &phb, &fake}, [&] { return shb.received.size() == 1; }));
  PumpFor({&shb, &phb, &fake}, absl::Milliseconds(100));
  CHECK(shb.received.size() == 1);
  CHECK(shb.log.size() == 1);
}

// Every kind of message a peer could use to subscribe, ack, nack, release or publish (a PHB takes
// the publisher's name from the channel: an impostor's Publish must not arrive under its name).
std::vector<Message> EveryPeerMessage() {
  CheckpointToken ct;
  ct.Set(kP, 5);
  return {ConnectMessage{"sub", "", "", ct, 1, true},
          AckMessage{"sub", ct},
          CuriosityMessage{kP, {{1, 100}}},
          ReleaseMessage{{{kP, 100, 100}}},
          KnowledgeMessage{kP, {}, {}},
          DisconnectMessage{"sub"},
          UnsubscribeMessage{"sub"},
          PublishMessage{1, kP, "", MakeEventRef(Event())}};
}

TEST_CASE("zmq channel with CURVE: only allowed keys get through, each only as its own name",
          "[zmq]") {
  auto server_keys = GenerateCurveKeyPair();
  if (absl::IsUnimplemented(server_keys.status())) {
    WARN("skipped: libzmq was built without CURVE");
    return;
  }
  REQUIRE_OK(server_keys);
  const CurveKeyPair client_keys = *GenerateCurveKeyPair();
  const CurveKeyPair subscriber_keys = *GenerateCurveKeyPair();
  const CurveKeyPair intruder_keys = *GenerateCurveKeyPair();
  ZmqChannelOptions so = Listening("shb");
  so.curve = true;
  so.keys = *server_keys;
  so.allowed_clients = {{client_keys.public_key, ""}, {subscriber_keys.public_key, "app-1"}};
  Endpoint shb(so);
  const std::string at = shb.channel->bound_endpoint();
  auto curve_client = [&](const std::string& name, const CurveKeyPair& keys) {
    ZmqChannelOptions o = Dialing(name, "shb", at, so.keys.public_key);
    o.curve = true;
    o.keys = keys;
    return std::make_unique<Endpoint>(o);
  };
  auto intruder = curve_client("intruder", intruder_keys);
  auto plain = std::make_unique<Endpoint>(Dialing("plain", "shb", at));
  auto impostor = curve_client("phb", subscriber_keys);  // app-1's key under another name
  for (const Message& m : EveryPeerMessage()) {
    INFO(MessageKindName(m));
    // A refused handshake may already have closed the intruder's and the plain client's
    // queues (the send fails at once) or not yet (the messages wait and go nowhere).
    (void)intruder->channel->Send("shb", m);
    (void)plain->channel->Send("shb", m);
    REQUIRE_OK(impostor->channel->Send("shb", m));
  }
  // The impostor's messages arrive and are dropped; the others' never arrive (their handshakes
  // fail). Give those a while to get through if they could, on a loaded machine too.
  REQUIRE(PumpUntil({&shb, intruder.get(), plain.get(), impostor.get()}, [&] {
    return shb.channel->stats().impersonations == EveryPeerMessage().size();
  }));
  PumpFor({&shb, intruder.get(), plain.get(), impostor.get()}, absl::Milliseconds(500));
  CHECK(shb.received.empty());
  CHECK(shb.channel->stats().impersonations == EveryPeerMessage().size());
  // The intruder's key was refused (the plain client has none to refuse).
  CHECK(PumpUntil({&shb, intruder.get()}, [&] { return shb.channel->stats().denied >= 1; }));
  // The same messages from allowed keys arrive (so the check above could have failed).
  auto client = curve_client("client", client_keys);
  auto subscriber = curve_client("app-1", subscriber_keys);
  for (const Message& m : EveryPeerMessage()) {
    REQUIRE_OK(client->channel->Send("shb", m));
    REQUIRE_OK(subscriber->channel->Send("shb", m));
  }
  const size_t n = EveryPeerMessage().size();
  REQUIRE(PumpUntil({&shb, client.get(), subscriber.get()},
                    [&] { return shb.received.size() == 2 * n; }));
  // Replies reach allowed clients, encrypted.
  REQUIRE_OK(shb.channel->Send("app-1", Nack(4, 4)));
  REQUIRE(PumpUntil({&shb, subscriber.get()}, [&] { return subscriber->received.size() == 1; }));
}

TEST_CASE("zmq channel: bad options are refused with the option named", "[zmq]") {
  ZmqChannelOptions o;
  REQUIRE_CODE(ZmqChannel::Create(o), absl::StatusCode::kInvalidArgument);
  o.name = std::string(256, 'n');
  REQUIRE_CODE(ZmqChannel::Create(o), absl::StatusCode::kInvalidArgument);
  o.name = "x";
  o.listen = "nonsense://here";
  REQUIRE_CODE(ZmqChannel::Create(o), absl::StatusCode::kInvalidArgument);
  o.listen = "";
  o.curve = true;
  o.keys = {"short", "keys"};
  REQUIRE_CODE(ZmqChannel::Create(o), absl::StatusCode::kInvalidArgument);
  auto keys = GenerateCurveKeyPair();
  if (keys.ok()) {
    o.keys = *keys;
    o.peers = {{"phb", "tcp://127.0.0.1:1", ""}};  // no server key
    REQUIRE_CODE(ZmqChannel::Create(o), absl::StatusCode::kInvalidArgument);
    o.keys.public_key = GenerateCurveKeyPair()->public_key;  // not the secret key's
    o.peers.clear();
    REQUIRE_CODE(ZmqChannel::Create(o), absl::StatusCode::kInvalidArgument);
  }
  Endpoint a(Listening("a"));
  ZmqChannelOptions b;
  b.name = "b";
  b.listen = a.channel->bound_endpoint();
  REQUIRE_CODE(ZmqChannel::Create(b), absl::StatusCode::kUnavailable);  // address in use
}

}  // namespace
}  // namespace gryph
