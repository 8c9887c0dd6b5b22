#include "gryph/version.h"

namespace gryph {

Version LibraryVersion() {
  return Version{GRYPH_VERSION_MAJOR, GRYPH_VERSION_MINOR, GRYPH_VERSION_PATCH,
                 GRYPH_VERSION_STRING};
}

}  // namespace gryph
