// dlopen() of libmempool.so.0 by a program that does not link it, as a plugin or a
// language binding loads it: the library's initial-exec TLS must find room in glibc's
// static TLS surplus (docs/architecture.md, "Packaging"). mp_malloc and mp_free are
// looked up with dlsym and used from the main thread and from a thread started after
// the load (whose static TLS block glibc lays out with the library's in it).
//
//   dlopen_test PATH-TO-libmempool.so.0
#include <dlfcn.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>

namespace {

using MallocFn = void* (*)(std::size_t);
using FreeFn = void (*)(void*);

bool use_heap(MallocFn mp_malloc, FreeFn mp_free, const char* who) {
  void* blocks[1000];
  for (std::size_t i = 0; i < 1000; ++i) {
    blocks[i] = mp_malloc(16 + (i % 64) * 16);
    if (blocks[i] == nullptr) {
      std::fprintf(stderr, "%s: mp_malloc failed\n", who);
      return false;
    }
    std::memset(blocks[i], static_cast<int>(i), 16);
  }
  for (void* p : blocks)
    mp_free(p);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fputs("usage: dlopen_test PATH-TO-libmempool.so.0\n", stderr);
    return 2;
  }
  if (dlsym(RTLD_DEFAULT, "mp_malloc") != nullptr) {
    std::fputs("mp_malloc is already loaded: this program must not link mempool\n", stderr);
    return 1;
  }
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());  // NOLINT(concurrency-mt-unsafe): one thread
    return 1;
  }
  auto mp_malloc = reinterpret_cast<MallocFn>(dlsym(library, "mp_malloc"));
  auto mp_free = reinterpret_cast<FreeFn>(dlsym(library, "mp_free"));
  if (mp_malloc == nullptr || mp_free == nullptr) {
    std::fprintf(stderr, "dlsym: %s\n", dlerror());  // NOLINT(concurrency-mt-unsafe): one thread
    return 1;
  }
  bool ok = use_heap(mp_malloc, mp_free, "main thread");
  std::thread other([&] { ok = use_heap(mp_malloc, mp_free, "new thread") && ok; });
  other.join();
  ok = use_heap(mp_malloc, mp_free, "main thread again") && ok;
  std::puts(ok ? "dlopen ok" : "dlopen: the heap failed");
  return ok ? 0 : 1;
}
