/* A C program under the drop-in library (LD_PRELOAD), or with mempool::override linked
 * in (override_c_linked): neither must bring the C++ runtime into it
 * (docs/architecture.md, "The drop-in library"), and
 * operator new must still work when a C++ library is loaded later with dlopen,
 * its new-handler and std::bad_alloc included, reached only through dlsym, and
 * the nothrow form must answer nullptr.
 * argv[1]: the C++ library (tests/override/dlopen_library.cpp). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char* what) {
  fprintf(stderr, "c_program_test: %s\n", what);
  return 1;
}

/* The first line of /proc/self/maps that names one of the C++ runtime's libraries. */
static int cxx_runtime_loaded(char* line, size_t size) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) return 0;
  int found = 0;
  while (!found && fgets(line, (int)size, maps) != NULL)
    found = strstr(line, "libstdc++") != NULL || strstr(line, "libgcc_s") != NULL ||
            strstr(line, "/libm.so") != NULL;
  fclose(maps);
  return found;
}

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage: c_program_test CXX_LIBRARY");
  if (dlsym(RTLD_DEFAULT, "mp_malloc") == NULL) return fail("the drop-in library is not loaded");
  void* p = malloc(100);
  if (p == NULL) return fail("malloc failed");
  memset(p, 1, 100);
  free(p);
  char line[512];
  if (cxx_runtime_loaded(line, sizeof line)) {
    fprintf(stderr, "c_program_test: the C++ runtime is loaded: %s", line);
    return 1;
  }

  void* lib = dlopen(argv[1], RTLD_NOW);
  if (lib == NULL) return fail(dlerror());
  char* (*new_bytes)(size_t, char) = (char* (*)(size_t, char))dlsym(lib, "library_new_bytes");
  int (*check_and_free)(char*, size_t, char) =
      (int (*)(char*, size_t, char))dlsym(lib, "library_check_and_free");
  int (*new_fails)(size_t) = (int (*)(size_t))dlsym(lib, "library_new_fails_after_handler");
  if (new_bytes == NULL || check_and_free == NULL || new_fails == NULL)
    return fail("the C++ library lacks its functions");
  /* new[] there, free here (both mempool's), the bytes intact. */
  char* bytes = new_bytes(3000, 'z');
  if (!check_and_free(bytes, 3000, 'z')) return fail("a block from new[] lost its bytes");
  /* The new-handler three times, then std::bad_alloc, caught in the C++ library. */
  const int calls = new_fails(SIZE_MAX / 2);
  if (calls != 3) {
    fprintf(stderr, "c_program_test: operator new ran the new-handler %d times, want 3\n", calls);
    return 1;
  }
  /* The nothrow form, whose handler throws: nullptr, and nothing escapes (the catch
   * runtime was bound to nothing when the drop-in loaded, so the handler is not run). */
  int (*nothrow_new)(size_t) =
      (int (*)(size_t))dlsym(lib, "library_nothrow_new_with_throwing_handler");
  if (nothrow_new == NULL || nothrow_new(SIZE_MAX / 2) != 1)
    return fail("operator new(nothrow) did not answer nullptr");
  puts("c program ok");
  return 0;
}
