// A program whose heap at exit is known, for `mempool-bench run --profile`'s
// tests (tests/bench/mempool_bench_test.py, profile) and the sample profile
// under tests/bench/profile/ (heap_profile_test.py): what it holds when it
// exits, by the function that allocated it.
//   big_site      64 blocks of 1 MiB (malloc), called from layer
//   medium_site   256 blocks of 64 KiB (malloc), called from layer
//   small_site    10,000 blocks of 400 bytes (new[]), called from main
//   grow_site     a std::vector<long> of 100,000, grown by push_back: 1 MiB of
//                 capacity from the vector's allocator, and the vector (new)
//   freed_site    1,000 blocks of 1 MiB, each freed at once: nothing
// Built without inlining, tail calls or frame-pointer omission (CMakeLists.txt),
// so that every site keeps its frame.
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int kSlots = 64 + 256 + 10000;
void* held[kSlots];  // not freed at exit: the profile's in-use heap
int next_slot = 0;
std::vector<long>* grown = nullptr;

void keep(void* p) {
  std::memset(p, 1, 16);  // touched: no allocation is optimized away
  held[next_slot++] = p;
}

}  // namespace

__attribute__((noinline)) void big_site() {
  for (int i = 0; i < 64; ++i)
    keep(std::malloc(std::size_t{1} << 20));
}

__attribute__((noinline)) void medium_site() {
  for (int i = 0; i < 256; ++i)
    keep(std::malloc(std::size_t{64} << 10));
}

__attribute__((noinline)) void small_site() {
  for (int i = 0; i < 10000; ++i)
    keep(new char[400]);
}

__attribute__((noinline)) void grow_site() {
  grown = new std::vector<long>;
  for (long i = 0; i < 100000; ++i)
    grown->push_back(i);
}

__attribute__((noinline)) void freed_site() {
  for (int i = 0; i < 1000; ++i) {
    void* p = std::malloc(std::size_t{1} << 20);
    std::memset(p, 1, 16);
    std::free(p);
  }
}

__attribute__((noinline)) void layer() {
  big_site();
  medium_site();
}

int main() {
  layer();
  small_site();
  grow_site();
  freed_site();
  return next_slot == kSlots && grown->size() == 100000 ? 0 : 1;
}
