// What every bench program measures the same way: wall and CPU clocks, the
// resident set (current and peak, read without allocating), which library
// `malloc` resolves to, a pointer the compiler must assume is used, running a
// body on N threads released together by a barrier, and the producer/consumer
// loop (a ring between two threads).
#pragma once

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
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

// A bounded single-producer/single-consumer ring of pointers. Each side keeps its
// own index privately and publishes it (a release store) every kPublish
// elements, or before it waits; it reads the other side's index (acquire) only
// when its cached copy says full or empty. So the index cache lines cross between
// the cores once per batch, not once per element, and the ring costs little next
// to the allocator.
class SpscRing {
 public:
  static constexpr std::size_t kCapacity = 1024;  // a power of two
  static constexpr std::size_t kPublish = 32;

  // Producer side.
  bool try_push(void* p) noexcept {
    if (tail_ - head_cache_ == kCapacity) {
      head_cache_ = head_.load(std::memory_order_acquire);
      if (tail_ - head_cache_ == kCapacity) {
        publish_tail();  // the consumer must see everything before we wait
        return false;
      }
    }
    slots_[tail_ & (kCapacity - 1)] = p;
    ++tail_;
    if (tail_ % kPublish == 0) publish_tail();
    return true;
  }
  void publish_tail() noexcept { shared_tail_.store(tail_, std::memory_order_release); }

  // Consumer side.
  void* try_pop() noexcept {
    if (head_private_ == tail_cache_) {
      tail_cache_ = shared_tail_.load(std::memory_order_acquire);
      if (head_private_ == tail_cache_) {
        head_.store(head_private_, std::memory_order_release);
        return nullptr;
      }
    }
    void* p = slots_[head_private_ & (kCapacity - 1)];
    ++head_private_;
    if (head_private_ % kPublish == 0) head_.store(head_private_, std::memory_order_release);
    return p;
  }

 private:
  // The producer's line.
  alignas(64) std::size_t tail_ = 0;  // next slot to write
  std::size_t head_cache_ = 0;        // the consumer's index as last read
  // The consumer's line.
  alignas(64) std::size_t head_private_ = 0;  // next slot to read
  std::size_t tail_cache_ = 0;                // the producer's index as last read
  // The published indices, each on its own line.
  alignas(64) std::atomic<std::size_t> shared_tail_{0};
  alignas(64) std::atomic<std::size_t> head_{0};
  alignas(64) void* slots_[kCapacity] = {};
};

// Spin with a pause; after a while also yield, so that a waiting thread does not
// starve the other on a machine with fewer free cores than threads.
struct Backoff {
  unsigned spins = 0;
  void wait() noexcept {
    if (++spins < 256) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      spins = 0;
      std::this_thread::yield();
    }
  }
};

constexpr std::size_t kProdconsSize = 64;
// The resident set is sampled at 10%, 20%, ... 90% of the ops and after the end:
// start = the 10% sample (the pipeline is full by then), middle = 50%, end.
constexpr std::size_t kRssSamples = 10;

// The resident set samples and the checksum of a producer/consumer run.
struct ProdconsResult {
  Timing timing;
  std::vector<long> rss_samples_kib;  // at 10%, 20%, ... 90% of the ops, and after the end
  bool checksum_ok = true;
};

// One thread (the caller) allocates `ops` blocks of kProdconsSize bytes with
// allocate(n), writes a sequence number into each and passes it through an
// SpscRing to a second thread, which reads it and frees it with release(p). The
// clock runs from the first allocation to the consumer's join.
template <class Allocate, class Release>
ProdconsResult prodcons_loop(std::size_t ops, Allocate allocate, Release release) {
  auto ring = std::make_unique<SpscRing>();
  std::atomic<bool> consumer_ready{false};
  std::uint64_t consumed_sum = 0;
  std::thread consumer([&] {
    consumer_ready.store(true, std::memory_order_release);
    std::uint64_t sum = 0;
    Backoff backoff;
    for (std::size_t i = 0; i < ops; ++i) {
      void* p;
      while ((p = ring->try_pop()) == nullptr)
        backoff.wait();
      auto* b = static_cast<unsigned char*>(p);
      std::uint64_t seq;
      std::memcpy(&seq, b, sizeof seq);
      sum += seq + b[kProdconsSize - 1];
      release(p);
    }
    consumed_sum = sum;
  });
  while (!consumer_ready.load(std::memory_order_acquire))
    std::this_thread::yield();

  ProdconsResult r;
  r.timing.rss_before_kib = current_rss_kib();
  r.rss_samples_kib.reserve(kRssSamples);
  std::uint64_t expected = 0;
  const std::int64_t cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  const std::int64_t wall = now_ns(CLOCK_MONOTONIC);
  std::size_t next_sample = ops / kRssSamples;
  Backoff backoff;
  for (std::size_t i = 0; i < ops; ++i) {
    if (i == next_sample && r.rss_samples_kib.size() + 1 < kRssSamples) [[unlikely]] {
      r.rss_samples_kib.push_back(current_rss_kib());
      next_sample += ops / kRssSamples;
    }
    auto* b = static_cast<unsigned char*>(allocate(kProdconsSize));
    const std::uint64_t seq = i;
    std::memcpy(b, &seq, sizeof seq);
    b[kProdconsSize - 1] = static_cast<unsigned char>(i);
    expected += seq + static_cast<unsigned char>(i);
    escape(b);
    while (!ring->try_push(b))
      backoff.wait();
  }
  ring->publish_tail();  // the last, partial batch
  consumer.join();
  r.timing.wall_ns = now_ns(CLOCK_MONOTONIC) - wall;
  r.timing.cpu_ns = now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu;
  r.rss_samples_kib.push_back(current_rss_kib());
  r.checksum_ok = consumed_sum == expected;
  return r;
}

}  // namespace mempool_bench
