// libgryph_io_shim.so: an LD_PRELOAD library that keeps, for each LMDB data file (data.mdb) the
// process writes, an undo journal of the writes that are not yet durable, so that a power loss
// can be simulated after the process is SIGKILLed (tests/campaigns/power_cut.cc reverts a random
// subset of them).
//
//   LD_PRELOAD=libgryph_io_shim.so GRYPH_IO_JOURNAL=/path/to/journal gryph-broker ...
//
// The model of the disk: a write returns once it is in the page cache; it is durable once an
// fsync or fdatasync of its file has returned 0 after it, or at once on a file opened with O_SYNC
// or O_DSYNC (LMDB writes its meta pages that way). Until then a power loss may keep it or lose
// it, sector by sector. So, for each write to a data file not opened with O_(D)SYNC, the journal
// gets a record of the bytes the write is about to replace (read before the write is made), and
// a successful fsync or fdatasync of the file empties the journal. A process killed at any point
// leaves a journal whose records cover every write not known durable: a kill between a write's
// record and the write leaves a record that restores what is already there, and a kill between
// an fsync's return and the journal emptied leaves records of writes the process never learned
// were durable, which a power loss at that instant could have lost.
//
// GRYPH_IO_KILL_AT_SYNC=N makes the process SIGKILL itself at its N-th fsync or fdatasync of the
// data file, before the sync: a power loss at the moment a commit's pages are written and not yet
// durable, which a kill from outside at a random instant seldom hits.
//
// I/O errors (#17, campaign 2): GRYPH_IO_FAIL_SYNC=K makes the K-th fsync or fdatasync of the
// data file fail with EIO (GRYPH_IO_ERRNO=ENOSPC for that instead) without syncing, and
// GRYPH_IO_FAIL_WRITE=K the K-th write to it (pwrite, write or writev) without writing; with
// GRYPH_IO_PERSISTENT=1 every one from the K-th on fails (a disk gone bad). Each injected
// failure appends a line to the file GRYPH_IO_FAULT_LOG names, if set.
//
// One data file open for writing at a time (a new store is made in a staging directory, synced,
// closed, and moved in: gryph/storage.h). Journal record, native byte order:
//   u64 path length ‖ the data file's absolute path ‖ u64 offset ‖ u64 length ‖ u64 file size
//   before the write ‖ the old bytes of the part of [offset, offset + length) below that size
// Written with plain write(2): the page cache outlives a SIGKILL, which is all the campaign needs
// (the journal stands for the disk's own knowledge, not for a file that must survive the power
// loss).
//
// LMDB (0.9.24, liblmdb.so) writes its data file with pwrite, and with lseek + writev or write
// for runs of pages; it syncs with fdatasync (fsync on some paths). Those, and open and close to
// know which descriptor is the data file, are what this interposes; everything else passes
// through. Calls of the interposed functions from the shim itself go to libc directly.

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace {

using OpenFn = int (*)(const char*, int, ...);
using CloseFn = int (*)(int);
using PwriteFn = ssize_t (*)(int, const void*, size_t, off_t);
using WriteFn = ssize_t (*)(int, const void*, size_t);
using WritevFn = ssize_t (*)(int, const struct iovec*, int);
using SyncFn = int (*)(int);

template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

struct Real {
  OpenFn open = Next<OpenFn>("open");
  OpenFn open64 = Next<OpenFn>("open64");
  CloseFn close = Next<CloseFn>("close");
  PwriteFn pwrite = Next<PwriteFn>("pwrite");
  PwriteFn pwrite64 = Next<PwriteFn>("pwrite64");
  WriteFn write = Next<WriteFn>("write");
  WritevFn writev = Next<WritevFn>("writev");
  SyncFn fsync = Next<SyncFn>("fsync");
  SyncFn fdatasync = Next<SyncFn>("fdatasync");
};

Real& real() {
  static Real r;
  return r;
}

// The data file's descriptor (-1: none open) and absolute path, and the journal's descriptor.
std::atomic<int> g_data_fd{-1};
char g_data_path[4096];
int g_journal_fd = -1;
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

bool IsDataFile(const char* path) {
  const size_t n = strlen(path);
  return n >= 8 && strcmp(path + n - 8, "data.mdb") == 0 && (n == 8 || path[n - 9] == '/');
}

void WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = real().write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) abort();  // the campaign cannot judge a run whose journal is incomplete
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void OpenJournal() {
  if (g_journal_fd >= 0) return;
  const char* path = getenv("GRYPH_IO_JOURNAL");
  if (path == nullptr) return;
  g_journal_fd = real().open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (g_journal_fd < 0) abort();
}

// Journals what [offset, offset + length) of the data file holds before a write replaces it.
void Record(int fd, uint64_t offset, uint64_t length) {
  if (length == 0) return;
  pthread_mutex_lock(&g_mu);
  OpenJournal();
  if (g_journal_fd >= 0) {
    struct stat st;
    if (fstat(fd, &st) != 0) abort();
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    const uint64_t path_bytes = strlen(g_data_path);
    const uint64_t header[3] = {offset, length, size};
    std::vector<char> old;
    if (offset < size) {
      old.resize(static_cast<size_t>(std::min(length, size - offset)));
      size_t got = 0;
      while (got < old.size()) {
        const ssize_t n =
            pread(fd, old.data() + got, old.size() - got, static_cast<off_t>(offset + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) abort();
        got += static_cast<size_t>(n);
      }
    }
    WriteAll(g_journal_fd, &path_bytes, sizeof(path_bytes));
    WriteAll(g_journal_fd, g_data_path, path_bytes);
    WriteAll(g_journal_fd, header, sizeof(header));
    if (!old.empty()) WriteAll(g_journal_fd, old.data(), old.size());
  }
  pthread_mutex_unlock(&g_mu);
}

// A data-file descriptor whose writes are not durable at once.
bool Journaled(int fd) {
  if (fd < 0 || fd != g_data_fd.load(std::memory_order_acquire)) return false;
  const int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && (flags & (O_SYNC | O_DSYNC)) == 0;
}

long EnvCount(const char* name) {
  const char* n = getenv(name);
  return n == nullptr ? 0L : strtol(n, nullptr, 10);
}

// An injected failure: whether the call counted by `calls` fails (errno set), from
// GRYPH_IO_FAIL_<what>.
bool Fails(std::atomic<long>& calls, long at) {
  static const bool persistent = EnvCount("GRYPH_IO_PERSISTENT") != 0;
  static const int error = [] {
    const char* e = getenv("GRYPH_IO_ERRNO");
    return e != nullptr && strcmp(e, "ENOSPC") == 0 ? ENOSPC : EIO;
  }();
  if (at <= 0) return false;
  const long n = calls.fetch_add(1) + 1;
  if (n == at || (persistent && n > at)) {
    if (const char* log = getenv("GRYPH_IO_FAULT_LOG"); log != nullptr) {
      const int fd = real().open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        char line[64];
        const int len = snprintf(line, sizeof(line), "call %ld: %s\n", n, strerror(error));
        WriteAll(fd, line, static_cast<size_t>(len));
        real().close(fd);
      }
    }
    errno = error;
    return true;
  }
  return false;
}
std::atomic<long> g_syncs{0};
std::atomic<long> g_writes{0};
bool SyncFails(int fd) {
  static const long at = EnvCount("GRYPH_IO_FAIL_SYNC");
  return fd == g_data_fd.load(std::memory_order_acquire) && Fails(g_syncs, at);
}
bool WriteFails(int fd) {
  static const long at = EnvCount("GRYPH_IO_FAIL_WRITE");
  return fd == g_data_fd.load(std::memory_order_acquire) && Fails(g_writes, at);
}

// Counts the data file's syncs down to GRYPH_IO_KILL_AT_SYNC, and dies there.
void BeforeSync(int fd) {
  static std::atomic<long> left{EnvCount("GRYPH_IO_KILL_AT_SYNC")};
  if (fd != g_data_fd.load(std::memory_order_acquire)) return;
  if (left.load() > 0 && left.fetch_sub(1) == 1) raise(SIGKILL);
}

void Synced(int fd, int rc) {
  if (rc != 0 || fd != g_data_fd.load(std::memory_order_acquire)) return;
  pthread_mutex_lock(&g_mu);
  if (g_journal_fd >= 0 && ftruncate(g_journal_fd, 0) != 0) abort();
  pthread_mutex_unlock(&g_mu);
}

int Opened(const char* path, int flags, int fd) {
  // The data file, opened for writing without O_(D)SYNC. LMDB opens it once per environment.
  if (fd >= 0 && path != nullptr && (flags & O_ACCMODE) != O_RDONLY &&
      (flags & (O_SYNC | O_DSYNC)) == 0 && IsDataFile(path)) {
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    pthread_mutex_lock(&g_mu);
    const ssize_t n = readlink(link, g_data_path, sizeof(g_data_path) - 1);
    if (n <= 0) abort();
    g_data_path[n] = '\0';
    pthread_mutex_unlock(&g_mu);
    g_data_fd.store(fd, std::memory_order_release);
  }
  return fd;
}

mode_t ModeOf(int flags, va_list args) {
  return (flags & (O_CREAT | O_TMPFILE)) != 0 ? static_cast<mode_t>(va_arg(args, int)) : 0;
}

}  // namespace

extern "C" {

int open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeOf(flags, args);
  va_end(args);
  return Opened(path, flags, real().open(path, flags, mode));
}

int open64(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeOf(flags, args);
  va_end(args);
  return Opened(path, flags, real().open64(path, flags, mode));
}

int close(int fd) {
  int expected = fd;
  g_data_fd.compare_exchange_strong(expected, -1);
  return real().close(fd);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset) {
  if (WriteFails(fd)) return -1;
  if (Journaled(fd)) Record(fd, static_cast<uint64_t>(offset), count);
  return real().pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off_t offset) {
  if (WriteFails(fd)) return -1;
  if (Journaled(fd)) Record(fd, static_cast<uint64_t>(offset), count);
  return real().pwrite64(fd, buf, count, offset);
}

ssize_t write(int fd, const void* buf, size_t count) {
  if (WriteFails(fd)) return -1;
  if (Journaled(fd)) Record(fd, static_cast<uint64_t>(lseek(fd, 0, SEEK_CUR)), count);
  return real().write(fd, buf, count);
}

ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  if (WriteFails(fd)) return -1;
  if (Journaled(fd)) {
    uint64_t total = 0;
    for (int i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
    Record(fd, static_cast<uint64_t>(lseek(fd, 0, SEEK_CUR)), total);
  }
  return real().writev(fd, iov, iovcnt);
}

int fsync(int fd) {
  BeforeSync(fd);
  if (SyncFails(fd)) return -1;
  const int rc = real().fsync(fd);
  Synced(fd, rc);
  return rc;
}

int fdatasync(int fd) {
  BeforeSync(fd);
  if (SyncFails(fd)) return -1;
  const int rc = real().fdatasync(fd);
  Synced(fd, rc);
  return rc;
}

}  // extern "C"
