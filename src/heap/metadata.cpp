#include "metadata.hpp"

#include <bit>
#include <cstdint>
#include <cstring>

#include "mempool/detail/os.hpp"

namespace mempool::detail {

constinit MetadataArena g_metadata;

namespace {
std::size_t metadata_class(std::size_t bytes) noexcept {
  return bytes <= 64 ? 0 : static_cast<std::size_t>(std::bit_width(bytes - 1)) - 6;
}
}  // namespace

void* MetadataArena::allocate(std::size_t bytes) noexcept {
  const std::size_t c = metadata_class(bytes);
  const std::size_t rounded = std::size_t{64} << c;
  std::lock_guard<Lock> lock(mutex_);
  if (FreeBlock* b = free_[c]; b != nullptr) {
    free_[c] = b->next;
    std::memset(b, 0, rounded);
    return b;
  }
  // Aligned to its own size (a power of two): spans rely on 128-byte alignment.
  const auto misalignment = reinterpret_cast<std::uintptr_t>(chunk_next_) & (rounded - 1);
  if (chunk_next_ != nullptr && misalignment != 0) chunk_next_ += rounded - misalignment;
  if (chunk_next_ > chunk_end_ || static_cast<std::size_t>(chunk_end_ - chunk_next_) < rounded) {
    // The tail of the old chunk is dropped: at most 64 KiB per 1 MiB.
    auto* chunk = static_cast<char*>(huge_pages_ ? os_map_aligned(chunk_bytes_, chunk_bytes_)
                                                 : os_map(chunk_bytes_));
    if (chunk == nullptr) return nullptr;
    if (huge_pages_) os_advise_huge_pages(chunk, chunk_bytes_, true);
    chunk_next_ = chunk;
    chunk_end_ = chunk + chunk_bytes_;
    bytes_mapped_ += chunk_bytes_;
  }
  void* p = chunk_next_;  // fresh from the OS: already zero
  chunk_next_ += rounded;
  return p;
}

void MetadataArena::deallocate(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  const std::size_t c = metadata_class(bytes);
  std::lock_guard<Lock> lock(mutex_);
  auto* b = static_cast<FreeBlock*>(p);
  b->next = free_[c];
  free_[c] = b;
}

void MetadataArena::use_huge_pages() noexcept {
  std::lock_guard<Lock> lock(mutex_);
  huge_pages_ = true;
  chunk_bytes_ = std::size_t{2} << 20;  // a huge page (hugepage_filler.hpp)
}

std::size_t MetadataArena::bytes_mapped() const noexcept {
  std::lock_guard<Lock> lock(mutex_);
  return bytes_mapped_;
}

}  // namespace mempool::detail
