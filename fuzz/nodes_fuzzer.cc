// libFuzzer target for live nodes: decodable messages from strangers and from known peers, fed
// to a running publisher hosting broker, subscriber hosting broker and durable subscriber (the
// shared harness, gryph/testing/topology.h, on memory storage and a virtual clock). No peer may
// stop a broker for everyone else, so beyond "no crash, no sanitizer report" it checks that
// after the messages, and a while of every node's loop, neither broker has stopped (the SHB's
// status and every pubend's are OK).
//
// The input is a sequence of records: sender (u8: a stranger, "phb", "shb" or the subscriber's
// endpoint), target (u8: the PHB, the SHB or the subscriber), length (u8), then that many bytes
// of a frame. Frames that do not decode are dropped, as a transport would drop them.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz/fuzz_check.h"
#include "gryph/message.h"
#include "gryph/testing/topology.h"

namespace {

using gryph::fuzz::Fail;

struct Quiet : gryph::DurableSubscriber::Handler {
  void OnEvent(gryph::PubendId, gryph::Tick, const gryph::EventRef&) override {}
  void OnSilence(gryph::PubendId, gryph::Tick) override {}
  void OnGap(gryph::PubendId, gryph::Tick) override {}
  void OnError(const absl::Status&) override {}
};

constexpr gryph::PubendId kP{1};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gryph::TopologyOptions o;
  o.pubends = {kP};
  auto topology = gryph::Topology::Create(o);
  if (!topology.ok()) Fail("the topology does not open", topology.status().message());
  gryph::Topology& t = **topology;
  Quiet handler;
  gryph::DurableSubscriberOptions so;
  so.subscription = "s";
  so.selector = "x > 1";
  so.broker = "shb";
  auto sub = t.StartSubscriber(so, &handler);
  if (!sub.ok()) Fail("the subscriber does not start", sub.status().message());
  gryph::Event e;
  e.SetInt64("x", 5);
  t.Publish(kP, "gateway", 1, gryph::MakeEventRef(e));
  t.Run(absl::Milliseconds(20));

  static const char* const kSenders[] = {"stranger", "phb", "shb", "app-1"};
  size_t at = 0;
  while (at + 3 <= size) {
    const char* from = kSenders[data[at] % 4];
    const uint8_t target = data[at + 1] % 3;
    const size_t n = std::min<size_t>(data[at + 2], size - at - 3);
    const absl::string_view frame(reinterpret_cast<const char*>(data) + at + 3, n);
    at += 3 + n;
    absl::StatusOr<gryph::Message> m = gryph::DecodeMessage(frame);
    if (!m.ok()) continue;
    switch (target) {
      case 0: (void)t.phb().HandleMessage(from, *m); break;
      case 1: t.shb("shb").HandleMessage(from, *m); break;
      case 2: (*sub)->HandleMessage(from, *m); break;
    }
    t.Run(absl::Milliseconds(1));
  }
  e.SetInt64("x", 6);
  t.Publish(kP, "gateway", 2, gryph::MakeEventRef(e));
  t.Run(absl::Milliseconds(50));
  if (!t.shb("shb").status().ok()) Fail("a peer stopped the SHB", t.shb("shb").status().message());
  if (!t.phb().pubend(kP)->status().ok()) {
    Fail("a peer stopped the pubend", t.phb().pubend(kP)->status().message());
  }
  return 0;
}
