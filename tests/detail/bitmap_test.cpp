#include "mempool/detail/bitmap.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace mempool::detail {
namespace {

void claim_all_then_release(std::size_t bits) {
  AtomicBitmap bm(bits);
  ASSERT_EQ(bm.count(), bits);
  std::vector<bool> seen(bits);
  for (std::size_t n = 0; n < bits; ++n) {
    const std::size_t i = bm.claim(n * 7919);
    ASSERT_NE(i, AtomicBitmap::npos) << "bits=" << bits << " n=" << n;
    ASSERT_LT(i, bits);
    ASSERT_FALSE(seen[i]) << "claimed twice: " << i;
    seen[i] = true;
  }
  EXPECT_EQ(bm.claim(0), AtomicBitmap::npos);
  EXPECT_EQ(bm.count(), 0u);
  for (std::size_t i = 0; i < bits; i += 3)
    EXPECT_TRUE(bm.release(i));
  EXPECT_FALSE(bm.release(0)) << "releasing a set bit reports it";
  for (std::size_t i = 0; i < bits; i += 3)
    EXPECT_EQ(bm.claim(i), i) << "the hinted bit is free";
  EXPECT_EQ(bm.claim(0), AtomicBitmap::npos);
}

TEST(AtomicBitmap, OneLevel) {
  claim_all_then_release(1);
}
TEST(AtomicBitmap, OneFullWord) {
  claim_all_then_release(64);
}
TEST(AtomicBitmap, TwoLevelsPartialWord) {
  claim_all_then_release(65);
}
TEST(AtomicBitmap, ThreeLevels) {
  claim_all_then_release(64 * 64 + 1);
}
TEST(AtomicBitmap, TwoToTheEighteen) {
  claim_all_then_release(std::size_t{1} << 18);
}
TEST(AtomicBitmap, FourLevels) {
  claim_all_then_release((std::size_t{1} << 18) + 100);
}

TEST(AtomicBitmap, CursorClaimsStayInItsWordThenMove) {
  AtomicBitmap bm(64 * 64 * 3);
  std::atomic<std::size_t> cursor{5};
  bool lost = false;
  for (std::size_t n = 0; n < 64; ++n)
    EXPECT_EQ(bm.claim(cursor, 5, lost) / 64, 5u) << "word 5 first";
  const std::size_t next = bm.claim(cursor, 5, lost);
  EXPECT_EQ(next / 64, 6u) << "then the next word with a free bit";
  EXPECT_EQ(cursor.load(), 6u) << "and the cursor follows";
  std::vector<bool> seen(bm.size());
  seen[next] = true;
  for (std::size_t n = 65; n < bm.size(); ++n) {
    const std::size_t i = bm.claim(cursor, 5, lost);
    ASSERT_NE(i, AtomicBitmap::npos);
    ASSERT_FALSE(seen[i]);
    seen[i] = true;
  }
  EXPECT_EQ(bm.claim(cursor, 5, lost), AtomicBitmap::npos);
  ASSERT_TRUE(bm.release(7));
  EXPECT_EQ(bm.claim(cursor, 5, lost), 7u) << "found from any cursor position";
}

// When the cursor's word runs dry the search starts again at the cursor's home,
// not at the word it just emptied: a thread stays in its part of the bitmap.
TEST(AtomicBitmap, AnEmptyCursorWordSendsTheSearchHome) {
  AtomicBitmap bm(64 * 64 * 3);
  std::atomic<std::size_t> cursor{5};
  bool lost = false;
  for (std::size_t n = 0; n < 128; ++n)
    ASSERT_EQ(bm.claim(cursor, 5, lost) / 64, 5 + n / 64);  // words 5, then 6
  EXPECT_EQ(cursor.load(), 6u);
  ASSERT_TRUE(bm.release(5 * 64 + 10));
  EXPECT_EQ(bm.claim(cursor, 5, lost), 5u * 64 + 10) << "home first, not onwards from word 6";
  EXPECT_EQ(cursor.load(), 5u);
  EXPECT_EQ(bm.claim(cursor, 5, lost), 7u * 64) << "then the first free word after home";
  EXPECT_FALSE(lost) << "one thread loses no race";
}

TEST(AtomicBitmap, FindsTheLastFreeBitAnywhere) {
  const std::size_t bits = 100000;
  AtomicBitmap bm(bits);
  for (std::size_t n = 0; n < bits; ++n)
    ASSERT_NE(bm.claim(0), AtomicBitmap::npos);
  for (const std::size_t last : {std::size_t{0}, std::size_t{4095}, std::size_t{4096}, bits - 1}) {
    ASSERT_TRUE(bm.release(last));
    EXPECT_TRUE(bm.test(last));
    EXPECT_EQ(bm.claim(12345), last);
    EXPECT_EQ(bm.claim(0), AtomicBitmap::npos);
  }
}

TEST(AtomicBitmap, ConcurrentClaimsAreUnique) {
  constexpr std::size_t kBits = 5000;
  constexpr int kThreads = 8;
  AtomicBitmap bm(kBits);
  std::vector<std::atomic<int>> owned(kBits);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::size_t> mine;
      for (int round = 0; round < 200; ++round) {
        for (int k = 0; k < 20; ++k) {
          const std::size_t i = bm.claim(static_cast<std::size_t>(t) * 600);
          if (i == AtomicBitmap::npos) break;
          if (owned[i].fetch_add(1) != 0) ++errors;
          mine.push_back(i);
        }
        for (std::size_t i : mine) {
          owned[i].fetch_sub(1);
          if (!bm.release(i)) ++errors;
        }
        mine.clear();
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(bm.count(), kBits) << "every bit came back and the summaries agree";
  for (std::size_t n = 0; n < kBits; ++n)
    ASSERT_NE(bm.claim(n), AtomicBitmap::npos);
}

}  // namespace
}  // namespace mempool::detail
