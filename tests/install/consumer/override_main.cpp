// Linked with the installed mempool::override: malloc, libc's own strdup and
// operator new must all hand out mempool's memory.
#include <mempool/mempool.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

int main() {
  void* m = std::malloc(100);
  char* s = ::strdup("from libc");
  auto n = std::make_unique<int>(7);
  const bool ok = mp_owns(m) == 1 && mp_owns(s) == 1 && mp_owns(n.get()) == 1;
  std::free(s);
  std::free(m);
  std::printf("override %d\n", ok);
  return ok ? 0 : 1;
}
