#include "lib/pfs/record_cache.h"

#include <algorithm>
#include <utility>

namespace gryph::internal {

PfsRecordCache::PfsRecordCache(size_t max_bytes)
    : max_bytes_(max_bytes), chunk_bytes_(std::clamp<size_t>(max_bytes / 16, 1, 64 * 1024)) {}

size_t PfsRecordCache::Chunk::UpperBound(Tick t) const {
  return static_cast<size_t>(std::upper_bound(ticks_.begin(), ticks_.end(), t) - ticks_.begin());
}

size_t PfsRecordCache::Chunk::bytes() const {
  // What it holds, plus a map node's worth for an empty chunk.
  return bytes_.size() + ticks_.size() * (sizeof(Tick) + sizeof(size_t)) + sizeof(Chunk);
}

PfsRecordCache::Builder::Builder(PfsRecordCache* cache, Tick from) : cache_(cache) {
  chunk_.lo_ = from;
}

void PfsRecordCache::Builder::Add(Tick t, absl::string_view value) {
  if (!cache_->enabled()) return;
  if (chunk_.bytes_.size() >= cache_->chunk_bytes_) {
    // Full: it holds every record in (lo, last tick]; the next starts there.
    const Tick last = chunk_.ticks_.back();
    chunk_.hi_ = last;
    cache_->Insert(std::move(chunk_));
    chunk_ = Chunk();
    chunk_.lo_ = last;
  }
  chunk_.ticks_.push_back(t);
  chunk_.bytes_.append(value.data(), value.size());
  chunk_.ends_.push_back(chunk_.bytes_.size());
}

void PfsRecordCache::Builder::Finish(Tick through) {
  // (A range without records is not kept: a chunk costs more than asking storage again.)
  if (!cache_->enabled() || through <= chunk_.lo_ || chunk_.ticks_.empty()) return;
  chunk_.hi_ = through;
  cache_->Insert(std::move(chunk_));
  chunk_ = Chunk();
  chunk_.lo_ = through;
}

const PfsRecordCache::Chunk* PfsRecordCache::Covering(Tick t) {
  auto it = chunks_.upper_bound(t);  // the first chunk with lo > t
  if (it == chunks_.begin()) return nullptr;
  --it;
  if (t >= it->second.hi_) return nullptr;
  it->second.used_ = ++clock_;
  return &it->second;
}

Tick PfsRecordCache::NextStart(Tick t) const {
  auto it = chunks_.upper_bound(t);
  return it == chunks_.end() ? kMaxTick : it->first;
}

void PfsRecordCache::DropThrough(Tick t) {
  while (!chunks_.empty() && chunks_.begin()->second.hi_ <= t) Erase(chunks_.begin());
}

void PfsRecordCache::Insert(Chunk chunk) {
  // A chunk overlapping the new one is older news about the same records: it goes.
  auto it = chunks_.upper_bound(chunk.lo_);
  if (it != chunks_.begin() && std::prev(it)->second.hi_ > chunk.lo_) --it;
  while (it != chunks_.end() && it->first < chunk.hi_) it = Erase(it);
  chunk.used_ = ++clock_;
  bytes_ += chunk.bytes();
  const Tick lo = chunk.lo_;
  chunks_.emplace(lo, std::move(chunk));
  // Least recently used first, never the chunk just added.
  while (bytes_ > max_bytes_ && chunks_.size() > 1) {
    auto oldest = chunks_.end();
    for (auto c = chunks_.begin(); c != chunks_.end(); ++c) {
      if (c->first != lo && (oldest == chunks_.end() || c->second.used_ < oldest->second.used_)) {
        oldest = c;
      }
    }
    Erase(oldest);
  }
}

absl::btree_map<Tick, PfsRecordCache::Chunk>::iterator PfsRecordCache::Erase(
    absl::btree_map<Tick, Chunk>::iterator it) {
  bytes_ -= it->second.bytes();
  return chunks_.erase(it);  // (a btree's erase invalidates every other iterator)
}

}  // namespace gryph::internal
