// The stored key and value layouts (lib/*/*_keys.h, docs/format.md): each Parse inverts its
// Encode, refuses what is not its layout, and the bytes are those docs/format.md gives. The whole
// stored format is checked against a checked-in store in store_golden_test.cc.

#include <string>

#include "absl/strings/escaping.h"
#include "lib/pfs/pfs_keys.h"
#include "lib/pubend/pubend_keys.h"
#include "lib/shb/shb_keys.h"
#include "lib/util/coding.h"
#include "lib/util/fnv1a.h"
#include "lib/util/pubend_prefix.h"
#include "tests/test_util.h"

namespace gryph::internal {
namespace {

std::string Hex(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

TEST_CASE("keys: fixed-width big-endian coding", "[keys]") {
  char buf[8];
  EncodeFixed64BE(buf, 0x0102030405060708ull);
  CHECK(Hex(absl::string_view(buf, 8)) == "0102030405060708");
  CHECK(DecodeFixed64BE(buf) == 0x0102030405060708ull);
  EncodeFixed32BE(buf, 0xa0b0c0d0u);
  CHECK(Hex(absl::string_view(buf, 4)) == "a0b0c0d0");
  CHECK(DecodeFixed32BE(buf) == 0xa0b0c0d0u);
  std::string s;
  PutFixed16BE(&s, 0x0102);
  CHECK(Hex(s) == "0102");
  CHECK(DecodeFixed16BE(s.data()) == 0x0102);
  for (int w = 1; w <= 8; ++w) {
    const uint64_t v = (w == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * w)) - 1) - 1;
    EncodeFixedBE(buf, v, w);
    CHECK(DecodeFixedBE(buf, w) == v);
    CHECK(BytesFor(v) == w);
  }
  CHECK(BytesFor(0) == 1);
  uint64_t a = 0, b = 0;
  CHECK(ParseFixed64BEPair(Fixed64BEPair(1, 2), &a, &b));
  CHECK((a == 1 && b == 2));
  CHECK_FALSE(ParseFixed64BEPair(std::string(15, '\0'), &a, &b));
}

TEST_CASE("keys: FNV-1a matches its published test values", "[keys]") {
  CHECK(Fnv1a64("") == 0xcbf29ce484222325ull);
  CHECK(Fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(Fnv1a64("foobar") == 0x85944171f73967e8ull);
}

TEST_CASE("keys: pubend prefixes keep each pubend's rows together", "[keys]") {
  CHECK(Hex(PubendPrefix(PubendId{7})) == "00000007");
  CHECK(PubendEnd(PubendId{7}) == PubendPrefix(PubendId{8}));
  CHECK(PubendEnd(PubendId{UINT32_MAX}).empty());
  const std::string k = PubendKey64(PubendId{7}, 20);
  CHECK(Hex(k) == "000000070000000000000014");  // docs/format.md's PFS example
  uint64_t x = 0;
  CHECK(ParsePubendKey64(k, PubendId{7}, &x));
  CHECK(x == 20);
  CHECK_FALSE(ParsePubendKey64(k, PubendId{8}, &x));
  CHECK_FALSE(ParsePubendKey64(k.substr(0, 11), PubendId{7}, &x));
}

TEST_CASE("keys: the pubend's layouts", "[keys]") {
  CHECK(ParseEventKey(PubendId{3}, EventKey(PubendId{3}, 99)) == Tick{99});
  CHECK_FALSE(ParseEventKey(PubendId{4}, EventKey(PubendId{3}, 99)).has_value());
  CHECK(Hex(MetaKey(PubendId{1}, kMetaAnnouncedTick)) == "0000000154");
  CHECK(ParseMetaTick(EncodeMetaTick(5)) == Tick{5});
  CHECK_FALSE(ParseMetaTick("short").has_value());
  CHECK(ParseDownstreamKey(DownstreamKey(PubendId{1}, "shb")) == "shb");
  const std::optional<DownstreamRow> row = ParseDownstreamRow(EncodeDownstreamRow({4, 9}));
  REQUIRE(row.has_value());
  CHECK((row->released == 4 && row->latest_delivered == 9));
  const std::string key = PublisherSequenceKey(PubendId{1}, "gw-a", 3);
  CHECK(Hex(key) ==
        "00000001"
        "0004"
        "67772d61"
        "0000000000000003");
  const std::optional<PublisherSequence> seq = ParsePublisherSequenceKey(key);
  REQUIRE(seq.has_value());
  CHECK((seq->name == "gw-a" && seq->sequence == 3));
  CHECK_FALSE(ParsePublisherSequenceKey(key.substr(0, key.size() - 1)).has_value());
  CHECK(Hex(EncodePublisherRow(41000)) == "02a8c002");
  absl::StatusOr<Tick> t = ParsePublisherRow(EncodePublisherRow(41000));
  REQUIRE_OK(t);
  CHECK(*t == 41000);
  CHECK_FALSE(ParsePublisherRow("\x01\x05").ok());  // an unknown version
  CHECK_FALSE(ParsePublisherRow(EncodePublisherRow(1) + "x").ok());
}

TEST_CASE("keys: the PFS's layouts", "[keys]") {
  Tick t = 0;
  CHECK(ParsePfsRecordKey(PfsRecordKey(PubendId{7}, 20), PubendId{7}, &t));
  CHECK(t == 20);
  uint64_t s = 0;
  CHECK(ParsePfsSubscriberKey(PfsSubscriberKey(PubendId{7}, SubscriberId{9}), PubendId{7}, &s));
  CHECK(s == 9);
  char row[kPfsSubscriberRowBytes];
  EncodePfsSubscriberRow(row, {10, 30});
  PfsSubscriberRow parsed;
  CHECK(ParsePfsSubscriberRow(absl::string_view(row, sizeof(row)), &parsed));
  CHECK((parsed.registered_at == 10 && parsed.last_index == 30));
  CHECK(Hex(PfsMetaKey(PubendId{7}, kPfsMetaCheckpoint)) == "0000000743");
}

TEST_CASE("keys: the subscriber hosting broker's layouts", "[keys]") {
  CHECK(ParseNextId(EncodeNextId(3)) == uint64_t{3});
  const std::optional<DeliveredRow> d = ParseDeliveredRow(EncodeDeliveredRow({5, 8}));
  REQUIRE(d.has_value());
  CHECK((d->latest_delivered == 5 && d->lease == 8));
  const std::string sub = EncodeSubscriptionRow({2, 1, "", "orders/#", ""});
  CHECK(Hex(sub) == "020100086f72646572732f23");  // docs/format.md: id, epoch, selector, filter
  absl::StatusOr<SubscriptionRow> r = ParseSubscriptionRow(sub);
  REQUIRE_OK(r);
  CHECK((r->id == 2 && r->epoch == 1 && r->selector.empty() && r->topic_filter == "orders/#"));
  CHECK_FALSE(ParseSubscriptionRow(sub + "x").ok());
  // Since stored programs: the selector's program after the filter.
  const std::string with_program = EncodeSubscriptionRow({2, 1, "", "orders/#", "\x01"});
  CHECK(Hex(with_program) == "020100086f72646572732f230101");
  r = ParseSubscriptionRow(with_program);
  REQUIRE_OK(r);
  CHECK((r->topic_filter == "orders/#" && r->program == "\x01"));
  CHECK_FALSE(ParseSubscriptionRow(sub + std::string(1, '\0')).ok());  // an empty program
  CHECK_FALSE(ParseSubscriptionRow(with_program + "x").ok());
  const std::string key = PositionKey(SubscriberId{2}, PubendId{1});
  CHECK(Hex(key) == "000000000000000200000001");
  const std::optional<PositionKeyParts> k = ParsePositionKey(key);
  REQUIRE(k.has_value());
  CHECK((k->subscriber == SubscriberId{2} && k->pubend == PubendId{1}));
  const std::optional<PositionRow> p = ParsePositionRow(EncodePositionRow({0, 41001}));
  REQUIRE(p.has_value());
  CHECK((p->created == 0 && p->released == 41001));
}

}  // namespace
}  // namespace gryph::internal
