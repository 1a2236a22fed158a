// The OS door (src/os/os_memory.cpp): the aligned map and the zero reservation
// keep exactly their bytes of address space (the unaligned ends go back), and only
// the map is counted as memory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "mempool/detail/os.hpp"

namespace {

using mempool::detail::os_commit;
using mempool::detail::os_map_aligned;
using mempool::detail::os_reserve_zeros;
using mempool::detail::os_unmap;
using mempool::detail::os_unreserve;
using mempool::detail::page_size;
using mempool::testing::os_bytes_mapped;

// The process's address space in bytes (/proc/self/statm's first field), read with
// no allocation: a malloc between two reads could map memory of its own.
std::size_t address_space_bytes() {
  char text[128] = {};
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  return std::strtoul(text, nullptr, 10) * page_size();
}

bool aligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

TEST(OsMemory, AnAlignedMapKeepsOnlyItsOwnBytes) {
  ASSERT_NE(address_space_bytes(), 0u);
  for (const std::size_t alignment : {std::size_t{64} << 10, std::size_t{2} << 20}) {
    const std::size_t bytes = 5 * page_size();
    const std::size_t space = address_space_bytes();
    const std::size_t counted = os_bytes_mapped();
    void* p = os_map_aligned(bytes, alignment);
    const std::size_t space_after = address_space_bytes();
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(aligned(p, alignment)) << p << " for " << alignment;
    EXPECT_EQ(space_after - space, bytes) << "the unaligned ends stayed mapped";
    EXPECT_EQ(os_bytes_mapped() - counted, bytes);
    std::memset(p, 0xa5, bytes);  // writable to its last byte
    EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], 0xa5);
    os_unmap(p, bytes);
    EXPECT_EQ(os_bytes_mapped(), counted);
    EXPECT_EQ(address_space_bytes(), space);
  }
}

TEST(OsMemory, AZeroReservationReadsZerosAndIsNotCountedUntilCommitted) {
  const std::size_t alignment = std::size_t{2} << 20;
  const std::size_t bytes = std::size_t{4} << 20;
  const std::size_t space = address_space_bytes();
  const std::size_t counted = os_bytes_mapped();
  auto* p = static_cast<unsigned char*>(os_reserve_zeros(bytes, alignment));
  const std::size_t space_after = address_space_bytes();
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(aligned(p, alignment));
  EXPECT_EQ(space_after - space, bytes) << "the unaligned ends stayed reserved";
  EXPECT_EQ(os_bytes_mapped(), counted) << "a reservation is not memory";
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[bytes - 1], 0);
  // A part committed becomes writable memory, counted; the rest still reads as zeros.
  ASSERT_TRUE(os_commit(p + alignment, page_size()));
  EXPECT_EQ(os_bytes_mapped() - counted, page_size());
  p[alignment] = 7;
  EXPECT_EQ(p[alignment], 7);
  EXPECT_EQ(p[alignment + page_size()], 0);
  EXPECT_EQ(p[alignment - 1], 0);
  os_unmap(p + alignment, page_size());
  os_unreserve(p, bytes);
  EXPECT_EQ(os_bytes_mapped(), counted);
  EXPECT_EQ(address_space_bytes(), space);
}

TEST(OsMemory, SizesThatOverflowAreRefused) {
  EXPECT_EQ(os_map_aligned(SIZE_MAX - 4096, std::size_t{2} << 20), nullptr);
  EXPECT_EQ(os_reserve_zeros(SIZE_MAX - 4096, std::size_t{2} << 20), nullptr);
  EXPECT_EQ(os_reserve_zeros(0, std::size_t{2} << 20), nullptr);
}

}  // namespace
