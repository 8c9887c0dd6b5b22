// libFuzzer target for the parsers of stored rows (docs/format.md; lib/*/*_keys.h): what a
// broker reads back from its store when it opens, and what a damaged or foreign row presents.
// Beyond "no crash, no read past the row, no sanitizer report" it checks that every parser that
// accepts a row gives back an Encode of the same bytes, and that a PFS record's entries are
// read within the record (a lookup of each entry's subscriber finds an entry of that subscriber
// when the record's subscribers are sorted, as a writer writes them).
// The first byte chooses the layout; the rest is the row (key and value split at its first
// 0xff byte where a layout has both).

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"
#include "lib/pfs/pfs_keys.h"
#include "lib/pubend/pubend_keys.h"
#include "lib/shb/shb_keys.h"

namespace {

using gryph::fuzz::Fail;
namespace gi = gryph::internal;

void PfsRecord(absl::string_view value) {
  gi::PfsRecordView record;
  if (!record.Parse(value)) return;
  if (record.count() == 0) Fail("a parsed PFS record without entries");
  bool sorted = true;
  for (size_t i = 0; i < record.count(); ++i) {
    (void)record.delta(i);
    if (i > 0 && record.id(i) <= record.id(i - 1)) sorted = false;
  }
  for (size_t i = 0; i < record.count(); ++i) {
    const size_t found = record.Find(record.id(i));
    if (found > record.count()) Fail("a PFS lookup beyond the record");
    if (sorted && found != i) Fail("a PFS lookup misses an entry of a sorted record");
  }
}

void Subscription(absl::string_view value) {
  absl::StatusOr<gi::SubscriptionRow> row = gi::ParseSubscriptionRow(value);
  if (!row.ok()) return gryph::fuzz::CheckRefusal(row.status());
  if (gi::EncodeSubscriptionRow(*row) != value) Fail("a subscription row re-encodes differently");
}

void Publisher(absl::string_view key, absl::string_view value) {
  if (std::optional<gi::PublisherSequence> seq = gi::ParsePublisherSequenceKey(key)) {
    if (key.size() < gi::kPubendPrefixBytes) Fail("a publisher key shorter than its prefix");
    const gryph::PubendId p{gi::DecodeFixed32BE(key.data())};
    if (gi::PublisherSequenceKey(p, seq->name, seq->sequence) != key) {
      Fail("a publisher key re-encodes differently");
    }
  }
  absl::StatusOr<gryph::Tick> t = gi::ParsePublisherRow(value);
  if (t.ok() && gi::EncodePublisherRow(*t) != value) Fail("a publisher row re-encodes differently");
}

void Fixed(absl::string_view key, absl::string_view value) {
  const gryph::PubendId p{key.size() >= 4 ? gi::DecodeFixed32BE(key.data()) : 0};
  if (std::optional<gryph::Tick> t = gi::ParseEventKey(p, key)) {
    if (gi::EventKey(p, *t) != key) Fail("an event key re-encodes differently");
  }
  if (std::optional<gi::PositionKeyParts> k = gi::ParsePositionKey(key)) {
    if (gi::PositionKey(k->subscriber, k->pubend) != key) Fail("a position key re-encodes");
  }
  if (std::optional<gi::DownstreamRow> d = gi::ParseDownstreamRow(value)) {
    if (gi::EncodeDownstreamRow(*d) != value) Fail("a downstream row re-encodes differently");
  }
  if (std::optional<gi::DeliveredRow> d = gi::ParseDeliveredRow(value)) {
    if (gi::EncodeDeliveredRow(*d) != value) Fail("a delivered row re-encodes differently");
  }
  if (std::optional<gi::PositionRow> r = gi::ParsePositionRow(value)) {
    if (gi::EncodePositionRow(*r) != value) Fail("a position row re-encodes differently");
  }
  gi::PfsSubscriberRow row;
  if (gi::ParsePfsSubscriberRow(value, &row)) {
    char out[gi::kPfsSubscriberRowBytes];
    gi::EncodePfsSubscriberRow(out, row);
    if (absl::string_view(out, sizeof(out)) != value) Fail("a PFS subscriber row re-encodes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = in.find('\xff');
  const absl::string_view key = split == absl::string_view::npos ? in : in.substr(0, split);
  const absl::string_view value =
      split == absl::string_view::npos ? absl::string_view() : in.substr(split + 1);
  switch (data[0] % 4) {
    case 0: PfsRecord(in); break;
    case 1: Subscription(in); break;
    case 2: Publisher(key, value); break;
    case 3: Fixed(key, value); break;
  }
  return 0;
}
