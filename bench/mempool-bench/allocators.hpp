// mempool-bench's allocators. Those that replace malloc (glibc as it is,
// mimalloc, jemalloc, tcmalloc and mempool's libmempool-malloc.so) run the
// workload through malloc/free in a child process under LD_PRELOAD, or, the
// *-linked ones, in a copy of mempool-bench with that malloc linked in; mempool's
// own APIs run it in process, each where the workload fits it. Every workload is
// a template over one of the policies below (static allocate/deallocate), so no
// allocator pays for an indirect call the others do not.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <memory_resource>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mempool/bitmap_pool.hpp"
#include "mempool/heap.hpp"
#include "mempool/object_pool.hpp"
#include "mempool/size_class_pool.hpp"

namespace mempool_bench {

// One measurement: the workload, the allocator and the parameters.
struct RunSpec {
  std::string workload;
  std::string allocator;
  int threads = 1;
  std::size_t size = 0;  // --size: bytes per block (fixed) or the largest (mixed); 0: default
  bool mixed = false;    // --size-dist=mixed
  bool window = false;   // --mode=window
  std::size_t window_size = 1024;
  std::string replace;  // bigbuffers: "free-first" or "new-first" ("" before cases)
  double warmup_s = 0.2;
  double seconds = 1.0;
  std::size_t sample_rate = 64;  // every n-th operation is timed
  bool quick = false;
  std::string app;                   // apps: the program of this case ("" before cases)
  std::vector<std::string> command;  // run: the user's command
  double timeout_s = 600;            // apps and run: the most one program run may take
  bool check_output = false;         // run: the command's stdout is compared across allocators
};

// A run that cannot happen for this allocator (a single-threaded pool on several
// threads, a fixed-size pool on mixed sizes): reported, not an error.
struct Skipped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct AllocatorInfo {
  const char* name;
  bool preload;  // through malloc in a child: under LD_PRELOAD, or linked into `program`
  std::vector<const char*> libs;  // candidates, first found wins (empty: glibc itself)
  const char* package;            // the Debian package that brings it
  const char* what;
  bool by_default = true;  // run when --allocators does not say which (or a workload asks)
  // Extra environment of the child and the programs it runs ("NAME=value"): a
  // configuration of the library, such as jemalloc's MALLOC_CONF.
  std::vector<const char*> env = {};
  // The program the child runs instead of mempool-bench, beside it: mempool-bench
  // with this malloc linked in (mempool::override, a peer's static archive), so that
  // a call reaches malloc without a PLT stub. libs then names the archive, for its
  // version. nullptr: mempool-bench itself.
  const char* program = nullptr;
  // Given by --preload NAME=PATH: a library of the user's (libs holds its one path), run
  // with the default set; not a peer, and not mempool's.
  bool given = false;
};

const std::vector<AllocatorInfo>& all_allocators();
// --preload NAME=PATH: the malloc library at PATH (a build of your own, another version,
// another allocator) preloaded as allocator NAME beside the others. "" when added, else
// what is wrong with it. Before any lookup: the pointers find_allocator gave may move.
std::string add_given_allocator(const std::string& name_and_path);
// The argument that gives allocator `name` to a child ("--preload=NAME=PATH"), or "" for
// a built-in one.
std::string given_allocator_argument(std::string_view name);
const AllocatorInfo* find_allocator(std::string_view name);
// The allocator's extra environment ("NAME=value"), empty for an unknown name.
std::vector<std::string> allocator_env(std::string_view name);
// The library to preload for a preload allocator: "" for glibc, the path found,
// or nothing when not installed (why says so). exe_dir: where mempool-bench is
// (libmempool-malloc.so is one level up in a build tree). For an allocator with a
// program, also false when the program is not built beside mempool-bench.
bool locate_library(const AllocatorInfo& a, const std::string& exe_dir, std::string* path,
                    std::string* why);

// ---------------------------------------------------------------------------
// The policies. deallocate always gets the size; malloc's free ignores it.

struct MallocApi {
  static void setup(const RunSpec& /*spec*/) {}
  static void* allocate(std::size_t n) { return std::malloc(n); }
  static void deallocate(void* p, std::size_t /*n*/) { std::free(p); }
};

// The general heap through its C++ API, freed without the size as malloc is.
struct HeapApi {
  static void setup(const RunSpec& /*spec*/) {}
  static void* allocate(std::size_t n) { return mempool::allocate(n); }
  static void deallocate(void* p, std::size_t /*n*/) { mempool::deallocate(p); }
};

struct SizeClassApi {
  static void setup(const RunSpec& /*spec*/) {}
  static void* allocate(std::size_t n) { return mempool::SizeClassPool::global().allocate(n); }
  static void deallocate(void* p, std::size_t n) {
    mempool::SizeClassPool::global().deallocate(p, n);
  }
};

struct PmrApi {
  static inline std::pmr::synchronized_pool_resource* resource = nullptr;
  static void setup(const RunSpec& /*spec*/) {
    resource = new std::pmr::synchronized_pool_resource();  // lives until the child exits
  }
  static void* allocate(std::size_t n) { return resource->allocate(n, kAlign); }
  static void deallocate(void* p, std::size_t n) { resource->deallocate(p, n, kAlign); }
  static constexpr std::size_t kAlign = alignof(std::max_align_t);
};

// Fixed-size pools: the block is --size bytes; mixed sizes do not fit them.
inline void require_fixed_size(const RunSpec& spec, const char* pool) {
  if (spec.mixed) throw Skipped(std::string(pool) + " has one block size; mixed sizes do not fit");
}

struct ObjectPoolApi {
  static inline mempool::FixedPool* pool = nullptr;
  static void setup(const RunSpec& spec) {
    require_fixed_size(spec, "object-pool");
    if (spec.threads != 1) throw Skipped("object-pool is single-threaded");
    pool = new mempool::FixedPool(spec.size);
  }
  static void* allocate(std::size_t /*n*/) { return pool->allocate(); }
  static void deallocate(void* p, std::size_t /*n*/) { pool->deallocate(p); }
};

// Capacity is fixed at construction (and all of it mapped then): twice what the
// threads keep live, at least 64 Ki blocks, at most 2^20 blocks or 512 MiB.
struct BitmapPoolApi {
  static inline mempool::BitmapPool* pool = nullptr;
  static void setup(const RunSpec& spec) {
    require_fixed_size(spec, "bitmap-pool");
    std::size_t capacity = 2 * static_cast<std::size_t>(spec.threads) * (spec.window_size + 1024);
    capacity = std::max(capacity, std::size_t{1} << 16);
    capacity = std::min({capacity, std::size_t{1} << 20, (std::size_t{512} << 20) / spec.size});
    pool = new mempool::BitmapPool(spec.size, capacity);
  }
  static void* allocate(std::size_t /*n*/) { return pool->allocate(); }  // nullptr when full
  static void deallocate(void* p, std::size_t /*n*/) { pool->deallocate(p); }
};

// Calls f.template operator()<Api>() with the policy of spec.allocator, after
// its setup (which may throw Skipped).
template <class F>
decltype(auto) with_allocator(const RunSpec& spec, F&& f) {
  const std::string& a = spec.allocator;
  auto run = [&]<class Api>() -> decltype(auto) {
    Api::setup(spec);
    return f.template operator()<Api>();
  };
  if (a == "mempool-heap") return run.template operator()<HeapApi>();
  if (a == "size-class-pool") return run.template operator()<SizeClassApi>();
  if (a == "std-pmr") return run.template operator()<PmrApi>();
  if (a == "object-pool") return run.template operator()<ObjectPoolApi>();
  if (a == "bitmap-pool") return run.template operator()<BitmapPoolApi>();
  return run.template operator()<MallocApi>();  // glibc or a preloaded malloc
}

}  // namespace mempool_bench
