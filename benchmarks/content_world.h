// The selectors and events of the content workloads (match_content, match_concurrent, restart):
// trading events with 10 attributes and the selector mix a trading desk's subscribers write,
// generated from a seed, so that every run and every workload sees the same ones.

#ifndef GRYPH_BENCHMARKS_CONTENT_WORLD_H_
#define GRYPH_BENCHMARKS_CONTENT_WORLD_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gryph/event.h"
#include "gryph/subscription.h"

namespace gryph::bench {

// A small deterministic generator (splitmix64), the same on every platform.
class Rand {
 public:
  explicit Rand(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  }
  uint64_t Uniform(uint64_t n) { return Next() % n; }
  double Real(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(Next() >> 11) / 9007199254740992.0;
  }

 private:
  uint64_t s_;
};

// The subscription, or the process ends saying why (generated selectors must parse).
inline Subscription MustCreate(const std::string& selector, const std::string& filter) {
  absl::StatusOr<Subscription> s = Subscription::Create(selector, filter);
  if (!s.ok()) {
    std::fprintf(stderr, "bad subscription '%s' '%s': %s\n", selector.c_str(), filter.c_str(),
                 s.status().ToString().c_str());
    std::abort();
  }
  return *std::move(s);
}

// Content: selectors over 10 attributes of trading events.
//
//   symbol    'S0'..'S4999'    price     double in [0, 1000)   quantity  int in [1, 1000]
//   exchange  'E0'..'E9'       side      'buy' / 'sell'        currency  5 codes
//   trader    'T0'..'T999'     region    'R0'..'R19'           urgent    bool
//   account   int in [0, 100000)
//
// Selector mix (fraction of subscriptions): the index's access in brackets.
//   41%    symbol = S AND price > p                                     [symbol key]
//   15%    symbol IN (S1, S2, S3) AND quantity BETWEEN q AND q + 200 AND side = 'buy'
//                                                                        [3 symbol keys]
//   20%    price BETWEEN lo AND lo + w AND quantity > q  (w in [1, 10))  [price interval]
//   10%    trader = T AND currency IN ('USD', 'EUR') AND urgent = TRUE   [trader key]
//    5%    symbol LIKE 'Sddd%' AND price < p                             [symbol prefix]
//    5%    (symbol = S AND price > p) OR (trader = T AND quantity < q)   [2 keys, deduped]
//    3%    exchange = E AND side = 'sell' AND account = n                [account key]
//    1%    region = R AND urgent AND quantity > q                        [region key]
//    0.01% residuals: NOT (side = 'buy'), symbol <> S, price > quantity  [scanned]
class ContentWorld {
 public:
  explicit ContentWorld(uint64_t seed) : r_(seed) {}

  std::string Symbol() { return absl::StrCat("'S", r_.Uniform(5000), "'"); }
  std::string Trader() { return absl::StrCat("'T", r_.Uniform(1000), "'"); }

  std::string Selector() {
    const uint64_t x = r_.Uniform(10000);
    if (x < 4100) return absl::StrCat("symbol = ", Symbol(), " AND price > ", Price());
    if (x < 5600) {
      const uint64_t q = 1 + r_.Uniform(800);
      return absl::StrCat("symbol IN (", Symbol(), ", ", Symbol(), ", ", Symbol(),
                          ") AND quantity BETWEEN ", q, " AND ", q + 200, " AND side = 'buy'");
    }
    if (x < 7600) {
      const double lo = r_.Real(0, 990);
      return absl::StrCat("price BETWEEN ", Fixed(lo), " AND ", Fixed(lo + r_.Real(1, 10)),
                          " AND quantity > ", 1 + r_.Uniform(1000));
    }
    if (x < 8600) {
      return absl::StrCat("trader = ", Trader(),
                          " AND currency IN ('USD', 'EUR') AND urgent = TRUE");
    }
    if (x < 9100) {
      return absl::StrCat("symbol LIKE 'S", 100 + r_.Uniform(400), "%' AND price < ", Price());
    }
    if (x < 9600) {
      return absl::StrCat("(symbol = ", Symbol(), " AND price > ", Price(),
                          ") OR (trader = ", Trader(), " AND quantity < ", 1 + r_.Uniform(1000),
                          ")");
    }
    if (x < 9900) {
      return absl::StrCat("exchange = 'E", r_.Uniform(10),
                          "' AND side = 'sell' AND account = ", r_.Uniform(100000));
    }
    if (x < 9999) {
      return absl::StrCat("region = 'R", r_.Uniform(20), "' AND urgent AND quantity > ",
                          1 + r_.Uniform(1000));
    }
    switch (r_.Uniform(3)) {
      case 0: return "NOT (side = 'buy')";
      case 1: return absl::StrCat("symbol <> ", Symbol());
      default: return "price > quantity";
    }
  }

  Event RandomEvent() {
    static const char* const kCurrencies[] = {"USD", "EUR", "JPY", "GBP", "CHF"};
    Event e;
    e.SetTopic("trades");
    e.SetString("symbol", absl::StrCat("S", r_.Uniform(5000)));
    e.SetDouble("price", r_.Real(0, 1000));
    e.SetInt64("quantity", static_cast<int64_t>(1 + r_.Uniform(1000)));
    e.SetString("exchange", absl::StrCat("E", r_.Uniform(10)));
    e.SetString("side", r_.Uniform(2) == 0 ? "buy" : "sell");
    e.SetString("currency", kCurrencies[r_.Uniform(5)]);
    e.SetString("trader", absl::StrCat("T", r_.Uniform(1000)));
    e.SetString("region", absl::StrCat("R", r_.Uniform(20)));
    e.SetBool("urgent", r_.Uniform(2) == 0);
    e.SetInt64("account", static_cast<int64_t>(r_.Uniform(100000)));
    return e;
  }

  std::vector<Subscription> Subscriptions(size_t n) {
    std::vector<Subscription> subs;
    subs.reserve(n);
    for (size_t i = 0; i < n; ++i) subs.push_back(MustCreate(Selector(), ""));
    return subs;
  }

  std::vector<Event> Events(size_t n) {
    std::vector<Event> events;
    for (size_t i = 0; i < n; ++i) events.push_back(RandomEvent());
    return events;
  }

 private:
  std::string Price() { return Fixed(r_.Real(0, 1000)); }
  static std::string Fixed(double d) { return absl::StrCat(static_cast<int64_t>(d * 100) / 100.0); }

  Rand r_;
};

}  // namespace gryph::bench

#endif  // GRYPH_BENCHMARKS_CONTENT_WORLD_H_
