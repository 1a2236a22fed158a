// Run-time options of the heap, read once from MEMPOOL_* environment variables
// (docs/options.md). A bad value is reported on stderr and ignored, never fatal.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mempool::detail {

inline constexpr std::uint64_t kNeverDecay = ~std::uint64_t{0};
// 1 in 16: the suite at 1.09-1.13x the default library's time (1 in 8: 1.24x), with
// every block of a class the class's size (docs/options.md, "The hardened library").
inline constexpr std::uint64_t kDefaultHardenedSample = 16;

// The heap profiler samples on average once every this many bytes allocated (tcmalloc's
// and jemalloc's default too). A sampled block has an 8 KiB page of its own: its resident
// cost, with the unwinder's pages and the tables, is in docs/options.md.
inline constexpr std::size_t kDefaultProfileRate = std::size_t{512} * 1024;

// MEMPOOL_THP (the page heap's ThpMode, hugepage_filler.hpp).
enum class ThpOption : std::uint8_t { kAuto, kAlways, kNever };

struct HeapOptions {
  std::size_t release_threshold = std::size_t{128} << 20;        // MEMPOOL_RELEASE_THRESHOLD
  std::size_t thread_cache_bytes = std::size_t{8} << 20;         // MEMPOOL_THREAD_CACHE_BYTES
  std::size_t total_thread_cache_bytes = std::size_t{32} << 20;  // MEMPOOL_TOTAL_THREAD_CACHE_BYTES
  std::size_t direct_map_threshold = std::size_t{64} << 20;      // MEMPOOL_DIRECT_MAP_THRESHOLD
  std::size_t direct_cache_bytes = std::size_t{256} << 20;       // MEMPOOL_DIRECT_CACHE_BYTES
  std::size_t memory_limit = 0;                                  // MEMPOOL_MEMORY_LIMIT (0: none)
  std::uint64_t decay_ms = 1000;  // MEMPOOL_DECAY_MS (kNeverDecay: "never" or -1)
  // MEMPOOL_HARDENED_SEED: the hardened library's block order follows it (0: the secret)
  std::uint64_t hardened_seed = 0;
  // MEMPOOL_HARDENED_SAMPLE: the hardened library guards 1 in this many small spans (1: all)
  std::uint64_t hardened_sample = kDefaultHardenedSample;
  ThpOption thp = ThpOption::kAuto;  // MEMPOOL_THP: auto, always or never
  // MEMPOOL_PROFILE_RATE: mean bytes between samples (0: the profiler is off; the
  // default rate when only MEMPOOL_PROFILE is set).
  std::size_t profile_rate = 0;
  // MEMPOOL_PROFILE: where the profile of what is in use goes at exit (%p: the pid).
  const char* profile_path = nullptr;
  // MEMPOOL_LEAK_CHECK: every block tracked, the leaks reported at exit; then the
  // process exits with MEMPOOL_LEAK_CHECK_EXITCODE (0: as the program would).
  bool leak_check = false;
  int leak_check_exit_code = 23;
  // MEMPOOL_LEAK_CHECK_SUPPRESSIONS: a file of `leak:PATTERN` lines (LeakSanitizer's).
  const char* leak_check_suppressions = nullptr;
  bool show_stats = false;  // MEMPOOL_SHOW_STATS
  bool verbose = false;     // MEMPOOL_VERBOSE
};

// Reads the environment. Allocates nothing (the heap may be malloc itself).
HeapOptions read_heap_options() noexcept;

// One line on stderr, "mempool: " first; no allocation.
void write_stderr_line(const char* a, const char* b = "", const char* c = "",
                       const char* d = "") noexcept;

}  // namespace mempool::detail
