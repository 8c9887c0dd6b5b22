// Internal: early-return helpers for absl::Status (Abseil 20220623 ships none).

#ifndef GRYPH_LIB_UTIL_STATUS_MACROS_H_
#define GRYPH_LIB_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns the status of `expr` from the enclosing function when it is not OK.
#define GRYPH_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status gryph_status_ = (expr);         \
    if (!gryph_status_.ok()) return gryph_status_; \
  } while (0)

#define GRYPH_STATUS_CONCAT_INNER_(a, b) a##b
#define GRYPH_STATUS_CONCAT_(a, b) GRYPH_STATUS_CONCAT_INNER_(a, b)

// GRYPH_ASSIGN_OR_RETURN(lhs, expr): evaluates the StatusOr `expr`; returns its status when it is
// not OK, otherwise assigns its value to `lhs` (which may be a declaration).
#define GRYPH_ASSIGN_OR_RETURN(lhs, expr) \
  GRYPH_ASSIGN_OR_RETURN_IMPL_(GRYPH_STATUS_CONCAT_(gryph_statusor_, __LINE__), lhs, expr)
#define GRYPH_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

#endif  // GRYPH_LIB_UTIL_STATUS_MACROS_H_
