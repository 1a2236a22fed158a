// Adapters that plug mempool into standard C++: STL allocators, unique_ptr and
// shared_ptr helpers, and a std::pmr::memory_resource.
//
// A "pool" here is anything with allocate(bytes) and deallocate(p, bytes), such
// as SizeClassPool. If it also has a static or member alignment(bytes), requests
// that need more alignment than it gives go to its allocate(bytes, align_val_t)
// when it has one (the heap), to the general heap's aligned allocate otherwise, so
// a block is never misaligned; a pool without alignment(bytes) is assumed to give
// alignof(std::max_align_t), like malloc. The choice depends only on (bytes,
// alignment), so a free always takes the path its allocation took.
//
// The process-wide default is the general heap (Heap::global()).
#pragma once

#include <cstddef>
#include <limits>
#include <memory>
#include <memory_resource>
#include <new>
#include <type_traits>
#include <utility>

#include "mempool/heap.hpp"
#include "mempool/size_class_pool.hpp"

namespace mempool {

namespace detail {

// The alignment a pool guarantees for a block of `bytes`.
template <class Pool>
constexpr std::size_t pool_alignment(const Pool& pool, std::size_t bytes) noexcept {
  if constexpr (requires { pool.alignment(bytes); }) {
    return pool.alignment(bytes);
  } else {
    return alignof(std::max_align_t);
  }
}

template <class Pool>
void* pool_allocate(Pool& pool, std::size_t bytes, std::size_t alignment) {
  if (alignment > pool_alignment(pool, bytes)) {
    if constexpr (requires { pool.allocate(bytes, std::align_val_t{alignment}); }) {
      return pool.allocate(bytes, std::align_val_t{alignment});
    } else {
      return mempool::allocate(bytes, std::align_val_t{alignment});  // the general heap
    }
  }
  return pool.allocate(bytes);
}

template <class Pool>
void pool_deallocate(Pool& pool, void* p, std::size_t bytes, std::size_t alignment) noexcept {
  if (alignment > pool_alignment(pool, bytes)) {
    if constexpr (requires { pool.deallocate(p, bytes, std::align_val_t{alignment}); }) {
      pool.deallocate(p, bytes, std::align_val_t{alignment});
    } else {
      mempool::deallocate(p, bytes, std::align_val_t{alignment});
    }
    return;
  }
  pool.deallocate(p, bytes);
}

// n objects of T in bytes; std::bad_array_new_length when that overflows.
template <class T>
std::size_t array_bytes(std::size_t n) {
  if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
  return n * sizeof(T);
}

}  // namespace detail

// Stateless STL allocator over the general heap. Every instance is
// equal to every other, so containers move and swap their memory freely.
template <class T>
class Allocator {
 public:
  using value_type = T;
  using is_always_equal = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;

  Allocator() noexcept = default;
  template <class U>
  Allocator(const Allocator<U>& /*other*/) noexcept {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] T* allocate(std::size_t n) {
    return static_cast<T*>(
        detail::pool_allocate(Heap::global(), detail::array_bytes<T>(n), alignof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    detail::pool_deallocate(Heap::global(), p, n * sizeof(T), alignof(T));
  }

  template <class U>
  bool operator==(const Allocator<U>& /*other*/) const noexcept {
    return true;
  }
};

// Stateful STL allocator over a given pool, which must outlive every container
// using it. Copies, moves and swaps carry the pool along (propagate_on_* are all
// true), so a container never frees into a pool it did not allocate from.
template <class T, class Pool = SizeClassPool>
class PoolAllocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;
  template <class U>
  struct rebind {
    using other = PoolAllocator<U, Pool>;
  };

  explicit PoolAllocator(Pool& pool) noexcept : pool_(&pool) {}
  template <class U>
  PoolAllocator(
      const PoolAllocator<U, Pool>& other) noexcept  // NOLINT(google-explicit-constructor)
      : pool_(&other.pool()) {}

  [[nodiscard]] T* allocate(std::size_t n) {
    return static_cast<T*>(detail::pool_allocate(*pool_, detail::array_bytes<T>(n), alignof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    detail::pool_deallocate(*pool_, p, n * sizeof(T), alignof(T));
  }

  [[nodiscard]] Pool& pool() const noexcept { return *pool_; }

  template <class U>
  bool operator==(const PoolAllocator<U, Pool>& other) const noexcept {
    return pool_ == &other.pool();
  }

 private:
  Pool* pool_;
};

// Destroys and frees an object made by make_unique or allocate_unique. It is
// not convertible between types: a unique_ptr<Base> from a Derived would free
// the wrong size.
template <class T, class Pool = Heap>
class Deleter {
 public:
  Deleter() noexcept : pool_(&Pool::global()) {}
  explicit Deleter(Pool& pool) noexcept : pool_(&pool) {}

  void operator()(T* p) const noexcept {
    if (p == nullptr) return;
    p->~T();
    detail::pool_deallocate(*pool_, p, sizeof(T), alignof(T));
  }

  [[nodiscard]] Pool& pool() const noexcept { return *pool_; }

 private:
  Pool* pool_;
};

template <class T, class Pool = Heap>
using unique_ptr = std::unique_ptr<T, Deleter<T, Pool>>;

// A T made in `pool`; if T's constructor throws, its block goes back first.
template <class T, class Pool, class... Args>
[[nodiscard]] unique_ptr<T, Pool> allocate_unique(Pool& pool, Args&&... args) {
  static_assert(!std::is_array_v<T>, "allocate_unique makes single objects");
  void* p = detail::pool_allocate(pool, sizeof(T), alignof(T));
  try {
    return unique_ptr<T, Pool>(::new (p) T(std::forward<Args>(args)...), Deleter<T, Pool>(pool));
  } catch (...) {
    detail::pool_deallocate(pool, p, sizeof(T), alignof(T));
    throw;
  }
}

// A T made in the general heap.
template <class T, class... Args>
[[nodiscard]] unique_ptr<T> make_unique(Args&&... args) {
  return allocate_unique<T>(Heap::global(), std::forward<Args>(args)...);
}

// A shared T and its control block in one allocation from the general heap.
template <class T, class... Args>
[[nodiscard]] std::shared_ptr<T> make_shared(Args&&... args) {
  return std::allocate_shared<T>(Allocator<T>{}, std::forward<Args>(args)...);
}

// A std::pmr::memory_resource over a pool, which must outlive it. Requests for
// more alignment than the pool gives (allocate(n, 64)) go to the general heap.
template <class Pool>
class MEMPOOL_API PoolResource final : public std::pmr::memory_resource {
 public:
  explicit PoolResource(Pool& pool) noexcept : pool_(&pool) {}
  [[nodiscard]] Pool& pool() const noexcept { return *pool_; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    return detail::pool_allocate(*pool_, bytes, alignment);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
    detail::pool_deallocate(*pool_, p, bytes, alignment);
  }
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    const auto* o = dynamic_cast<const PoolResource*>(&other);
    return o != nullptr && o->pool_ == pool_;
  }

  Pool* pool_;
};

// The resource over the general heap; never destroyed.
MEMPOOL_API std::pmr::memory_resource* default_resource() noexcept;

}  // namespace mempool
