// readme_example: README.md's "A first program", verbatim (a test checks it).
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "absl/time/clock.h"
#include "gryph/durable_subscriber.h"
#include "gryph/in_process_channel.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/subscriber_hosting_broker.h"

using namespace gryph;  // NOLINT: brevity

// The application. A real one commits checkpoint() in the same transaction as its own state.
struct Blotter : DurableSubscriber::Handler {
  int orders = 0;
  void OnEvent(PubendId, Tick t, const EventRef& e) override {
    std::cout << "Event " << t << ": IBM x " << std::get<int64_t>(*e->Find("quantity")) << "\n";
    ++orders;
  }
  void OnSilence(PubendId, Tick t) override { std::cout << "Silence up to " << t << "\n"; }
  void OnGap(PubendId, Tick t) override { std::cout << "Gap up to " << t << ": reconcile\n"; }
  void OnError(const absl::Status& s) override { std::cout << s << "\n"; }
};

int Run(const std::string& dir) {  // .value() aborts on an error, for brevity
  InProcessNetwork net;  // the Channel between the nodes; bring your own transport (channel.h)
  auto phb_net = net.Connect("phb").value(), shb_net = net.Connect("shb").value(),
       app_net = net.Connect("app").value();
  auto phb_store = OpenLmdbStorage({.path = dir + "/phb"}).value();
  auto shb_store = OpenLmdbStorage({.path = dir + "/shb"}).value();
  PublisherHostingBrokerOptions po;
  po.pubends = {{.id = PubendId{1}}};
  po.downstream = {"shb"};
  po.commit_thread = false;  // the loop below commits, in phb->OnTimer
  auto phb = PublisherHostingBroker::Open(po, phb_store.get(), phb_net.get()).value();
  SubscriberHostingBrokerOptions so;
  so.pubends = {{PubendId{1}, "phb"}};
  so.silence_interval = absl::Milliseconds(250);
  auto shb = SubscriberHostingBroker::Open(so, shb_store.get(), shb_net.get()).value();
  Blotter blotter;
  DurableSubscriberOptions o;
  o.subscription = "blotter";
  o.selector = "symbol = 'IBM' AND quantity > 100";
  o.broker = "shb";
  o.checkpoint = {};  // after a restart: the CT the application stored
  auto sub = DurableSubscriber::Create(o, app_net.get(), &blotter).value();
  app_net->SetReceiver([&](absl::string_view from, Message m) { sub->HandleMessage(from, m); });
  auto run = [&](absl::Duration d) {  // the event loop: timers and messages
    for (absl::Time end = absl::Now() + d; absl::Now() < end;) {
      phb->OnTimer(absl::Now());  // commits: `done` below runs once the order is durable
      net.DeliverAll();
      shb->OnTimer(absl::Now());
      sub->OnTimer(absl::Now());  // acks the CT, so that the brokers can release
      absl::SleepFor(absl::Milliseconds(1));
    }
  };
  (void)sub->Connect();
  run(absl::Milliseconds(100));
  for (int i = 1; i <= 4; ++i) {  // sequence i makes a retry after a crash idempotent
    Event order;
    order.SetString("symbol", i % 2 ? "MSFT" : "IBM").SetInt64("quantity", 100 * i);
    phb->Publish(PubendId{1}, "gateway", i, MakeEventRef(order), [](absl::StatusOr<Tick>) {});
  }
  run(absl::Seconds(1));
  return blotter.orders == 2 ? 0 : 1;  // IBM x 200 and IBM x 400
}

int main() {
  std::string dir = std::filesystem::temp_directory_path() / "gryph-readme-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) return 1;
  const int rc = Run(dir);
  std::filesystem::remove_all(dir);
  return rc;
}
