#include "gryph/broker/matcher.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "lib/matcher/plan.h"
#include "lib/matcher/pool.h"
#include "lib/matcher/range_index.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

using testing::Rng;
using testing::Seeds;

Subscription Sub(absl::string_view selector, absl::string_view filter = "") {
  absl::StatusOr<Subscription> s = Subscription::Create(selector, filter);
  INFO("selector: " << selector << "  filter: " << filter);
  REQUIRE_OK(s);
  return *std::move(s);
}

// The matching ids, sorted; fails if one is reported twice.
std::vector<uint64_t> MatchIds(const Matcher& m, const Event& e) {
  std::vector<uint64_t> ids;
  m.Match(e, [&](SubscriberId id) { ids.push_back(id.value); });
  std::sort(ids.begin(), ids.end());
  REQUIRE(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
  return ids;
}

Event Topic(absl::string_view topic) {
  Event e;
  e.SetTopic(topic);
  return e;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST_CASE("a matcher finds subscribers by exact topic, '+' and '#' filters", "[matcher]") {
  const char* const filters[] = {
      "orders/us/IBM", "orders/+/IBM", "orders/#", "#",           "+",   "+/+",
      "orders/+",      "orders",       "a//b",     "a/+/b",       "+/#", "",
      "orders/us/#",   "/a",           "+/a",      "orders/+/+/#"};
  const char* const topics[] = {"orders/us/IBM",
                                "orders/eu/IBM",
                                "orders",
                                "orders/us",
                                "orders/",
                                "",
                                "a//b",
                                "a/x/b",
                                "/a",
                                "x",
                                "orders/us/IBM/x",
                                "order",
                                "orders/us/east/IBM"};
  Matcher m;
  std::vector<Subscription> subs;
  for (size_t i = 0; i < std::size(filters); ++i) {
    subs.push_back(Sub("", filters[i]));
    REQUIRE_OK(m.Add(SubscriberId{i}, subs.back()));
  }
  m.Publish();
  for (const char* topic : topics) {
    INFO("topic: '" << topic << "'");
    std::vector<uint64_t> expected;
    for (size_t i = 0; i < subs.size(); ++i) {
      if (subs[i].Matches(Topic(topic))) expected.push_back(i);
    }
    REQUIRE(MatchIds(m, Topic(topic)) == expected);
  }
  // Spot checks that the reference above is what we think.
  REQUIRE(MatchIds(m, Topic("orders")) == std::vector<uint64_t>{2, 3, 4, 7, 10, 11});
  REQUIRE(MatchIds(m, Topic("orders/us/IBM")) == std::vector<uint64_t>{0, 1, 2, 3, 10, 11, 12, 15});
}

struct SemanticsCase {
  const char* selector;
  std::vector<Event> matching;
  std::vector<Event> not_matching;
};

Event E() { return Event(); }

TEST_CASE("a matcher applies equality, range, IN, OR, LIKE and NULL semantics through its index",
          "[matcher]") {
  const double two53 = 9007199254740992.0;
  const std::vector<SemanticsCase> cases = {
      {"a = 5",
       {E().SetInt64("a", 5), E().SetDouble("a", 5.0)},
       {E().SetInt64("a", 6), E().SetString("a", "5"), E(), E().SetDouble("a", kNaN),
        E().SetDouble("a", 5.5), E().SetBool("a", true)}},
      {"a = 5.0", {E().SetInt64("a", 5), E().SetDouble("a", 5.0)}, {E().SetDouble("a", 5.25)}},
      {"a = 2.5", {E().SetDouble("a", 2.5)}, {E().SetInt64("a", 2), E().SetInt64("a", 3)}},
      {"a = 9007199254740993",
       {E().SetInt64("a", 9007199254740993)},
       {E().SetDouble("a", two53), E().SetInt64("a", 9007199254740992)}},
      {"a = 9007199254740992.0",
       {E().SetDouble("a", two53), E().SetInt64("a", 9007199254740992)},
       {E().SetInt64("a", 9007199254740993)}},
      {"s = 'x'", {E().SetString("s", "x")}, {E().SetString("s", "y"), E().SetInt64("s", 1), E()}},
      {"f = TRUE", {E().SetBool("f", true)}, {E().SetBool("f", false), E().SetString("f", "TRUE")}},
      {"f", {E().SetBool("f", true)}, {E().SetBool("f", false), E().SetInt64("f", 1)}},
      {"a > 3",
       {E().SetInt64("a", 4), E().SetDouble("a", 3.5)},
       {E().SetInt64("a", 3), E().SetDouble("a", kNaN), E().SetString("a", "9"), E()}},
      {"a >= 3", {E().SetInt64("a", 3), E().SetDouble("a", 3.0)}, {E().SetDouble("a", 2.999)}},
      {"3 > a", {E().SetInt64("a", 2), E().SetDouble("a", -1e300)}, {E().SetInt64("a", 3)}},
      {"a < 9007199254740993",
       {E().SetInt64("a", 9007199254740992), E().SetDouble("a", two53)},
       {E().SetInt64("a", 9007199254740993)}},
      {"a > 9007199254740992",
       {E().SetInt64("a", 9007199254740993)},
       {E().SetDouble("a", two53), E().SetInt64("a", 9007199254740992)}},
      {"a BETWEEN 1 AND 2",
       {E().SetInt64("a", 1), E().SetDouble("a", 1.5), E().SetInt64("a", 2)},
       {E().SetInt64("a", 3), E().SetDouble("a", 0.999), E().SetDouble("a", kNaN)}},
      {"a BETWEEN 2 AND 1", {}, {E().SetInt64("a", 1), E().SetInt64("a", 2)}},
      {"a BETWEEN 5 AND 5",
       {E().SetInt64("a", 5)},
       {E().SetInt64("a", 4), E().SetDouble("a", 5.1)}},
      {"a BETWEEN -1e300 AND 1e300",
       {E().SetInt64("a", 0), E().SetDouble("a", 1e299)},
       {E().SetDouble("a", 1e301), E().SetDouble("a", std::numeric_limits<double>::infinity())}},
      {"a BETWEEN -1.7976931348623157e308 AND 1.7976931348623157e308",
       {E().SetInt64("a", 0), E().SetDouble("a", 1e308)},
       {E().SetDouble("a", std::numeric_limits<double>::infinity())}},
      {"a BETWEEN 1e-300 AND 2e-300",
       {E().SetDouble("a", 1.5e-300)},
       {E().SetInt64("a", 0), E().SetDouble("a", 3e-300)}},
      {"a > 1 AND a < 3 AND a <> 2",
       {E().SetDouble("a", 1.5), E().SetDouble("a", 2.5)},
       {E().SetInt64("a", 2), E().SetInt64("a", 3), E().SetInt64("a", 1)}},
      {"a NOT BETWEEN 1 AND 2",
       {E().SetInt64("a", 0), E().SetInt64("a", 3)},
       {E().SetInt64("a", 1), E(), E().SetString("a", "x")}},
      {"s IN ('x', 'y')",
       {E().SetString("s", "x"), E().SetString("s", "y")},
       {E().SetString("s", "z"), E(), E().SetInt64("s", 1)}},
      {"a IN (1, 2.0, 1.0, 2.5)",
       {E().SetInt64("a", 1), E().SetDouble("a", 2.0), E().SetDouble("a", 2.5)},
       {E().SetInt64("a", 3), E().SetString("a", "1"), E().SetDouble("a", kNaN)}},
      {"s NOT IN ('x')",
       {E().SetString("s", "y")},
       {E().SetString("s", "x"), E(), E().SetInt64("s", 1)}},
      {"s LIKE 'ab%'",
       {E().SetString("s", "ab"), E().SetString("s", "abc")},
       {E().SetString("s", "a"), E().SetString("s", "ba"), E().SetInt64("s", 1), E()}},
      {"s LIKE 'ab'", {E().SetString("s", "ab")}, {E().SetString("s", "abc")}},
      {"s LIKE 'a_c%'",
       {E().SetString("s", "abc"), E().SetString("s", "axcd")},
       {E().SetString("s", "ac")}},
      {"s LIKE '%c'",
       {E().SetString("s", "abc"), E().SetString("s", "c")},
       {E().SetString("s", "ca")}},
      {"s LIKE 'x\\_%' ESCAPE '\\'", {E().SetString("s", "x_1")}, {E().SetString("s", "xa1")}},
      // A prefix ending in a lone lead byte: the text's "€" (E2 82 AC) is one character, which
      // the pattern's lone E2 does not match, although the bytes start alike.
      {"s LIKE '\xE2%'",
       {E().SetString("s", "\xE2"), E().SetString("s",
                                                  "\xE2"
                                                  "a")},
       {E().SetString("s", "\xE2\x82\xAC"), E().SetString("s",
                                                          "\xE2\x82\xAC"
                                                          "a")}},
      {"s LIKE '\xC3\xA9%'", {E().SetString("s", "\xC3\xA9\xA9")}, {E().SetString("s", "\xC3")}},
      {"s NOT LIKE 'a%'",
       {E().SetString("s", "b")},
       {E().SetString("s", "ab"), E(), E().SetBool("s", true)}},
      {"a IS NULL", {E(), E().SetInt64("b", 1)}, {E().SetInt64("a", 1)}},
      {"a IS NOT NULL", {E().SetInt64("a", 1), E().SetString("a", "")}, {E()}},
      {"s = 'x' OR a > 5",
       {E().SetString("s", "x").SetInt64("a", 9), E().SetInt64("a", 6), E().SetString("s", "x")},
       {E().SetString("s", "y").SetInt64("a", 1), E()}},
      {"s = 'x' OR s = 'y' OR s IN ('y', 'z')",
       {E().SetString("s", "y"), E().SetString("s", "z")},
       {E().SetString("s", "w")}},
      {"(s = 'x' AND a = 1) OR (s = 'y' AND a = 2)",
       {E().SetString("s", "x").SetInt64("a", 1), E().SetString("s", "y").SetInt64("a", 2)},
       {E().SetString("s", "x").SetInt64("a", 2), E().SetString("s", "x")}},
      {"(a > 1 OR b < 0) AND s LIKE 'q%'",
       {E().SetInt64("a", 2).SetString("s", "q")},
       {E().SetInt64("a", 2).SetString("s", "r"), E().SetString("s", "q")}},
      {"NOT (a = 1)", {E().SetInt64("a", 2)}, {E().SetInt64("a", 1), E()}},
      {"a + 1 > b",
       {E().SetInt64("a", 1).SetInt64("b", 1)},
       {E().SetInt64("a", 1), E().SetInt64("a", 0).SetInt64("b", 1)}},
      {"a <> 1",
       {E().SetInt64("a", 2)},
       {E().SetInt64("a", 1), E().SetString("a", "x"), E(), E().SetDouble("a", kNaN)}},
      {"s <> 'x'", {E().SetString("s", "y")}, {E().SetString("s", "x"), E().SetInt64("s", 1)}},
      {"a = b", {E().SetInt64("a", 1).SetDouble("b", 1.0)}, {E().SetInt64("a", 1)}},
      {"s = 'x' AND a > 1 AND b < 2 AND c IS NULL",
       {E().SetString("s", "x").SetInt64("a", 2).SetInt64("b", 1)},
       {E().SetString("s", "x").SetInt64("a", 2).SetInt64("b", 1).SetInt64("c", 0)}},
      {"", {E(), E().SetInt64("a", 1)}, {}},
  };
  Matcher m;
  for (size_t i = 0; i < cases.size(); ++i)
    REQUIRE_OK(m.Add(SubscriberId{i}, Sub(cases[i].selector)));
  m.Publish();
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("selector: " << cases[i].selector);
    const Subscription sub = Sub(cases[i].selector);
    for (const Event& e : cases[i].matching) {
      REQUIRE(sub.Matches(e));  // the table itself is right
      const std::vector<uint64_t> ids = MatchIds(m, e);
      REQUIRE(std::count(ids.begin(), ids.end(), i) == 1);
    }
    for (const Event& e : cases[i].not_matching) {
      REQUIRE_FALSE(sub.Matches(e));
      const std::vector<uint64_t> ids = MatchIds(m, e);
      REQUIRE(std::count(ids.begin(), ids.end(), i) == 0);
    }
  }
}

TEST_CASE("a subscriber reached through several OR branches is reported once", "[matcher]") {
  Matcher m;
  REQUIRE_OK(m.Add(SubscriberId{1}, Sub("a = 1 OR b = 2 OR c > 0 OR s LIKE 'x%' OR a >= 1")));
  REQUIRE_OK(m.Add(SubscriberId{2}, Sub("a IN (1, 1.0, 2) OR a = 1")));
  m.Publish();
  Event e;
  e.SetInt64("a", 1).SetInt64("b", 2).SetInt64("c", 3).SetString("s", "xy");
  REQUIRE(MatchIds(m, e) == std::vector<uint64_t>{1, 2});
}

TEST_CASE(
    "a matcher rejects duplicate adds and unknown removes, and takes an id back after removal",
    "[matcher]") {
  Matcher m;
  REQUIRE_OK(m.Add(SubscriberId{1}, Sub("a = 1")));
  REQUIRE_CODE(m.Add(SubscriberId{1}, Sub("a = 2")), absl::StatusCode::kAlreadyExists);
  REQUIRE_CODE(m.Remove(SubscriberId{2}), absl::StatusCode::kNotFound);
  REQUIRE(m.size() == 1);
  m.Publish();
  Event one;
  one.SetInt64("a", 1);
  Event two;
  two.SetInt64("a", 2);
  REQUIRE(MatchIds(m, one) == std::vector<uint64_t>{1});
  REQUIRE_OK(m.Remove(SubscriberId{1}));
  REQUIRE_CODE(m.Remove(SubscriberId{1}), absl::StatusCode::kNotFound);
  REQUIRE_OK(m.Add(SubscriberId{1}, Sub("a = 2")));  // re-added before publication
  m.Publish();
  REQUIRE(MatchIds(m, one).empty());
  REQUIRE(MatchIds(m, two) == std::vector<uint64_t>{1});
  REQUIRE_OK(m.Remove(SubscriberId{1}));
  m.Publish();
  REQUIRE(MatchIds(m, two).empty());
  REQUIRE(m.size() == 0);
  REQUIRE_OK(m.Add(SubscriberId{1}, Sub("a = 1")));  // re-added after publication
  m.Publish();
  REQUIRE(MatchIds(m, one) == std::vector<uint64_t>{1});
}

TEST_CASE("changes stay invisible until published, and max_unpublished changes publish themselves",
          "[matcher]") {
  Matcher m(MatcherOptions{.max_unpublished = 3});
  const Event e = Topic("t");
  REQUIRE_OK(m.Add(SubscriberId{1}, Sub("", "t")));
  REQUIRE_OK(m.Add(SubscriberId{2}, Sub("", "t")));
  REQUIRE(MatchIds(m, e).empty());
  REQUIRE_OK(m.Add(SubscriberId{3}, Sub("", "t")));  // the third change publishes
  REQUIRE(MatchIds(m, e) == std::vector<uint64_t>{1, 2, 3});
  REQUIRE_OK(m.Remove(SubscriberId{1}));
  REQUIRE(MatchIds(m, e) == std::vector<uint64_t>{1, 2, 3});
  m.Publish();
  REQUIRE(MatchIds(m, e) == std::vector<uint64_t>{2, 3});
  m.Publish();  // nothing new: no change
  REQUIRE(MatchIds(m, e) == std::vector<uint64_t>{2, 3});

  Matcher every(MatcherOptions{.max_unpublished = 1});
  REQUIRE_OK(every.Add(SubscriberId{9}, Sub("", "t")));
  REQUIRE(MatchIds(every, e) == std::vector<uint64_t>{9});
}

TEST_CASE("TryPublish gives up while a reader still holds the copy it must reuse, Publish waits",
          "[matcher][concurrency]") {
  Matcher m;
  const Event e = Topic("t");
  REQUIRE_OK(m.Add(SubscriberId{1}, Sub("", "t")));
  m.Publish();
  std::atomic<bool> inside{false};
  std::atomic<bool> release{false};
  std::thread reader([&] {
    bool first = true;
    m.Match(e, [&](SubscriberId) {
      if (!first) return;
      first = false;
      inside.store(true);
      while (!release.load()) std::this_thread::yield();  // holds the copy it reads
    });
  });
  while (!inside.load()) std::this_thread::yield();
  REQUIRE_OK(m.Add(SubscriberId{2}, Sub("", "t")));
  REQUIRE(m.TryPublish());  // the other copy is free: published
  REQUIRE(MatchIds(m, e) == std::vector<uint64_t>{1, 2});
  REQUIRE_OK(m.Add(SubscriberId{3}, Sub("", "t")));
  REQUIRE_FALSE(m.TryPublish());  // the copy to reuse is the reader's
  REQUIRE(MatchIds(m, e) == std::vector<uint64_t>{1, 2});
  std::thread publisher([&] { m.Publish(); });  // waits for the reader
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release.store(true);
  reader.join();
  publisher.join();
  REQUIRE(MatchIds(m, e) == std::vector<uint64_t>{1, 2, 3});
  REQUIRE(m.TryPublish());  // nothing left to publish
}

TEST_CASE("a matcher holds many subscribers on one topic and removes them in any order",
          "[matcher]") {
  constexpr uint64_t kSubscribers = 20000;
  Matcher m;
  for (uint64_t i = 0; i < kSubscribers; ++i) {
    REQUIRE_OK(m.Add(SubscriberId{i}, Sub(i % 4 == 0 ? "n >= 0" : "", "orders/us/IBM")));
  }
  m.Publish();
  Event e = Topic("orders/us/IBM");
  e.SetInt64("n", 1);
  REQUIRE(MatchIds(m, e).size() == kSubscribers);
  Rng rng(7);
  std::vector<uint64_t> ids(kSubscribers);
  for (uint64_t i = 0; i < kSubscribers; ++i) ids[i] = i;
  for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.Uniform(i)]);
  std::set<uint64_t> live(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size() / 2; ++i) {
    REQUIRE_OK(m.Remove(SubscriberId{ids[i]}));
    live.erase(ids[i]);
  }
  m.Publish();
  REQUIRE(MatchIds(m, e) == std::vector<uint64_t>(live.begin(), live.end()));
  e.SetInt64("n", -1);  // only the unconditional ones now
  std::vector<uint64_t> unconditional;
  for (uint64_t id : live) {
    if (id % 4 != 0) unconditional.push_back(id);
  }
  REQUIRE(MatchIds(m, e) == unconditional);
  for (size_t i = ids.size() / 2; i < ids.size(); ++i) REQUIRE_OK(m.Remove(SubscriberId{ids[i]}));
  m.Publish();
  REQUIRE(MatchIds(m, e).empty());
}

TEST_CASE("a very wide level holds a hundred thousand topics and wildcard siblings", "[matcher]") {
  constexpr uint64_t kTopics = 100000;
  Matcher m;
  for (uint64_t i = 0; i < kTopics; ++i) {
    REQUIRE_OK(m.Add(SubscriberId{i}, Sub("", absl::StrCat(i, "-mainTopic"))));
  }
  // A wide level inside the wildcard trie too.
  for (uint64_t i = 0; i < 10000; ++i) {
    REQUIRE_OK(m.Add(SubscriberId{kTopics + i}, Sub("", absl::StrCat("w/", i, "/+"))));
  }
  REQUIRE_OK(m.Add(SubscriberId{999999}, Sub("", "+")));
  m.Publish();
  REQUIRE(MatchIds(m, Topic("12345-mainTopic")) == std::vector<uint64_t>{12345, 999999});
  REQUIRE(MatchIds(m, Topic("w/77/x")) == std::vector<uint64_t>{kTopics + 77});
  REQUIRE(MatchIds(m, Topic("w/77")).empty());
  for (uint64_t i = 0; i < kTopics; i += 2) REQUIRE_OK(m.Remove(SubscriberId{i}));
  for (uint64_t i = 0; i < 10000; i += 2) REQUIRE_OK(m.Remove(SubscriberId{kTopics + i}));
  m.Publish();
  REQUIRE(MatchIds(m, Topic("12344-mainTopic")) == std::vector<uint64_t>{999999});
  REQUIRE(MatchIds(m, Topic("12345-mainTopic")) == std::vector<uint64_t>{12345, 999999});
  REQUIRE(MatchIds(m, Topic("w/76/x")).empty());
  REQUIRE(MatchIds(m, Topic("w/77/x")) == std::vector<uint64_t>{kTopics + 77});
}

TEST_CASE("removing wildcard filters prunes the trie upwards and leaves siblings intact",
          "[matcher]") {
  // Filters sharing prefixes, '+' and '#' at several depths: each removal walks up from its group
  // through parent pointers, pruning only what no other filter uses.
  const std::vector<std::string> filters = {
      "a/b/c/+", "a/b/c/d", "a/b/+/d", "a/+/c/d", "+/b/c/d", "a/b/#", "a/b/c/#", "a/#",
      "#",       "+",       "+/+",     "a/+",     "a/b/+",   "x/y/#", "x/+/z",   "+/+/+/+"};
  const std::vector<std::string> topics = {"a",       "a/b",     "a/b/c",   "a/b/c/d",
                                           "a/b/c/e", "a/x/c/d", "q/b/c/d", "x/y",
                                           "x/y/z",   "x/q/z",   "x",       "a/b/q/d"};
  for (uint64_t seed : Seeds(7001, 20)) {
    INFO("seed " << seed);
    Rng rng(seed);
    // Several subscribers per filter, so that groups empty in different orders.
    std::vector<std::pair<uint64_t, std::string>> subs;
    for (size_t i = 0; i < filters.size() * 3; ++i)
      subs.emplace_back(i, filters[i % filters.size()]);
    Matcher m(MatcherOptions{.max_unpublished = 1 + rng.Uniform(4)});
    for (const auto& [id, f] : subs) REQUIRE_OK(m.Add(SubscriberId{id}, Sub("", f)));
    std::vector<std::pair<uint64_t, std::string>> present = subs;
    while (!present.empty()) {
      const size_t k = rng.Uniform(present.size());
      REQUIRE_OK(m.Remove(SubscriberId{present[k].first}));
      present.erase(present.begin() + static_cast<std::ptrdiff_t>(k));
      if (rng.Uniform(3) == 0) {  // re-add a removed one now and then: nodes are recreated
        const auto& back = subs[rng.Uniform(subs.size())];
        if (std::none_of(present.begin(), present.end(),
                         [&](const auto& p) { return p.first == back.first; })) {
          REQUIRE_OK(m.Add(SubscriberId{back.first}, Sub("", back.second)));
          present.push_back(back);
        }
      }
      m.Publish();
      for (const std::string& t : topics) {
        std::vector<uint64_t> want;
        for (const auto& [id, f] : present) {
          if (Sub("", f).Matches(Topic(t))) want.push_back(id);
        }
        std::sort(want.begin(), want.end());
        INFO("topic " << t);
        REQUIRE(MatchIds(m, Topic(t)) == want);
      }
    }
    REQUIRE(m.size() == 0);
  }
}

TEST_CASE("one batch may prune a trie path and rebuild it with the adds that follow", "[matcher]") {
  // Applying a batch fetches the trie path of each wildcard add some changes ahead of it; a
  // removal in between may free nodes of that path (and the adds after it recreate them).
  Matcher m(MatcherOptions{.max_unpublished = size_t{1} << 20});
  const std::vector<std::string> filters = {"p/q/r/s/+", "p/q/r/+/t", "p/q/+/s/t", "p/q/r/#"};
  uint64_t next_id = 0;
  std::vector<std::pair<uint64_t, std::string>> present;
  for (const std::string& f : filters) {
    REQUIRE_OK(m.Add(SubscriberId{next_id}, Sub("", f)));
    present.emplace_back(next_id++, f);
  }
  m.Publish();
  for (int round = 0; round < 20; ++round) {
    // Remove every subscription (pruning each path), each removal followed by adds under the
    // same paths, all in one batch.
    std::vector<std::pair<uint64_t, std::string>> added;
    for (const auto& [id, f] : present) {
      REQUIRE_OK(m.Remove(SubscriberId{id}));
      for (const std::string& g : filters) {
        REQUIRE_OK(m.Add(SubscriberId{next_id}, Sub("", g)));
        added.emplace_back(next_id++, g);
      }
    }
    present = added;
    if (present.size() > 64) present.resize(64);  // the rest stay; removed next round anyway
    m.Publish();
    std::vector<uint64_t> want;
    for (const auto& [id, f] : added) {
      if (Sub("", f).Matches(Topic("p/q/r/s/t"))) want.push_back(id);
    }
    std::sort(want.begin(), want.end());
    REQUIRE(MatchIds(m, Topic("p/q/r/s/t")) == want);
    // Those not kept in `present` go now, in one batch of their own.
    for (size_t i = present.size(); i < added.size(); ++i) {
      REQUIRE_OK(m.Remove(SubscriberId{added[i].first}));
    }
    m.Publish();
  }
  for (const auto& [id, f] : present) REQUIRE_OK(m.Remove(SubscriberId{id}));
  m.Publish();
  REQUIRE(m.size() == 0);
  REQUIRE(MatchIds(m, Topic("p/q/r/s/t")).empty());
}

TEST_CASE("a subscription added and removed within one batch leaves nothing behind", "[matcher]") {
  Matcher m(MatcherOptions{.max_unpublished = size_t{1} << 20});
  // Added and removed before any publication: both copies apply the add, then the removal, of a
  // record (the prefetching of the removal runs ahead of the add).
  for (uint64_t i = 0; i < 200; ++i) {
    REQUIRE_OK(m.Add(SubscriberId{i}, Sub("", i % 3 == 0   ? "t/+/x"
                                              : i % 3 == 1 ? "t/a/x"
                                                           : "t/#")));
  }
  for (uint64_t i = 0; i < 200; i += 2) REQUIRE_OK(m.Remove(SubscriberId{i}));
  m.Publish();
  m.Publish();  // the second copy too
  std::vector<uint64_t> want;
  for (uint64_t i = 1; i < 200; i += 2) want.push_back(i);
  REQUIRE(MatchIds(m, Topic("t/a/x")) == want);
  for (uint64_t i = 1; i < 200; i += 2) REQUIRE_OK(m.Remove(SubscriberId{i}));
  m.Publish();
  REQUIRE(MatchIds(m, Topic("t/a/x")).empty());
  REQUIRE(m.size() == 0);
}

TEST_CASE("a rejected duplicate add leaves the attribute names as they were", "[matcher]") {
  Matcher m;
  REQUIRE_OK(m.Add(SubscriberId{1}, Sub("a = 1")));
  // The duplicate interns `b` while compiling, then gives it back.
  REQUIRE_CODE(m.Add(SubscriberId{1}, Sub("b = 1 AND a = 1")), absl::StatusCode::kAlreadyExists);
  REQUIRE_OK(m.Add(SubscriberId{2}, Sub("b = 2")));
  m.Publish();
  Event e;
  e.SetInt64("a", 1);
  e.SetInt64("b", 2);
  REQUIRE(MatchIds(m, e) == std::vector<uint64_t>{1, 2});
  REQUIRE_OK(m.Remove(SubscriberId{2}));
  m.Publish();
  REQUIRE(MatchIds(m, e) == std::vector<uint64_t>{1});
}

TEST_CASE("an attribute's id is not given to another name while a copy may still hold it",
          "[matcher]") {
  Matcher m(MatcherOptions{.max_unpublished = size_t{1} << 20});
  REQUIRE_OK(m.Add(SubscriberId{1}, Sub("x > 5")));
  m.Publish();
  m.Publish();  // in both copies
  // Removed, and a subscription on another name added, in one batch: the copies apply the removal
  // of `x` before the add of `y`, so `y` must not take x's id meanwhile.
  REQUIRE_OK(m.Remove(SubscriberId{1}));
  REQUIRE_OK(m.Add(SubscriberId{2}, Sub("y > 5")));
  for (int round = 0; round < 2; ++round) {  // each copy in turn
    m.Publish();
    Event x;
    x.SetInt64("x", 6);
    REQUIRE(MatchIds(m, x).empty());
    Event y;
    y.SetInt64("y", 6);
    REQUIRE(MatchIds(m, y) == std::vector<uint64_t>{2});
    REQUIRE_OK(m.Add(SubscriberId{10 + static_cast<uint64_t>(round)}, Sub("z = 1")));
  }
}

TEST_CASE("Match may be called again from inside its sink, and appends to a vector", "[matcher]") {
  Matcher m;
  REQUIRE_OK(m.Add(SubscriberId{1}, Sub("a = 1")));
  REQUIRE_OK(m.Add(SubscriberId{2}, Sub("a > 0")));
  m.Publish();
  Event e;
  e.SetInt64("a", 1);
  std::vector<uint64_t> outer;
  std::vector<SubscriberId> inner;
  m.Match(e, [&](SubscriberId id) {
    outer.push_back(id.value);
    m.Match(e, &inner);
  });
  std::sort(outer.begin(), outer.end());
  REQUIRE(outer == std::vector<uint64_t>{1, 2});
  REQUIRE(inner.size() == 4);
}

// ---------------------------------------------------------------------------------------------
// Random subscriptions and events against evaluating every subscription one by one.

class RandomWorld {
 public:
  // `range_heavy`: the share of selectors that are conjunctions of several ranges (RangeSelector),
  // which the matcher files in its range index.
  explicit RandomWorld(Rng* rng, double range_heavy = 0.25)
      : rng_(*rng), range_heavy_(range_heavy) {}

  std::string Attr() {
    static const char* const kAttrs[] = {"a", "b", "s", "f"};
    return kAttrs[rng_.Uniform(std::size(kAttrs))];
  }
  std::string Number() {
    static const char* const kNumbers[] = {"0",
                                           "1",
                                           "-1",
                                           "2",
                                           "2.5",
                                           "1.0",
                                           "-0.0",
                                           "3",
                                           "0.5",
                                           "1e300",
                                           "9007199254740993",
                                           "9007199254740992.0",
                                           "-2"};
    return kNumbers[rng_.Uniform(std::size(kNumbers))];
  }
  std::string String() {
    static const char* const kStrings[] = {"''",    "'a'",  "'ab'",       "'abc'",       "'b'",
                                           "'x_y'", "'ba'", "'abcdefgh'", "'abcdefghij'"};
    return kStrings[rng_.Uniform(std::size(kStrings))];
  }
  std::string Pattern() {
    static const char* const kPatterns[] = {
        "'a%'",  "'ab%'", "'ab'",         "'%b'",        "'a_c%'",
        "'_'",   "'%'",   "'abc'",        "'b%a'",       "'x\\_%' ESCAPE '\\'",
        "'a%c'", "''",    "'abcdefghi%'", "'abcdefghij'"};
    return kPatterns[rng_.Uniform(std::size(kPatterns))];
  }
  std::string NumberList() {
    std::vector<std::string> v;
    for (uint64_t i = 0, n = rng_.Range(1, 4); i < n; ++i) v.push_back(Number());
    return absl::StrJoin(v, ", ");
  }
  std::string StringList() {
    std::vector<std::string> v;
    for (uint64_t i = 0, n = rng_.Range(1, 4); i < n; ++i) v.push_back(String());
    return absl::StrJoin(v, ", ");
  }

  std::string Atom() {
    static const char* const kOps[] = {"=", "<>", "<", "<=", ">", ">="};
    const std::string a = Attr();
    switch (rng_.Uniform(16)) {
      case 0:
      case 1: return absl::StrCat(a, " ", kOps[rng_.Uniform(6)], " ", Number());
      case 2: return absl::StrCat(Number(), " ", kOps[rng_.Uniform(6)], " ", a);
      case 3: return absl::StrCat(a, rng_.OneIn(3) ? " <> " : " = ", String());
      case 4: return absl::StrCat(a, " = ", rng_.OneIn(2) ? "TRUE" : "FALSE");
      case 5: return a;  // a boolean attribute as a condition
      case 6:
        return absl::StrCat(a, rng_.OneIn(4) ? " NOT" : "", " BETWEEN ", Number(), " AND ",
                            Number());
      case 7: return absl::StrCat(a, rng_.OneIn(4) ? " NOT" : "", " IN (", StringList(), ")");
      case 8: return absl::StrCat(a, rng_.OneIn(4) ? " NOT" : "", " IN (", NumberList(), ")");
      case 9:
      case 10: return absl::StrCat(a, rng_.OneIn(4) ? " NOT" : "", " LIKE ", Pattern());
      case 11: return absl::StrCat(a, rng_.OneIn(2) ? " IS NULL" : " IS NOT NULL");
      case 12: return absl::StrCat(a, " + 1 ", kOps[rng_.Uniform(6)], " ", Attr());
      case 13: return absl::StrCat(a, " = ", Attr());
      default: return absl::StrCat(a, " = ", rng_.OneIn(2) ? Number() : String());
    }
  }

  std::string Condition(int depth = 0) {
    switch (rng_.Uniform(depth > 2 ? 1 : 6)) {
      case 0:
      case 1: return Atom();
      case 2: return absl::StrCat("NOT (", Condition(depth + 1), ")");
      case 3:
      case 4: {
        std::vector<std::string> ops;
        for (uint64_t i = 0, n = rng_.Range(2, 3); i < n; ++i) ops.push_back(Condition(depth + 1));
        return absl::StrCat("(", absl::StrJoin(ops, " AND "), ")");
      }
      default: {
        std::vector<std::string> ops;
        for (uint64_t i = 0, n = rng_.Range(2, 3); i < n; ++i) ops.push_back(Condition(depth + 1));
        return absl::StrCat("(", absl::StrJoin(ops, " OR "), ")");
      }
    }
  }

  // Numbers for ranges over r0..r5: the events' values are mostly near them, and some land on
  // them exactly; some are not floats (0.1, 2^53 + 1), 1e300 is beyond float's range.
  std::string RangeNumber() {
    static const char* const kNumbers[] = {"0",   "1",   "2",     "3",      "5",
                                           "8",   "10",  "-1",    "2.5",    "0.5",
                                           "3.0", "0.1", "1e300", "-1e300", "9007199254740993",
                                           "4",   "6",   "7",     "9",      "9007199254740992.0"};
    return kNumbers[rng_.Uniform(std::size(kNumbers))];
  }
  std::string RangeConjunct(const std::string& attr) {
    static const char* const kOps[] = {"<", "<=", ">", ">="};
    switch (rng_.Uniform(8)) {
      case 0:
      case 1:
      case 2: {
        std::string lo = RangeNumber(), hi = RangeNumber();
        // Mostly lo <= hi, which a number's own order gives half of the time.
        if (!rng_.OneIn(5) && std::strtod(lo.c_str(), nullptr) > std::strtod(hi.c_str(), nullptr)) {
          std::swap(lo, hi);
        }
        return absl::StrCat(attr, " BETWEEN ", lo, " AND ", hi);
      }
      case 3: return absl::StrCat(RangeNumber(), " ", kOps[rng_.Uniform(4)], " ", attr);
      default: return absl::StrCat(attr, " ", kOps[rng_.Uniform(4)], " ", RangeNumber());
    }
  }
  // 2 to 6 ranges over r0..r5 (an attribute now and then twice), sometimes with another kind
  // of conjunct.
  std::string RangeSelector() {
    std::vector<std::string> ops;
    for (uint64_t i = 0, n = rng_.Range(2, 6); i < n; ++i) {
      ops.push_back(RangeConjunct(absl::StrCat("r", rng_.Uniform(6))));
    }
    if (rng_.OneIn(3)) ops.push_back(rng_.OneIn(3) ? Condition(1) : Atom());
    for (size_t i = ops.size(); i > 1; --i) std::swap(ops[i - 1], ops[rng_.Uniform(i)]);
    return absl::StrJoin(ops, " AND ");
  }

  std::string Selector() {
    if (static_cast<double>(rng_.Uniform(1000)) < range_heavy_ * 1000) return RangeSelector();
    switch (rng_.Uniform(8)) {
      case 0: return "";
      case 1:
      case 2:
      case 3: {  // a conjunction at the top, as most real selectors
        std::vector<std::string> ops;
        for (uint64_t i = 0, n = rng_.Range(1, 4); i < n; ++i)
          ops.push_back(rng_.OneIn(4) ? Condition(1) : Atom());
        return absl::StrJoin(ops, " AND ");
      }
      default: return Condition();
    }
  }

  std::string Level() {
    static const char* const kLevels[] = {"x", "y", "", "z"};
    return kLevels[rng_.Uniform(std::size(kLevels))];
  }

  std::string Filter() {
    if (rng_.OneIn(2)) return "";
    std::vector<std::string> levels;
    const uint64_t n = rng_.Range(1, 3);
    for (uint64_t i = 0; i < n; ++i) {
      if (i + 1 == n && rng_.OneIn(4)) {
        levels.push_back("#");
      } else {
        levels.push_back(rng_.OneIn(3) ? "+" : Level());
      }
    }
    return absl::StrJoin(levels, "/");
  }

  Event RandomEvent() {
    Event e;
    std::vector<std::string> levels;
    for (uint64_t i = 0, n = rng_.Range(1, 3); i < n; ++i) levels.push_back(Level());
    e.SetTopic(absl::StrJoin(levels, "/"));
    for (int r = 0; r < 6; ++r) {
      const std::string name = absl::StrCat("r", r);
      switch (rng_.Uniform(16)) {
        case 0:
        case 1: break;  // missing
        case 2: e.SetString(name, "1"); break;
        case 3: e.SetDouble(name, rng_.OneIn(2) ? kNaN : 0.1); break;
        case 4: e.SetBool(name, true); break;
        case 5:
        case 6:
        case 7: e.SetDouble(name, static_cast<double>(rng_.Uniform(26)) / 2 - 2); break;
        case 8: {
          static const int64_t kInts[] = {9007199254740993, 9007199254740992, INT64_MAX, INT64_MIN};
          e.SetInt64(name, kInts[rng_.Uniform(std::size(kInts))]);
          break;
        }
        case 9: {
          static const double kDoubles[] = {1e300, -1e300, 9007199254740992.0,
                                            std::numeric_limits<double>::infinity(), -0.0};
          e.SetDouble(name, kDoubles[rng_.Uniform(std::size(kDoubles))]);
          break;
        }
        default: e.SetInt64(name, static_cast<int64_t>(rng_.Uniform(14)) - 2); break;
      }
    }
    for (const char* name : {"a", "b", "s", "f"}) {
      switch (rng_.Uniform(12)) {
        case 0:
        case 1: break;  // missing
        case 2:
        case 3: e.SetInt64(name, static_cast<int64_t>(rng_.Uniform(6)) - 2); break;
        case 4: e.SetDouble(name, static_cast<double>(rng_.Uniform(8)) / 2 - 1); break;
        case 5: {
          static const char* const kStrings[] = {"",         "a",          "ab",        "abc",
                                                 "b",        "x_y",        "ba",        "abcc",
                                                 "abcdefgh", "abcdefghij", "abcdefghiX"};
          e.SetString(name, kStrings[rng_.Uniform(std::size(kStrings))]);
          break;
        }
        case 6: e.SetBool(name, rng_.OneIn(2)); break;
        case 7: e.SetDouble(name, kNaN); break;
        case 8: {
          static const int64_t kInts[] = {INT64_MAX, INT64_MIN, 9007199254740993, 9007199254740992};
          e.SetInt64(name, kInts[rng_.Uniform(std::size(kInts))]);
          break;
        }
        case 9: {
          static const double kDoubles[] = {1e300, -1e300, 9007199254740992.0,
                                            0.5,   -0.0,   std::numeric_limits<double>::infinity()};
          e.SetDouble(name, kDoubles[rng_.Uniform(std::size(kDoubles))]);
          break;
        }
        default: e.SetInt64(name, 1); break;
      }
    }
    return e;
  }

 private:
  Rng& rng_;
  double range_heavy_;
};

// Random churn of `ids` subscriptions (a share `range_heavy` of them conjunctions of ranges,
// `topic_share` of them with a topic filter), each published state checked on random events.
void CheckRandomChurn(uint64_t seed_base, int seeds, uint64_t kIds, int steps, double range_heavy,
                      bool filters) {
  for (uint64_t seed : Seeds(seed_base, seeds)) {
    INFO("seed " << seed);
    Rng rng(seed);
    RandomWorld world(&rng, range_heavy);
    const size_t max_unpublished = std::vector<size_t>{1, 5, 64, 100000}[seed % 4];
    Matcher m(MatcherOptions{.max_unpublished = max_unpublished});
    std::map<uint64_t, Subscription> current;    // every change made
    std::map<uint64_t, Subscription> published;  // what Match must see
    size_t unpublished = 0;
    auto changed = [&] {
      if (++unpublished >= max_unpublished) {
        published = current;
        unpublished = 0;
      }
    };
    size_t checked = 0;
    for (int step = 0; step < steps; ++step) {
      const uint64_t id = rng.Uniform(kIds);
      if (current.contains(id) && rng.OneIn(3)) {
        REQUIRE_OK(m.Remove(SubscriberId{id}));
        current.erase(id);
        changed();
      } else if (!current.contains(id)) {
        const std::string selector = world.Selector();
        const std::string filter = filters ? world.Filter() : "";
        absl::StatusOr<Subscription> sub = Subscription::Create(selector, filter);
        if (!sub.ok()) continue;  // e.g. an ordering comparison the parser refuses
        REQUIRE_OK(m.Add(SubscriberId{id}, *sub));
        current.emplace(id, *sub);
        changed();
      }
      if (rng.OneIn(40)) {
        m.Publish();
        published = current;
        unpublished = 0;
      }
      if (step % 10 == 0 && (steps <= 2000 || step % 100 == 0 || step + 10 >= steps)) {
        for (int k = 0; k < 8; ++k) {
          const Event e = world.RandomEvent();
          std::vector<uint64_t> expected;
          for (const auto& [sid, sub] : published) {
            if (sub.Matches(e)) expected.push_back(sid);
          }
          const std::vector<uint64_t> got = MatchIds(m, e);
          if (got != expected) {
            std::string diff;
            for (uint64_t x : got) {
              if (!std::binary_search(expected.begin(), expected.end(), x)) {
                diff += absl::StrCat(
                    " extra ", x, " [", published.at(x).selector().text(), " | ",
                    published.at(x).topic_filter() ? published.at(x).topic_filter()->text() : "",
                    "]");
              }
            }
            for (uint64_t x : expected) {
              if (!std::binary_search(got.begin(), got.end(), x)) {
                diff += absl::StrCat(
                    " missing ", x, " [", published.at(x).selector().text(), " | ",
                    published.at(x).topic_filter() ? published.at(x).topic_filter()->text() : "",
                    "]");
              }
            }
            std::string attrs;
            for (const Attribute& a : e.attributes()) {
              attrs += absl::StrCat(" ", a.name, "#", a.value.index(), "=");
              std::visit([&](const auto& v) { attrs += absl::StrCat(v); }, a.value);
            }
            INFO("event topic '" << e.topic() << "' attrs" << attrs << "; diff:" << diff);
            REQUIRE(got == expected);
          }
          ++checked;
        }
      }
    }
    REQUIRE(checked > 0);
  }
}

TEST_CASE("the matcher's answer equals evaluating every subscription, under random churn",
          "[matcher][random]") {
  CheckRandomChurn(5000, 12, /*ids=*/300, /*steps=*/1500, /*range_heavy=*/0.25,
                   /*filters=*/true);
}

TEST_CASE("conjunctions of ranges under random churn match exactly, through the range index",
          "[matcher][random]") {
  // Enough subscriptions without a topic filter that the range index's grids are cut into
  // buckets, rebuilt as they grow, and purged of removed subscriptions.
  CheckRandomChurn(7000, 6, /*ids=*/2000, /*steps=*/8000, /*range_heavy=*/0.85,
                   /*filters=*/false);
}

// ---------------------------------------------------------------------------------------------
// The range index and the planner's choice of it (internal: lib/matcher/range_index.h, plan.h).

namespace mi = matcher_internal;

// A range index driven alongside a plain list of the same terms, with its two copies changed as
// the matcher changes them: each change reaches one copy at once and the other at CatchUp, and
// the copies swap roles at each CatchUp. Owners are fake pointers into `tokens`, never read by
// the index.
class RangeIndexModel {
 public:
  explicit RangeIndexModel(size_t capacity) : tokens_(capacity) {}

  void Add(uint64_t id, std::vector<mi::RangeTerm> terms) {
    const uint32_t slot = index_.File(first_, terms);
    index_.Enter(first_, slot, Owner(id));
    slots_[id] = slot;
    terms_[first_][id] = terms;
    lagging_.push_back(Change{true, id, slot, std::move(terms)});
  }
  void Remove(uint64_t id) {
    const uint32_t slot = slots_.at(id);
    index_.Leave(first_, slot);
    slots_.erase(id);
    terms_[first_].erase(id);
    lagging_.push_back(Change{false, id, slot, {}});
  }
  // The other copy applies the changes it lacks; then it is the first to change.
  void CatchUp() {
    index_.Flush(first_);
    const int second = 1 - first_;
    for (Change& c : lagging_) {
      if (c.add) {
        index_.Enter(second, c.slot, Owner(c.id));
        terms_[second][c.id] = std::move(c.terms);
      } else {
        index_.Leave(second, c.slot);
        terms_[second].erase(c.id);
      }
    }
    lagging_.clear();
    first_ = second;
  }
  // The copy with every change, and the one that may lag.
  int newer() const { return first_; }
  int older() const { return 1 - first_; }

  // The ids the index finds in `copy` for `values` (by attribute id), sorted; and the ids of that
  // copy whose every term holds for the float rounding of a numeric, non-NaN value.
  std::vector<uint64_t> Found(int copy, const std::vector<const AttributeValue*>& values,
                              bool* exact) {
    if (copy == first_) index_.Flush(copy);  // as the matcher does before publishing it
    *exact = index_.Match(copy, values.data(), scratch_);
    std::vector<uint64_t> ids;
    for (uint32_t slot : scratch_.survivors) ids.push_back(Id(index_.owner(copy, slot)));
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  std::vector<uint64_t> Expected(int copy, const std::vector<const AttributeValue*>& values) const {
    std::vector<uint64_t> ids;
    for (const auto& [id, terms] : terms_[copy]) {
      bool all = true;
      for (const mi::RangeTerm& t : terms) {
        const AttributeValue* v = values[t.attr];
        if (v == nullptr || v->index() > 1) {
          all = false;
          break;
        }
        const double d = mi::RangeValue(*v);
        const float x = mi::FloatRounding::Nearest(d);
        all = all && !std::isnan(d) && t.lo <= x && x <= t.hi;
      }
      if (all) ids.push_back(id);
    }
    return ids;  // terms_ is ordered by id
  }
  // Both copies' answers checked.
  void Check(const std::vector<const AttributeValue*>& values, bool* exact) {
    for (int copy : {0, 1}) {
      INFO("copy " << copy << (copy == first_ ? " (newer)" : " (older)"));
      REQUIRE(Found(copy, values, exact) == Expected(copy, values));
    }
  }
  mi::RangeIndex& index() { return index_; }

 private:
  struct Change {
    bool add;
    uint64_t id;
    uint32_t slot;
    std::vector<mi::RangeTerm> terms;
  };
  const mi::Record* Owner(uint64_t id) {
    return reinterpret_cast<const mi::Record*>(&tokens_.at(id));
  }
  uint64_t Id(const mi::Record* owner) const {
    return static_cast<uint64_t>(reinterpret_cast<const uint64_t*>(owner) - tokens_.data());
  }

  std::vector<uint64_t> tokens_;
  mi::RangeIndex index_;
  mi::RangeScratch scratch_;
  int first_ = 0;
  std::vector<Change> lagging_;
  std::map<uint64_t, uint32_t> slots_;
  std::map<uint64_t, std::vector<mi::RangeTerm>> terms_[2];
};

TEST_CASE("the range index finds exactly the subscriptions all of whose ranges hold, under churn",
          "[matcher]") {
  constexpr uint32_t kAttrs = 6;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (uint64_t seed : Seeds(9100, 4)) {
    INFO("seed " << seed);
    Rng rng(seed);
    RangeIndexModel model(20000);
    auto bound = [&] { return static_cast<float>(rng.Uniform(41)) / 4 - 1; };  // -1 .. 9
    std::vector<uint64_t> live;
    uint64_t next = 0;
    const std::vector<AttributeValue> kOdd = {std::string("x"), true, kNaN};
    for (int round = 0; round < 60; ++round) {
      // Grow by a few hundred, then remove a random share: grids are rebuilt as they grow and
      // purged as removals pile up.
      for (int k = 0; k < 300; ++k) {
        std::vector<mi::RangeTerm> terms;
        std::vector<uint32_t> attrs = {0, 1, 2, 3, 4, 5};
        for (uint64_t i = 0, n = rng.Range(1, 4); i < n; ++i) {
          std::swap(attrs[i], attrs[i + rng.Uniform(kAttrs - i)]);
          float lo = bound(), hi = bound();
          if (!rng.OneIn(8) && lo > hi) std::swap(lo, hi);  // some empty ranges stay
          if (rng.OneIn(6)) lo = -kInf;
          if (rng.OneIn(6)) hi = kInf;
          terms.push_back(mi::RangeTerm{attrs[i], lo, hi});
        }
        model.Add(next, std::move(terms));
        live.push_back(next++);
      }
      for (size_t k = 0, n = live.size() / (round % 3 == 2 ? 2 : 5); k < n; ++k) {
        const size_t i = rng.Uniform(live.size());
        model.Remove(live[i]);
        live[i] = live.back();
        live.pop_back();
      }
      // Mostly the copies are apart by a round's changes (some of them adds and removes of one
      // subscription before the other copy has either), sometimes by several rounds'.
      if (!rng.OneIn(4)) model.CatchUp();
      for (int e = 0; e < 20; ++e) {
        std::vector<AttributeValue> storage(kAttrs);
        std::vector<const AttributeValue*> values(kAttrs, nullptr);
        for (uint32_t a = 0; a < kAttrs; ++a) {
          switch (rng.Uniform(6)) {
            case 0: continue;  // missing
            case 1: storage[a] = kOdd[rng.Uniform(kOdd.size())]; break;
            case 2: storage[a] = static_cast<int64_t>(rng.Uniform(12)) - 2; break;
            default: storage[a] = static_cast<double>(bound()); break;  // often on a bound
          }
          values[a] = &storage[a];
        }
        bool exact = false;
        model.Check(values, &exact);
        REQUIRE(exact);  // quarters and small integers are floats
      }
      // What a change replaced is freed once the other copy changes (no reader can hold it).
      REQUIRE(model.index().retired() <= 2 * (kAttrs + 1) * 64);
    }
    REQUIRE(model.index().buckets(0) > 1);  // the grids were cut
  }
}

TEST_CASE("the range index says when an event value is not exactly a float", "[matcher]") {
  RangeIndexModel model(4);
  model.Add(1, {mi::RangeTerm{0, 0, 1}, mi::RangeTerm{1, -1, 1e30f}});
  model.CatchUp();
  auto found = [&](AttributeValue a, AttributeValue b, bool* exact) {
    std::vector<const AttributeValue*> values = {&a, &b};
    return model.Found(model.newer(), values, exact);
  };
  bool exact = false;
  REQUIRE(found(int64_t{1}, 0.5, &exact) == std::vector<uint64_t>{1});
  REQUIRE(exact);
  REQUIRE(found(0.1, 0.5, &exact) == std::vector<uint64_t>{1});
  REQUIRE_FALSE(exact);  // 0.1 is no float: the survivor must be verified
  REQUIRE(found(int64_t{0}, int64_t{9007199254740993}, &exact) == std::vector<uint64_t>{1});
  REQUIRE_FALSE(exact);
  REQUIRE(found(int64_t{0}, std::string("1"), &exact).empty());
  REQUIRE(found(int64_t{2}, 0.5, &exact).empty());
}

TEST_CASE("the range index reuses a removed subscription's slot only once its terms are purged",
          "[matcher]") {
  RangeIndexModel model(1000);
  for (uint64_t id = 0; id < 200; ++id) model.Add(id, {mi::RangeTerm{0, 0, 10}});
  model.CatchUp();
  for (uint64_t id = 0; id < 100; ++id) model.Remove(id);
  REQUIRE(model.index().dead() == 0);  // left by one copy only: still filed
  model.CatchUp();
  REQUIRE(model.index().dead() == 100);  // not yet reused: 100 <= 100 / 2 + 64
  for (uint64_t id = 200; id < 300; ++id) model.Add(id, {mi::RangeTerm{1, 0, 10}});
  const AttributeValue five = int64_t{5};
  std::vector<const AttributeValue*> values = {&five, nullptr};
  bool exact = false;
  model.Check(values, &exact);  // 100..199
  for (uint64_t id = 100; id < 160; ++id) model.Remove(id);
  model.CatchUp();
  REQUIRE(model.index().dead() < 60);  // purged on the way
  REQUIRE(model.index().size(0) == 140);
  REQUIRE(model.index().size(1) == 140);
  for (uint64_t id = 300; id < 500; ++id) model.Add(id, {mi::RangeTerm{0, 6, 7}});
  model.Check(values, &exact);  // 160..199, and 300..499 in the newer copy only
  values = {nullptr, &five};
  model.Check(values, &exact);  // 200..299
  model.CatchUp();
  values = {&five, &five};
  model.Check(values, &exact);
}

// Compiles `selector` as the matcher would, with `stats`.
struct Compiled {
  explicit Compiled(absl::string_view selector, const mi::AccessStats& stats = mi::AccessStats())
      : rec(mi::Compile(
            SubscriberId{1}, Sub(selector),
            [this](absl::string_view name) {
              auto [it, inserted] = ids.try_emplace(std::string(name), ids.size());
              return it->second;
            },
            stats, pool, &view, &terms)) {}
  ~Compiled() { mi::DestroyRecord(rec, pool); }
  mi::Access::Kind kind() const { return rec->accesses[0].kind; }

  mi::Pool pool;
  selector_program::View view;
  std::map<std::string, uint32_t> ids;
  std::vector<mi::RangeTerm> terms;  // of a kRanges record
  mi::Record* rec;
};

TEST_CASE("the planner files conjunctions of unselective ranges under the range index",
          "[matcher]") {
  using Kind = mi::Access::Kind;
  {
    Compiled c("a BETWEEN 0 AND 100 AND b >= 5 AND b <= 8");
    REQUIRE(c.kind() == Kind::kRanges);
    REQUIRE(c.terms.size() == 2);
    REQUIRE_FALSE(c.rec->ranges_proven);  // b's two conjuncts merged: checked
  }
  {
    Compiled c("a BETWEEN 0 AND 100 AND b BETWEEN -3 AND 2.5 AND c <= 7");
    REQUIRE(c.kind() == Kind::kRanges);
    REQUIRE(c.rec->ranges_proven);
  }
  REQUIRE_FALSE(Compiled("a > 0 AND b < 1").rec->ranges_proven);                 // exclusive
  REQUIRE_FALSE(Compiled("a >= 0.1 AND b <= 1").rec->ranges_proven);             // 0.1: no float
  REQUIRE_FALSE(Compiled("a >= 0 AND b <= 1 AND s = 'x'").rec->ranges_proven);   // a string check
  REQUIRE(Compiled("a BETWEEN 0 AND 100 AND s = 'x'").kind() != Kind::kRanges);  // one range
  REQUIRE(Compiled("a >= 0 AND a <= 9").kind() != Kind::kRanges);                // one attribute
  // An equality access: the range index only when that key is crowded.
  REQUIRE(Compiled("a BETWEEN 0 AND 100 AND b < 5 AND s = 'x'").kind() == Kind::kEqString);

  // Once a's ranges are known to span [0, 10000], a range of 50 on it is selective.
  mi::AccessStats stats;
  Compiled wide("a BETWEEN 0 AND 10000 AND b BETWEEN 0 AND 10000");
  stats.Count(*wide.rec, +1, wide.terms);
  REQUIRE(Compiled("a BETWEEN 10 AND 60 AND b BETWEEN 0 AND 5000", stats).kind() ==
          Kind::kInterval);
  REQUIRE(Compiled("a BETWEEN 10 AND 2000 AND b BETWEEN 0 AND 5000", stats).kind() ==
          Kind::kRanges);
}

// ---------------------------------------------------------------------------------------------
// Readers and a writer.

// Phase p adds block p (subs.size() subscribers, all matching `event`) and removes block p - 3,
// then publishes, while three readers match `event`: after publication p, exactly blocks
// max(1, p - 2)..p are present, and each reader's answer must be one publication's whole.
void CheckWholePublications(const std::vector<Subscription>& subs, const Event& event,
                            uint64_t phases) {
  const uint64_t kBlock = subs.size();
  Matcher m(MatcherOptions{.max_unpublished = 1 << 20});
  std::atomic<uint64_t> published_phase{0};
  std::atomic<bool> done{false};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> matches{0};
  absl::Mutex mu;
  std::string first_failure;

  auto reader = [&] {
    std::vector<SubscriberId> ids;
    while (!done.load(std::memory_order_acquire)) {
      const uint64_t before = published_phase.load(std::memory_order_acquire);
      ids.clear();
      m.Match(event, &ids);
      const uint64_t after = published_phase.load(std::memory_order_acquire);
      matches.fetch_add(1, std::memory_order_relaxed);
      // Which phase's set is this?
      std::map<uint64_t, uint64_t> per_block;
      for (SubscriberId id : ids) per_block[id.value / kBlock]++;
      uint64_t q = per_block.empty() ? 0 : per_block.rbegin()->first;
      std::string problem;
      if (q < before || q > after + 1)
        problem = absl::StrCat("phase ", q, " outside [", before, ", ", after + 1, "]");
      for (uint64_t b = (q > 2 ? q - 2 : 1); q > 0 && b <= q; ++b) {
        if (per_block[b] != kBlock) problem += absl::StrCat(" block ", b, " has ", per_block[b]);
      }
      if (per_block.size() != std::min<uint64_t>(q, 3)) problem += " unexpected blocks";
      if (!problem.empty()) {
        failures.fetch_add(1);
        absl::MutexLock lock(&mu);
        if (first_failure.empty()) first_failure = problem;
      }
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) readers.emplace_back(reader);

  for (uint64_t p = 1; p <= phases; ++p) {
    for (uint64_t i = 0; i < kBlock; ++i) REQUIRE_OK(m.Add(SubscriberId{p * kBlock + i}, subs[i]));
    if (p > 3) {
      for (uint64_t i = 0; i < kBlock; ++i)
        REQUIRE_OK(m.Remove(SubscriberId{(p - 3) * kBlock + i}));
    }
    m.Publish();
    published_phase.store(p, std::memory_order_release);
    if (p % 64 == 0) std::this_thread::yield();
  }
  // Let the readers see the last phase for a moment.
  const uint64_t seen = matches.load();
  while (matches.load() < seen + 100) std::this_thread::yield();
  done.store(true, std::memory_order_release);
  for (std::thread& t : readers) t.join();
  INFO(first_failure);
  REQUIRE(failures.load() == 0);
  REQUIRE(matches.load() > 100);
}

TEST_CASE("a subscription proven by its ranges keeps only its terms, and compares them exactly",
          "[matcher]") {
  {
    Compiled c("a BETWEEN 0 AND 16777216 AND b BETWEEN -2.5 AND 100 AND c <= 7");
    REQUIRE(c.kind() == mi::Access::Kind::kRanges);
    REQUIRE(c.rec->ranges_proven);
    REQUIRE_FALSE(c.rec->program);  // no program: its terms say all
    REQUIRE(c.rec->terms().size() == 3);
    REQUIRE(c.rec->lists() == nullptr);
  }
  Matcher m;
  REQUIRE_OK(m.Add(SubscriberId{1}, Sub("a BETWEEN 0 AND 16777216 AND b BETWEEN -2.5 AND 100")));
  m.Publish();
  auto event = [](AttributeValue a, AttributeValue b) {
    Event e;
    e.Set("a", std::move(a));
    e.Set("b", std::move(b));
    return e;
  };
  const std::vector<uint64_t> one = {1};
  REQUIRE(MatchIds(m, event(int64_t{16777216}, 100.0)) == one);
  REQUIRE(MatchIds(m, event(int64_t{0}, -2.5)) == one);
  // Values whose nearest float is a bound, beyond it: the range index lets them through, the
  // exact comparison refuses them.
  REQUIRE(MatchIds(m, event(int64_t{16777217}, 50.0)).empty());
  REQUIRE(MatchIds(m, event(int64_t{5}, 100.000000000001)).empty());
  REQUIRE(MatchIds(m, event(int64_t{5}, -2.5000000000001)).empty());
  // Inexact values inside: matched.
  REQUIRE(MatchIds(m, event(int64_t{16777215}, 99.99999999999)) == one);
  REQUIRE(MatchIds(m, event(int64_t{5}, kNaN)).empty());
  REQUIRE(MatchIds(m, event(int64_t{5}, std::string("50"))).empty());
}

TEST_CASE("readers matching while the owner churns always see one whole publication",
          "[matcher][concurrency]") {
  const char* const kSelectors[] = {"",
                                    "x >= 0",
                                    "k = 'v'",
                                    "x BETWEEN 0 AND 10",
                                    "k LIKE 'v%'",
                                    "x IN (1, 2)",
                                    "k = 'v' OR x < 0",
                                    "NOT (x < 0)",
                                    "x BETWEEN 0 AND 10 AND y >= 0"};  // the range index
  const char* const kFilters[] = {"", "t/u", "t/#", "+/u"};
  std::vector<Subscription> subs;
  for (uint64_t i = 0; i < 50; ++i) {
    subs.push_back(
        Sub(kSelectors[i % std::size(kSelectors)], kFilters[(i / 8) % std::size(kFilters)]));
  }
  Event event = Topic("t/u");
  event.SetInt64("x", 1).SetInt64("y", 2).SetString("k", "v");
  CheckWholePublications(subs, event, 400);
}

TEST_CASE(
    "readers matching while the range index is filled, cut, rebuilt and purged see one "
    "whole publication",
    "[matcher][concurrency]") {
  // Conjunctions of wide ranges (the range index) of varied bounds, so that its grids are cut;
  // each phase files 300 and kills 300: cells grow, grids are rebuilt and purged, slots reused,
  // all while readers match the other copy.
  Rng rng(4242);
  std::vector<Subscription> subs;
  for (int i = 0; i < 300; ++i) {
    const auto lo = [&] { return 500 - static_cast<int64_t>(rng.Uniform(400)); };
    const auto hi = [&] { return 500 + static_cast<int64_t>(rng.Uniform(400)); };
    std::string selector =
        absl::StrCat("x BETWEEN ", lo(), " AND ", hi(), " AND y BETWEEN ", lo(), " AND ", hi());
    if (i % 3 == 0) absl::StrAppend(&selector, " AND z >= ", lo());
    subs.push_back(Sub(selector, i % 2 == 0 ? "" : "t/u"));
  }
  Event event = Topic("t/u");
  event.SetInt64("x", 500).SetInt64("y", 500).SetInt64("z", 500);
  CheckWholePublications(subs, event, 150);
}

}  // namespace
}  // namespace gryph
