// An in-memory Storage with LMDB's semantics, for tests and the deterministic simulator.
//
// Tables are ordered maps, batches apply atomically, cursors read a snapshot, keys and table
// names are validated exactly as by the LMDB implementation, so code tested against it behaves the
// same on disk.
//
// Crash simulation: the committed data lives in a MemoryStorage::State, shared through a
// shared_ptr. A "crash" is destroying the MemoryStorage (and everything using it) and creating a
// new one on the same State: since every commit is atomic, the new instance sees exactly the
// batches that committed, as LMDB would after a crash with Durability::kSync.
//
//   auto state = gryph::MemoryStorage::NewState();
//   auto storage = std::make_unique<gryph::MemoryStorage>(state);
//   ... storage->Commit(batch) ...
//   storage.reset();                                          // crash
//   storage = std::make_unique<gryph::MemoryStorage>(state);  // recover
//
// Thread-safety: thread-safe, like every Storage. A State is thread-safe too; instances sharing
// one State see each other's commits (the simulator normally keeps one instance per State).

#ifndef GRYPH_MEMORY_STORAGE_H_
#define GRYPH_MEMORY_STORAGE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gryph/storage.h"

namespace gryph {

class MemoryStorage final : public Storage {
 public:
  // The committed contents of a memory store: what survives a simulated crash. Opaque.
  class State;

  // A new, empty state holding at most `max_tables` tables (as StorageOptions::max_tables).
  static std::shared_ptr<State> NewState(int max_tables = StorageOptions().max_tables);

  // A storage over a fresh, empty state.
  MemoryStorage();
  // A storage over `state`, seeing everything committed to it before. REQUIRES: state != nullptr.
  explicit MemoryStorage(std::shared_ptr<State> state);
  ~MemoryStorage() override;

  // The state this instance commits to.
  const std::shared_ptr<State>& state() const { return state_; }

  absl::Status Commit(const WriteBatch& batch) override;
  absl::StatusOr<std::optional<std::string>> Get(absl::string_view table,
                                                 absl::string_view key) override;
  absl::StatusOr<std::unique_ptr<Cursor>> NewCursor(absl::string_view table) override;
  absl::StatusOr<std::vector<std::string>> ListTables() override;
  absl::StatusOr<uint64_t> ApproximateBytesUsed() override;

 private:
  const std::shared_ptr<State> state_;
};

}  // namespace gryph

#endif  // GRYPH_MEMORY_STORAGE_H_
