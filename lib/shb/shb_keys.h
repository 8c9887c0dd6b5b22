// Internal: the subscriber hosting broker's tables, and the Encode/Parse pair of each key and
// value layout (docs/format.md, "Subscriber hosting broker"). A Parse returns nullopt (or false)
// for bytes that are not the layout; it never reads past them.

#ifndef GRYPH_LIB_SHB_SHB_KEYS_H_
#define GRYPH_LIB_SHB_SHB_KEYS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/tick.h"
#include "lib/util/coding.h"
#include "lib/util/pubend_prefix.h"

namespace gryph::internal {

inline constexpr absl::string_view kShbMetaTable = "shb.meta";
inline constexpr absl::string_view kShbDeliveredTable = "shb.delivered";
inline constexpr absl::string_view kShbSubscriptionsTable = "shb.subscriptions";
inline constexpr absl::string_view kShbPositionsTable = "shb.positions";

// shb.meta: "next_id" -> the next subscriber id, u64 BE.
inline constexpr absl::string_view kShbNextIdKey = "next_id";
inline std::string EncodeNextId(uint64_t id) { return Fixed64BE(id); }
inline std::optional<uint64_t> ParseNextId(absl::string_view value) {
  if (value.size() != 8) return std::nullopt;
  return DecodeFixed64BE(value.data());
}

// shb.delivered: pubend u32 BE -> latestDelivered(p) u64 BE ‖ delivery lease u64 BE.
inline std::string DeliveredKey(PubendId p) { return PubendPrefix(p); }
struct DeliveredRow {
  Tick latest_delivered = 0;
  Tick lease = 0;  // >= latest_delivered
};
inline std::string EncodeDeliveredRow(const DeliveredRow& row) {
  return Fixed64BEPair(row.latest_delivered, row.lease);
}
inline std::optional<DeliveredRow> ParseDeliveredRow(absl::string_view value) {
  DeliveredRow row;
  if (!ParseFixed64BEPair(value, &row.latest_delivered, &row.lease)) return std::nullopt;
  return row;
}

// shb.subscriptions: subscription name -> id:varint epoch:varint selector:bytes
// topic_filter:bytes [program:bytes]. `program` is the selector's Selector::EncodeProgram(), so
// that a restart decodes it rather than parsing the text (at least its version byte: never
// empty); rows written before it have none.
struct SubscriptionRow {
  uint64_t id = 0;
  uint64_t epoch = 0;
  absl::string_view selector;  // views into the parsed value
  absl::string_view topic_filter;
  absl::string_view program;  // empty when the row has none
};
inline std::string EncodeSubscriptionRow(const SubscriptionRow& row) {
  std::string out;
  PutVarint64(&out, row.id);
  PutVarint64(&out, row.epoch);
  PutLengthPrefixed(&out, row.selector);
  PutLengthPrefixed(&out, row.topic_filter);
  if (!row.program.empty()) PutLengthPrefixed(&out, row.program);
  return out;
}
// InvalidArgument saying what is malformed.
inline absl::StatusOr<SubscriptionRow> ParseSubscriptionRow(absl::string_view value) {
  ByteReader in(value, "subscription row");
  SubscriptionRow row;
  if (!in.ReadVarint64(&row.id, "id") || !in.ReadVarint64(&row.epoch, "epoch") ||
      !in.ReadLengthPrefixed(&row.selector, "selector") ||
      !in.ReadLengthPrefixed(&row.topic_filter, "topic filter") ||
      (in.remaining() != 0 && (!in.ReadLengthPrefixed(&row.program, "program") ||
                               (row.program.empty() && !in.Fail("an empty program")))) ||
      !in.ExpectEnd()) {
    return in.status();
  }
  return row;
}

// shb.positions: subscriber id u64 BE ‖ pubend u32 BE -> created u64 BE ‖ released u64 BE.
inline std::string PositionKey(SubscriberId s, PubendId p) {
  std::string k = Fixed64BE(s.value);
  PutFixed32BE(&k, p.value);
  return k;
}
struct PositionKeyParts {
  SubscriberId subscriber;
  PubendId pubend;
};
inline std::optional<PositionKeyParts> ParsePositionKey(absl::string_view key) {
  if (key.size() != 12) return std::nullopt;
  return PositionKeyParts{SubscriberId{DecodeFixed64BE(key.data())},
                          PubendId{DecodeFixed32BE(key.data() + 8)}};
}
struct PositionRow {
  Tick created = 0;
  Tick released = 0;
};
inline std::string EncodePositionRow(const PositionRow& row) {
  return Fixed64BEPair(row.created, row.released);
}
inline std::optional<PositionRow> ParsePositionRow(absl::string_view value) {
  PositionRow row;
  if (!ParseFixed64BEPair(value, &row.created, &row.released)) return std::nullopt;
  return row;
}

}  // namespace gryph::internal

#endif  // GRYPH_LIB_SHB_SHB_KEYS_H_
