// The general heap through the C++ API, beside the program's own malloc (not replaced).
#include <mempool/mempool.h>
#include <mempool/allocator.hpp>
#include <mempool/heap.hpp>

#include <cstdint>
#include <cstdio>
#include <memory_resource>
#include <new>
#include <string>
#include <vector>

struct Message {
  int id;
  std::string text;
};

int main() {
  // Raw blocks: any size, any power-of-two alignment; a sized free skips the page-map lookup.
  void* buf = mempool::allocate(1000);
  void* line = mempool::allocate(256, std::align_val_t{64});
  const bool raw_ok = mempool::usable_size(buf) >= 1000 &&
                      reinterpret_cast<std::uintptr_t>(line) % 64 == 0 && mempool::owns(buf);
  mempool::deallocate(line, 256, std::align_val_t{64});
  mempool::deallocate(buf, 1000);

  // Containers and smart pointers over the heap.
  std::vector<int, mempool::Allocator<int>> v(1000, 7);
  auto m = mempool::make_unique<Message>(1, "hello");   // mempool::unique_ptr<Message>
  auto s = mempool::make_shared<Message>(2, "shared");  // one allocation
  std::pmr::vector<int> pv({1, 2, 3}, mempool::default_resource());
  const bool adapters_ok =
      mempool::owns(v.data()) && m->text == "hello" && s->id == 2 && mempool::owns(pv.data());

  // From C (or C++): the malloc family under its own names.
  char* c = static_cast<char*>(mp_calloc(16, 1));
  const bool c_ok = c != nullptr && c[15] == 0 && mp_owns(c) == 1;
  mp_free(c);

  const mempool::HeapStats st = mempool::stats();  // what MEMPOOL_SHOW_STATS=1 prints at exit
  std::printf("in use %zu bytes, %zu thread caches\n", st.bytes_in_use, st.thread_caches);
  const bool ok = raw_ok && adapters_ok && c_ok && st.bytes_in_use > 0;
  return ok ? 0 : 1;
}
