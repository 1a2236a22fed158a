/* The heap's C API from a C translation unit: proves <mempool/mempool.h> is valid
 * C (compiled as C11 with -Wpedantic -Werror) and exercises every call.
 * mempool_c_api_check() returns 0, or the line of the first failed check;
 * heap_c_api_driver_test.cpp runs it under GoogleTest. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <mempool/mempool.h>

int mempool_c_api_check(void);

#define CHECK(cond)    \
  do {                 \
    if (!(cond)) {     \
      return __LINE__; \
    }                  \
  } while (0)

static int is_aligned(const void* p, size_t a) {
  return ((uintptr_t)p % a) == 0;
}

static int is_zero(const unsigned char* p, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) {
    if (p[i] != 0) return 0;
  }
  return 1;
}

int mempool_c_api_check(void) {
  size_t n;
  unsigned char* p;
  unsigned char* q;
  void* out;
  void* untouched = &out;
  FILE* f;

  /* malloc: aligned, usable, writable; 0 gives a unique pointer. */
  for (n = 1; n <= 5000; n += 37) {
    p = (unsigned char*)mp_malloc(n);
    CHECK(p != NULL);
    CHECK(is_aligned(p, n >= 16 ? 16 : 8));
    CHECK(mp_usable_size(p) >= n);
    memset(p, 0xab, mp_usable_size(p));
    CHECK(mp_owns(p) == 1);
    mp_free(p);
  }
  CHECK(mp_owns(&n) == 0); /* the stack is not the heap's */
  p = (unsigned char*)mp_malloc(0);
  q = (unsigned char*)mp_malloc(0);
  CHECK(p != NULL && q != NULL && p != q);
  mp_free(p);
  mp_free(q);
  mp_free(NULL);
  CHECK(mp_usable_size(NULL) == 0);

  /* calloc zeroes, also a block dirtied and freed before; overflow is ENOMEM. */
  p = (unsigned char*)mp_malloc(4000);
  CHECK(p != NULL);
  memset(p, 0xff, 4000);
  mp_free(p);
  p = (unsigned char*)mp_calloc(1000, 4);
  CHECK(p != NULL);
  CHECK(is_zero(p, 4000));
  mp_free(p);
  errno = 0;
  CHECK(mp_calloc(SIZE_MAX / 2 + 1, 2) == NULL);
  CHECK(errno == ENOMEM);

  /* realloc: NULL allocates, contents survive growing and shrinking, 0 frees. */
  p = (unsigned char*)mp_realloc(NULL, 10);
  CHECK(p != NULL);
  memcpy(p, "mempool-c", 10);
  p = (unsigned char*)mp_realloc(p, 100000);
  CHECK(p != NULL);
  CHECK(memcmp(p, "mempool-c", 10) == 0);
  p = (unsigned char*)mp_realloc(p, 5);
  CHECK(p != NULL);
  CHECK(memcmp(p, "mempo", 5) == 0);
  errno = 0;
  CHECK(mp_realloc(p, SIZE_MAX) == NULL);
  CHECK(errno == ENOMEM);
  CHECK(memcmp(p, "mempo", 5) == 0); /* a failed realloc leaves p as it was */
  CHECK(mp_realloc(p, 0) == NULL);

  /* aligned_alloc and posix_memalign. */
  p = (unsigned char*)mp_aligned_alloc(4096, 100);
  CHECK(p != NULL);
  CHECK(is_aligned(p, 4096));
  mp_free(p);
  errno = 0;
  CHECK(mp_aligned_alloc(24, 100) == NULL);
  CHECK(errno == EINVAL);
  out = untouched;
  CHECK(mp_posix_memalign(&out, 256, 1000) == 0);
  CHECK(out != untouched && is_aligned(out, 256));
  mp_free(out);
  out = untouched;
  CHECK(mp_posix_memalign(&out, 4, 1000) == EINVAL);
  CHECK(out == untouched);
  CHECK(mp_posix_memalign(&out, 64, SIZE_MAX) == ENOMEM);
  CHECK(out == untouched);

  /* malloc of an absurd size: NULL and ENOMEM. */
  errno = 0;
  CHECK(mp_malloc(SIZE_MAX) == NULL);
  CHECK(errno == ENOMEM);

  /* collect and the statistics table. */
  mp_collect();
  f = tmpfile();
  CHECK(f != NULL);
  mp_stats_print(f);
  CHECK(ftell(f) > 0);
  fclose(f);
  return 0;
}
