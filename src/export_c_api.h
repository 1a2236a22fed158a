/* Forced into every source of libmempool.so (-include): mempool.h is C and carries no
   export mark, and the library is built with -fvisibility=hidden, so its mp_* are
   declared visible here, before any source includes the header. */
#pragma GCC visibility push(default)
#include "mempool/mempool.h"
#pragma GCC visibility pop
