// Statistics policies for the single-threaded pools. Pick one as a template
// argument: NoStats (the default) is an empty class stored with
// [[no_unique_address]], so it adds no byte and no instruction.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mempool {

// A snapshot of one pool's counters.
struct PoolStats {
  std::uint64_t allocations = 0;   // blocks handed out since construction
  std::uint64_t frees = 0;         // blocks given back
  std::uint64_t live = 0;          // allocations - frees
  std::uint64_t peak = 0;          // highest `live` seen
  std::size_t chunks = 0;          // chunks mapped from the OS
  std::size_t bytes_reserved = 0;  // bytes in those chunks
};

// No counting at all (the default).
struct NoStats {
  static constexpr bool enabled = false;
  void on_allocate() noexcept {}
  void on_free() noexcept {}
};

// Counts allocations, frees, live and peak blocks: four plain integer updates.
class WithStats {
 public:
  static constexpr bool enabled = true;
  void on_allocate() noexcept {
    ++allocations_;
    if (++live_ > peak_) peak_ = live_;
  }
  void on_free() noexcept {
    ++frees_;
    --live_;
  }
  [[nodiscard]] PoolStats snapshot() const noexcept {
    PoolStats s;
    s.allocations = allocations_;
    s.frees = frees_;
    s.live = live_;
    s.peak = peak_;
    return s;
  }

 private:
  std::uint64_t allocations_ = 0;
  std::uint64_t frees_ = 0;
  std::uint64_t live_ = 0;
  std::uint64_t peak_ = 0;
};

}  // namespace mempool
