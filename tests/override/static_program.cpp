// A fully static program (-static) linked with mempool::override that uses nothing of
// libstdc++ but operator new and a catch. With no argument: its new must still throw
// std::bad_alloc and its nothrow new answer nullptr (CMakeLists.txt asks for the runtime's),
// where a weak reference alone would find no runtime linked and stop the process. With
// "leak": one block of 5000 bytes left behind, for the leak check to report with its stack
// (the unwinder cannot run during glibc's static start-up: heap_profiler.cpp).
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>

namespace {

void* volatile g_kept = nullptr;  // so that the compiler keeps the allocation

__attribute__((noinline)) void leak_one_block() {
  char* p = new char[5000];
  std::memset(p, 1, 5000);
  g_kept = p;
  g_kept = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "leak") == 0) {
    leak_one_block();
    std::printf("left one block\n");
    return 0;
  }
  // Out of reach of any heap; argc keeps the compiler from folding the size.
  const std::size_t absurd = (std::size_t{1} << 60) + static_cast<std::size_t>(argc);
  bool threw = false;
  try {
    char* p = new char[absurd];
    std::printf("new answered %p\n", static_cast<void*>(p));
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  char* q = new (std::nothrow) char[absurd];
  char* small = new char[100];
  small[99] = 'x';
  delete[] small;
  std::printf("bad_alloc %s, nothrow %s\n", threw ? "thrown" : "not thrown",
              q == nullptr ? "nullptr" : "not nullptr");
  return threw && q == nullptr ? 0 : 1;
}
