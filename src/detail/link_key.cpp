#include <sys/auxv.h>
#include <sys/random.h>

#include <cstdint>
#include <cstring>
#include <ctime>

#include "mempool/detail/error.hpp"
#include "mempool/detail/free_list.hpp"

namespace mempool::detail {

namespace {

// One splitmix64 step: the key does not reveal the AT_RANDOM bytes (glibc's stack
// and pointer guards).
std::uint64_t mix(std::uint64_t x) noexcept {
  return splitmix64_mix(x + kSplitmix64Gamma);
}

std::uint64_t random_word() noexcept {
  std::uint64_t word = 0;
  // GRND_NONBLOCK: at early boot the pool may not be ready; never wait for it.
  if (::getrandom(&word, sizeof word, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof word))
    return word;
  std::uint64_t seed[2] = {};
  if (const auto bytes = ::getauxval(AT_RANDOM); bytes != 0)
    std::memcpy(seed, reinterpret_cast<const void*>(bytes), sizeof seed);
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return mix(seed[0] ^ mix(seed[1] ^ static_cast<std::uint64_t>(now.tv_nsec) ^
                           reinterpret_cast<std::uintptr_t>(&now)));
}

}  // namespace

std::uintptr_t new_link_key() noexcept {
  std::uintptr_t key = random_word();
  if ((key & 7) == 0) key |= 1;  // zeros and 8-aligned words decode misaligned
  // One byte repeated (0x41 fill, 0xff) decodes with a zero top two bytes only if
  // the key's two top bytes are equal.
  if ((key >> 56) == ((key >> 48) & 0xff)) key ^= std::uintptr_t{1} << 63;
  return key;
}

void pool_free_list_corrupted(const char* owner, const void* b) noexcept {
  fatal_misuse(owner, b, "free list corrupted (write after free?)");
}

}  // namespace mempool::detail
