#include "mempool/detail/bitmap.hpp"

namespace mempool::detail {

AtomicBitmap::AtomicBitmap(std::size_t bits) : bits_(bits) {
  constexpr std::size_t kLineWords = std::size_t{1} << kSummaryStrideShift;
  std::size_t counts[kMaxLevels] = {};
  std::size_t n = bits;
  std::size_t total = 0;
  do {
    counts[levels_] = (n + 63) / 64;
    offset_[levels_] = total;
    // Level 0 rounded up to whole lines; a summary word a line each.
    total += levels_ == 0 ? (counts[0] + kLineWords - 1) / kLineWords * kLineWords
                          : counts[levels_] * kLineWords;
    n = counts[levels_];
    ++levels_;
  } while (n > 1);
  words_ = std::make_unique<std::atomic<std::uint64_t>[]>(total + kLineWords - 1);
  const auto start = reinterpret_cast<std::uintptr_t>(words_.get());
  base_ = words_.get() + (align_up(start, kCacheLine) - start) / sizeof(std::uint64_t);
  // Level 0: `bits` ones; each summary: one bit per word below.
  std::size_t ones = bits;
  for (std::size_t level = 0; level < levels_; ++level) {
    for (std::size_t i = 0; i < counts[level]; ++i) {
      const std::size_t in_word = ones - i * 64 >= 64 ? 64 : ones - i * 64;
      const std::uint64_t v = in_word == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << in_word) - 1;
      word(level, i).store(v, std::memory_order_relaxed);
    }
    ones = counts[level];
  }
}

void AtomicBitmap::word_emptied(std::size_t level, std::size_t index) noexcept {
  while (level + 1 < levels_) {
    const std::uint64_t bit = std::uint64_t{1} << (index % 64);
    std::atomic<std::uint64_t>& parent = word(level + 1, index / 64);
    const std::uint64_t old = parent.fetch_and(~bit, std::memory_order_seq_cst);
    // A release may have refilled the word between its emptying and our clear.
    if (word(level, index).load(std::memory_order_seq_cst) != 0) {
      parent.fetch_or(bit, std::memory_order_seq_cst);
      return;
    }
    if (old != bit) return;  // the parent still has other set bits
    ++level;
    index /= 64;
  }
}

void AtomicBitmap::word_filled(std::size_t level, std::size_t index) noexcept {
  while (level + 1 < levels_) {
    const std::uint64_t bit = std::uint64_t{1} << (index % 64);
    const std::uint64_t old = word(level + 1, index / 64).fetch_or(bit, std::memory_order_seq_cst);
    if (old != 0) return;  // the parent was already non-zero: its parent knows
    ++level;
    index /= 64;
  }
}

std::size_t AtomicBitmap::count() const noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < (bits_ + 63) / 64; ++i) {
    n += static_cast<std::size_t>(std::popcount(word(0, i).load(std::memory_order_relaxed)));
  }
  return n;
}

std::size_t AtomicBitmap::claim_and_move(std::atomic<std::size_t>& cursor,
                                         std::size_t home) noexcept {
  const std::size_t i = claim(home * 64);
  if (i != npos) cursor.store(i / 64, std::memory_order_relaxed);
  return i;
}

}  // namespace mempool::detail
