// A hierarchical atomic bitmap: find-and-claim a set bit in a bounded number of
// steps however full it is, and set bits back, from any thread without locks.
//
// Level 0 holds one bit per item (1 = available). Each word of level k+1
// summarises 64 words of level k: its bit is 1 when that word may have a set bit.
// A claim walks down from the single top word choosing a set bit with
// count-trailing-zeros, so it reads at most one word per level (4 levels cover
// 2^24 items), and then clears its bit with one fetch_and.
//
// Summaries: whoever turns a word from 0 to non-zero sets its parent bit; whoever
// turns a word to 0 clears the parent bit and then re-reads the word, setting
// the parent bit again if a release slipped in meanwhile. So a summary bit can
// be stale-set for a moment (a claim then retries) but is never left clear over
// a non-zero word. The price: while the very last free items are being released
// concurrently, a claim may see the bitmap as full for that moment.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "mempool/detail/platform.hpp"

namespace mempool::detail {

class AtomicBitmap {
 public:
  static constexpr std::size_t kMaxLevels = 4;
  static constexpr std::size_t kMaxBits = std::size_t{1} << (6 * kMaxLevels);  // 2^24
  static constexpr std::size_t npos = SIZE_MAX;

  // All `bits` (1 .. kMaxBits) start set (available). Allocates its words here
  // and never again.
  explicit AtomicBitmap(std::size_t bits);
  AtomicBitmap(AtomicBitmap&&) noexcept = default;
  AtomicBitmap& operator=(AtomicBitmap&&) noexcept = default;

  [[nodiscard]] std::size_t size() const noexcept { return bits_; }

  // Clears and returns a set bit, preferring bits at or after `hint`; npos when
  // none is set. Walks down from the top word.
  [[nodiscard]] std::size_t claim(std::size_t hint) noexcept {
    for (;;) {
      // Walk down the summaries; `index` is the word index at the next level.
      std::size_t index = 0;
      std::size_t level = levels_ - 1;
      for (; level > 0; --level) {
        const std::uint64_t w = word(level, index).load(std::memory_order_acquire);
        if (MEMPOOL_UNLIKELY(w == 0)) break;
        index = index * 64 + pick(w, hint >> (6 * level));
      }
      if (level > 0) {
        if (level == levels_ - 1) return npos;  // the top is empty: nothing is free
        // A stale summary bit led to an empty word: repair it (or another walk
        // would follow it forever), then walk again.
        word_emptied(level, index);
        continue;
      }
      const std::size_t i = claim_in_word(index, hint);
      if (MEMPOOL_LIKELY(i != npos)) return i;
      if (levels_ == 1) return npos;  // the only word is empty
      // The word emptied under us; make sure its summary bit says so, then retry.
      word_emptied(0, index);
    }
  }

  // The fast path: first the level-0 word the cursor names (no walk at all),
  // then a walk from there, leaving the cursor at the word where a bit was found.
  // Callers keep one cursor per thread (or per group of threads), so a thread
  // keeps claiming from the word it claimed from last.
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE std::size_t claim(std::atomic<std::size_t>& cursor) noexcept {
    const std::size_t w = cursor.load(std::memory_order_relaxed);
    const std::size_t i = claim_in_word(w, 0);
    if (MEMPOOL_LIKELY(i != npos)) return i;
    return claim_and_move(cursor, w);
  }

  // Level-0 words (a cursor's range).
  [[nodiscard]] std::size_t words() const noexcept { return (bits_ + 63) / 64; }

  // Sets bit i; false if it was already set (the item was not claimed).
  [[nodiscard]] bool release(std::size_t i) noexcept {
    const std::size_t index = i / 64;
    const std::uint64_t bit = std::uint64_t{1} << (i % 64);
    // Only "was the bit set?" is needed: one `lock bts`, no CAS loop.
    if (MEMPOOL_UNLIKELY((word(0, index).fetch_or(bit, std::memory_order_seq_cst) & bit) != 0)) {
      return false;
    }
    // The word may have been empty: make sure its summary bit is set. Reading the
    // summary after our write pairs with word_emptied, which clears the summary
    // and then re-reads the word: one of the two sees the other.
    if (levels_ > 1 && MEMPOOL_UNLIKELY(!summary_set(index))) word_filled(0, index);
    return true;
  }

  [[nodiscard]] bool test(std::size_t i) const noexcept {
    return (word(0, i / 64).load(std::memory_order_acquire) >> (i % 64)) & 1;
  }

  // Set bits now (a snapshot; O(size / 64)).
  [[nodiscard]] std::size_t count() const noexcept;

 private:
  // The first set bit at or after position `from` (mod 64), else the first set bit.
  static MEMPOOL_ALWAYS_INLINE std::size_t pick(std::uint64_t w, std::size_t from) noexcept {
    const std::uint64_t after = w & (~std::uint64_t{0} << (from % 64));
    return static_cast<std::size_t>(std::countr_zero(after != 0 ? after : w));
  }

  // Clears a set bit of level-0 word `index` (preferring bits at or after
  // `from`); npos when the word has none.
  MEMPOOL_ALWAYS_INLINE std::size_t claim_in_word(std::size_t index, std::size_t from) noexcept {
    std::atomic<std::uint64_t>& leaf = word(0, index);
    std::uint64_t w = leaf.load(std::memory_order_relaxed);
    while (w != 0) {
      const std::size_t b = pick(w, from);
      const std::uint64_t bit = std::uint64_t{1} << b;
      // One `lock btr`; whoever leaves the word empty then clears its summary.
      if (MEMPOOL_LIKELY((leaf.fetch_and(~bit, std::memory_order_seq_cst) & bit) != 0)) {
        if (MEMPOOL_UNLIKELY(leaf.load(std::memory_order_seq_cst) == 0)) word_emptied(0, index);
        return index * 64 + b;
      }
      w = leaf.load(std::memory_order_relaxed);  // someone took it first: look again
    }
    return npos;
  }

  // The summary bit of level-0 word `index` (levels_ > 1).
  [[nodiscard]] bool summary_set(std::size_t index) const noexcept {
    return ((word(1, index / 64).load(std::memory_order_seq_cst) >> (index % 64)) & 1) != 0;
  }

  MEMPOOL_COLD std::size_t claim_and_move(std::atomic<std::size_t>& cursor,
                                          std::size_t from_word) noexcept;

  std::atomic<std::uint64_t>& word(std::size_t level, std::size_t index) const noexcept {
    return words_[offset_[level] + index];
  }

  // Word `index` of `level` became 0: clear its bit above, unless it refilled.
  MEMPOOL_COLD void word_emptied(std::size_t level, std::size_t index) noexcept;
  // Word `index` of `level` went from 0 to non-zero: set its bit above.
  MEMPOOL_COLD void word_filled(std::size_t level, std::size_t index) noexcept;

  std::size_t bits_ = 0;
  std::size_t levels_ = 0;
  std::size_t offset_[kMaxLevels] = {};  // first word of each level in words_
  std::unique_ptr<std::atomic<std::uint64_t>[]> words_;
};

}  // namespace mempool::detail
