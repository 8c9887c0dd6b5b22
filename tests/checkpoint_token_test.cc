#include "gryph/checkpoint_token.h"

#include "tests/test_util.h"

namespace gryph {
namespace {

CheckpointToken Ct(std::initializer_list<std::pair<uint32_t, Tick>> entries) {
  CheckpointToken ct;
  for (auto [p, t] : entries) ct.Set(PubendId{p}, t);
  return ct;
}

TEST_CASE("a checkpoint token is at tick 0 for pubends it does not name", "[ct]") {
  CheckpointToken ct = Ct({{1, 100}});
  REQUIRE(ct.Get(PubendId{1}) == 100);
  REQUIRE(ct.Get(PubendId{2}) == 0);
  REQUIRE(ct.Names(PubendId{1}));
  REQUIRE_FALSE(ct.Names(PubendId{2}));
}

TEST_CASE("a checkpoint token names a pubend at tick 0 apart from one it does not name", "[ct]") {
  // A subscription created before its broker heard from pubend 1 stands at 1:0: owed every match
  // of it. A token that does not name 1 says nothing about it.
  CheckpointToken ct = Ct({{1, 0}});
  REQUIRE(ct.Names(PubendId{1}));
  REQUIRE_FALSE(ct.empty());
  REQUIRE_FALSE(ct == CheckpointToken());
  REQUIRE((ct <=> CheckpointToken()) == std::partial_ordering::equivalent);
  auto decoded = CheckpointToken::Decode(ct.Encode());
  REQUIRE_OK(decoded);
  REQUIRE(*decoded == ct);
  REQUIRE(decoded->Names(PubendId{1}));
  REQUIRE(ct.ToString() == "{p1:0}");
  // Merging names the union.
  CheckpointToken merged = Ct({{2, 5}});
  merged.Merge(ct);
  REQUIRE(merged == Ct({{1, 0}, {2, 5}}));
}

TEST_CASE("a checkpoint token without a zero tick is written as version 1, others as 2", "[ct]") {
  REQUIRE(Ct({{1, 6}}).Encode() == std::string("\x01\x01\x01\x06", 4));
  REQUIRE(Ct({{1, 0}}).Encode() == std::string("\x02\x01\x01\x00", 4));
  // Version 1 from an older writer still reads.
  auto v1 = CheckpointToken::Decode(std::string("\x01\x02\x01\x06\x03\x07", 6));
  REQUIRE_OK(v1);
  REQUIRE(*v1 == Ct({{1, 6}, {3, 7}}));
  REQUIRE_CODE(CheckpointToken::Decode(std::string("\x03\x00", 2)),
               absl::StatusCode::kInvalidArgument);
  // Version 2 holding what version 1 can is not what the encoder writes.
  REQUIRE_CODE(CheckpointToken::Decode(std::string("\x02\x01\x01\x06", 4)),
               absl::StatusCode::kInvalidArgument);
}

TEST_CASE("checkpoint tokens are ordered component by component", "[ct]") {
  REQUIRE(Ct({{1, 5}, {2, 7}}) < Ct({{1, 6}, {2, 7}}));
  REQUIRE(Ct({{1, 5}}) <= Ct({{1, 5}, {2, 1}}));
  REQUIRE(Ct({{1, 5}, {2, 7}}) > Ct({{1, 5}}));
  const auto cmp = Ct({{1, 6}, {2, 1}}) <=> Ct({{1, 5}, {2, 2}});
  REQUIRE(cmp == std::partial_ordering::unordered);
  REQUIRE((Ct({{1, 3}}) <=> Ct({{1, 3}})) == std::partial_ordering::equivalent);
}

TEST_CASE("merging takes the maximum of each pubend", "[ct]") {
  CheckpointToken ct = Ct({{1, 6}, {2, 1}});
  ct.Merge(Ct({{1, 5}, {2, 2}, {3, 9}}));
  REQUIRE(ct == Ct({{1, 6}, {2, 2}, {3, 9}}));
}

TEST_CASE("a checkpoint token round-trips and rejects malformed bytes", "[ct]") {
  CheckpointToken ct = Ct({{1, 6}, {7, 1ull << 60}, {UINT32_MAX, 3}});
  auto decoded = CheckpointToken::Decode(ct.Encode());
  REQUIRE_OK(decoded);
  REQUIRE(*decoded == ct);
  const std::string bytes = ct.Encode();
  for (size_t n = 0; n < bytes.size(); ++n) {
    REQUIRE_CODE(CheckpointToken::Decode(bytes.substr(0, n)), absl::StatusCode::kInvalidArgument);
  }
  // Pubends out of order: {2:1, 1:1}.
  REQUIRE_CODE(CheckpointToken::Decode(std::string("\x01\x02\x02\x01\x01\x01", 6)),
               absl::StatusCode::kInvalidArgument);
  // A zero tick in version 1, which cannot hold one.
  REQUIRE_CODE(CheckpointToken::Decode(std::string("\x01\x01\x02\x00", 4)),
               absl::StatusCode::kInvalidArgument);
  REQUIRE(ct.ToString() == "{p1:6, p7:1152921504606846976, p4294967295:3}");
}

}  // namespace
}  // namespace gryph
