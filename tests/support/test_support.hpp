// The tests' scaffolding, written once: sanitizer detection, the alignment check,
// block patterns (fill and check), resident and virtual bytes (VmRSS, VmSize, mincore),
// the cross-thread hand-off box, and the fresh-process runner with its checks that
// say what failed (IN_FRESH_PROCESS, CHILD_CHECK).
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define MEMPOOL_TEST_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define MEMPOOL_TEST_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEMPOOL_TEST_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define MEMPOOL_TEST_TSAN 1
#endif
#endif
#ifndef MEMPOOL_TEST_ASAN
#define MEMPOOL_TEST_ASAN 0
#endif
#ifndef MEMPOOL_TEST_TSAN
#define MEMPOOL_TEST_TSAN 0
#endif

namespace mempool_test {

inline constexpr bool kAsan = MEMPOOL_TEST_ASAN != 0;
inline constexpr bool kTsan = MEMPOOL_TEST_TSAN != 0;
// Sanitizers slow everything down several times and reserve terabytes of address
// space for their shadow memory.
inline constexpr bool kSanitized = kAsan || kTsan;

inline constexpr std::size_t kKiB = 1024;
inline constexpr std::size_t kMiB = 1024 * kKiB;
inline constexpr std::size_t kGiB = 1024 * kMiB;
inline constexpr std::size_t kNoMismatch = SIZE_MAX;

// p is a multiple of `alignment` (a power of two or not).
inline bool is_aligned(const void* p, std::size_t alignment) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

// The 8-byte word at index i of the pattern of `seed`: different for every word
// of a block and for every block, so a block handed out twice, a shifted copy or
// a stray write all show.
constexpr std::uint64_t pattern_word(std::uint64_t seed, std::size_t i) noexcept {
  std::uint64_t x = seed * 0xD1B54A32D192ED03ull + i * 0x9E3779B97F4A7C15ull + 1;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

constexpr std::uint8_t pattern_byte(std::uint64_t seed, std::size_t k) noexcept {
  return static_cast<std::uint8_t>(pattern_word(seed, k / 8) >> (8 * (k % 8)));
}

// Writes the pattern over bytes [0, n) of p (any alignment).
inline void fill_pattern(void* p, std::size_t n, std::uint64_t seed) noexcept {
  auto* b = static_cast<unsigned char*>(p);
  const std::size_t words = n / 8;
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t w = pattern_word(seed, i);
    std::memcpy(b + 8 * i, &w, 8);
  }
  for (std::size_t k = 8 * words; k < n; ++k)
    b[k] = pattern_byte(seed, k);
}

// The offset of the first byte of [0, n) that differs from the pattern, or
// kNoMismatch. With stride > 1 only every stride-th word is read, plus the first
// and last 4 KiB (for big blocks under slow sanitizers).
inline std::size_t first_mismatch(const void* p, std::size_t n, std::uint64_t seed,
                                  std::size_t stride = 1) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  const std::size_t words = n / 8;
  for (std::size_t i = 0; i < words;) {
    std::uint64_t w;
    std::memcpy(&w, b + 8 * i, 8);
    if (w != pattern_word(seed, i)) {
      for (std::size_t k = 8 * i;; ++k) {
        if (b[k] != pattern_byte(seed, k)) return k;
      }
    }
    const bool edge = i < 512 || i + 512 >= words;
    i += edge ? 1 : stride;
  }
  for (std::size_t k = 8 * words; k < n; ++k) {
    if (b[k] != pattern_byte(seed, k)) return k;
  }
  return kNoMismatch;
}

// Resident memory of this process in bytes (VmRSS), 0 if unreadable.
inline std::size_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  std::size_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmRSS:", 6) == 0) {
      kib = std::strtoull(line + 6, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

// Virtual size of this process in bytes (VmSize), 0 if unreadable.
inline std::size_t virtual_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  std::size_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmSize:", 7) == 0) {
      kib = std::strtoull(line + 7, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

// Bytes of [p, p + n) resident in this process (mincore over the pages it spans);
// SIZE_MAX if mincore fails (the range is not mapped).
inline std::size_t resident_bytes_in(const void* p, std::size_t n) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(p) / page * page;
  const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(p) + n + page - 1) / page * page;
  std::vector<unsigned char> vec((end - first) / page);
  if (::mincore(reinterpret_cast<void*>(first), end - first, vec.data()) != 0) return SIZE_MAX;
  std::size_t pages = 0;
  for (unsigned char v : vec)
    pages += v & 1;
  return pages * page;
}

// The mapping of this process that holds address p, from /proc/self/smaps: its
// range, its VmFlags ("hg": MADV_HUGEPAGE, "nh": MADV_NOHUGEPAGE) and its
// AnonHugePages. found is false when no mapping holds p.
struct Mapping {
  bool found = false;
  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
  std::string flags;
  std::size_t anon_huge_bytes = 0;
  [[nodiscard]] bool has_flag(const char* flag) const {
    return (" " + flags + " ").find(std::string(" ") + flag + " ") != std::string::npos;
  }
};
inline Mapping mapping_of(const void* p) {
  Mapping m;
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return m;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  char line[512];
  bool inside = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long low = 0, high = 0;
    if (std::sscanf(line, "%llx-%llx ", &low, &high) == 2) {  // a mapping's first line
      if (inside) break;                                      // past the mapping of p
      inside = a >= low && a < high;
      if (inside) {
        m.found = true;
        m.start = low;
        m.end = high;
      }
    } else if (inside && std::strncmp(line, "AnonHugePages:", 14) == 0) {
      m.anon_huge_bytes = std::strtoull(line + 14, nullptr, 10) * 1024;
    } else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
      m.flags = line + 8;
      while (!m.flags.empty() && (m.flags.back() == '\n' || m.flags.back() == ' '))
        m.flags.pop_back();
      while (!m.flags.empty() && m.flags.front() == ' ')
        m.flags.erase(0, 1);
    }
  }
  std::fclose(f);
  return m;
}

// The system's transparent huge pages: "always", "madvise" or "never" (also where
// the kernel has none).
inline std::string system_thp_mode() {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == nullptr) return "never";
  char line[128] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  if (!read) return "never";
  const std::string text = line;
  for (const char* mode : {"always", "madvise", "never"})
    if (text.find(std::string("[") + mode + "]") != std::string::npos) return mode;
  return "never";
}

// The box in which one thread hands items to another: put() never blocks, take()
// waits for an item or for close() (then nullopt), try_take() never waits.
template <class T>
class HandOff {
 public:
  void put(T item) {
    {
      std::lock_guard<std::mutex> lock(m_);
      items_.push_back(std::move(item));
    }
    ready_.notify_one();
  }
  std::optional<T> take() {
    std::unique_lock<std::mutex> lock(m_);
    ready_.wait(lock, [this] { return !items_.empty() || closed_; });
    return pop_locked();
  }
  std::optional<T> try_take() {
    std::lock_guard<std::mutex> lock(m_);
    return pop_locked();
  }
  // Wakes every take(): once the box is empty they return nullopt.
  void close() {
    {
      std::lock_guard<std::mutex> lock(m_);
      closed_ = true;
    }
    ready_.notify_all();
  }
  std::vector<T> drain() {
    std::lock_guard<std::mutex> lock(m_);
    std::vector<T> all(std::make_move_iterator(items_.begin()),
                       std::make_move_iterator(items_.end()));
    items_.clear();
    return all;
  }

 private:
  std::optional<T> pop_locked() {
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  std::mutex m_;
  std::condition_variable ready_;
  std::deque<T> items_;
  bool closed_ = false;
};

// Writes one line to stderr without allocating (the heap may be out of memory, or
// the process past main).
inline void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void say(const char* fmt, ...) {
  char line[512];
  va_list args;
  va_start(args, fmt);
  const int len = std::vsnprintf(line, sizeof line - 1, fmt, args);
  va_end(args);
  std::size_t n =
      len < 0 ? 0 : std::min<std::size_t>(static_cast<std::size_t>(len), sizeof line - 2);
  line[n++] = '\n';
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line, n);
}

// "0x7f3a2c001040", as the misuse report writes a pointer.
inline std::string hex_pointer(const void* p) {
  char buf[2 + 2 * sizeof(std::uintptr_t) + 1];
  std::snprintf(buf, sizeof buf, "0x%llx",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  return buf;
}

// The first pair of overlapping ranges {start, length} in `blocks` (which it
// sorts), as indices into the sorted vector; {0, 0} when all are disjoint.
inline std::pair<std::size_t, std::size_t> find_overlap(
    std::vector<std::pair<const void*, std::size_t>>& blocks) {
  std::sort(blocks.begin(), blocks.end());
  for (std::size_t i = 1; i < blocks.size(); ++i) {
    const auto prev_end = reinterpret_cast<std::uintptr_t>(blocks[i - 1].first) +
                          std::max<std::size_t>(blocks[i - 1].second, 1);
    if (prev_end > reinterpret_cast<std::uintptr_t>(blocks[i].first)) return {i - 1, i};
  }
  return {0, 0};
}

}  // namespace mempool_test

// In a child process (IN_FRESH_PROCESS, a fork, a death test): a failed check writes
// "file:line: check failed: cond" and the message (printf-style) to stderr, then ends
// the child with status 1, so the parent's report says which check failed.
#define CHILD_CHECK(cond, ...)                                                   \
  do {                                                                           \
    if (!(cond)) {                                                               \
      ::mempool_test::say("%s:%d: check failed: %s", __FILE__, __LINE__, #cond); \
      ::mempool_test::say(__VA_ARGS__);                                          \
      ::_exit(1);                                                                \
    }                                                                            \
  } while (0)

// Runs `body` in a freshly executed copy of this test program (gtest's "threadsafe"
// death-test style: nothing another test did to the heap, and the environment as the
// test set it, is what the child's heap starts from). The body must end the process
// with status 0 (std::exit(0) or _exit(0)); its checks use CHILD_CHECK. The optional
// second argument is a regular expression its stderr must match.
#define IN_FRESH_PROCESS(body, ...)                                                          \
  do {                                                                                       \
    GTEST_FLAG_SET(death_test_style, "threadsafe");                                          \
    EXPECT_EXIT(body, ::testing::ExitedWithCode(0), ::std::string(__VA_OPT__(__VA_ARGS__))); \
  } while (0)
