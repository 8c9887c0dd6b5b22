// libFuzzer target for every decoder of bytes from a peer: messages (frames), and the events and
// checkpoint tokens inside them. docs/format.md promises that each decoder accepts exactly what
// its encoder produces, so beyond "no crash, no sanitizer report" it checks:
//   - an accepted input re-encodes byte for byte to itself, and decodes again to the same bytes;
//   - a refused input fails with InvalidArgument naming the byte offset.
// The first byte chooses the decoder (so one corpus covers all three); the rest is the input.

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"
#include "gryph/checkpoint_token.h"
#include "gryph/event.h"
#include "gryph/message.h"

namespace {

using gryph::fuzz::CheckRefusal;
using gryph::fuzz::Fail;

void Message(absl::string_view in) {
  absl::StatusOr<gryph::Message> m = gryph::DecodeMessage(in);
  if (!m.ok()) return CheckRefusal(m.status());
  const std::string again = gryph::EncodeMessage(*m);
  if (again != in) Fail("a decoded message re-encodes differently", gryph::MessageKindName(*m));
  // (Compared by encoding: a NaN attribute is not equal to itself.)
  absl::StatusOr<gryph::Message> m2 = gryph::DecodeMessage(again);
  if (!m2.ok() || gryph::EncodeMessage(*m2) != in) Fail("a message does not survive a round trip");
}

void Event(absl::string_view in) {
  absl::StatusOr<gryph::Event> e = gryph::Event::Decode(in);
  if (!e.ok()) return CheckRefusal(e.status());
  if (e->Encode() != in) Fail("a decoded event re-encodes differently");
  absl::StatusOr<gryph::Event> e2 = gryph::Event::Decode(e->Encode());
  if (!e2.ok() || e2->Encode() != in) Fail("an event does not survive a round trip");
}

void Checkpoint(absl::string_view in) {
  absl::StatusOr<gryph::CheckpointToken> ct = gryph::CheckpointToken::Decode(in);
  if (!ct.ok()) return CheckRefusal(ct.status());
  if (ct->Encode() != in) Fail("a decoded checkpoint token re-encodes differently");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: Message(in); break;
    case 1: Event(in); break;
    case 2: Checkpoint(in); break;
  }
  return 0;
}
