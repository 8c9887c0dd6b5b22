// Internal: the pubend's tables and key layouts (docs/format.md, "Pubend").

#ifndef GRYPH_LIB_PUBEND_PUBEND_KEYS_H_
#define GRYPH_LIB_PUBEND_PUBEND_KEYS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "gryph/tick.h"
#include "lib/util/coding.h"

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

inline std::string PubendPrefix(PubendId p) {
  std::string k;
  PutFixed32BE(&k, p.value);
  return k;
}

inline std::string EventKey(PubendId p, Tick t) {
  std::string k = PubendPrefix(p);
  PutFixed64BE(&k, t);
  return k;
}

inline std::string MetaKey(PubendId p, char field) { return PubendPrefix(p) + field; }

inline std::string NamedKey(PubendId p, absl::string_view name) {
  std::string k = PubendPrefix(p);
  k.append(name.data(), name.size());
  return k;
}

// A publisher's row for one logged sequence: the prefix, the name's length (2 bytes,
// big-endian), the name, the sequence (8 bytes, big-endian). The length keeps one publisher's
// rows contiguous when its name is a prefix of another's.
inline std::string PublisherSequenceKey(PubendId p, absl::string_view name, uint64_t sequence) {
  std::string k = PubendPrefix(p);
  k.push_back(static_cast<char>(name.size() >> 8));
  k.push_back(static_cast<char>(name.size() & 0xff));
  k.append(name.data(), name.size());
  PutFixed64BE(&k, sequence);
  return k;
}

// The first key after every key of pubend p ("" when p is the last possible pubend: unbounded).
inline std::string PubendEnd(PubendId p) {
  return p.value == UINT32_MAX ? std::string() : PubendPrefix(PubendId{p.value + 1});
}

}  // namespace gryph::internal

#endif  // GRYPH_LIB_PUBEND_PUBEND_KEYS_H_
