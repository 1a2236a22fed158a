#include "mempool/detail/platform.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <stdexcept>

#include "mempool/detail/block_layout.hpp"

namespace mempool::detail {
namespace {

TEST(Platform, PageSizeMatchesSysconf) {
  EXPECT_EQ(page_size(), static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
  EXPECT_TRUE(is_power_of_two(page_size()));
}

TEST(Platform, AlignUp) {
  EXPECT_EQ(align_up(0, 16), 0u);
  EXPECT_EQ(align_up(1, 16), 16u);
  EXPECT_EQ(align_up(16, 16), 16u);
  EXPECT_EQ(align_up(17, 8), 24u);
  EXPECT_EQ(align_up(SIZE_MAX - 3, 16), 0u) << "overflow is reported as 0";
}

TEST(Platform, PowerOfTwo) {
  EXPECT_FALSE(is_power_of_two(0));
  EXPECT_TRUE(is_power_of_two(1));
  EXPECT_TRUE(is_power_of_two(4096));
  EXPECT_FALSE(is_power_of_two(24));
}

TEST(BlockLayout, SmallBlocksHoldAPointer) {
  const BlockLayout l = make_block_layout("Test", 1, 0);
  EXPECT_EQ(l.size, sizeof(void*));
  EXPECT_EQ(l.alignment, alignof(void*));
}

TEST(BlockLayout, SixteenAndUpAreSixteenAligned) {
  EXPECT_EQ(make_block_layout("Test", 24, 0).size, 32u);
  EXPECT_EQ(make_block_layout("Test", 24, 0).alignment, 16u);
  EXPECT_EQ(make_block_layout("Test", 48, 0).size, 48u);
}

TEST(BlockLayout, AskedAlignmentIsExactButHoldsAPointer) {
  EXPECT_EQ(make_block_layout("Test", 24, 8).size, 24u) << "dense 24-byte blocks";
  EXPECT_EQ(make_block_layout("Test", 24, 8).alignment, 8u);
  EXPECT_EQ(make_block_layout("Test", 12, 4).size, 16u);
  EXPECT_EQ(make_block_layout("Test", 12, 4).alignment, 8u);
  EXPECT_EQ(make_block_layout("Test", 40, 1).size, 40u);
  EXPECT_EQ(make_block_layout("Test", 8, 16).size, 16u);
}

TEST(BlockLayout, AskedAlignmentWins) {
  const BlockLayout l = make_block_layout("Test", 48, 64);
  EXPECT_EQ(l.alignment, 64u);
  EXPECT_EQ(l.size, 64u);
  EXPECT_EQ(make_block_layout("Test", 8, 4096).size, 4096u);
}

TEST(BlockLayout, BadArgumentsNameTheParameter) {
  try {
    (void)make_block_layout("Test", 0, 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("mempool::Test: block_size"), std::string::npos);
  }
  try {
    (void)make_block_layout("Test", 64, 24);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("alignment 24"), std::string::npos);
  }
  EXPECT_THROW((void)make_block_layout("Test", 64, 8192), std::invalid_argument);
  EXPECT_THROW((void)make_block_layout("Test", SIZE_MAX, 0), std::length_error);
  EXPECT_THROW((void)make_block_layout("Test", kMaxBlockSize + 1, 0), std::length_error);
}

}  // namespace
}  // namespace mempool::detail
