#include "mempool/detail/chunk_arena.hpp"

#include <algorithm>
#include <functional>
#include <new>
#include <utility>

#include "mempool/detail/os.hpp"
#include "mempool/detail/platform.hpp"

namespace mempool::detail {

namespace {

// Chunks start at one page (or a few blocks) and double up to 1 MiB, so a small
// pool stays small and a big one maps rarely.
constexpr std::size_t kMinBlocksPerChunk = 4;
constexpr std::size_t kMaxChunkBytes = std::size_t{1} << 20;

}  // namespace

ChunkArena::~ChunkArena() {
  release_all();
}

ChunkArena::ChunkArena(ChunkArena&& other) noexcept
    : layout_(other.layout_),
      track_(other.track_),
      chunks_(std::move(other.chunks_)),
      by_address_(std::move(other.by_address_)),
      next_chunk_bytes_(std::exchange(other.next_chunk_bytes_, 0)),
      bytes_reserved_(std::exchange(other.bytes_reserved_, 0)) {
  other.chunks_.clear();
  other.by_address_.clear();
}

ChunkArena& ChunkArena::operator=(ChunkArena&& other) noexcept {
  if (this != &other) {
    release_all();
    layout_ = other.layout_;
    track_ = other.track_;
    chunks_ = std::move(other.chunks_);
    by_address_ = std::move(other.by_address_);
    next_chunk_bytes_ = std::exchange(other.next_chunk_bytes_, 0);
    bytes_reserved_ = std::exchange(other.bytes_reserved_, 0);
    other.chunks_.clear();
    other.by_address_.clear();
  }
  return *this;
}

void ChunkArena::release_all() noexcept {
  for (Chunk& c : chunks_)
    os_unmap(c.base, c.bytes);
  chunks_.clear();
  by_address_.clear();
  bytes_reserved_ = 0;
  next_chunk_bytes_ = 0;
}

bool ChunkArena::grow() noexcept {
  const std::size_t page = page_size();
  // At least kMinBlocksPerChunk blocks, at least a page, doubling each time.
  const std::size_t floor_bytes = align_up(layout_.size * kMinBlocksPerChunk, page);
  std::size_t bytes = std::max(next_chunk_bytes_, std::max(floor_bytes, page));
  try {
    // Reserve the bookkeeping first: after the map nothing may fail.
    chunks_.reserve(chunks_.size() + 1);
    by_address_.reserve(by_address_.size() + 1);
    Chunk c{nullptr, bytes, bytes / layout_.size, 0, nullptr};
    if (track_) {
      c.allocated = std::make_unique<std::atomic<std::uint64_t>[]>((c.blocks + 63) / 64);
    }
    c.base = static_cast<char*>(os_map(bytes));
    if (c.base == nullptr) return false;
    const auto index = static_cast<std::uint32_t>(chunks_.size());
    chunks_.push_back(std::move(c));
    const auto at = std::lower_bound(
        by_address_.begin(), by_address_.end(), chunks_.back().base,
        [this](std::uint32_t i, const char* base) { return chunks_[i].base < base; });
    by_address_.insert(at, index);
  } catch (const std::bad_alloc&) {
    return false;
  }
  bytes_reserved_ += bytes;
  next_chunk_bytes_ = std::min(bytes * 2, std::max(kMaxChunkBytes, floor_bytes));
  return true;
}

void* ChunkArena::carve_one() noexcept {
  if (chunks_.empty() || chunks_.back().carved == chunks_.back().blocks) {
    if (!grow()) return nullptr;
  }
  Chunk& c = chunks_.back();
  return c.base + (c.carved++) * layout_.size;
}

FreeChain ChunkArena::carve(std::size_t n) noexcept {
  FreeChain chain;
  if (n == 0) return chain;
  if (chunks_.empty() || chunks_.back().carved == chunks_.back().blocks) {
    if (!grow()) return chain;
  }
  Chunk& c = chunks_.back();
  const std::size_t take = std::min(n, c.blocks - c.carved);
  char* first = c.base + c.carved * layout_.size;
  for (std::size_t i = 0; i + 1 < take; ++i) {
    set_pool_next(reinterpret_cast<FreeBlock*>(first + i * layout_.size),
                  reinterpret_cast<FreeBlock*>(first + (i + 1) * layout_.size));
  }
  chain.first = reinterpret_cast<FreeBlock*>(first);
  chain.last = reinterpret_cast<FreeBlock*>(first + (take - 1) * layout_.size);
  set_pool_next(chain.last, nullptr);
  chain.count = take;
  c.carved += take;
  return chain;
}

const ChunkArena::Chunk* ChunkArena::find(const void* p, std::size_t* index) const noexcept {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  // The last chunk whose base is <= p.
  auto it = std::upper_bound(by_address_.begin(), by_address_.end(), addr,
                             [this](std::uintptr_t a, std::uint32_t i) {
                               return a < reinterpret_cast<std::uintptr_t>(chunks_[i].base);
                             });
  if (it == by_address_.begin()) return nullptr;
  const Chunk& c = chunks_[*(it - 1)];
  const std::uintptr_t offset = addr - reinterpret_cast<std::uintptr_t>(c.base);
  if (offset >= c.carved * layout_.size || offset % layout_.size != 0) return nullptr;
  *index = offset / layout_.size;
  return &c;
}

bool ChunkArena::owns(const void* p) const noexcept {
  std::size_t index = 0;
  return find(p, &index) != nullptr;
}

void ChunkArena::mark_allocated(const void* p) noexcept {
  std::size_t i = 0;
  const Chunk* c = find(p, &i);
  if (c != nullptr && c->allocated) {
    c->allocated[i / 64].fetch_or(std::uint64_t{1} << (i % 64), std::memory_order_relaxed);
  }
}

bool ChunkArena::mark_free(const void* p) noexcept {
  std::size_t i = 0;
  const Chunk* c = find(p, &i);
  if (c == nullptr || !c->allocated) return c != nullptr;
  const std::uint64_t bit = std::uint64_t{1} << (i % 64);
  return (c->allocated[i / 64].fetch_and(~bit, std::memory_order_relaxed) & bit) != 0;
}

std::size_t ChunkArena::release_free_chunks(std::vector<void*>& free_blocks) noexcept {
  std::sort(free_blocks.begin(), free_blocks.end(), std::less<>());
  std::size_t released = 0;
  std::size_t kept = 0;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    Chunk& chunk = chunks_[c];
    void* const begin = chunk.base;
    void* const end = chunk.base + chunk.carved * layout_.size;
    const auto first =
        std::lower_bound(free_blocks.begin(), free_blocks.end(), begin, std::less<>());
    const auto last = std::lower_bound(first, free_blocks.end(), end, std::less<>());
    const bool being_carved = c + 1 == chunks_.size() && chunk.carved < chunk.blocks;
    const auto free_here = static_cast<std::size_t>(last - first);
    if (!being_carved && chunk.carved > 0 && free_here == chunk.carved) {
      free_blocks.erase(first, last);  // shifts pointers down; no allocation
      os_unmap(chunk.base, chunk.bytes);
      released += chunk.bytes;
      bytes_reserved_ -= chunk.bytes;
      continue;
    }
    if (kept != c) chunks_[kept] = std::move(chunk);
    ++kept;
  }
  chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(kept), chunks_.end());
  by_address_.resize(kept);
  for (std::uint32_t i = 0; i < kept; ++i)
    by_address_[i] = i;
  std::sort(by_address_.begin(), by_address_.end(),
            [this](std::uint32_t a, std::uint32_t b) { return chunks_[a].base < chunks_[b].base; });
  return released;
}

}  // namespace mempool::detail
