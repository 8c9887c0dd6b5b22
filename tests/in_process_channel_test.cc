#include "gryph/in_process_channel.h"

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

}  // namespace
}  // namespace gryph
