// Internal: the pubend's tables, and the Encode/Parse pair of each key and value layout
// (docs/format.md, "Pubend"). Every key starts with the pubend's prefix (lib/util/pubend_prefix.h).
// A Parse returns false (or nullopt) for bytes that are not the layout; it never reads past them.

#ifndef GRYPH_LIB_PUBEND_PUBEND_KEYS_H_
#define GRYPH_LIB_PUBEND_PUBEND_KEYS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/tick.h"
#include "lib/util/coding.h"
#include "lib/util/pubend_prefix.h"

namespace gryph::internal {

// Names distinct within gryph::internal: two inline variables of one name with different values
// are an ODR violation, and an unoptimized build then links one value into both users (the
// storage layer's meta table is internal::kMetaTable, "gryph.meta").
inline constexpr absl::string_view kEventsTable = "pubend.events";
inline constexpr absl::string_view kPubendMetaTable = "pubend.meta";
inline constexpr absl::string_view kDownstreamTable = "pubend.downstream";
inline constexpr absl::string_view kPublishersTable = "pubend.publishers";

// Meta fields. DO NOT CHANGE: stored on disk.
inline constexpr char kMetaAnnouncedTick = 'T';
inline constexpr char kMetaLPrefix = 'L';

// pubend.events: prefix ‖ tick u64 BE -> the encoded Event.
inline std::string EventKey(PubendId p, Tick t) { return PubendKey64(p, t); }
// The tick of one of p's event keys; nullopt for another pubend's key or a malformed one.
inline std::optional<Tick> ParseEventKey(PubendId p, absl::string_view key) {
  Tick t;
  if (!ParsePubendKey64(key, p, &t)) return std::nullopt;
  return t;
}

// pubend.meta: prefix ‖ field byte -> tick u64 BE.
inline std::string MetaKey(PubendId p, char field) { return PubendPrefix(p) + field; }
inline std::string EncodeMetaTick(Tick t) { return Fixed64BE(t); }
inline std::optional<Tick> ParseMetaTick(absl::string_view value) {
  if (value.size() != 8) return std::nullopt;
  return DecodeFixed64BE(value.data());
}

// pubend.downstream: prefix ‖ node name -> released u64 BE ‖ latest_delivered u64 BE.
inline std::string DownstreamKey(PubendId p, absl::string_view node) {
  std::string k = PubendPrefix(p);
  k.append(node.data(), node.size());
  return k;
}
// The node of one of p's downstream keys (a view into `key`).
inline absl::string_view ParseDownstreamKey(absl::string_view key) {
  return key.substr(kPubendPrefixBytes);
}
struct DownstreamRow {
  Tick released = 0;
  Tick latest_delivered = 0;
};
inline std::string EncodeDownstreamRow(const DownstreamRow& row) {
  return Fixed64BEPair(row.released, row.latest_delivered);
}
inline std::optional<DownstreamRow> ParseDownstreamRow(absl::string_view value) {
  DownstreamRow row;
  if (!ParseFixed64BEPair(value, &row.released, &row.latest_delivered)) return std::nullopt;
  return row;
}

// pubend.publishers: one row per logged sequence. The key is the prefix, the name's length
// (2 bytes, big-endian), the name, the sequence (8 bytes, big-endian); the length keeps one
// publisher's rows contiguous when its name is a prefix of another's. The value is
// `version:u8(=2) tick:varint`.
inline constexpr uint8_t kPublisherRowVersion = 2;
inline std::string PublisherSequenceKey(PubendId p, absl::string_view name, uint64_t sequence) {
  std::string k = PubendPrefix(p);
  PutFixed16BE(&k, static_cast<uint16_t>(name.size()));
  k.append(name.data(), name.size());
  PutFixed64BE(&k, sequence);
  return k;
}
struct PublisherSequence {
  absl::string_view name;  // a view into the parsed key
  uint64_t sequence = 0;
};
inline std::optional<PublisherSequence> ParsePublisherSequenceKey(absl::string_view key) {
  if (key.size() < kPubendPrefixBytes + 2) return std::nullopt;
  const size_t name_bytes = DecodeFixed16BE(key.data() + kPubendPrefixBytes);
  if (key.size() != kPubendPrefixBytes + 2 + name_bytes + 8) return std::nullopt;
  return PublisherSequence{key.substr(kPubendPrefixBytes + 2, name_bytes),
                           DecodeFixed64BE(key.data() + kPubendPrefixBytes + 2 + name_bytes)};
}
inline std::string EncodePublisherRow(Tick t) {
  std::string row(1, static_cast<char>(kPublisherRowVersion));
  PutVarint64(&row, t);
  return row;
}
// The tick of a publisher row; InvalidArgument saying what is malformed.
inline absl::StatusOr<Tick> ParsePublisherRow(absl::string_view value) {
  ByteReader in(value, "publisher row");
  uint8_t version = 0;
  Tick t = 0;
  if (in.ReadByte(&version, "version") && version != kPublisherRowVersion) {
    in.Fail("unknown version");
  }
  if (!in.ReadVarint64(&t, "tick") || !in.ExpectEnd()) return in.status();
  return t;
}

}  // namespace gryph::internal

#endif  // GRYPH_LIB_PUBEND_PUBEND_KEYS_H_
