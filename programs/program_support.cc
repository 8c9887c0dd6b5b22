#include "programs/program_support.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gryph::programs {

namespace {

std::string& ProgramName() {
  static std::string* name = new std::string("gryph");
  return *name;
}

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Writes all of `content` to `fd`.
bool WriteAll(int fd, absl::string_view content) {
  while (!content.empty()) {
    const ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    content.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

absl::Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("opening the directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Errno("syncing the directory", dir);
  return absl::OkStatus();
}

// A key file's content without surrounding whitespace (an editor's trailing newline).
absl::StatusOr<std::string> ReadKey(const std::string& path) {
  absl::StatusOr<std::string> key = ReadFile(path);
  if (!key.ok()) return key.status();
  return std::string(absl::StripAsciiWhitespace(*key));
}

// absl's parser exits 1 on a flag it does not know or a value it cannot parse; here a bad flag
// exits 2, as every other usage error does. So each flag is looked up and its value parsed
// first (into the flag itself, which the parser then sets again).
void CheckFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // DATA_DIR, or "-"
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    // absl's usage flags are not in its registry: its parser handles them (and exits 0).
    if (name == "help" || name == "helpfull" || name == "helpshort" || name == "helppackage" ||
        name == "version" || name == "only_check_args" || name == "helpon" || name == "helpmatch") {
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      negated = flag != nullptr && flag->IsOfType<bool>();
      if (!negated) flag = nullptr;
    }
    if (flag == nullptr) Die(absl::StrCat("unknown flag --", name, " (see --help)"));
    std::optional<std::string> value;
    if (eq != absl::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (!flag->IsOfType<bool>()) {
      if (i + 1 == argc) Die(absl::StrCat("--", name, " needs a value (see --help)"));
      value = argv[++i];
    }
    if (negated && value) Die(absl::StrCat("--", name, " takes no value"));
    std::string error;
    if (value && !flag->ParseFrom(*value, &error)) {
      Die(absl::StrCat("--", name, "=", *value, ": ", error));
    }
  }
}

}  // namespace

void SetProgramName(absl::string_view name) { ProgramName() = std::string(name); }

void Die(absl::string_view what, int code) {
  std::fprintf(stderr, "%s: %.*s\n", ProgramName().c_str(), static_cast<int>(what.size()),
               what.data());
  std::exit(code);
}

absl::Status WriteFileDurably(const std::string& path, absl::string_view content) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("creating", tmp);
  const bool written = WriteAll(fd, content) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!written) {
    errno = saved;
    return Errno("writing", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("renaming to", path);
  std::string dir = std::filesystem::path(path).parent_path().string();
  return FsyncDirectory(dir.empty() ? "." : dir);
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("creating", tmp);
  const bool written = WriteAll(fd, content);
  const int saved = errno;
  ::close(fd);
  if (!written) {
    errno = saved;
    return Errno("writing", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("renaming to", path);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file ", path));
    return Errno("opening", path);
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const absl::Status st = Errno("reading", path);
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::Status GenerateKeys(const std::string& dir, const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' cannot name a key file"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", dir, ": ", ec.message()));
  const std::string secret_path = absl::StrCat(dir, "/", name, ".key");
  const std::string public_path = absl::StrCat(dir, "/", name, ".pub");
  if (std::filesystem::exists(secret_path) || std::filesystem::exists(public_path)) {
    return absl::AlreadyExistsError(absl::StrCat("a key for ", name, " is in ", dir, " already"));
  }
  absl::StatusOr<CurveKeyPair> keys = GenerateCurveKeyPair();
  if (!keys.ok()) return keys.status();
  // The secret key is created readable by its owner only, before it holds anything.
  const int fd = ::open(secret_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("creating", secret_path);
  const bool written = WriteAll(fd, keys->secret_key + "\n") && ::fsync(fd) == 0;
  ::close(fd);
  if (!written) return Errno("writing", secret_path);
  return WriteFileDurably(public_path, keys->public_key + "\n");
}

absl::StatusOr<std::string> PeerName(absl::string_view spec) {
  const size_t at = spec.find('@');
  if (at == absl::string_view::npos || at == 0 || at + 1 == spec.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a peer is NAME@ENDPOINT (shb@tcp://10.0.0.2:7300), not '", spec, "'"));
  }
  return std::string(spec.substr(0, at));
}

absl::StatusOr<std::unique_ptr<ZmqChannel>> OpenChannel(const ChannelFlags& flags) {
  ZmqChannelOptions o;
  o.name = flags.name;
  o.listen = flags.listen;
  const bool curve = !flags.keys_dir.empty();
  if (curve) {
    o.curve = true;
    const std::string secret_path = absl::StrCat(flags.keys_dir, "/", flags.name, ".key");
    absl::StatusOr<std::string> secret = ReadKey(secret_path);
    if (!secret.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no secret key for ", flags.name, " (", secret.status().message(),
                       "): make one with gryph-broker --genkey --name=", flags.name,
                       " --keys_dir=", flags.keys_dir));
    }
    absl::StatusOr<std::string> public_key = CurvePublicKey(*secret);
    if (!public_key.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(secret_path, ": ", public_key.status().message()));
    }
    o.keys = {*public_key, *secret};
    if (!flags.listen.empty()) {
      // Every peer whose public key is here may connect, as the name its file gives.
      std::error_code ec;
      for (const auto& entry : std::filesystem::directory_iterator(flags.keys_dir, ec)) {
        if (entry.path().extension() != ".pub") continue;
        const std::string peer = entry.path().stem().string();
        if (peer == flags.name) continue;
        absl::StatusOr<std::string> key = ReadKey(entry.path().string());
        if (!key.ok()) return key.status();
        o.allowed_clients.push_back({*key, peer});
      }
      if (ec) return absl::InvalidArgumentError(absl::StrCat(flags.keys_dir, ": ", ec.message()));
    }
  }
  for (absl::string_view spec : absl::StrSplit(flags.peers, ',', absl::SkipEmpty())) {
    absl::StatusOr<std::string> name = PeerName(spec);
    if (!name.ok()) return name.status();
    ZmqChannelOptions::Peer peer{*name, std::string(spec.substr(name->size() + 1)), ""};
    if (curve) {
      absl::StatusOr<std::string> key = ReadKey(absl::StrCat(flags.keys_dir, "/", *name, ".pub"));
      if (!key.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("no public key for peer ", *name, ": ", key.status().message()));
      }
      peer.server_key = *key;
    }
    o.peers.push_back(std::move(peer));
  }
  return ZmqChannel::Create(std::move(o));
}

absl::StatusOr<std::unique_ptr<Storage>> OpenStore(const std::string& dir, Durability durability) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InvalidArgumentError(absl::StrCat("data directory ", dir, ": ", ec.message()));
  StorageOptions so;
  so.path = dir;
  so.durability = durability;
  absl::StatusOr<std::unique_ptr<Storage>> s = OpenLmdbStorage(so);
  if (!s.ok()) {
    return absl::Status(s.status().code(),
                        absl::StrCat("opening the store in ", dir, ": ", s.status().message()));
  }
  return s;
}

absl::StatusOr<Durability> ParseDurability(absl::string_view s) {
  if (s == "sync") return Durability::kSync;
  if (s == "nosync") return Durability::kNoSync;
  return absl::InvalidArgumentError(absl::StrCat("--durability is sync or nosync, not '", s, "'"));
}

std::vector<char*> ParseFlags(int argc, char** argv, absl::string_view source_file) {
  // --help lists the flags of the program's file (absl looks for a file named as the program,
  // whose name has a dash where the file's has an underscore).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [file = std::string(source_file)](absl::string_view f) {
    return absl::EndsWith(f, file);
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  CheckFlags(argc, argv);
  return absl::ParseCommandLine(argc, argv);
}

Repeater::Repeater(Runtime* runtime, absl::Duration interval, std::function<void()> fn) {
  if (interval <= absl::ZeroDuration()) return;
  thread_ = std::thread([this, runtime, interval, fn = std::move(fn)] {
    while (!stop_.WaitForNotificationWithTimeout(interval)) runtime->Post([fn] { fn(); });
  });
}

Repeater::~Repeater() {
  if (!thread_.joinable()) return;
  stop_.Notify();
  thread_.join();
}

std::unique_ptr<Repeater> PrintStats(Runtime* runtime, absl::Duration interval,
                                     std::function<std::string()> line) {
  // On the loop, where the nodes live; printed there too (a line is short).
  return std::make_unique<Repeater>(runtime, interval, [line = std::move(line)] {
    const std::string text = line();
    std::fprintf(stderr, "%s: %s\n", ProgramName().c_str(), text.c_str());
  });
}

}  // namespace gryph::programs
