// What gryph's programs (gryph-broker, gryph-sub) share: exiting with a clear message, files
// written atomically and durably, CURVE keys kept in a directory, the ZeroMQ channel built from
// flags, and the periodic one-line stats on standard error.
//
// Keys: a keys directory holds NAME.key (a node's secret key, Z85, readable by its owner only)
// for the node that runs there and NAME.pub (public keys, Z85) for its peers. A listening node
// allows exactly the keys of its directory's .pub files, each under its own name; a dialing
// node authenticates each peer by the peer's NAME.pub. Without a keys directory the channel is
// plain TCP (a trusted network only: anyone who reaches the port can publish, subscribe and
// release; see the README).

#ifndef GRYPH_PROGRAMS_PROGRAM_SUPPORT_H_
#define GRYPH_PROGRAMS_PROGRAM_SUPPORT_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gryph/runtime.h"
#include "gryph/storage.h"
#include "gryph/zmq_channel.h"

namespace gryph::programs {

// Exit codes: 0 done, 1 a failure while running, 2 bad flags or an unusable directory or key.
inline constexpr int kExitUsage = 2;
inline constexpr int kExitFailure = 1;

// Prints "PROGRAM: WHAT" on standard error and exits with `code`.
[[noreturn]] void Die(absl::string_view what, int code = kExitUsage);
// The program's name for messages (set once by main).
void SetProgramName(absl::string_view name);

// Parses the command line (absl flags), or exits 2 naming a flag it does not know or a value it
// cannot parse (absl's own parser would exit 1). --help lists the flags of `source_file` (the
// program's main file, e.g. "gryph_broker.cc"). Returns the positional arguments, argv[0] first.
std::vector<char*> ParseFlags(int argc, char** argv, absl::string_view source_file);

// Replaces `path` with `content` so that a crash at any instant leaves the old content or the
// new, and the new survives a power loss once this returns: a temporary file beside it, fsync,
// rename, fsync of the directory.
absl::Status WriteFileDurably(const std::string& path, absl::string_view content);
// Replaces `path` with `content` atomically (a temporary file beside it, renamed), without
// fsync: for files that are rewritten often and need not survive a power loss (metrics).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view content);
// The whole file; NotFound when it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes DIR/NAME.key (mode 0600) and DIR/NAME.pub for a new CURVE key pair. AlreadyExists
// rather than overwrite a key.
absl::Status GenerateKeys(const std::string& dir, const std::string& name);

// A node's channel: `name` listening on `listen` (empty: not listening) and dialing `peers`
// ("NAME@ENDPOINT", comma-separated), with CURVE when `keys_dir` is not empty.
struct ChannelFlags {
  std::string name;
  std::string listen;
  std::string peers;
  std::string keys_dir;
};
absl::StatusOr<std::unique_ptr<ZmqChannel>> OpenChannel(const ChannelFlags& flags);
// "NAME@ENDPOINT" -> NAME. InvalidArgument without the '@'.
absl::StatusOr<std::string> PeerName(absl::string_view spec);

// Opens (creating) an LMDB store in `dir`. The error names the directory.
absl::StatusOr<std::unique_ptr<Storage>> OpenStore(const std::string& dir, Durability durability);
// "sync" or "nosync".
absl::StatusOr<Durability> ParseDurability(absl::string_view s);

// Runs `fn` on the runtime's loop every `interval` (never when zero), posted from a thread of
// its own, which it stops when destroyed. Destroy it before the runtime.
class Repeater {
 public:
  Repeater(Runtime* runtime, absl::Duration interval, std::function<void()> fn);
  ~Repeater();

 private:
  absl::Notification stop_;
  std::thread thread_;
};

// Prints what `line` returns on standard error, prefixed with the program's name, every
// `interval` (never when zero), on the runtime's loop.
std::unique_ptr<Repeater> PrintStats(Runtime* runtime, absl::Duration interval,
                                     std::function<std::string()> line);

}  // namespace gryph::programs

#endif  // GRYPH_PROGRAMS_PROGRAM_SUPPORT_H_
