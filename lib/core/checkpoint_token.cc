#include "gryph/checkpoint_token.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/util/coding.h"

namespace gryph {

Tick CheckpointToken::Get(PubendId p) const {
  auto it = ticks_.find(p);
  return it == ticks_.end() ? 0 : it->second;
}

void CheckpointToken::Set(PubendId p, Tick t) { ticks_[p] = t; }

void CheckpointToken::Merge(const CheckpointToken& other) {
  for (const auto& [p, t] : other.ticks_) {
    Tick& mine = ticks_[p];
    mine = std::max(mine, t);
  }
}

std::partial_ordering operator<=>(const CheckpointToken& a, const CheckpointToken& b) {
  bool a_leads = false;
  bool b_leads = false;
  auto note = [&](Tick x, Tick y) {
    a_leads |= x > y;
    b_leads |= y > x;
  };
  for (const auto& [p, t] : a.ticks_) note(t, b.Get(p));
  for (const auto& [p, t] : b.ticks_) note(a.Get(p), t);
  if (a_leads && b_leads) return std::partial_ordering::unordered;
  if (a_leads) return std::partial_ordering::greater;
  if (b_leads) return std::partial_ordering::less;
  return std::partial_ordering::equivalent;
}

void CheckpointToken::EncodeTo(std::string* out) const {
  // Version 1 where it can hold the token, so that readers that know only it read it.
  const bool zero =
      std::any_of(ticks_.begin(), ticks_.end(), [](const auto& e) { return e.second == 0; });
  out->push_back(static_cast<char>(zero ? 2 : 1));
  internal::PutVarint64(out, ticks_.size());
  for (const auto& [p, t] : ticks_) {
    internal::PutVarint64(out, p.value);
    internal::PutVarint64(out, t);
  }
}

std::string CheckpointToken::Encode() const {
  std::string out;
  EncodeTo(&out);
  return out;
}

absl::StatusOr<CheckpointToken> CheckpointToken::Decode(absl::string_view bytes) {
  internal::ByteReader in(bytes, "checkpoint token");
  uint8_t version = 0;
  if (!in.ReadByte(&version, "version")) return in.status();
  if (version != 1 && version != 2) {
    in.Fail(absl::StrCat("unsupported version ", version));
    return in.status();
  }
  uint64_t count = 0;
  if (!in.ReadVarintAtMost(in.remaining() / 2, &count, "entry count")) return in.status();
  CheckpointToken ct;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t p = 0;
    uint64_t t = 0;
    if (!in.ReadVarintAtMost(UINT32_MAX, &p, "pubend") || !in.ReadVarint64(&t, "tick")) {
      return in.status();
    }
    if (!ct.ticks_.empty() && ct.ticks_.rbegin()->first.value >= p) {
      in.Fail(absl::StrCat("pubend ", p, " is out of order or repeated"));
      return in.status();
    }
    if (t == 0 && version == 1) {
      in.Fail(absl::StrCat("pubend ", p, " has tick 0, which version 1 cannot hold"));
      return in.status();
    }
    ct.ticks_.emplace(PubendId{static_cast<uint32_t>(p)}, t);
  }
  if (!in.ExpectEnd()) return in.status();
  // Version 2 only for what version 1 cannot hold: the decoder accepts what the encoder writes.
  if (version == 2 && std::none_of(ct.ticks_.begin(), ct.ticks_.end(),
                                   [](const auto& e) { return e.second == 0; })) {
    in.Fail("version 2 without a zero tick (it is written as version 1)");
    return in.status();
  }
  return ct;
}

std::string CheckpointToken::ToString() const {
  return absl::StrCat("{",
                      absl::StrJoin(ticks_, ", ",
                                    [](std::string* out, const auto& e) {
                                      absl::StrAppend(out, "p", e.first.value, ":", e.second);
                                    }),
                      "}");
}

}  // namespace gryph
