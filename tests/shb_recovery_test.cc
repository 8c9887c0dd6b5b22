// Recovery of a subscriber hosting broker with thousands of subscriptions, on one thread and on
// two (SubscriberHostingBrokerOptions::recovery_threads): the same subscriptions, positions and
// matches either way, against a naive model; damage found with the same error either way.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gryph/broker/pfs.h"
#include "gryph/in_process_channel.h"
#include "gryph/log.h"
#include "gryph/memory_storage.h"
#include "gryph/selector.h"
#include "gryph/subscriber_hosting_broker.h"
#include "lib/shb/shb_keys.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr PubendId kP{1};
// Above the count from which recovery files subscriptions on a second thread.
constexpr uint64_t kSubscriptions = 6000;
constexpr int64_t kValues = 10;  // events n = 0 .. kValues - 1, at ticks 1 .. kValues

// Subscription i (ids 1..kSubscriptions, named "sub-<i>"): "n = <i mod 10>" for even i,
// "n > <i mod 10>" for odd i.
std::string SelectorOf(uint64_t i) {
  return absl::StrCat("n ", i % 2 == 0 ? "=" : ">", " ", i % kValues);
}
// The events of ticks 1..kValues that subscription i matches (the naive model).
uint64_t MatchesOf(uint64_t i) {
  const auto k = static_cast<int64_t>(i % kValues);
  return i % 2 == 0 ? 1 : static_cast<uint64_t>(kValues - 1 - k);
}

// How the rows store their selectors' programs.
enum class Programs {
  kNone,    // as rows were written before they had one
  kStored,  // as the broker writes them now
};

// Writes the subscriptions as the broker stores them, through `edit` (which may damage a row:
// change its name, id or selector) and `edit_program` (the program's bytes, with kStored). Every
// third has no position at kP and is not in its PFS, as if kP had been added to the broker's
// pubends since that subscription was made.
void WriteSubscriptions(
    Storage* storage,
    const std::function<void(uint64_t, std::string*, uint64_t*, std::string*)>& edit = nullptr,
    Programs programs = Programs::kNone,
    const std::function<void(uint64_t, std::string*)>& edit_program = nullptr) {
  PfsOptions po;
  po.pubend = kP;
  auto pfs = PFS::Open(po, storage);
  REQUIRE_OK(pfs);
  WriteBatch batch;
  for (uint64_t i = 1; i <= kSubscriptions; ++i) {
    std::string name = absl::StrCat("sub-", i);
    uint64_t id = i;
    std::string selector = SelectorOf(i);
    if (edit) edit(i, &name, &id, &selector);
    std::string program;
    if (programs == Programs::kStored) {
      absl::StatusOr<Selector> parsed = Selector::Parse(selector);
      if (parsed.ok()) program = parsed->EncodeProgram();
      if (edit_program) edit_program(i, &program);
    }
    batch.Put(internal::kShbSubscriptionsTable, name,
              internal::EncodeSubscriptionRow({id, 1, selector, "", program}));
    if (i % 3 != 0) {
      REQUIRE_OK((*pfs)->AddSubscriber(SubscriberId{i}, &batch));
      batch.Put(internal::kShbPositionsTable, internal::PositionKey(SubscriberId{i}, kP),
                internal::EncodePositionRow({0, 0}));
    }
  }
  batch.Put(internal::kShbMetaTable, internal::kShbNextIdKey,
            internal::EncodeNextId(kSubscriptions + 1));
  REQUIRE_OK(storage->Commit(batch));
}

SubscriberHostingBrokerOptions Options(size_t threads) {
  SubscriberHostingBrokerOptions o;
  o.pubends = {{kP, "phb"}};
  o.recovery_threads = threads;
  return o;
}

// What a recovered broker knows of each subscription after ticks 1..kValues: its status and its
// backlog (the events the PFS holds for it).
struct Recovered {
  std::vector<SubscriptionStatus> subscriptions;
  std::vector<uint64_t> backlog;  // by id - 1
};

// The subscriptions of `storage` (WriteSubscriptions's) recovered on `threads`, matched against
// ticks 1..kValues. `log` receives the broker's log.
Recovered RecoverAndMatch(MemoryStorage& storage, size_t threads, LogSink log = nullptr) {
  InProcessNetwork net;
  auto phb = net.Connect("phb");
  auto channel = net.Connect("shb");
  REQUIRE_OK(phb);
  REQUIRE_OK(channel);
  (*phb)->SetReceiver([](absl::string_view, Message) {});
  SubscriberHostingBrokerOptions options = Options(threads);
  if (log) options.log = std::move(log);
  auto shb = SubscriberHostingBroker::Open(options, &storage, channel->get());
  REQUIRE_OK(shb);
  REQUIRE((*shb)->recovery().subscription_count == kSubscriptions);
  KnowledgeMessage k{kP, {}};
  for (int64_t n = 0; n < kValues; ++n) {
    Event e;
    e.SetInt64("n", n);
    k.spans.push_back(KnowledgeSpan::Data(static_cast<Tick>(n + 1), MakeEventRef(std::move(e))));
  }
  REQUIRE_OK((*phb)->Send("shb", std::move(k)));
  absl::Time now = absl::Now();
  for (int i = 0; i < 10 && (*shb)->latest_delivered(kP) < kValues; ++i) {
    net.DeliverAll();
    (*shb)->Flush();
    now += absl::Seconds(1);
    (*shb)->OnTimer(now);
  }
  REQUIRE((*shb)->latest_delivered(kP) == kValues);
  Recovered r;
  r.subscriptions = (*shb)->Subscriptions();
  for (uint64_t i = 1; i <= kSubscriptions; ++i) {
    auto backlog = (*shb)->BacklogEvents(absl::StrCat("sub-", i), kP);
    REQUIRE_OK(backlog);
    r.backlog.push_back(*backlog);
  }
  return r;
}

Recovered RecoverAndMatch(size_t threads) {
  MemoryStorage storage;
  WriteSubscriptions(&storage);
  return RecoverAndMatch(storage, threads);
}

TEST_CASE("recovery on two threads rebuilds what one thread does, and what was stored",
          "[shb][restart]") {
  const Recovered one = RecoverAndMatch(1);
  const Recovered two = RecoverAndMatch(2);
  REQUIRE(one.subscriptions.size() == kSubscriptions);
  REQUIRE(two.subscriptions.size() == kSubscriptions);
  for (size_t s = 0; s < kSubscriptions; ++s) {
    INFO(one.subscriptions[s].name);
    CHECK(two.subscriptions[s].name == one.subscriptions[s].name);
    CHECK(two.subscriptions[s].selector == one.subscriptions[s].selector);
    REQUIRE(one.subscriptions[s].pubends.size() == 1);
    REQUIRE(two.subscriptions[s].pubends.size() == 1);
    CHECK(two.subscriptions[s].pubends[0].released == one.subscriptions[s].pubends[0].released);
  }
  for (uint64_t i = 1; i <= kSubscriptions; ++i) {
    INFO("sub-" << i);
    CHECK(one.backlog[i - 1] == MatchesOf(i));
    CHECK(two.backlog[i - 1] == MatchesOf(i));
  }
}

TEST_CASE("damaged subscription rows fail recovery alike on one thread and on two",
          "[shb][restart][damage]") {
  struct Damage {
    const char* what;
    std::function<void(uint64_t, std::string*, uint64_t*, std::string*)> edit;
    const char* error;
  };
  const std::vector<Damage> cases = {
      {"a selector that no longer parses, late in the rows",
       [](uint64_t i, std::string*, uint64_t*, std::string* selector) {
         if (i == kSubscriptions - 700) *selector = "n = = 1";
       },
       "no longer parses"},
      {"two rows sharing an id",
       [](uint64_t i, std::string*, uint64_t* id, std::string*) {
         if (i == kSubscriptions - 5) *id = 17;
       },
       "which 'sub-17' has too"},
      {"an id not below the next id",
       [](uint64_t i, std::string*, uint64_t* id, std::string*) {
         if (i == 4500) *id = kSubscriptions + 1;
       },
       "not below the next id"},
  };
  for (const Damage& d : cases) {
    std::vector<std::string> errors;
    for (size_t threads : {size_t{1}, size_t{2}}) {
      INFO(d.what << ", threads " << threads);
      MemoryStorage storage;
      WriteSubscriptions(&storage, d.edit);
      InProcessNetwork net;
      auto channel = net.Connect("shb");
      REQUIRE_OK(channel);
      auto shb = SubscriberHostingBroker::Open(Options(threads), &storage, channel->get());
      REQUIRE_CODE(shb, absl::StatusCode::kDataLoss);
      CHECK_THAT(std::string(shb.status().message()), Catch::Contains(d.error));
      errors.push_back(shb.status().ToString());
    }
    CHECK(errors[0] == errors[1]);
  }
}

TEST_CASE("stored selector programs are decoded, and a row without a usable one is parsed",
          "[shb][restart][damage]") {
  for (size_t threads : {size_t{1}, size_t{2}}) {
    INFO("threads " << threads);
    // Every row has a program but three: one with an unknown version, one cut short, one with a
    // byte flipped (a store whose row checksums missed it, or a writer's bug).
    MemoryStorage storage;
    WriteSubscriptions(&storage, nullptr, Programs::kStored, [](uint64_t i, std::string* program) {
      if (i == 4000) (*program)[0] = 9;
      if (i == 4001) program->resize(program->size() - 1);
      if (i == 4002) (*program)[1] = static_cast<char>(0xff);
    });
    std::vector<LogRecord> logged;
    const Recovered r =
        RecoverAndMatch(storage, threads, [&](const LogRecord& l) { logged.push_back(l); });
    REQUIRE(r.subscriptions.size() == kSubscriptions);
    for (uint64_t i = 1; i <= kSubscriptions; ++i) {
      INFO("sub-" << i);
      CHECK(r.backlog[i - 1] == MatchesOf(i));
    }
    std::vector<std::string> reparsed;
    for (const LogRecord& l : logged) {
      if (absl::StrContains(l.message, "parsed")) reparsed.push_back(l.message);
    }
    REQUIRE(reparsed.size() == 1);
    CHECK_THAT(reparsed[0], Catch::StartsWith("3 of 6000 stored selector programs could not be "
                                              "used, so their texts were parsed instead (the "
                                              "first, of subscription 'sub-4000': "));
    CHECK_THAT(reparsed[0], Catch::Contains("version 9"));
  }
  // Rows from before programs were stored: parsed, with one line that says so.
  MemoryStorage storage;
  WriteSubscriptions(&storage);
  std::vector<LogRecord> logged;
  const Recovered r = RecoverAndMatch(storage, 2, [&](const LogRecord& l) { logged.push_back(l); });
  for (uint64_t i = 1; i <= kSubscriptions; ++i) CHECK(r.backlog[i - 1] == MatchesOf(i));
  size_t lines = 0;
  for (const LogRecord& l : logged) {
    if (!absl::StrContains(l.message, "parsed")) continue;
    ++lines;
    CHECK_THAT(l.message, Catch::StartsWith("6000 of 6000 stored subscriptions predate stored "
                                            "selector programs"));
    CHECK(l.level == LogLevel::kInfo);
  }
  CHECK(lines == 1);
}

TEST_CASE("the broker stores each subscription's selector program in its row", "[shb][restart]") {
  MemoryStorage storage;
  InProcessNetwork net;
  auto channel = net.Connect("shb");
  auto sub = net.Connect("sub");
  REQUIRE_OK(channel);
  REQUIRE_OK(sub);
  (*sub)->SetReceiver([](absl::string_view, Message) {});
  auto shb = SubscriberHostingBroker::Open(Options(1), &storage, channel->get());
  REQUIRE_OK(shb);
  ConnectMessage c;
  c.subscription = "s";
  c.selector = "n BETWEEN 2 AND 4 OR s LIKE 'x%'";
  c.create = true;
  REQUIRE_OK((*sub)->Send("shb", c));
  net.DeliverAll();
  (*shb)->Flush();
  (*shb)->OnTimer(absl::Now() + absl::Seconds(1));  // the creation's commit, if not yet made
  (*shb)->Flush();
  auto row = storage.Get(internal::kShbSubscriptionsTable, "s");
  REQUIRE_OK(row);
  REQUIRE(row->has_value());
  auto parsed = internal::ParseSubscriptionRow(**row);
  REQUIRE_OK(parsed);
  CHECK(parsed->selector == c.selector);
  CHECK(parsed->program == Selector::Parse(c.selector)->EncodeProgram());
}

}  // namespace
}  // namespace gryph
