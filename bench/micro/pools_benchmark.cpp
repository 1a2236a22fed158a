// The pools against new/delete of the same 24-byte object (Google Benchmark).
//
// Workloads, each run for every allocator:
//   Single  one allocation, then its free, per iteration
//   Bulk    10,000 allocations, then 10,000 frees, per iteration
//   Churn   5,000 objects live; per iteration free the 100 oldest and allocate
//           100 in their place
//   ChurnScattered  the same, freeing 100 in a fixed shuffled order (objects die
//           at random ages; reported without a target: the random accesses to
//           the objects, not the allocator, dominate the time)
// Single-threaded: NewDelete, ObjectPool, ConcurrentFixedPool, BitmapPool, and
// NoAllocatorFloor (the loop without any allocator: the best any could do). With 2
// and 8 threads (wall-clock time): NewDelete and the two thread-safe pools, one
// pool shared by all the threads, each thread running the whole workload.
//
// Every allocator gets the same treatment: the object is constructed (its three
// words written), its pointer passed through benchmark::DoNotOptimize (which also
// clobbers memory, so nothing is kept in registers across it), then freed. Built
// with -fno-allocation-dce so that GCC cannot delete the new/delete baseline.
//
// Names are "<Workload>/<Allocator>", plus the suffixes Google Benchmark adds
// ("/real_time", "/threads:N"). bench/summarize.py turns the JSON into the
// speedup table.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "mempool/bitmap_pool.hpp"
#include "mempool/concurrent_fixed_pool.hpp"
#include "mempool/object_pool.hpp"
#include "micro_shapes.hpp"

namespace {

using mempool_bench::kBulk;
using mempool_bench::kChurnLive;
using mempool_bench::kChurnStep;
using mempool_bench::Obj;

constexpr int kMaxThreads = 8;
// BitmapPool has a fixed capacity: enough for Bulk on one thread, and on all of them.
constexpr std::size_t kBitmapCapacitySingle = 16'384;
constexpr std::size_t kBitmapCapacityShared = 131'072;
static_assert(kBitmapCapacitySingle >= kBulk && kBitmapCapacityShared >= kMaxThreads * kBulk);

// The allocators, behind the same two calls: make (allocate and construct) and
// drop (destroy and free). The pools are process-wide, created on first use
// (thread-safe static initialisation) and shared by every benchmark thread, so
// they are warm, as the heap behind new/delete is. Every pool uses its default
// alignment (16 here: 32-byte blocks for the 24-byte object, as glibc's chunks).

struct NewDelete {
  explicit NewDelete(const benchmark::State& /*state*/) {}
  Obj* make(std::uint64_t v) { return new Obj{v, v + 1, v + 2}; }
  void drop(Obj* p) { delete p; }
};

struct ObjectPoolAlloc {
  explicit ObjectPoolAlloc(const benchmark::State& /*state*/) : pool(instance()) {}
  static mempool::ObjectPool<Obj>& instance() {
    static mempool::ObjectPool<Obj> p;
    return p;
  }
  // From a temporary: the same three stores as Obj{...} (Clang 14 has no
  // parenthesised aggregate initialisation, so create(v, ...) would not compile).
  Obj* make(std::uint64_t v) { return pool.create(Obj{v, v + 1, v + 2}); }
  void drop(Obj* p) { pool.destroy(p); }
  mempool::ObjectPool<Obj>& pool;
};

struct ConcurrentFixedPoolAlloc {
  explicit ConcurrentFixedPoolAlloc(const benchmark::State& /*state*/) : pool(instance()) {}
  static mempool::ConcurrentFixedPool& instance() {
    static mempool::ConcurrentFixedPool p(sizeof(Obj));
    return p;
  }
  Obj* make(std::uint64_t v) { return ::new (pool.allocate()) Obj{v, v + 1, v + 2}; }
  void drop(Obj* p) {
    p->~Obj();
    pool.deallocate(p);
  }
  mempool::ConcurrentFixedPool& pool;
};

// No allocator at all: the loop's own cost (the object written, its pointer
// passed through DoNotOptimize), a floor that no allocator can beat. make()
// reuses a ring of objects; drop() does not touch the object.
struct NoAllocatorFloor {
  explicit NoAllocatorFloor(const benchmark::State& /*state*/) {}
  static constexpr std::size_t kRing = 8192;
  static Obj* ring() {
    static Obj objects[kRing];
    return objects;
  }
  Obj* make(std::uint64_t v) { return ::new (&ring()[v & (kRing - 1)]) Obj{v, v + 1, v + 2}; }
  void drop(Obj* p) { benchmark::DoNotOptimize(p); }
};

[[noreturn]] __attribute__((noinline, cold)) void bitmap_pool_exhausted() {
  std::fputs("pools_benchmark: BitmapPool is full (capacity too small for the workload)\n", stderr);
  std::abort();
}

struct BitmapPoolAlloc {
  explicit BitmapPoolAlloc(const benchmark::State& state)
      : pool(state.threads() > 1 ? shared() : single()) {}
  static mempool::BitmapPool& single() {
    static mempool::BitmapPool p(sizeof(Obj), kBitmapCapacitySingle);
    return p;
  }
  static mempool::BitmapPool& shared() {
    static mempool::BitmapPool p(sizeof(Obj), kBitmapCapacityShared);
    return p;
  }
  Obj* make(std::uint64_t v) {
    void* m = pool.allocate();
    if (m == nullptr) [[unlikely]] {
      bitmap_pool_exhausted();
    }
    return ::new (m) Obj{v, v + 1, v + 2};
  }
  void drop(Obj* p) {
    p->~Obj();
    pool.deallocate(p);
  }
  mempool::BitmapPool& pool;
};

template <class Alloc>
void Single(benchmark::State& state) {
  Alloc alloc(state);
  std::uint64_t v = 0;
  for (auto _ : state) {
    Obj* p = alloc.make(v++);
    benchmark::DoNotOptimize(p);
    alloc.drop(p);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

template <class Alloc>
void Bulk(benchmark::State& state) {
  Alloc alloc(state);
  std::vector<Obj*> live(kBulk);
  for (auto _ : state) {
    for (std::size_t i = 0; i < kBulk; ++i) {
      Obj* p = alloc.make(i);
      benchmark::DoNotOptimize(p);
      live[i] = p;
    }
    for (Obj* p : live)
      alloc.drop(p);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBulk));
}

// A fixed permutation of 0 .. kChurnLive-1; Churn walks it kChurnStep at a time,
// so the objects freed together are scattered and every one is replaced in turn.
// The order in which Churn frees its live objects: oldest first (a FIFO, as in a
// message queue or a cache with a time limit), or in a fixed shuffled order.
const std::vector<std::uint32_t>& churn_order(bool scattered) {
  static const auto make = [](bool shuffle) {
    std::vector<std::uint32_t> o(kChurnLive);
    for (std::size_t i = 0; i < o.size(); ++i)
      o[i] = static_cast<std::uint32_t>(i);
    if (shuffle) {
      std::mt19937 rng(42);
      std::shuffle(o.begin(), o.end(), rng);
    }
    return o;
  };
  static const std::vector<std::uint32_t> fifo = make(false);
  static const std::vector<std::uint32_t> shuffled = make(true);
  return scattered ? shuffled : fifo;
}

template <class Alloc, bool kScattered>
void Churn(benchmark::State& state) {
  Alloc alloc(state);
  const std::uint32_t* order = churn_order(kScattered).data();
  std::vector<Obj*> live(kChurnLive);
  std::uint64_t v = 0;
  for (Obj*& p : live) {
    p = alloc.make(v++);
    benchmark::DoNotOptimize(p);
  }
  std::size_t next = 0;
  for (auto _ : state) {
    const std::uint32_t* slots = order + next;
    for (std::size_t j = 0; j < kChurnStep; ++j)
      alloc.drop(live[slots[j]]);
    for (std::size_t j = 0; j < kChurnStep; ++j) {
      Obj* p = alloc.make(v++);
      benchmark::DoNotOptimize(p);
      live[slots[j]] = p;
    }
    next += kChurnStep;
    if (next == kChurnLive) next = 0;
  }
  for (Obj* p : live)
    alloc.drop(p);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kChurnStep));
}

using Fn = void (*)(benchmark::State&);

struct Workload {
  const char* name;
  Fn new_delete;
  Fn object_pool;
  Fn concurrent_fixed_pool;
  Fn bitmap_pool;
  Fn floor;
};

void register_all() {
  const Workload workloads[] = {
      {"Single", &Single<NewDelete>, &Single<ObjectPoolAlloc>, &Single<ConcurrentFixedPoolAlloc>,
       &Single<BitmapPoolAlloc>, &Single<NoAllocatorFloor>},
      {"Bulk", &Bulk<NewDelete>, &Bulk<ObjectPoolAlloc>, &Bulk<ConcurrentFixedPoolAlloc>,
       &Bulk<BitmapPoolAlloc>, &Bulk<NoAllocatorFloor>},
      {"Churn", &Churn<NewDelete, false>, &Churn<ObjectPoolAlloc, false>,
       &Churn<ConcurrentFixedPoolAlloc, false>, &Churn<BitmapPoolAlloc, false>,
       &Churn<NoAllocatorFloor, false>},
      {"ChurnScattered", &Churn<NewDelete, true>, &Churn<ObjectPoolAlloc, true>,
       &Churn<ConcurrentFixedPoolAlloc, true>, &Churn<BitmapPoolAlloc, true>,
       &Churn<NoAllocatorFloor, true>},
  };
  // Every single-threaded run first: glibc's malloc skips its arena locks and
  // atomic fastbin updates only until the process starts a second thread (for
  // good), and Google Benchmark runs benchmarks in registration order. So the
  // single-threaded baseline is measured at its best.
  for (const Workload& w : workloads) {
    const std::string n = w.name;
    benchmark::RegisterBenchmark((n + "/NewDelete").c_str(), w.new_delete);
    benchmark::RegisterBenchmark((n + "/ObjectPool").c_str(), w.object_pool);
    benchmark::RegisterBenchmark((n + "/ConcurrentFixedPool").c_str(), w.concurrent_fixed_pool);
    benchmark::RegisterBenchmark((n + "/BitmapPool").c_str(), w.bitmap_pool);
    benchmark::RegisterBenchmark((n + "/NoAllocatorFloor").c_str(), w.floor);
  }
  for (const Workload& w : workloads) {
    const std::string n = w.name;
    for (auto [suffix, fn] : {std::pair{"/NewDelete", w.new_delete},
                              std::pair{"/ConcurrentFixedPool", w.concurrent_fixed_pool},
                              std::pair{"/BitmapPool", w.bitmap_pool}}) {
      benchmark::RegisterBenchmark((n + suffix).c_str(), fn)
          ->Threads(2)
          ->Threads(kMaxThreads)
          ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
