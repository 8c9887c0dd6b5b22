// gryph_power_cut: what a power loss leaves of a data file whose process was SIGKILLed, from the
// undo journal libgryph_io_shim.so kept (tests/campaigns/io_shim.cc says what it records).
//
// Usage: gryph_power_cut --journal=FILE --seed=S [--mode=lose_all|keep_all|sectors]
//
// Every write the journal holds was not known durable when the process died, and the disk may
// have kept or lost each 512-byte sector of it independently. The seed picks (unless --mode
// says) one of:
//   lose_all   every journaled write lost (the disk wrote none of them);
//   keep_all   every one kept (the disk wrote them all, as after a plain SIGKILL);
//   sectors    each sector of each write lost with probability 1/2; and, in one cut in two, one
//              lost sector torn (only a prefix of it reverted): a sector the disk was writing
//              when the power went.
// Losing a write restores the bytes it replaced in the file the record names (zeros where it
// extended the file), newest write first, so that a sector written twice reverts to what the
// older write left or to what was there before both. A record of a file that is gone (a staging
// file renamed after it was synced) is skipped. A journal cut short (the process died while
// appending a record, before the write it describes) ends at its last whole record. The journal
// is removed once applied.
//
// Prints one JSON line: the mode, the writes and sectors journaled, how many sectors were reverted
// and whether one was torn. Exits 2 on bad usage or an unreadable or unwritable file.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace {

constexpr uint64_t kSector = 512;

struct Write {
  std::string path;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t size_before = 0;
  std::string old;  // the bytes of [offset, min(offset + length, size_before))
};

bool ReadJournal(const std::string& path, std::vector<Write>* writes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  auto u64 = [&](uint64_t* v) {
    if (bytes.size() - at < sizeof(uint64_t)) return false;
    std::memcpy(v, bytes.data() + at, sizeof(uint64_t));
    at += sizeof(uint64_t);
    return true;
  };
  while (true) {
    Write w;
    uint64_t path_bytes = 0;
    if (!u64(&path_bytes) || bytes.size() - at < path_bytes) break;  // cut short
    w.path = bytes.substr(at, path_bytes);
    at += path_bytes;
    if (!u64(&w.offset) || !u64(&w.length) || !u64(&w.size_before)) break;
    const uint64_t old =
        w.offset < w.size_before ? std::min(w.length, w.size_before - w.offset) : 0;
    if (bytes.size() - at < old) break;
    w.old = bytes.substr(at, old);
    at += old;
    writes->push_back(std::move(w));
  }
  return true;
}

void Usage() {
  std::fprintf(
      stderr,
      "usage: gryph_power_cut --journal=FILE --seed=S [--mode=lose_all|keep_all|sectors]\n");
}

}  // namespace

int main(int argc, char** argv) {
  const char* const modes[] = {"lose_all", "keep_all", "sectors", "sectors"};
  std::string journal;
  int mode = -1;
  uint64_t seed = 0;
  bool seeded = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (absl::StartsWith(arg, "--journal=")) {
      journal = std::string(arg.substr(10));
    } else if (absl::StartsWith(arg, "--mode=")) {
      for (int m = 0; m < 3; ++m) {
        if (arg.substr(7) == modes[m]) mode = m;
      }
      if (mode < 0) {
        Usage();
        return 2;
      }
    } else if (absl::StartsWith(arg, "--seed=") && absl::SimpleAtoi(arg.substr(7), &seed)) {
      seeded = true;
    } else {
      Usage();
      return 2;
    }
  }
  if (journal.empty() || !seeded) {
    Usage();
    return 2;
  }
  std::vector<Write> writes;
  if (access(journal.c_str(), F_OK) != 0) {
    // Nothing written since the last sync, or the process never wrote: nothing to lose.
  } else if (!ReadJournal(journal, &writes)) {
    std::fprintf(stderr, "gryph_power_cut: cannot read %s\n", journal.c_str());
    return 2;
  }
  std::mt19937_64 rng(seed);
  const int drawn = static_cast<int>(rng() % 4);
  if (mode < 0) mode = drawn;
  const bool tear = mode >= 2 && rng() % 2 == 0;
  uint64_t sectors = 0;
  uint64_t reverted = 0;
  bool torn = false;
  std::map<std::string, int> files;  // each file's descriptor; -1 when it is gone
  for (auto w = writes.rbegin(); w != writes.rend(); ++w) {
    auto [file, added] = files.emplace(w->path, -1);
    if (added) {
      file->second = open(w->path.c_str(), O_WRONLY);
      if (file->second < 0 && errno != ENOENT) {
        std::fprintf(stderr, "gryph_power_cut: cannot open %s: %s\n", w->path.c_str(),
                     strerror(errno));
        return 2;
      }
    }
    const int fd = file->second;
    if (fd < 0) continue;
    const uint64_t end = w->offset + w->length;
    for (uint64_t from = w->offset; from < end;) {
      const uint64_t to = std::min(end, (from / kSector + 1) * kSector);
      ++sectors;
      const bool lose = mode == 0 || (mode >= 2 && rng() % 2 == 0);
      if (lose) {
        uint64_t upto = to;
        if (tear && !torn && to - from > 1 && rng() % 8 == 0) {
          upto = from + 1 + rng() % (to - from - 1);  // the disk had written the rest
          torn = true;
        }
        std::string bytes(upto - from, '\0');
        for (uint64_t b = from; b < upto && b < w->size_before; ++b) {
          bytes[b - from] = w->old[b - w->offset];
        }
        if (pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(from)) !=
            static_cast<ssize_t>(bytes.size())) {
          std::fprintf(stderr, "gryph_power_cut: write to %s failed: %s\n", w->path.c_str(),
                       strerror(errno));
          return 2;
        }
        ++reverted;
      }
      from = to;
    }
  }
  for (const auto& [path, fd] : files) {
    if (fd >= 0 && (fsync(fd) != 0 || close(fd) != 0)) {
      std::fprintf(stderr, "gryph_power_cut: sync of %s failed: %s\n", path.c_str(),
                   strerror(errno));
      return 2;
    }
  }
  std::remove(journal.c_str());
  std::printf(
      "{\"mode\": \"%s\", \"writes\": %zu, \"sectors\": %llu, \"reverted\": %llu, \"torn\": %s}\n",
      modes[mode], writes.size(), static_cast<unsigned long long>(sectors),
      static_cast<unsigned long long>(reverted), torn ? "true" : "false");
  return 0;
}
