// The general heap against glibc malloc, mimalloc, jemalloc and tcmalloc: one
// plain program, one measurement per process (bench/heap_compare.py runs it once
// per allocator and repetition, interleaved, and prints the tables).
//
// Compiled twice from this file:
//   heap_benchmark          calls malloc/free. A plain run measures glibc; with
//                           LD_PRELOAD=libmimalloc.so.2 (libjemalloc.so.2,
//                           libtcmalloc_minimal.so.4) it measures that peer.
//   heap_benchmark_mempool  (MEMPOOL_BENCH_HEAP=1) calls mempool::allocate(n) and
//                           the size-free mempool::deallocate(p); `--api c` calls
//                           mp_malloc/mp_free instead.
// Everything else (the program's own vectors, std::thread) uses whatever malloc
// the process has, the same in every run of one variant.
//
//   heap_benchmark --workload W [--ops N] [--threads T] [--label NAME] [--api cpp|c]
//   heap_benchmark --workload callgrind-pair --size N --ops K    (under callgrind)
//   heap_benchmark --workload callgrind-loop --ops K             (the same loop, no allocator)
//   heap_benchmark --workload callgrind-usable|callgrind-realloc --size N --ops K
//                  (malloc_usable_size of a live block; realloc to N+16 and back),
//                  and callgrind-usable-loop|callgrind-realloc-loop without an allocator
//
// Workloads (one "op" is one allocate + one free):
//   pair16, pair64, pair4096  one thread: allocate N bytes, write its first and last
//                             byte, pass the pointer through an empty asm (it escapes),
//                             free it at once.
//   mixed-immediate           T threads (1 or 2), each on its own data: sizes 8..256
//                             (uniform, a xorshift generator precomputed into a 64 Ki
//                             array so the generator costs the same for everyone),
//                             allocate, write, free at once.
//   mixed-window              T threads, each with 1,024 live blocks (filled before
//                             the clock starts); each op frees a random slot (also
//                             precomputed) and refills it with a block of a random size.
//   prodcons                  the main thread allocates 64-byte blocks, writes a
//                             sequence number into each and pushes the pointer through
//                             a bounded single-producer/single-consumer ring (1,024
//                             slots) to a second thread, which reads and frees it. The
//                             resident set is sampled at every tenth of the run.
// With one thread the loop runs on the main thread and no thread is ever created
// (glibc takes slower, locked paths for good once a second thread exists). With
// T threads the clock starts when all have reached a barrier and stops when all
// have been joined.
//
// Output: one JSON line on stdout: workload, label, api, the library `malloc`
// resolves to (dlsym + dladdr: proves an LD_PRELOAD took effect), threads, ops per
// thread, wall and process CPU time, ns per op (wall time / ops per thread: the
// time one thread takes per pair while all run), ops per second (all threads),
// peak resident set (VmHWM, KiB; see peak_rss_kib) and the resident set just before
// the workload started; prodcons adds the samples and the checksum check.
// callgrind-*: the loop runs K pairs (after 1,000 warm-up pairs) between
// CALLGRIND_START_INSTRUMENTATION and CALLGRIND_STOP_INSTRUMENTATION; run it as
// `valgrind --tool=callgrind --instr-atstart=no ...` and divide Ir by K.
//
// Built with -fno-allocation-dce where the compiler has it; every pointer also
// goes through an asm the compiler cannot see into, so no pair can be elided.
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_args.hpp"
#include "bench_support.hpp"

#if MEMPOOL_BENCH_HAVE_CALLGRIND
#include <valgrind/callgrind.h>
#endif

#if MEMPOOL_BENCH_HEAP
#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#endif

namespace {

using namespace mempool_bench;

// ---------------------------------------------------------------------------
// The allocators, each a pair of static functions the loops are templated on.

#if MEMPOOL_BENCH_HEAP
// usable and resize: malloc_usable_size and realloc, which programs such as
// redis call on every string they grow (the C++ API has neither).
struct MempoolCpp {
  static constexpr const char* kApi = "mempool::allocate";
  static void* allocate(std::size_t n) { return mempool::allocate(n); }
  static void release(void* p) { mempool::deallocate(p); }
  static std::size_t usable(void* p) { return mp_usable_size(p); }
  static void* resize(void* p, std::size_t n) { return mp_realloc(p, n); }
};
struct MempoolC {
  static constexpr const char* kApi = "mp_malloc";
  static void* allocate(std::size_t n) { return mp_malloc(n); }
  static void release(void* p) { mp_free(p); }
  static std::size_t usable(void* p) { return mp_usable_size(p); }
  static void* resize(void* p, std::size_t n) { return mp_realloc(p, n); }
};
#else
struct Malloc {
  static constexpr const char* kApi = "malloc";
  static void* allocate(std::size_t n) { return std::malloc(n); }
  static void release(void* p) { std::free(p); }
  static std::size_t usable(void* p) { return malloc_usable_size(p); }
  static void* resize(void* p, std::size_t n) { return std::realloc(p, n); }
};
#endif

// ---------------------------------------------------------------------------
// The workloads.

struct Result : Timing {
  Result() = default;
  explicit Result(const Timing& t) : Timing(t) {}
  std::vector<long> rss_samples_kib;  // prodcons only
  bool checksum_ok = true;            // prodcons only
};

constexpr std::size_t kWarmupPairs = 1000;

template <class A, std::size_t N>
__attribute__((noinline)) void pair_loop(std::size_t ops) {
  for (std::size_t i = 0; i < ops; ++i) {
    void* p = A::allocate(N);
    touch(p, N, static_cast<unsigned char>(i));
    A::release(p);
  }
}

template <class A, std::size_t N>
Result run_pair(std::size_t ops) {
  return Result(run_threads(
      1, [](int) { pair_loop<A, N>(kWarmupPairs); }, [&](int) { pair_loop<A, N>(ops); }));
}

// Precomputed random data, so that every allocator sees the same sequence and the
// generator's cost is a load.
constexpr std::size_t kRandomCount = std::size_t{1} << 16;  // a power of two
constexpr std::size_t kRandomMask = kRandomCount - 1;
constexpr std::size_t kMinSize = 8;
constexpr std::size_t kMaxSize = 256;
constexpr std::size_t kWindow = 1024;  // a power of two

struct RandomData {
  std::vector<std::uint16_t> sizes;  // kMinSize..kMaxSize
  std::vector<std::uint16_t> slots;  // 0..kWindow-1
};

RandomData make_random(int thread) {
  std::uint64_t x =
      0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(thread + 1) * 0xD1B54A32D192ED03ull);
  const auto next = [&x] {  // xorshift64
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  RandomData d;
  d.sizes.resize(kRandomCount);
  d.slots.resize(kRandomCount);
  for (std::size_t i = 0; i < kRandomCount; ++i) {
    d.sizes[i] = static_cast<std::uint16_t>(kMinSize + next() % (kMaxSize - kMinSize + 1));
    d.slots[i] = static_cast<std::uint16_t>(next() % kWindow);
  }
  return d;
}

template <class A>
__attribute__((noinline)) void mixed_immediate_loop(const RandomData& d, std::size_t ops) {
  const std::uint16_t* sizes = d.sizes.data();
  for (std::size_t i = 0; i < ops; ++i) {
    const std::size_t n = sizes[i & kRandomMask];
    void* p = A::allocate(n);
    touch(p, n, static_cast<unsigned char>(i));
    A::release(p);
  }
}

struct Window {
  void* block[kWindow];
};

template <class A>
__attribute__((noinline)) void mixed_window_loop(const RandomData& d, Window& w, std::size_t ops) {
  const std::uint16_t* sizes = d.sizes.data();
  const std::uint16_t* slots = d.slots.data();
  for (std::size_t i = 0; i < ops; ++i) {
    const std::size_t k = i & kRandomMask;
    const std::size_t n = sizes[k];
    void*& slot = w.block[slots[k]];
    A::release(slot);
    void* p = A::allocate(n);
    touch(p, n, static_cast<unsigned char>(i));
    slot = p;
  }
}

template <class A>
Result run_mixed(bool window, int threads, std::size_t ops) {
  std::vector<RandomData> data(static_cast<std::size_t>(threads));
  std::vector<Window> windows(static_cast<std::size_t>(threads));
  const auto prepare = [&](int t) {
    RandomData& d = data[static_cast<std::size_t>(t)];
    d = make_random(t);
    if (window) {
      Window& w = windows[static_cast<std::size_t>(t)];
      for (std::size_t s = 0; s < kWindow; ++s) {
        const std::size_t n = d.sizes[(kRandomCount - 1 - s) & kRandomMask];
        w.block[s] = A::allocate(n);
        touch(w.block[s], n, 1);
      }
      mixed_window_loop<A>(d, w, kWarmupPairs);
    } else {
      mixed_immediate_loop<A>(d, kWarmupPairs);
    }
  };
  const auto body = [&](int t) {
    const RandomData& d = data[static_cast<std::size_t>(t)];
    if (window) {
      mixed_window_loop<A>(d, windows[static_cast<std::size_t>(t)], ops);
    } else {
      mixed_immediate_loop<A>(d, ops);
    }
  };
  Result r(run_threads(threads, prepare, body));
  for (Window& w : windows) {
    if (!window) break;
    for (void* p : w.block)
      A::release(p);
  }
  return r;
}

template <class A>
Result run_prodcons(std::size_t ops) {
  ProdconsResult pc = prodcons_loop(
      ops, [](std::size_t n) { return A::allocate(n); }, [](void* p) { A::release(p); });
  Result r(pc.timing);
  r.rss_samples_kib = std::move(pc.rss_samples_kib);
  r.checksum_ok = pc.checksum_ok;
  return r;
}

// The instruction-count loops: the pointer is opaque to the compiler, nothing
// else happens between the calls. Pair: allocate + free. Usable: the usable size
// of one live block. Realloc: one block grown by 16 bytes and shrunk back (two
// calls an op), as a program that appends to a string does.
struct PairLoop {
  template <class A>
  __attribute__((noinline)) static void run(std::size_t n, std::size_t ops) {
    for (std::size_t i = 0; i < ops; ++i) {
      void* p = A::allocate(n);
      asm volatile("" : "+r"(p) : : "memory");
      A::release(p);
      asm volatile("" : : : "memory");
    }
  }
};
struct UsableLoop {
  template <class A>
  __attribute__((noinline)) static void run(std::size_t n, std::size_t ops) {
    void* p = A::allocate(n);
    std::size_t sum = 0;
    for (std::size_t i = 0; i < ops; ++i) {
      asm volatile("" : "+r"(p) : : "memory");
      sum += A::usable(p);
    }
    asm volatile("" : : "r"(sum) : "memory");
    A::release(p);
  }
};
struct ReallocLoop {
  template <class A>
  __attribute__((noinline)) static void run(std::size_t n, std::size_t ops) {
    void* p = A::allocate(n);
    for (std::size_t i = 0; i < ops; ++i) {
      p = A::resize(p, n + 16);
      asm volatile("" : "+r"(p) : : "memory");
      p = A::resize(p, n);
      asm volatile("" : "+r"(p) : : "memory");
    }
    A::release(p);
  }
};

// The same loops with no allocator, to subtract.
struct NoAllocator {
  static constexpr const char* kApi = "none";
  static void* allocate(std::size_t /*n*/) { return &buffer; }
  static void release(void* /*p*/) {}
  static std::size_t usable(void* /*p*/) { return sizeof buffer; }
  static void* resize(void* p, std::size_t /*n*/) { return p; }
  static inline std::max_align_t buffer;
};

template <class A, class Loop = PairLoop>
Result run_callgrind(std::size_t n, std::size_t ops) {
#if MEMPOOL_BENCH_HAVE_CALLGRIND
  Loop::template run<A>(n, kWarmupPairs);
  Result r;
  r.rss_before_kib = current_rss_kib();
  const std::int64_t wall = now_ns(CLOCK_MONOTONIC);
  CALLGRIND_START_INSTRUMENTATION;
  Loop::template run<A>(n, ops);
  CALLGRIND_STOP_INSTRUMENTATION;
  r.wall_ns = now_ns(CLOCK_MONOTONIC) - wall;
  return r;
#else
  (void)n;
  (void)ops;
  std::fputs("heap_benchmark: built without valgrind/callgrind.h\n", stderr);
  std::exit(2);
#endif
}

// ---------------------------------------------------------------------------
// Command line and output.

struct Options {
  std::string workload;
  std::size_t ops = 0;  // 0: the workload's default
  int threads = 1;
  std::size_t size = 64;  // callgrind-pair
  std::string label;
  std::string api = "cpp";  // mempool build only
};

[[noreturn]] void usage_error(const char* what) {
  std::fprintf(stderr,
               "heap_benchmark: %s\n"
               "usage: heap_benchmark --workload W [--ops N] [--threads T] [--label NAME]"
#if MEMPOOL_BENCH_HEAP
               " [--api cpp|c]"
#endif
               "\n  W: pair16 pair64 pair4096 mixed-immediate mixed-window prodcons\n"
               "     callgrind-pair (with --size N) callgrind-loop\n",
               what);
  std::exit(2);
}

std::size_t parse_count(const char* s) {
  if (const auto v = mempool_bench::parse_positive(s)) return *v;
  usage_error("expected a positive number");
}

std::size_t default_ops(std::string_view w) {
  if (w.starts_with("pair")) return 20'000'000;
  if (w.starts_with("mixed")) return 10'000'000;
  if (w == "prodcons") return 5'000'000;
  return 1'000'000;  // callgrind
}

// Labels and paths go into JSON strings: only plain characters are kept.
std::string json_safe(std::string s) {
  for (char& c : s) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  return s;
}

template <class A>
Result run_workload(const Options& o) {
  const std::string_view w = o.workload;
  if (w == "pair16") return run_pair<A, 16>(o.ops);
  if (w == "pair64") return run_pair<A, 64>(o.ops);
  if (w == "pair4096") return run_pair<A, 4096>(o.ops);
  if (w == "mixed-immediate") return run_mixed<A>(false, o.threads, o.ops);
  if (w == "mixed-window") return run_mixed<A>(true, o.threads, o.ops);
  if (w == "prodcons") return run_prodcons<A>(o.ops);
  if (w == "callgrind-pair") return run_callgrind<A>(o.size, o.ops);
  if (w == "callgrind-loop") return run_callgrind<NoAllocator>(o.size, o.ops);
  if (w == "callgrind-usable") return run_callgrind<A, UsableLoop>(o.size, o.ops);
  if (w == "callgrind-usable-loop") return run_callgrind<NoAllocator, UsableLoop>(o.size, o.ops);
  if (w == "callgrind-realloc") return run_callgrind<A, ReallocLoop>(o.size, o.ops);
  if (w == "callgrind-realloc-loop") return run_callgrind<NoAllocator, ReallocLoop>(o.size, o.ops);
  usage_error("unknown workload");
}

void print_json(const Options& o, const char* api, const Result& r) {
  const double ns_per_op = static_cast<double>(r.wall_ns) / static_cast<double>(o.ops);
  // prodcons: one block passed per op (its two threads work on the same op).
  const int working_threads = o.workload.starts_with("mixed") ? o.threads : 1;
  const double total_ops = static_cast<double>(o.ops) * working_threads;
  const double ops_per_s = r.wall_ns > 0 ? total_ops * 1e9 / static_cast<double>(r.wall_ns) : 0;
  std::string line;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"workload\": \"%s\", \"label\": \"%s\", \"api\": \"%s\", "
                "\"malloc_from\": \"%s\", \"threads\": %d, \"ops\": %zu",
                json_safe(o.workload).c_str(), json_safe(o.label).c_str(), api,
                json_safe(malloc_library()).c_str(), o.threads, o.ops);
  line += buf;
  if (o.workload.starts_with("callgrind-")) {
    std::snprintf(buf, sizeof buf, ", \"size\": %zu", o.size);
    line += buf;
  }
  std::snprintf(buf, sizeof buf,
                ", \"wall_ns\": %lld, \"cpu_ns\": %lld, \"ns_per_op\": %.4f, \"ops_per_s\": %.0f, "
                "\"peak_rss_kib\": %ld, \"rss_before_kib\": %ld",
                static_cast<long long>(r.wall_ns), static_cast<long long>(r.cpu_ns), ns_per_op,
                ops_per_s, peak_rss_kib(), r.rss_before_kib);
  line += buf;
  if (!r.rss_samples_kib.empty()) {
    line += ", \"rss_samples_kib\": [";
    for (std::size_t i = 0; i < r.rss_samples_kib.size(); ++i) {
      line += (i ? ", " : "") + std::to_string(r.rss_samples_kib[i]);
    }
    line += "]";
    const auto at = [&](std::size_t i) {
      return r.rss_samples_kib[std::min(i, r.rss_samples_kib.size() - 1)];
    };
    std::snprintf(buf, sizeof buf,
                  ", \"rss_start_kib\": %ld, \"rss_middle_kib\": %ld, \"rss_end_kib\": %ld, "
                  "\"checksum_ok\": %s",
                  at(0), at(kRssSamples / 2 - 1), r.rss_samples_kib.back(),
                  r.checksum_ok ? "true" : "false");
    line += buf;
  }
  line += "}\n";
  std::fputs(line.c_str(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error("an option lacks its value");
      return argv[++i];
    };
    if (a == "--workload") {
      o.workload = value();
    } else if (a == "--ops") {
      o.ops = parse_count(value());
    } else if (a == "--threads") {
      o.threads = static_cast<int>(parse_count(value()));
    } else if (a == "--size") {
      o.size = parse_count(value());
    } else if (a == "--label") {
      o.label = value();
    } else if (a == "--api") {
      o.api = value();
      if (o.api != "cpp" && o.api != "c") usage_error("--api takes cpp or c");
    } else if (a == "-h" || a == "--help") {
      usage_error("help");
    } else {
      usage_error("unknown argument");
    }
  }
  if (o.workload.empty()) usage_error("--workload is required");
  if (o.ops == 0) o.ops = default_ops(o.workload);
  const bool threaded = o.workload.starts_with("mixed");
  if (!threaded && o.workload != "prodcons" && o.threads != 1) {
    usage_error("--threads applies to mixed-immediate and mixed-window only");
  }
  if (o.workload == "prodcons") o.threads = 2;  // one producer, one consumer
  if (o.threads > 64) usage_error("--threads: at most 64");

#if MEMPOOL_BENCH_HEAP
  if (o.label.empty()) o.label = o.api == "c" ? "mempool-c" : "mempool";
  const bool c_api = o.api == "c";
  const Result r = c_api ? run_workload<MempoolC>(o) : run_workload<MempoolCpp>(o);
  const char* api = o.workload.ends_with("-loop") ? NoAllocator::kApi
                    : c_api                       ? MempoolC::kApi
                                                  : MempoolCpp::kApi;
#else
  if (o.api != "cpp") usage_error("--api applies to heap_benchmark_mempool only");
  if (o.label.empty()) o.label = "malloc";
  const Result r = run_workload<Malloc>(o);
  const char* api = o.workload.ends_with("-loop") ? NoAllocator::kApi : Malloc::kApi;
#endif
  print_json(o, api, r);
  if (!r.checksum_ok) {
    std::fputs("heap_benchmark: prodcons checksum mismatch\n", stderr);
    return 1;
  }
  return 0;
}
