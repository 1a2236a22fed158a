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

class MEMPOOL_API AtomicBitmap {
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
      bool lost_race = false;
      const std::size_t i = claim_in_word(index, hint, lost_race);
      if (MEMPOOL_LIKELY(i != npos)) return i;
      if (levels_ == 1) return npos;  // the only word is empty
      // The word emptied under us; make sure its summary bit says so, then retry.
      word_emptied(0, index);
    }
  }

  // The fast path: first the level-0 word the cursor names (no walk at all),
  // then a walk from the cursor's home word (the first free bit at or after it,
  // else the first anywhere), leaving the cursor where a bit was found.
  // Callers keep one cursor per thread (or per group of threads), each with a
  // home of its own, so a thread keeps claiming from the word it claimed from
  // last and then from its own part of the bitmap: walking on from the current
  // word instead, cursors drifted round the bitmap at their threads' speeds
  // until two met and fought over the same words.
  // `lost_race` becomes true when another thread took the bit this one picked in
  // the cursor's word: a sign that two threads share the cursor.
  [[nodiscard]] MEMPOOL_ALWAYS_INLINE std::size_t claim(std::atomic<std::size_t>& cursor,
                                                        std::size_t home,
                                                        bool& lost_race) noexcept {
    const std::size_t w = cursor.load(std::memory_order_relaxed);
    const std::size_t i = claim_in_word(w, 0, lost_race);
    if (MEMPOOL_LIKELY(i != npos)) return i;
    return claim_and_move(cursor, home);
  }

  // Level-0 words (a cursor's range).
  [[nodiscard]] std::size_t words() const noexcept { return (bits_ + 63) / 64; }

  // Sets bit i; false if it was already set (the item was not claimed).
  [[nodiscard]] bool release(std::size_t i) noexcept {
    const std::size_t index = i / 64;
    const std::uint64_t bit = std::uint64_t{1} << (i % 64);
    // The whole old word, not just the bit (a CAS loop, not `lock bts`): then only
    // the release that refills an empty word touches the summary. Reading the
    // summary on every release missed the cache each time another thread had
    // emptied or filled a word under the same summary line (2 threads ran slower
    // than new/delete).
    const std::uint64_t old = word(0, index).fetch_or(bit, std::memory_order_seq_cst);
    if (MEMPOOL_UNLIKELY((old & bit) != 0)) return false;
    // 0 -> non-zero: set the summary bit. word_emptied clears the summary and then
    // re-reads the word, so an emptying that races with this refill still leaves
    // the summary set.
    if (MEMPOOL_UNLIKELY(old == 0) && levels_ > 1) word_filled(0, index);
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
  // `from`); npos when the word has none. lost_race: another thread cleared the
  // bit first at least once.
  MEMPOOL_ALWAYS_INLINE std::size_t claim_in_word(std::size_t index, std::size_t from,
                                                  bool& lost_race) noexcept {
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
      lost_race = true;
      w = leaf.load(std::memory_order_relaxed);  // someone took it first: look again
    }
    return npos;
  }

  MEMPOOL_COLD std::size_t claim_and_move(std::atomic<std::size_t>& cursor,
                                          std::size_t home) noexcept;

  // Level 0 packed from base_, then each summary level with one word per cache
  // line: summaries are what threads working in different parts of the bitmap
  // share, and packed, every word one of them emptied or refilled moved a line
  // between cores (two threads ran slower than new/delete).
  static constexpr unsigned kSummaryStrideShift = 3;  // 8 words: 64 bytes
  std::atomic<std::uint64_t>& word(std::size_t level, std::size_t index) const noexcept {
    return level == 0 ? base_[index] : base_[offset_[level] + (index << kSummaryStrideShift)];
  }

  // Word `index` of `level` became 0: clear its bit above, unless it refilled.
  MEMPOOL_COLD void word_emptied(std::size_t level, std::size_t index) noexcept;
  // Word `index` of `level` went from 0 to non-zero: set its bit above.
  MEMPOOL_COLD void word_filled(std::size_t level, std::size_t index) noexcept;

  std::size_t bits_ = 0;
  std::size_t levels_ = 0;
  std::size_t offset_[kMaxLevels] = {};  // first word of each level from base_
  std::unique_ptr<std::atomic<std::uint64_t>[]> words_;
  std::atomic<std::uint64_t>* base_ = nullptr;  // words_ rounded up to a cache line
};

}  // namespace mempool::detail
