// Memory for the heap's own bookkeeping (spans, checked-build bitmaps): it cannot
// come from the heap itself, nor from malloc, which the heap may be replacing.
// Power-of-two size classes from 64 bytes to 64 KiB, carved from 1 MiB chunks
// mapped from the OS, recycled through free lists. Thread-safe (one mutex; every
// caller is already on a slow path).
#pragma once

#include <cstddef>
#include <mutex>

#include "mempool/detail/free_list.hpp"
#include "mempool/detail/lock.hpp"

namespace mempool::detail {

class MetadataArena {
 public:
  static constexpr std::size_t kMaxBytes = 64 * 1024;

  // Zero-filled; nullptr when the OS refuses memory. bytes <= kMaxBytes.
  void* allocate(std::size_t bytes) noexcept;
  void deallocate(void* p, std::size_t bytes) noexcept;

  template <typename T>
  T* create() noexcept {
    void* memory = allocate(sizeof(T));
    return memory == nullptr ? nullptr : new (memory) T();
  }
  template <typename T>
  void destroy(T* object) noexcept {
    object->~T();
    deallocate(object, sizeof(T));
  }

  [[nodiscard]] std::size_t bytes_mapped() const noexcept;
  // From now on chunks are whole huge pages, advised MADV_HUGEPAGE: the page heap
  // asks once the heap is large enough that its spans fill them (page_heap.cpp).
  void use_huge_pages() noexcept;

  // fork(): the child must not inherit a locked mutex.
  void lock() noexcept { mutex_.lock(); }
  void unlock() noexcept { mutex_.unlock(); }

 private:
  static constexpr std::size_t kChunkBytes = 1024 * 1024;
  static constexpr std::size_t kClasses = 11;  // 64 B .. 64 KiB

  mutable Lock mutex_;
  FreeBlock* free_[kClasses] = {};
  char* chunk_next_ = nullptr;
  char* chunk_end_ = nullptr;
  std::size_t bytes_mapped_ = 0;
  std::size_t chunk_bytes_ = kChunkBytes;
  bool huge_pages_ = false;
};

extern constinit MetadataArena g_metadata;

}  // namespace mempool::detail
