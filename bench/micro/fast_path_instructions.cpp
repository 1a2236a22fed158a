// Instructions per allocate + deallocate pair, counted by valgrind's callgrind.
//
//   valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file=F
//            fast_path_instructions CASE [PAIRS]
//
// runs PAIRS (default 1,000,000) pairs of CASE's allocator after a warm-up, with
// collection switched on (CALLGRIND_TOGGLE_COLLECT) around that loop only, so
// F's total divided by PAIRS is the cost of one pair, loop included. The `loop`
// case is the same loop with no allocator, to subtract. `fast_path_instructions
// sizes` prints the object sizes that show NoStats adds no byte.
//
// Every case runs the same noinline loop: allocate, an empty asm that takes the
// pointer in a register and clobbers memory (so the pointer is opaque and every
// pool keeps its state in memory, as in a real program, at zero instructions),
// deallocate, another clobber. Without a pool in the way the compiler could fold
// the pop and the push together.
#include <valgrind/callgrind.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "mempool/bitmap_pool.hpp"
#include "mempool/concurrent_fixed_pool.hpp"
#include "mempool/detail/chunk_arena.hpp"
#include "mempool/detail/free_list.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "mempool/object_pool.hpp"
#include "mempool/stats.hpp"
#include "micro_shapes.hpp"

namespace {

using mempool_bench::Obj;

constexpr long kWarmupPairs = 1000;
constexpr long kDefaultPairs = 1'000'000;

// The baseline: a hand-written intrusive free list with FixedPool's contract
// (allocate never fails on the fast path, deallocate(nullptr) does nothing), its
// refill kept out of line as the pool's is.
class BareFreeList {
 public:
  void* allocate() {
    if (head_ != nullptr) [[likely]] {
      Node* n = head_;
      head_ = n->next;
      return n;
    }
    return refill();
  }
  void deallocate(void* p) {
    if (p == nullptr) [[unlikely]] {
      return;
    }
    Node* n = static_cast<Node*>(p);
    n->next = head_;
    head_ = n;
  }

 private:
  struct Node {
    Node* next;
  };
  __attribute__((noinline, cold)) void* refill() {
    void* p = std::aligned_alloc(16, 32);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  Node* head_ = nullptr;
};

// The empty loop: what every count below includes besides the allocator.
struct EmptyLoop {
  void* allocate() { return nullptr; }
  void deallocate(void* /*p*/) {}
};

template <class Pool>
struct ObjectPoolCase {
  void* allocate() { return pool.allocate(); }
  void deallocate(void* p) { pool.deallocate(p); }
  Pool pool;
};

struct FixedPoolCase {
  void* allocate() { return pool.allocate(); }
  void deallocate(void* p) { pool.deallocate(p); }
  mempool::FixedPool pool{sizeof(Obj)};
};

struct ConcurrentFixedPoolCase {
  void* allocate() { return pool.allocate(); }
  void deallocate(void* p) { pool.deallocate(p); }
  mempool::ConcurrentFixedPool pool{sizeof(Obj)};
};

struct BitmapPoolCase {
  void* allocate() {
    void* p = pool.allocate();
    if (p == nullptr) [[unlikely]] {
      std::abort();  // as a caller must check: BitmapPool returns nullptr when full
    }
    return p;
  }
  void deallocate(void* p) { pool.deallocate(p); }
  mempool::BitmapPool pool{sizeof(Obj), 16'384};
};

struct NewDeleteCase {
  void* allocate() { return ::operator new(sizeof(Obj)); }
  void deallocate(void* p) {
#if defined(__cpp_sized_deallocation)
    ::operator delete(p, sizeof(Obj));  // what `delete p` calls for an Obj
#else
    ::operator delete(p);
#endif
  }
};

// The general heap's in-process API: mempool::allocate(64) + mempool::deallocate(p,
// 64). `heap`: the size a constant, so both hit paths are inlined here; `heap_var`: a
// size the compiler does not know, so both calls go into the library (heap.cpp), as
// issue 27 measured. fast_path_instructions links libmempool.a,
// fast_path_instructions_shared libmempool.so.0 (compiled with MEMPOOL_SHARED, as a
// find_package consumer of mempool::mempool is): the two must cost the same.
struct HeapCase {
  void* allocate() { return mempool::allocate(64); }
  void deallocate(void* p) { mempool::deallocate(p, 64); }
};
struct HeapVarCase {
  void* allocate() { return mempool::allocate(opaque(64)); }
  void deallocate(void* p) { mempool::deallocate(p, opaque(64)); }
  static std::size_t opaque(std::size_t n) {
    asm("" : "+r"(n));  // no instruction: the compiler just forgets the value
    return n;
  }
};

// The C API (mempool.h), as a program linked with mempool calls it: mp_malloc and
// mp_free run the same hit paths as the drop-in library's malloc and free.
struct HeapCApiCase {
  void* allocate() { return mp_malloc(HeapVarCase::opaque(64)); }
  void deallocate(void* p) { mp_free(p); }
};

template <class Case>
__attribute__((noinline)) void run_pairs(Case& c, long pairs) {
  for (long i = 0; i < pairs; ++i) {
    void* p = c.allocate();
    asm volatile("" : "+r"(p) : : "memory");
    c.deallocate(p);
    asm volatile("" : : : "memory");
  }
}

template <class Case>
int measure(long pairs) {
  static Case c;  // static storage, as a long-lived pool would be
  run_pairs(c, kWarmupPairs);
  CALLGRIND_TOGGLE_COLLECT;
  run_pairs(c, pairs);
  CALLGRIND_TOGGLE_COLLECT;
  std::printf("%ld\n", pairs);
  return 0;
}

// FixedPool's members without the Stats one: the size a pool without any
// statistics support would have.
struct PoolWithoutStatsMember {
  mempool::detail::FreeList free;
  mempool::detail::ChunkArena arena;
  const char* name;
};

int print_sizes() {
  std::printf("sizeof(ObjectPool<Obj>)              %zu\n", sizeof(mempool::ObjectPool<Obj>));
  std::printf("sizeof(ObjectPool<Obj, WithStats>)   %zu\n",
              sizeof(mempool::ObjectPool<Obj, mempool::WithStats>));
  std::printf("sizeof(same members, no Stats one)   %zu\n", sizeof(PoolWithoutStatsMember));
  return 0;
}
static_assert(sizeof(mempool::ObjectPool<Obj>) == sizeof(PoolWithoutStatsMember),
              "NoStats must add no byte");

int usage() {
  std::fputs(
      "usage: fast_path_instructions CASE [PAIRS] | sizes\n"
      "CASE: loop bare objectpool objectpool_stats fixedpool concurrent bitmap newdelete heap "
      "heap_var heap_c\n",
      stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) return usage();
  const char* which = argv[1];
  if (std::strcmp(which, "sizes") == 0) return print_sizes();
  const long pairs = argc == 3 ? std::strtol(argv[2], nullptr, 10) : kDefaultPairs;
  if (pairs <= 0) return usage();
  if (std::strcmp(which, "loop") == 0) return measure<EmptyLoop>(pairs);
  if (std::strcmp(which, "bare") == 0) return measure<BareFreeList>(pairs);
  if (std::strcmp(which, "objectpool") == 0) {
    return measure<ObjectPoolCase<mempool::ObjectPool<Obj>>>(pairs);
  }
  if (std::strcmp(which, "objectpool_stats") == 0) {
    return measure<ObjectPoolCase<mempool::ObjectPool<Obj, mempool::WithStats>>>(pairs);
  }
  if (std::strcmp(which, "fixedpool") == 0) return measure<FixedPoolCase>(pairs);
  if (std::strcmp(which, "concurrent") == 0) return measure<ConcurrentFixedPoolCase>(pairs);
  if (std::strcmp(which, "bitmap") == 0) return measure<BitmapPoolCase>(pairs);
  if (std::strcmp(which, "newdelete") == 0) return measure<NewDeleteCase>(pairs);
  if (std::strcmp(which, "heap") == 0) return measure<HeapCase>(pairs);
  if (std::strcmp(which, "heap_var") == 0) return measure<HeapVarCase>(pairs);
  if (std::strcmp(which, "heap_c") == 0) return measure<HeapCApiCase>(pairs);
  return usage();
}
