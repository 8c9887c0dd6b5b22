#include "gryph/channel.h"

namespace gryph {

size_t Channel::SendMany(absl::Span<Outgoing> messages) {
  size_t accepted = 0;
  for (Outgoing& m : messages) accepted += Send(m.peer, std::move(m.message)).ok() ? 1 : 0;
  return accepted;
}

}  // namespace gryph
