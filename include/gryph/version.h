// gryph's version.
//
// The GRYPH_VERSION_* macros give the version of the headers a program was compiled against;
// LibraryVersion() gives the version of the library it was linked with, so that a program can
// tell the two apart (a header of one release with the library of another). The build reads
// its version from this file (CMakeLists.txt): this is the one place it is written.
//
// Versions follow semantic versioning: releases with the same major and minor version have the
// same API and read each other's stores and messages; the exported CMake package accepts a
// request for the same major.minor (find_package(gryph 0.1)).
//
// Thread-safety: constants; LibraryVersion may be called from any thread.

#ifndef GRYPH_VERSION_H_
#define GRYPH_VERSION_H_

#define GRYPH_VERSION_MAJOR 0
#define GRYPH_VERSION_MINOR 1
#define GRYPH_VERSION_PATCH 0
#define GRYPH_VERSION_STRING "0.1.0"
// One number that orders versions: major * 10000 + minor * 100 + patch.
#define GRYPH_VERSION_NUMBER \
  (GRYPH_VERSION_MAJOR * 10000 + GRYPH_VERSION_MINOR * 100 + GRYPH_VERSION_PATCH)

namespace gryph {

struct Version {
  int major = 0;
  int minor = 0;
  int patch = 0;
  // "major.minor.patch", with static storage.
  const char* string = "";
};

// The version of the gryph library linked into the program.
Version LibraryVersion();

}  // namespace gryph

#endif  // GRYPH_VERSION_H_
