#include "gryph/channel.h"

namespace gryph {

size_t Channel::SendMany(absl::Span<Outgoing> messages) {
  size_t accepted = 0;
  for (Outgoing& m : messages) {
    m.accepted = Send(m.peer, std::move(m.message)).ok();
    accepted += m.accepted ? 1 : 0;
  }
  return accepted;
}

}  // namespace gryph
