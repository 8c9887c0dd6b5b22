#include "gryph/in_process_channel.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace gryph {
namespace {

TEST_CASE("in-process channels deliver in send order, only when asked", "[channel]") {
  InProcessNetwork net;
  auto a = net.Connect("a");
  auto b = net.Connect("b");
  REQUIRE_OK(a);
  REQUIRE_OK(b);
  std::vector<std::string> got;
  (*b)->SetReceiver([&](absl::string_view from, Message m) {
    got.push_back(std::string(from) + ":" + std::get<DisconnectMessage>(m).subscription);
  });
  REQUIRE_OK((*a)->Send("b", DisconnectMessage{"1"}));
  REQUIRE_OK((*a)->Send("b", DisconnectMessage{"2"}));
  REQUIRE(got.empty());
  REQUIRE(net.pending() == 2);
  REQUIRE(net.DeliverAll() == 2);
  REQUIRE(got == std::vector<std::string>{"a:1", "a:2"});
}

TEST_CASE("sending to an unknown peer is Unavailable", "[channel]") {
  InProcessNetwork net;
  auto a = net.Connect("a");
  REQUIRE_OK(a);
  REQUIRE_CODE((*a)->Send("nobody", DisconnectMessage{"x"}), absl::StatusCode::kUnavailable);
  REQUIRE_CODE(net.Connect("a"), absl::StatusCode::kAlreadyExists);
}

TEST_CASE("a closed endpoint's queued messages are dropped", "[channel]") {
  InProcessNetwork net;
  auto a = net.Connect("a");
  auto b = net.Connect("b");
  REQUIRE_OK((*a)->Send("b", DisconnectMessage{"x"}));
  b->reset();
  REQUIRE(net.pending() == 0);
  REQUIRE(net.DeliverAll() == 0);
  auto again = net.Connect("b");  // the name is free again
  REQUIRE_OK(again);
}

TEST_CASE("messages sent by a receiver are delivered after it returns", "[channel]") {
  InProcessNetwork net;
  auto a = net.Connect("a");
  auto b = net.Connect("b");
  int pings = 0;
  (*b)->SetReceiver([&](absl::string_view from, Message) {
    if (++pings < 3) REQUIRE_OK((*b)->Send(from, DisconnectMessage{"pong"}));
  });
  (*a)->SetReceiver([&](absl::string_view from, Message) {
    REQUIRE_OK((*a)->Send(from, DisconnectMessage{"ping"}));
  });
  REQUIRE_OK((*a)->Send("b", DisconnectMessage{"ping"}));
  REQUIRE(net.DeliverAll() == 5);
  REQUIRE(pings == 3);
}

TEST_CASE("many threads may send while one delivers", "[channel]") {
  InProcessNetwork net;
  auto sink = net.Connect("sink");
  REQUIRE_OK(sink);
  std::atomic<int> received = 0;
  (*sink)->SetReceiver([&](absl::string_view, Message) { received++; });
  std::vector<std::unique_ptr<Channel>> senders;
  for (int i = 0; i < 4; ++i) senders.push_back(*net.Connect("s" + std::to_string(i)));
  std::vector<std::thread> threads;
  for (auto& s : senders) {
    threads.emplace_back([&s] {
      for (int i = 0; i < 1000; ++i) (void)s->Send("sink", DisconnectMessage{"x"});
    });
  }
  while (received < 4000) net.DeliverAll();
  for (auto& t : threads) t.join();
  REQUIRE(received == 4000);
}

TEST_CASE("SendMany queues a batch in order and counts what was accepted", "[channel]") {
  InProcessNetwork net;
  auto a = net.Connect("a");
  auto b = net.Connect("b");
  REQUIRE_OK(a);
  REQUIRE_OK(b);
  std::vector<std::string> got;
  (*b)->SetReceiver([&](absl::string_view, Message m) {
    got.push_back(std::get<DisconnectMessage>(m).subscription);
  });
  std::vector<Channel::Outgoing> batch;
  batch.push_back({"b", DisconnectMessage{"1"}});
  batch.push_back({"nobody", DisconnectMessage{"lost"}});
  batch.push_back({"b", DisconnectMessage{"2"}});
  REQUIRE((*a)->SendMany(absl::MakeSpan(batch)) == 2);
  REQUIRE(net.pending() == 2);
  REQUIRE(net.DeliverAll() == 2);
  REQUIRE(got == std::vector<std::string>{"1", "2"});
}

TEST_CASE("a lane delivers only its endpoints' messages", "[channel]") {
  InProcessNetwork net(2);
  auto broker = net.Connect("broker", 0);
  auto client = net.Connect("client", 1);
  REQUIRE_OK(broker);
  REQUIRE_OK(client);
  REQUIRE_CODE(net.Connect("far", 2), absl::StatusCode::kInvalidArgument);
  int to_broker = 0;
  int to_client = 0;
  (*broker)->SetReceiver([&](absl::string_view, Message) { ++to_broker; });
  (*client)->SetReceiver([&](absl::string_view, Message) { ++to_client; });
  REQUIRE_OK((*broker)->Send("client", DisconnectMessage{"x"}));
  REQUIRE_OK((*client)->Send("broker", DisconnectMessage{"y"}));
  REQUIRE_OK((*client)->Send("broker", DisconnectMessage{"z"}));
  REQUIRE(net.pending() == 3);
  REQUIRE(net.DeliverAll(1) == 1);
  REQUIRE(to_client == 1);
  REQUIRE(to_broker == 0);
  REQUIRE(net.DeliverAll(0) == 2);
  REQUIRE(to_broker == 2);
  REQUIRE(net.pending() == 0);
}

TEST_CASE("messages queued for a closed endpoint never reach a new one of the same name",
          "[channel]") {
  // A queued message names the connection it was sent to, not just the name.
  InProcessNetwork net;
  auto a = net.Connect("a");
  auto b = net.Connect("b");
  REQUIRE_OK((*a)->Send("b", DisconnectMessage{"to the first b"}));
  b->reset();
  auto again = net.Connect("b");
  REQUIRE_OK(again);
  std::vector<std::string> got;
  (*again)->SetReceiver([&](absl::string_view, Message m) {
    got.push_back(std::get<DisconnectMessage>(m).subscription);
  });
  REQUIRE(net.pending() == 0);
  REQUIRE_OK((*a)->Send("b", DisconnectMessage{"to the second b"}));
  REQUIRE(net.pending() == 1);
  REQUIRE(net.DeliverAll() == 1);
  REQUIRE(got == std::vector<std::string>{"to the second b"});
  REQUIRE(net.pending() == 0);
}

TEST_CASE("a batch in delivery drops the messages of an endpoint closed meanwhile", "[channel]") {
  InProcessNetwork net;
  auto a = net.Connect("a");
  auto b = net.Connect("b");
  auto c = net.Connect("c");
  int to_c = 0;
  // b's receiver closes c while c's messages are already taken for delivery.
  (*b)->SetReceiver([&](absl::string_view, Message) { c->reset(); });
  (*c)->SetReceiver([&](absl::string_view, Message) { ++to_c; });
  REQUIRE_OK((*a)->Send("b", DisconnectMessage{"close c"}));
  REQUIRE_OK((*a)->Send("c", DisconnectMessage{"1"}));
  REQUIRE_OK((*a)->Send("c", DisconnectMessage{"2"}));
  REQUIRE(net.pending() == 3);
  REQUIRE(net.DeliverAll() == 1);
  REQUIRE(to_c == 0);
  REQUIRE(net.pending() == 0);
}

TEST_CASE("a receiver replaced during a batch gets the rest of it", "[channel]") {
  InProcessNetwork net;
  auto a = net.Connect("a");
  auto b = net.Connect("b");
  std::vector<std::string> got;
  (*b)->SetReceiver([&](absl::string_view, Message) {
    got.push_back("old");
    (*b)->SetReceiver([&](absl::string_view, Message) { got.push_back("new"); });
  });
  for (int i = 0; i < 3; ++i) REQUIRE_OK((*a)->Send("b", DisconnectMessage{"x"}));
  REQUIRE(net.DeliverAll() == 3);
  REQUIRE(got == std::vector<std::string>{"old", "new", "new"});
}

TEST_CASE("a batch of many messages, looked up a part at a time, stays exact", "[channel]") {
  // Longer than one part (256): the parts looked up later see what changed meanwhile.
  InProcessNetwork net(2);
  auto a = net.Connect("a", 0);
  auto b = net.Connect("b", 1);
  auto c = net.Connect("c", 1);
  auto d = net.Connect("d", 1);
  std::vector<int> at_b;
  int at_c = 0;
  int at_d_old = 0;
  int at_d_new = 0;
  (*b)->SetReceiver([&](absl::string_view, Message m) {
    const int n = std::stoi(std::get<DisconnectMessage>(m).subscription);
    at_b.push_back(n);
    if (n == 300) c->reset();  // c's later messages are dropped
    if (n == 600) {            // d's later messages reach its new receiver
      (*d)->SetReceiver([&](absl::string_view, Message) { ++at_d_new; });
    }
  });
  (*c)->SetReceiver([&](absl::string_view, Message) { ++at_c; });
  (*d)->SetReceiver([&](absl::string_view, Message) { ++at_d_old; });
  std::vector<Channel::Outgoing> batch;
  for (int i = 1; i <= 1000; ++i) {
    batch.push_back({"b", DisconnectMessage{std::to_string(i)}});
    batch.push_back({"c", DisconnectMessage{"c"}});
    batch.push_back({"d", DisconnectMessage{"d"}});
  }
  REQUIRE((*a)->SendMany(absl::MakeSpan(batch)) == 3000);
  REQUIRE(net.pending() == 3000);
  net.DeliverAll(1);
  REQUIRE(at_b.size() == 1000);
  for (int i = 0; i < 1000; ++i) REQUIRE(at_b[static_cast<size_t>(i)] == i + 1);
  REQUIRE(at_c == 299);  // the one after b's 300th was the first not delivered
  REQUIRE(at_d_old == 599);
  REQUIRE(at_d_new == 401);
  REQUIRE(net.pending() == 0);
}

TEST_CASE("two lanes run on two threads while others send", "[channel]") {
  InProcessNetwork net(2);
  auto broker = net.Connect("broker", 0);
  auto client = net.Connect("client", 1);
  std::atomic<int> at_broker = 0;
  std::atomic<int> at_client = 0;
  // Each side answers what it gets, so both lanes carry traffic from both threads.
  (*broker)->SetReceiver([&](absl::string_view, Message) {
    if (++at_broker <= 2000) (void)(*broker)->Send("client", DisconnectMessage{"b"});
  });
  (*client)->SetReceiver([&](absl::string_view, Message) {
    if (++at_client <= 2000) (void)(*client)->Send("broker", DisconnectMessage{"c"});
  });
  auto outside = net.Connect("outside", 0);
  std::atomic<bool> done = false;
  auto run = [&](size_t lane) {
    while (!done) {
      if (net.Deliver(64, lane) == 0) net.Wait(lane, absl::Milliseconds(1));
    }
  };
  std::thread lane0(run, 0);
  std::thread lane1(run, 1);
  for (int i = 0; i < 100; ++i) REQUIRE_OK((*outside)->Send("client", DisconnectMessage{"o"}));
  while (at_broker < 2000 || at_client < 2000) std::this_thread::yield();
  done = true;
  lane0.join();
  lane1.join();
  net.DeliverAll(0);
  net.DeliverAll(1);
  REQUIRE(net.pending() == 0);
  REQUIRE(at_client >= 2000);
}

TEST_CASE("Wait returns when a message arrives for the lane, or at the timeout", "[channel]") {
  InProcessNetwork net(2);
  auto a = net.Connect("a", 0);
  auto b = net.Connect("b", 1);
  (*b)->SetReceiver([](absl::string_view, Message) {});
  REQUIRE_FALSE(net.Wait(1, absl::Milliseconds(1)));
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    (void)(*a)->Send("b", DisconnectMessage{"x"});
  });
  REQUIRE(net.Wait(1, absl::Seconds(30)));
  sender.join();
  REQUIRE_FALSE(net.Wait(0, absl::ZeroDuration()));
  REQUIRE(net.DeliverAll(1) == 1);
}

TEST_CASE("an arrival hook runs once per emptied queue, and not after it is replaced",
          "[channel]") {
  InProcessNetwork net(2);
  auto a = net.Connect("a", 0);
  auto b = net.Connect("b", 1);
  (*b)->SetReceiver([](absl::string_view, Message) {});
  std::atomic<int> calls = 0;
  net.SetArrivalHook(1, [&] { ++calls; });
  REQUIRE_OK((*a)->Send("b", DisconnectMessage{"x"}));
  REQUIRE_OK((*a)->Send("b", DisconnectMessage{"y"}));  // the queue was not empty
  std::vector<Channel::Outgoing> many = {{"b", DisconnectMessage{"z"}},
                                         {"b", DisconnectMessage{"w"}}};
  REQUIRE((*a)->SendMany(absl::MakeSpan(many)) == 2);
  REQUIRE(calls == 1);
  REQUIRE(net.Wait(1, absl::ZeroDuration()));  // without the network's lock
  REQUIRE(net.DeliverAll(1) == 4);
  REQUIRE_FALSE(net.Wait(1, absl::ZeroDuration()));
  REQUIRE((*a)->SendMany(absl::MakeSpan(many)) == 2);
  REQUIRE(calls == 2);

  // A hook running on a sender's thread has ended once SetArrivalHook returns (a runtime's hook
  // must not run after the runtime is gone), though it runs outside the network's lock.
  REQUIRE(net.DeliverAll(1) == 2);
  std::atomic<bool> in_hook = false;
  std::atomic<bool> hook_done = false;
  std::atomic<size_t> pending_in_hook = 0;
  net.SetArrivalHook(1, [&] {
    in_hook = true;
    pending_in_hook = net.pending();  // the network's lock is free meanwhile
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    hook_done = true;
  });
  std::thread sender([&] { (void)(*a)->Send("b", DisconnectMessage{"late"}); });
  while (!in_hook) std::this_thread::yield();
  net.SetArrivalHook(1, nullptr);
  REQUIRE(hook_done);
  sender.join();
  REQUIRE(pending_in_hook == 1);
  REQUIRE(net.DeliverAll(1) == 1);
}

}  // namespace
}  // namespace gryph
