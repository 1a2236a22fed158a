// Programs for memcheck (run_memcheck.sh runs each under valgrind and reads its
// report): with MEMPOOL_VALGRIND=ON, blocks of the heap and of the pools are
// malloc'd and freed blocks to memcheck.
//   memcheck_programs leak             blocks lost from the heap and from two pools
//   memcheck_programs use-after-free   a write and a read into freed blocks
//   memcheck_programs clean            heap and pools used correctly: no error at all
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "mempool/bitmap_pool.hpp"
#include "mempool/concurrent_fixed_pool.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "mempool/object_pool.hpp"

namespace {

// Where a pointer is kept so the compiler cannot drop the stores before the free.
void* volatile g_sink;
// Blocks kept (reachable) so that each lost one is not the first of its span or
// chunk: the heap's span record and the pool's chunk list hold that address, and
// memcheck then counts the block as still reachable (docs/architecture.md).
void* volatile g_kept[8];

// Each leak in a function of its own, so that memcheck's stack names it.
__attribute__((noinline)) void leak_from_the_c_api() {
  g_kept[0] = mp_malloc(96);
  g_sink = mp_malloc(96);
}
__attribute__((noinline)) void leak_from_the_cxx_api() {
  g_kept[1] = mempool::allocate(4096);
  g_sink = mempool::allocate(4096);
}
// A large block is its span's only block: reported, but as still reachable.
__attribute__((noinline)) void leak_from_a_large_block() {
  g_sink = mp_malloc(1 << 20);
}
__attribute__((noinline)) void leak_from_a_fixed_pool(mempool::FixedPool& pool) {
  g_kept[2] = pool.allocate();
  g_sink = pool.allocate();
}
__attribute__((noinline)) void leak_from_a_concurrent_pool(mempool::ConcurrentFixedPool& pool) {
  g_kept[3] = pool.allocate();
  g_sink = pool.allocate();
}

// Old pointers left in dead stack slots would make lost blocks look reachable.
__attribute__((noinline)) void scrub_stack() {
  volatile char junk[64 * 1024];
  for (char& c : const_cast<char(&)[64 * 1024]>(junk))
    c = 0;
}

int leak() {
  // Pools that live past the leak check (static ones are destroyed before it,
  // and a pool's destruction frees what it held).
  auto* fixed = new mempool::FixedPool(48);
  auto* concurrent = new mempool::ConcurrentFixedPool(80);
  leak_from_the_c_api();
  leak_from_the_cxx_api();
  leak_from_a_large_block();
  leak_from_a_fixed_pool(*fixed);
  leak_from_a_concurrent_pool(*concurrent);
  g_sink = nullptr;
  scrub_stack();
  static mempool::FixedPool* volatile keep_fixed = fixed;
  static mempool::ConcurrentFixedPool* volatile keep_concurrent = concurrent;
  return 0;
}

__attribute__((noinline)) void write_after_free_in_the_heap() {
  auto* p = static_cast<char*>(mp_malloc(64));
  mp_free(p);
  p[10] = 'x';  // a byte past the link word
}
__attribute__((noinline)) void read_after_free_in_a_pool() {
  mempool::FixedPool pool(32);
  auto* p = static_cast<long*>(pool.allocate());
  pool.deallocate(p);
  g_sink = reinterpret_cast<void*>(p[0]);  // the link word itself
}

int use_after_free() {
  write_after_free_in_the_heap();
  read_after_free_in_a_pool();
  return 0;
}

// Everything the allocators do internally with free blocks (links, batches to
// the central cache, blocks freed by another thread, pools moved) without one
// complaint from memcheck.
int clean() {
  std::vector<void*> blocks;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 2000; ++i) {
      blocks.push_back(mp_malloc(static_cast<std::size_t>(8 + (i % 50) * 24)));
      std::memset(blocks.back(), i & 0xff, 8);
    }
    std::thread([&] {
      for (std::size_t i = 0; i < blocks.size(); i += 2)
        mp_free(blocks[i]);
    }).join();
    for (std::size_t i = 1; i < blocks.size(); i += 2)
      blocks[i] = mp_realloc(blocks[i], 300);
    for (std::size_t i = 1; i < blocks.size(); i += 2)
      mp_free(blocks[i]);
    blocks.clear();
  }
  void* big = mp_calloc(1, 3 << 20);
  std::printf("%d\n", static_cast<char*>(big)[12345]);  // calloc'd: defined
  mp_free(big);
  mempool::FixedPool fixed(24);
  std::vector<void*> fixed_blocks;
  for (int i = 0; i < 1000; ++i)
    fixed_blocks.push_back(fixed.allocate());
  for (void* p : fixed_blocks)
    fixed.deallocate(p);
  mempool::FixedPool moved(std::move(fixed));
  moved.deallocate(moved.allocate());
  mempool::ConcurrentFixedPool concurrent(64);
  std::vector<void*> shared;
  for (int i = 0; i < 1000; ++i)
    shared.push_back(concurrent.allocate());
  std::thread([&] {
    for (void* p : shared)
      concurrent.deallocate(p);
  }).join();
  mempool::BitmapPool bitmap(32, 128);
  void* b = bitmap.allocate();
  std::memset(b, 1, 32);
  bitmap.deallocate(b);
  mempool::collect();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view what = argc > 1 ? argv[1] : "";
  if (what == "leak") return leak();
  if (what == "use-after-free") return use_after_free();
  if (what == "clean") return clean();
  std::fprintf(stderr, "usage: memcheck_programs leak|use-after-free|clean\n");
  return 2;
}
