#include "gryph/testing/exactly_once_checker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gryph {

void ExactlyOnceChecker::Released(PubendId p, Tick t) {
  Tick& r = released_[p];
  r = std::max(r, t);
}

std::vector<std::string> ExactlyOnceChecker::Check(size_t max) const {
  std::vector<std::string> bad;
  for (const SubscriberRecord& a : subscribers_) {
    auto fail = [&](PubendId p, std::string what) {
      if (bad.size() < max) {
        bad.push_back(absl::StrCat(a.name, " [", a.subscription.selector().text(), "] pubend ",
                                   p.value, ": ", what));
      }
    };
    for (const auto& [p, events] : log_) {
      auto rit = released_.find(p);
      const Tick released = rit == released_.end() ? 0 : rit->second;
      std::vector<Tick> matching;
      for (const auto& [t, e] : events) {
        if (t > a.start.Get(p) && a.subscription.Matches(*e)) matching.push_back(t);
      }
      auto matches_in = [&](Tick lo, Tick hi) {  // a matching tick in (lo, hi]
        auto it = std::upper_bound(matching.begin(), matching.end(), lo);
        return it != matching.end() && *it <= hi;
      };
      Tick prev = a.start.Get(p);
      auto cit = a.consumed.find(p);
      if (cit != a.consumed.end()) {
        for (const Consumed& c : cit->second) {
          if (c.tick <= prev) {
            fail(p, absl::StrCat("tick ", c.tick, " not after ", prev, " (duplicate or reorder)"));
            break;
          }
          switch (c.kind) {
            case DeliveryKind::kEvent: {
              auto e = events.find(c.tick);
              if (e == events.end()) {
                fail(p, absl::StrCat("Event at ", c.tick, " which the pubend never logged"));
              } else if (c.event == nullptr || !(*e->second == *c.event)) {
                fail(p, absl::StrCat("Event at ", c.tick, " differs from the log"));
              } else if (!a.subscription.Matches(*c.event)) {
                fail(p, absl::StrCat("Event at ", c.tick, " does not match the subscription"));
              }
              if (matches_in(prev, c.tick - 1)) {
                fail(p, absl::StrCat("Event at ", c.tick, " skipped a match after ", prev));
              }
              break;
            }
            case DeliveryKind::kSilence:
              if (matches_in(prev, c.tick)) {
                fail(p, absl::StrCat("Silence at ", c.tick, " hid a match after ", prev));
              }
              break;
            case DeliveryKind::kGap:
              if (a.well_behaved) {
                fail(p, absl::StrCat("a well-behaved subscriber got a Gap at ", c.tick));
              }
              if (c.excusable_through) {
                const Tick excusable = *c.excusable_through;
                if (prev >= excusable) {
                  fail(p, absl::StrCat("Gap (", prev, ",", c.tick, "] but nothing above ",
                                       excusable, " was released or consumed when it came"));
                } else if (matches_in(excusable, c.tick)) {
                  fail(p, absl::StrCat("Gap (", prev, ",", c.tick, "] hid a match above ",
                                       excusable, ", which was neither released nor consumed"));
                }
              } else if (prev >= released && prev >= a.high_water.Get(p)) {
                fail(p, absl::StrCat("Gap (", prev, ",", c.tick, "] but nothing above ", released,
                                     " was released and the subscriber had not consumed it"));
              }
              break;
          }
          prev = c.tick;
        }
      }
      if (!matching.empty() && prev < matching.back()) {
        fail(p, absl::StrCat("stopped at ", prev, " but the last match is ", matching.back()));
      }
    }
  }
  return bad;
}

}  // namespace gryph
