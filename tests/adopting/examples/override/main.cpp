// Linked with mempool::override: the program's own malloc, the allocations libc makes for it
// (strdup) and operator new all come from mempool's heap, with no change to the code.
#include <mempool/mempool.h>  // only for mp_owns: the program itself needs no mempool header

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main() {
  void* m = std::malloc(100);
  char* s = ::strdup("from libc");
  std::vector<std::string> v(100, std::string(64, 'x'));  // operator new
  const bool ok =
      mp_owns(m) == 1 && mp_owns(s) == 1 && mp_owns(v.data()) == 1 && mp_owns(v[0].data()) == 1;
  std::free(s);
  std::free(m);
  std::printf("malloc and operator new are mempool's: %s\n", ok ? "yes" : "no");
  return ok ? 0 : 1;
}
