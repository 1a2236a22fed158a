#include "mempool/detail/chunk_arena.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "mempool/detail/os.hpp"

namespace mempool::detail {
namespace {

TEST(ChunkArena, CarvesDistinctAlignedBlocksAndGrowsGeometrically) {
  ChunkArena arena(BlockLayout{64, 64}, false);
  std::set<void*> blocks;
  for (int i = 0; i < 10000; ++i) {
    void* p = arena.carve_one();
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
    EXPECT_TRUE(blocks.insert(p).second);
    EXPECT_TRUE(arena.owns(p));
  }
  // 640,000 bytes in chunks of 4 KiB, 8, 16, ... : about 8 chunks, not 157.
  EXPECT_LE(arena.chunk_count(), 9u);
  EXPECT_GE(arena.bytes_reserved(), 10000u * 64);
}

TEST(ChunkArena, OwnsOnlyBlockStartsOfCarvedBlocks) {
  ChunkArena arena(BlockLayout{48, 16}, false);
  char* p = static_cast<char*>(arena.carve_one());
  EXPECT_TRUE(arena.owns(p));
  EXPECT_FALSE(arena.owns(p + 16)) << "inside a block";
  EXPECT_FALSE(arena.owns(p + 48)) << "not carved yet";
  EXPECT_FALSE(arena.owns(p - 48));
  int local = 0;
  EXPECT_FALSE(arena.owns(&local));
  EXPECT_FALSE(arena.owns(nullptr));
}

TEST(ChunkArena, CarveChainIsLinked) {
  ChunkArena arena(BlockLayout{32, 16}, false);
  const FreeChain c = arena.carve(10);
  ASSERT_EQ(c.count, 10u);
  std::size_t n = 1;
  for (FreeBlock* b = c.first; b != c.last; b = pool_next(b))
    ++n;
  EXPECT_EQ(n, 10u);
}

TEST(ChunkArena, TracksAllocatedBits) {
  ChunkArena arena(BlockLayout{16, 16}, true);
  void* p = arena.carve_one();
  arena.mark_allocated(p);
  EXPECT_TRUE(arena.mark_free(p));
  EXPECT_FALSE(arena.mark_free(p)) << "second free is a double free";
}

TEST(ChunkArena, OutOfMemoryIsAnEmptyAnswer) {
  ChunkArena arena(BlockLayout{64, 16}, false);
  mempool::testing::fail_os_maps_after(0);
  EXPECT_EQ(arena.carve_one(), nullptr);
  EXPECT_TRUE(arena.carve(4).empty());
  mempool::testing::fail_os_maps_after(-1);
  EXPECT_NE(arena.carve_one(), nullptr);
}

}  // namespace
}  // namespace mempool::detail
