// The heap profiler: which allocation stacks hold the memory in use.
//
// Sampling by bytes, as tcmalloc and jemalloc do: each thread draws the number of
// bytes until its next sample from an exponential distribution of mean R
// (MEMPOOL_PROFILE_RATE, 512 KiB), so that every byte allocated has the same chance
// 1/R of being sampled, whatever the sizes and their order. The hit paths subtract each
// request from the thread's countdown (heap_sample_due: two instructions) and come here
// when it turns negative. A sampled block gets a span of its own (one 8 KiB page for a
// small one), which records the site and the size: free finds the sample in the span
// it reads anyway, and nothing is added to its hit path (tcmalloc does the same). Sized
// frees skip the page map, so they take the page-map path while profiling
// (ThreadCache::sized_free_max).
//
// A block of n bytes is sampled with probability 1 - exp(-n/R); each sample stands for
// 1 / (1 - exp(-n/R)) blocks and n times that bytes, so the profile's sums are unbiased
// estimates of the blocks and bytes in use and allocated, by site. The relative error
// of a site's estimate is about 1/sqrt(bytes/R): 12% for 32 MiB at the default rate.
//
// Stacks come from glibc's backtrace() (libgcc's unwinder over .eh_frame), correct for
// programs built without frame pointers and no dependency more; libunwind would be
// faster per stack, but a stack is taken once per R bytes. The frames inside the
// allocator (MEMPOOL_ALLOCATION_ENTRY) are dropped. A thread taking a stack is marked
// busy: what the unwinder allocates (its first call loads libgcc_s) is served without a
// sample, so the profiler never recurses; a signal handler that allocates on that thread
// does too. The lock of the site table is held across fork().
//
// The heap at its peak: the estimate of the bytes in use is kept as a sum, and each time
// it passes the last snapshot's by a sixteenth, every site's in-use sums are copied to its
// peak sums (under the table's lock, once per sample at most, O(sites)). The peak profile
// is the heap at its highest to within 1/16 of its bytes (MEMPOOL_PROFILE writes it beside
// the profile at exit; mempool::profile_dump_peak on demand).
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "../options.hpp"
#include "../os/write_all.hpp"
#include "heap_internal.hpp"
#include "heap_profiler.hpp"
#include "leak_check.hpp"
#include "mempool/detail/lock.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "metadata.hpp"
#include "sampling_math.hpp"

// The bounds of the section that MEMPOOL_ALLOCATION_ENTRY places functions in (the
// linker defines them, in each shared object and executable that has the section).
extern "C" {
extern const char __start_mempool_allocation_entry[] __attribute__((visibility("hidden")));
extern const char __stop_mempool_allocation_entry[] __attribute__((visibility("hidden")));
}

// Weak, as in leak_check.cpp: a fully static program has no dynamic loader.
#pragma weak dladdr

namespace mempool::detail {

namespace {

constexpr int kMaxDepth = 64;    // frames kept (pprof's and tcmalloc's maximum)
constexpr int kMaxSkipped = 16;  // allocator frames above them
// The leak check unwinds on every allocation and free, at a cost linear in the frames:
// LeakSanitizer's default depth (malloc_context_size), and a few allocator frames above.
constexpr int kLeakDepth = 30;
constexpr int kLeakSkipped = 6;
constexpr std::size_t kBuckets = 8192;  // 64 KiB of pointers: one metadata block
constexpr unsigned kCountShift = 16;

constinit std::size_t g_rate = 0;  // 0: off
constinit double g_rate_bytes = 0;
constinit char g_path[PATH_MAX] = {};  // MEMPOOL_PROFILE, %p not yet replaced
constinit Lock g_lock;                 // the table and its arena
constinit ProfileSite** g_buckets = nullptr;
constinit char* g_arena_next = nullptr;
constinit char* g_arena_end = nullptr;
// The heap's peak (see the top of the file): the estimated bytes in use, and the total
// that triggers the next snapshot (from 1 MiB: a smaller heap is not worth a picture).
constinit std::atomic<std::uint64_t> g_live_bytes{0};
constinit std::atomic<std::uint64_t> g_next_snapshot{std::uint64_t{1} << 20};

// The samples freed last, for a misuse report on one of them (a double free): where it
// was allocated and where it was first freed. A ring written by any thread; read only
// by a report, as the process stops.
constexpr int kFreedFrames = 16;
constexpr std::size_t kFreedRing = 256;
struct FreedSample {
  std::atomic<bool> writing{false};  // a slot another thread is writing is passed over
  // The block's address inverted, so that the leak check, which scans this ring with the
  // other globals, does not take it for a pointer to a block allocated there since.
  std::atomic<std::uintptr_t> start_inverted{0};
  const ProfileSite* site = nullptr;
  void* frames[kFreedFrames] = {};
  int depth = 0;
};
constinit FreedSample g_freed[kFreedRing];
constinit std::atomic<std::size_t> g_freed_next{0};

struct ProfilerThread {
  std::uint64_t random = 0;  // xorshift64* state, 0 until first used
  bool busy = false;         // taking a stack: allocations are not sampled
};
constinit thread_local ProfilerThread tls_profiler MEMPOOL_TLS_MODEL;

std::uint64_t next_random(ProfilerThread& t) noexcept {
  if (t.random == 0) {
    // Distinct per thread and per process (the TLS block's address, the pid).
    t.random = (reinterpret_cast<std::uintptr_t>(&t) * 0x9e3779b97f4a7c15u) ^
               (static_cast<std::uint64_t>(::getpid()) << 32) ^ 0x5851f42d4c957f2du;
    if (t.random == 0) t.random = 1;
  }
  std::uint64_t x = t.random;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  t.random = x;
  return x * 0x2545f4914f6cdd1du;
}

// Bytes until the next sample: exponential with mean R.
std::int64_t next_interval(ProfilerThread& t) noexcept {
  const double u = static_cast<double>((next_random(t) >> 11) + 1) * 0x1p-53;  // (0, 1]
  const double bytes = -sampling_log(u) * g_rate_bytes;
  constexpr double kMost = 0x1p62;
  return static_cast<std::int64_t>(bytes < kMost ? bytes : kMost);
}

// What one sample of a block of n bytes stands for.
struct Weight {
  std::uint64_t count;  // blocks x 2^kCountShift
  std::uint64_t bytes;
};
Weight weight_of(std::size_t n) noexcept {
  const double size = n == 0 ? 1.0 : static_cast<double>(n);
  const double blocks = -1.0 / sampling_expm1(-size / g_rate_bytes);  // 1 / (1 - e^(-n/R))
  // Rounded to the nearest: both are positive, and being one off just below a half
  // does not matter here (llround is libm's).
  // NOLINTBEGIN(bugprone-incorrect-roundings)
  return {static_cast<std::uint64_t>(blocks * (1u << kCountShift) + 0.5),
          static_cast<std::uint64_t>(blocks * static_cast<double>(n) + 0.5)};
  // NOLINTEND(bugprone-incorrect-roundings)
}

// Whether libgcc's unwinder, under backtrace(), can run. In a fully static program it
// cannot while glibc's start-up runs (_dl_non_dynamic_init allocates before the program's
// own tables are known: the unwinder, and _dl_find_object itself, stop the process then),
// and the leak check, or a profiler sampling at once, would unwind there. So a program
// without a dynamic loader (AT_BASE 0) gets empty stacks until the constructors run; in any
// other the loader has set everything up before the first allocation.
constinit std::atomic<bool> g_unwinder_ready{false};

__attribute__((constructor)) void unwinder_ready_by_now() noexcept {
  g_unwinder_ready.store(true, std::memory_order_relaxed);
}

bool unwinder_ready() noexcept {
  if (MEMPOOL_LIKELY(g_unwinder_ready.load(std::memory_order_relaxed))) return true;
  if (::getauxval(AT_BASE) == 0) return false;
  g_unwinder_ready.store(true, std::memory_order_relaxed);
  return true;
}

// backtrace(), or no frame while the unwinder cannot run yet.
int capture_stack(void** frames, int most) noexcept {
  return unwinder_ready() ? backtrace(frames, most) : 0;
}

bool in_allocator(const void* pc) noexcept {
  const auto* p = static_cast<const char*>(pc);
  return p >= __start_mempool_allocation_entry && p < __stop_mempool_allocation_entry;
}

// The frames of a stack to drop: up to the end of the first run of the allocator's own,
// which may come after a frame or two of backtrace()'s (a sanitizer intercepts it).
int allocator_frames(void* const* frames, int depth) noexcept {
  constexpr int kMostBefore = 4;
  int i = 0;
  while (i < depth && i < kMostBefore && !in_allocator(frames[i]))
    ++i;
  if (i == depth || !in_allocator(frames[i])) return 0;
  while (i < depth && in_allocator(frames[i]))
    ++i;
  return i;
}

std::uint64_t hash_frames(void* const* frames, int depth) noexcept {
  std::uint64_t h = 0xcbf29ce484222325u;
  for (int i = 0; i < depth; ++i) {
    h ^= reinterpret_cast<std::uintptr_t>(frames[i]);
    h *= 0x100000001b3u;
    h ^= h >> 29;
  }
  return h;
}

// Bump allocation from metadata blocks for sites and their frames (never freed); g_lock held.
void* arena_allocate(std::size_t bytes) noexcept {
  bytes = (bytes + 15) & ~std::size_t{15};
  if (g_arena_next == nullptr || static_cast<std::size_t>(g_arena_end - g_arena_next) < bytes) {
    auto* block = static_cast<char*>(g_metadata.allocate(MetadataArena::kMaxBytes));
    if (block == nullptr) return nullptr;
    g_arena_next = block;
    g_arena_end = block + MetadataArena::kMaxBytes;
  }
  void* p = g_arena_next;
  g_arena_next += bytes;
  return p;
}

// The site of this stack, added if new; nullptr when out of memory. g_lock held.
ProfileSite* find_site(void* const* frames, int depth) noexcept {
  if (g_buckets == nullptr) {
    g_buckets = static_cast<ProfileSite**>(g_metadata.allocate(kBuckets * sizeof(void*)));
    if (g_buckets == nullptr) return nullptr;
  }
  const std::uint64_t h = hash_frames(frames, depth);
  ProfileSite*& bucket = g_buckets[h % kBuckets];
  for (ProfileSite* s = bucket; s != nullptr; s = s->next) {
    if (s->hash == h && s->depth == static_cast<std::uint32_t>(depth) &&
        std::memcmp(s->frames, frames, static_cast<std::size_t>(depth) * sizeof(void*)) == 0)
      return s;
  }
  void* memory =
      arena_allocate(sizeof(ProfileSite) + static_cast<std::size_t>(depth) * sizeof(void*));
  if (memory == nullptr) return nullptr;
  auto* site = new (memory) ProfileSite();
  auto** copy = reinterpret_cast<void**>(site + 1);
  std::memcpy(copy, frames, static_cast<std::size_t>(depth) * sizeof(void*));
  site->frames = copy;
  site->depth = static_cast<std::uint32_t>(depth);
  site->hash = h;
  site->next = bucket;
  bucket = site;
  return site;
}

// The allocation a sample replaces, served as if the profiler were off.
void* allocate_uncounted(std::size_t n, std::size_t alignment) noexcept {
  if (alignment != 0) return heap_allocate_aligned_uncounted(n, alignment);
  return heap_allocate_uncounted(n);
}

// A buffered writer to a descriptor, with no allocation.
class ProfileWriter {
 public:
  explicit ProfileWriter(int fd) noexcept : fd_(fd) {}
  void put(const char* text, std::size_t n) noexcept {
    while (n > 0) {
      if (used_ == sizeof buffer_) flush();
      const std::size_t take = n < sizeof buffer_ - used_ ? n : sizeof buffer_ - used_;
      std::memcpy(buffer_ + used_, text, take);
      used_ += take;
      text += take;
      n -= take;
    }
  }
  void put(const char* text) noexcept { put(text, std::strlen(text)); }
  template <typename... Args>
  void format(const char* f, Args... args) noexcept {
    char line[160];
    const int n = std::snprintf(line, sizeof line, f, args...);
    if (n <= 0) return;
    put(line,
        static_cast<std::size_t>(n) < sizeof line ? static_cast<std::size_t>(n) : sizeof line - 1);
  }
  bool flush() noexcept {
    if (!write_all(fd_, buffer_, used_)) ok_ = false;
    used_ = 0;
    return ok_;
  }

 private:
  int fd_;
  bool ok_ = true;
  std::size_t used_ = 0;
  char buffer_[8192];
};

std::uint64_t blocks_of(std::uint64_t count) noexcept {
  return (count + (1u << (kCountShift - 1))) >> kCountShift;
}

// The gperftools heap-profile format (google-pprof and Go's pprof read it): a header
// with the totals, a line per site (in use, then [allocated], then its stack), and the
// process's mappings, from which pprof finds the binaries to symbolize with. The
// counts are estimates already: the header's "heapprofile" tells pprof not to scale.
// `peak`: the sites' sums at the heap's peak instead of now (the allocated sums are now's).
bool write_profile(int fd, bool peak) noexcept {
  ProfileWriter out(fd);
  {
    std::lock_guard<Lock> lock(g_lock);
    const auto live_count = [peak](const ProfileSite* s) {
      return blocks_of(peak ? s->peak_count : s->live_count.load(std::memory_order_relaxed));
    };
    const auto live_bytes = [peak](const ProfileSite* s) {
      return peak ? s->peak_bytes : s->live_bytes.load(std::memory_order_relaxed);
    };
    std::uint64_t totals[4] = {};
    for (std::size_t b = 0; g_buckets != nullptr && b < kBuckets; ++b) {
      for (const ProfileSite* s = g_buckets[b]; s != nullptr; s = s->next) {
        totals[0] += live_count(s);
        totals[1] += live_bytes(s);
        totals[2] += blocks_of(s->total_count.load(std::memory_order_relaxed));
        totals[3] += s->total_bytes.load(std::memory_order_relaxed);
      }
    }
    out.format(
        "heap profile: %6llu: %8llu [%6llu: %8llu] @ heapprofile\n",
        static_cast<unsigned long long>(totals[0]), static_cast<unsigned long long>(totals[1]),
        static_cast<unsigned long long>(totals[2]), static_cast<unsigned long long>(totals[3]));
    for (std::size_t b = 0; g_buckets != nullptr && b < kBuckets; ++b) {
      for (const ProfileSite* s = g_buckets[b]; s != nullptr; s = s->next) {
        out.format("%6llu: %8llu [%6llu: %8llu] @", static_cast<unsigned long long>(live_count(s)),
                   static_cast<unsigned long long>(live_bytes(s)),
                   static_cast<unsigned long long>(
                       blocks_of(s->total_count.load(std::memory_order_relaxed))),
                   static_cast<unsigned long long>(s->total_bytes.load(std::memory_order_relaxed)));
        // Return addresses; pprof takes 1 from all but the first, which it takes for
        // the program counter of a sample (a CPU profile's): the call is 1 byte back.
        for (std::uint32_t i = 0; i < s->depth; ++i)
          out.format(" %#lx", reinterpret_cast<std::uintptr_t>(s->frames[i]) - (i == 0 ? 1 : 0));
        out.put("\n");
      }
    }
  }
  out.put("\nMAPPED_LIBRARIES:\n");
  const int maps = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (maps >= 0) {
    char chunk[4096];
    for (;;) {
      const ssize_t n = ::read(maps, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out.put(chunk, static_cast<std::size_t>(n));
    }
    ::close(maps);
  }
  return out.flush();
}

// MEMPOOL_PROFILE's path with %p replaced by the pid (a child of fork() writes its own).
void expand_path(char (&path)[PATH_MAX]) noexcept {
  std::size_t n = 0;
  for (const char* c = g_path; *c != '\0' && n + 1 < sizeof path; ++c) {
    if (c[0] == '%' && c[1] == 'p') {
      char pid[24];
      const int len = std::snprintf(pid, sizeof pid, "%d", static_cast<int>(::getpid()));
      for (int i = 0; i < len && n + 1 < sizeof path; ++i)
        path[n++] = pid[i];
      ++c;
    } else {
      path[n++] = *c;
    }
  }
  path[n] = '\0';
}

// The peak profile's path beside `path`: "x.heap" gives "x.peak.heap", another "x.peak".
// False when it would not fit (then no peak profile is written).
bool peak_path(const char* path, char (&out)[PATH_MAX]) noexcept {
  constexpr std::string_view kExtension = ".heap";
  constexpr std::string_view kPeak = ".peak";
  std::string_view base = path;
  const bool heap = base.ends_with(kExtension);
  if (heap) base.remove_suffix(kExtension.size());
  const std::size_t n = base.size() + kPeak.size() + (heap ? kExtension.size() : 0);
  if (n >= sizeof out) return false;
  char* at = std::copy(base.begin(), base.end(), out);
  at = std::copy(kPeak.begin(), kPeak.end(), at);
  if (heap) at = std::copy(kExtension.begin(), kExtension.end(), at);
  *at = '\0';
  return true;
}

void dump_at_exit() noexcept {
  char path[PATH_MAX];
  expand_path(path);
  char peak[PATH_MAX];
  const bool with_peak = peak_path(path, peak);
  for (const bool at_peak : {false, true}) {
    if (at_peak && !with_peak) break;
    const char* p = at_peak ? peak : path;
    if (!(at_peak ? profile_dump_peak(p) : profile_dump(p))) {
      // strerror at exit, on one thread's failure: its static buffer is not shared then.
      write_stderr_line("heap profile: cannot write ", p, ": ",
                        std::strerror(errno));  // NOLINT(concurrency-mt-unsafe)
    }
  }
}

// A new peak: every site's in-use sums become its peak sums. g_lock held.
void snapshot_peak() noexcept {
  const std::uint64_t live = g_live_bytes.load(std::memory_order_relaxed);
  if (live < g_next_snapshot.load(std::memory_order_relaxed)) return;  // another thread did
  for (std::size_t b = 0; b < kBuckets; ++b) {
    for (ProfileSite* s = g_buckets[b]; s != nullptr; s = s->next) {
      s->peak_count = s->live_count.load(std::memory_order_relaxed);
      s->peak_bytes = s->live_bytes.load(std::memory_order_relaxed);
    }
  }
  g_next_snapshot.store(live + live / 16, std::memory_order_relaxed);
}

}  // namespace

namespace {

// backtrace()'s first call loads libgcc_s, which allocates: done now, outside any lock.
void warm_up_unwinder() noexcept {
  ProfilerThread& t = tls_profiler;
  t.busy = true;
  void* frame[1];
  capture_stack(frame, 1);
  t.busy = false;
}

}  // namespace

bool heap_profiler_active() noexcept {
  return g_rate != 0;
}

void heap_profiler_configure(std::size_t rate, const char* path) noexcept {
  if (rate == 0) return;
  g_rate = rate;
  g_rate_bytes = static_cast<double>(rate);
  if (path != nullptr) {
    std::strncpy(g_path, path, sizeof g_path - 1);
  }
}

void heap_profiler_start() noexcept {
  if (g_leak_check) {
    // This thread's cache may hold blocks freed before the check began: given back, so
    // that from now on every free of this thread reaches the leak table (ThreadCache::flush).
    tls_thread_cache.release_all();
    tls_thread_cache.sample_countdown = -1;
    warm_up_unwinder();
    leak_check_start();
    return;
  }
  if (g_rate == 0) return;
  // This thread's sized frees take the page map from now on, and its next allocation
  // draws its countdown (threads that start later do both as their caches activate).
  tls_thread_cache.sized_free_max = 0;
  tls_thread_cache.sample_countdown = 0;
  warm_up_unwinder();
  if (g_path[0] != '\0') std::atexit(dump_at_exit);
}

void heap_profiler_lock() noexcept {
  g_lock.lock();
}
void heap_profiler_unlock() noexcept {
  g_lock.unlock();
}

namespace {

// The leak check's allocation: an ordinary block, its stack and size in the leak table.
// Every request comes here (the countdown stays negative).
MEMPOOL_ALLOCATION_ENTRY void* allocate_tracked(std::size_t n, std::size_t alignment) noexcept {
  ProfilerThread& t = tls_profiler;
  tls_thread_cache.sample_countdown = -1;
  if (t.busy) return allocate_uncounted(n, alignment);
  t.busy = true;
  void* frames[kLeakDepth + kLeakSkipped];
  const int depth = capture_stack(frames, kLeakDepth + kLeakSkipped);
  const int skip = allocator_frames(frames, depth);
  void* p = allocate_uncounted(n, alignment);
  if (p != nullptr) {
    const ProfileSite* site = nullptr;
    {
      std::lock_guard<Lock> lock(g_lock);
      site = find_site(frames + skip, depth - skip < kLeakDepth ? depth - skip : kLeakDepth);
    }
    if (site != nullptr) leak_track(p, n, site);
  }
  leak_scrub_stack();
  t.busy = false;
  return p;
}

}  // namespace

MEMPOOL_ALLOCATION_ENTRY MEMPOOL_NOINLINE void* heap_allocate_sampled(
    std::size_t n, std::size_t alignment) noexcept {
  heap_ensure_ready();  // the options, when this is the process's first allocation
  ThreadCache& cache = tls_thread_cache;
  ProfilerThread& t = tls_profiler;
  if (g_leak_check) return allocate_tracked(n, alignment);
  if (g_rate == 0) {
    cache.sample_countdown = INT64_MAX;
    return allocate_uncounted(n, alignment);
  }
  if (t.busy) return allocate_uncounted(n, alignment);
  cache.sample_countdown = next_interval(t);
  t.busy = true;
  void* frames[kMaxDepth + kMaxSkipped];
  const int depth = capture_stack(frames, kMaxDepth + kMaxSkipped);
  const int skip = allocator_frames(frames, depth);
  const std::size_t bytes = n == 0 ? 1 : n;
  void* p = kHardened ? hardened_allocate_large_block(bytes, alignment)
                      : heap_allocate_large(bytes, alignment);
  if (p != nullptr) {
    Span* s = g_page_map.lookup(p);
    s->requested = n;
    std::lock_guard<Lock> lock(g_lock);
    if (ProfileSite* site =
            find_site(frames + skip, depth - skip < kMaxDepth ? depth - skip : kMaxDepth)) {
      const Weight w = weight_of(n);
      site->live_count.fetch_add(w.count, std::memory_order_relaxed);
      site->live_bytes.fetch_add(w.bytes, std::memory_order_relaxed);
      site->total_count.fetch_add(w.count, std::memory_order_relaxed);
      site->total_bytes.fetch_add(w.bytes, std::memory_order_relaxed);
      s->profile_site = site;
      const std::uint64_t live =
          g_live_bytes.fetch_add(w.bytes, std::memory_order_relaxed) + w.bytes;
      if (live >= g_next_snapshot.load(std::memory_order_relaxed)) snapshot_peak();
    }
  }
  t.busy = false;
  return p;
}

namespace {

// Block `start`, allocated at `site`, is being freed: its free stack goes into the ring.
void record_free(std::uintptr_t start, const ProfileSite* site) noexcept {
  ProfilerThread& t = tls_profiler;
  if (t.busy) return;
  t.busy = true;
  FreedSample& f = g_freed[g_freed_next.fetch_add(1, std::memory_order_relaxed) % kFreedRing];
  if (!f.writing.exchange(true, std::memory_order_acquire)) {
    f.start_inverted.store(0, std::memory_order_relaxed);
    void* frames[kFreedFrames + kLeakSkipped];
    const int depth = capture_stack(frames, kFreedFrames + kLeakSkipped);
    const int skip = allocator_frames(frames, depth);
    f.depth = depth - skip < kFreedFrames ? depth - skip : kFreedFrames;
    std::memcpy(f.frames, frames + skip, static_cast<std::size_t>(f.depth) * sizeof(void*));
    f.site = site;
    f.start_inverted.store(~start, std::memory_order_release);
    f.writing.store(false, std::memory_order_release);
  }
  t.busy = false;
}

}  // namespace

MEMPOOL_ALLOCATION_ENTRY void heap_profile_on_free(Span* s) noexcept {
  record_free(s->start, s->profile_site);
  const Weight w = weight_of(s->requested);
  s->profile_site->live_count.fetch_sub(w.count, std::memory_order_relaxed);
  s->profile_site->live_bytes.fetch_sub(w.bytes, std::memory_order_relaxed);
  g_live_bytes.fetch_sub(w.bytes, std::memory_order_relaxed);
  s->profile_site = nullptr;
}

MEMPOOL_ALLOCATION_ENTRY void heap_tracked_free(const void* p) noexcept {
  if (const ProfileSite* site = leak_untrack(p); site != nullptr)
    record_free(reinterpret_cast<std::uintptr_t>(p), site);
}

bool heap_profiler_set_busy(bool busy) noexcept {
  ProfilerThread& t = tls_profiler;
  const bool was = t.busy;
  t.busy = busy;
  return was;
}

namespace {

// "    #0 0x55d0c1a2b3c4 function+0x1f (/path/to/object)", with what dladdr knows (weak,
// leak_check.cpp: nothing where a fully static program has no dynamic loader).
void write_frames(const char* title, void* const* frames, std::uint32_t depth) noexcept {
  ProfileWriter out(STDERR_FILENO);
  out.put("mempool: heap: ");
  out.put(title);
  out.put("\n");
  for (std::uint32_t i = 0; i < depth; ++i) {
    const auto pc = reinterpret_cast<std::uintptr_t>(frames[i]) - 1;  // the call
    Dl_info info{};
    out.format("    #%u %#lx", i, pc);
    if (&::dladdr != nullptr && ::dladdr(address_as(pc), &info) != 0) {
      if (info.dli_sname != nullptr) {
        out.put(" ");
        out.put(info.dli_sname);
        out.format("+%#lx", pc - reinterpret_cast<std::uintptr_t>(info.dli_saddr));
      }
      if (info.dli_fname != nullptr) {
        out.put(" (");
        out.put(info.dli_fname);
        out.put(")");
      }
    }
    out.put("\n");
  }
  out.flush();
}

}  // namespace

void heap_profile_explain(const void* p) noexcept {
  if (g_rate == 0 && !g_leak_check) return;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  // A block the leak check tracks, in use.
  if (const ProfileSite* site = leak_site_of(p); site != nullptr) {
    write_frames("the block was allocated at:", site->frames, site->depth);
    return;
  }
  const Span* s = g_page_map.lookup(p);
  // p in a sampled block in use (its start, or inside it: an interior pointer).
  if (s != nullptr && s->profile_site != nullptr &&
      (s->state == SpanState::kLarge || s->state == SpanState::kDirect)) {
    write_frames("the block was allocated at:", s->profile_site->frames, s->profile_site->depth);
    return;
  }
  // The newest freed sample at this address.
  const std::size_t next = g_freed_next.load(std::memory_order_relaxed);
  for (std::size_t i = 1; i <= kFreedRing && i <= next; ++i) {
    const FreedSample& f = g_freed[(next - i) % kFreedRing];
    if (f.start_inverted.load(std::memory_order_acquire) != ~address) continue;
    if (f.site != nullptr)
      write_frames("the block was allocated at:", f.site->frames, f.site->depth);
    write_frames("and first freed at:", f.frames, static_cast<std::uint32_t>(f.depth));
    return;
  }
}

std::size_t heap_sampled_usable_size(const Span* s) noexcept {
  if (s->requested > kHeapSmallMax) return s->bytes();
  return kHeapClasses[heap_class_of(s->requested)].size;
}

}  // namespace mempool::detail

namespace mempool {

namespace {

bool dump(const char* path, bool peak) noexcept {
  if (detail::g_rate == 0 || path == nullptr) {
    errno = EINVAL;
    return false;
  }
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = detail::write_profile(fd, peak);
  const int saved = errno;
  if (::close(fd) != 0 && ok) return false;
  errno = saved;
  return ok;
}

}  // namespace

bool profile_dump(const char* path) noexcept {
  return dump(path, false);
}

bool profile_dump_peak(const char* path) noexcept {
  return dump(path, true);
}

}  // namespace mempool

extern "C" int mp_profile_dump(const char* path) noexcept {
  return mempool::profile_dump(path) ? 0 : (errno != 0 ? errno : EIO);
}

extern "C" int mp_profile_dump_peak(const char* path) noexcept {
  return mempool::profile_dump_peak(path) ? 0 : (errno != 0 ? errno : EIO);
}
