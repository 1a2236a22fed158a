// What every bench program measures the same way: wall and CPU clocks, the
// resident set (current and peak, read without allocating), which library
// `malloc` resolves to, a pointer the compiler must assume is used, and running
// a body on N threads released together by a barrier.
#pragma once

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace mempool_bench {

// The pointer escapes into an asm the compiler cannot see into; memory is clobbered.
[[gnu::always_inline]] inline void escape(void* p) {
  asm volatile("" : : "r"(p) : "memory");
}

// The first and last byte written: every block is really used.
[[gnu::always_inline]] inline void touch(void* p, std::size_t n, unsigned char v) {
  auto* b = static_cast<unsigned char*>(p);
  b[0] = v;
  b[n - 1] = v;
  escape(p);
}

inline std::int64_t now_ns(clockid_t clock) noexcept {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Written only by one thread at a time (the main thread, or the barrier's completion).
inline long g_max_rss_seen_kib = 0;

// The current resident set in KiB, from /proc/self/statm, read without allocating.
inline long current_rss_kib() noexcept {
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  const ssize_t got = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (got <= 0) return -1;
  buf[got] = '\0';
  char* end = nullptr;
  std::strtol(buf, &end, 10);  // total program size: skipped
  const long resident_pages = std::strtol(end, nullptr, 10);
  const long kib = resident_pages * (sysconf(_SC_PAGESIZE) / 1024);
  g_max_rss_seen_kib = std::max(g_max_rss_seen_kib, kib);
  return kib;
}

// The peak resident set of this process image: VmHWM from /proc/self/status (or
// the largest resident set this program has read, if that is larger: the kernel
// folds threads' page counts into the high-water mark lazily). Not getrusage's
// ru_maxrss: after fork + exec that keeps the parent's high-water mark, so a
// child of a 14 MiB Python would report at least 14 MiB.
inline long peak_rss_kib() noexcept {
  long hwm = -1;
  const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buf[8192];
    const ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got > 0) {
      buf[got] = '\0';
      if (const char* line = std::strstr(buf, "\nVmHWM:")) hwm = std::strtol(line + 7, nullptr, 10);
    }
  }
  if (hwm < 0) {  // no procfs: the best there is
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    hwm = ru.ru_maxrss;
  }
  return std::max(hwm, current_rss_kib());
}

// The shared object that `malloc` resolves to in this process.
inline std::string malloc_library() {
  void* f = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info info{};
  if (f == nullptr || dladdr(f, &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

// One measured run: wall and process CPU time, and the resident set just before
// the clock started.
struct Timing {
  std::int64_t wall_ns = 0;
  std::int64_t cpu_ns = 0;
  long rss_before_kib = 0;
};

// Runs body(thread_index) on `threads` threads (the main thread alone when 1);
// prepare(thread_index) runs first on the same thread, before the clock starts.
template <class Prepare, class Body>
Timing run_threads(int threads, Prepare prepare, Body body) {
  Timing r;
  if (threads == 1) {
    prepare(0);
    r.rss_before_kib = current_rss_kib();
    const std::int64_t cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID);
    const std::int64_t wall = now_ns(CLOCK_MONOTONIC);
    body(0);
    r.wall_ns = now_ns(CLOCK_MONOTONIC) - wall;
    r.cpu_ns = now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu;
    return r;
  }
  std::int64_t cpu = 0;
  std::int64_t wall = 0;
  // The completion step runs once every thread has prepared, before any is released.
  std::barrier sync(threads, [&]() noexcept {
    r.rss_before_kib = current_rss_kib();
    cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID);
    wall = now_ns(CLOCK_MONOTONIC);
  });
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      prepare(t);
      sync.arrive_and_wait();
      body(t);
    });
  }
  for (std::thread& t : pool)
    t.join();
  r.wall_ns = now_ns(CLOCK_MONOTONIC) - wall;
  r.cpu_ns = now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu;
  return r;
}

}  // namespace mempool_bench
