#include "lib/storage/lmdb_handle.h"

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace gryph::internal {

namespace {

// The symbolic name of an LMDB code, for messages ("MDB_MAP_FULL").
const char* LmdbCodeName(int rc) {
  switch (rc) {
    case MDB_KEYEXIST: return "MDB_KEYEXIST";
    case MDB_NOTFOUND: return "MDB_NOTFOUND";
    case MDB_PAGE_NOTFOUND: return "MDB_PAGE_NOTFOUND";
    case MDB_CORRUPTED: return "MDB_CORRUPTED";
    case MDB_PANIC: return "MDB_PANIC";
    case MDB_VERSION_MISMATCH: return "MDB_VERSION_MISMATCH";
    case MDB_INVALID: return "MDB_INVALID";
    case MDB_MAP_FULL: return "MDB_MAP_FULL";
    case MDB_DBS_FULL: return "MDB_DBS_FULL";
    case MDB_READERS_FULL: return "MDB_READERS_FULL";
    case MDB_TLS_FULL: return "MDB_TLS_FULL";
    case MDB_TXN_FULL: return "MDB_TXN_FULL";
    case MDB_CURSOR_FULL: return "MDB_CURSOR_FULL";
    case MDB_PAGE_FULL: return "MDB_PAGE_FULL";
    case MDB_MAP_RESIZED: return "MDB_MAP_RESIZED";
    case MDB_INCOMPATIBLE: return "MDB_INCOMPATIBLE";
    case MDB_BAD_RSLOT: return "MDB_BAD_RSLOT";
    case MDB_BAD_TXN: return "MDB_BAD_TXN";
    case MDB_BAD_VALSIZE: return "MDB_BAD_VALSIZE";
    case MDB_BAD_DBI: return "MDB_BAD_DBI";
    case ENOSPC: return "ENOSPC";
    case EDQUOT: return "EDQUOT";
    case EFBIG: return "EFBIG";
    case ENOMEM: return "ENOMEM";
    case EIO: return "EIO";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EROFS: return "EROFS";
    case ENOENT: return "ENOENT";
    case ENOTDIR: return "ENOTDIR";
    case EAGAIN: return "EAGAIN";
    case EBUSY: return "EBUSY";
    case EINVAL: return "EINVAL";
    default: return nullptr;
  }
}

absl::StatusCode LmdbCode(int rc) {
  switch (rc) {
    case MDB_SUCCESS: return absl::StatusCode::kOk;
    case MDB_NOTFOUND:
    case ENOENT:
    case ENOTDIR: return absl::StatusCode::kNotFound;
    case MDB_KEYEXIST: return absl::StatusCode::kAlreadyExists;
    case MDB_MAP_FULL:
    case MDB_DBS_FULL:
    case MDB_READERS_FULL:
    case MDB_TLS_FULL:
    case MDB_TXN_FULL:
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case ENOMEM: return absl::StatusCode::kResourceExhausted;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
    case EIO:
    // Opening the store's files found something else there (a directory, a FIFO or socket, a
    // file that should not exist): the data directory is damaged.
    case EISDIR:
    case ESPIPE:
    case ENXIO:
    case EEXIST: return absl::StatusCode::kDataLoss;
    case MDB_PANIC:
    case MDB_CURSOR_FULL:
    case MDB_PAGE_FULL:
    case MDB_BAD_RSLOT:
    case MDB_BAD_TXN:
    case MDB_BAD_DBI: return absl::StatusCode::kInternal;
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE: return absl::StatusCode::kFailedPrecondition;
    case MDB_MAP_RESIZED: return absl::StatusCode::kAborted;
    case MDB_BAD_VALSIZE:
    case EINVAL: return absl::StatusCode::kInvalidArgument;
    case EACCES:
    case EPERM:
    case EROFS: return absl::StatusCode::kPermissionDenied;
    case EAGAIN:
    case EBUSY: return absl::StatusCode::kUnavailable;
    default: return absl::StatusCode::kUnknown;
  }
}

}  // namespace

bool LmdbErrorIsFatal(int rc) {
  return rc == MDB_PANIC || rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND || rc == MDB_INVALID ||
         rc == EIO;
}

absl::Status LmdbStatus(absl::string_view operation, int rc, absl::string_view context) {
  if (rc == MDB_SUCCESS) return absl::OkStatus();
  const char* name = LmdbCodeName(rc);
  std::string message = absl::StrCat(
      operation, ": ", name != nullptr ? name : absl::StrCat("error ", rc), ": ", mdb_strerror(rc));
  if (rc == MDB_PANIC) absl::StrAppend(&message, "; the storage must be reopened");
  if (!context.empty()) absl::StrAppend(&message, " (", context, ")");
  return absl::Status(LmdbCode(rc), message);
}

}  // namespace gryph::internal
