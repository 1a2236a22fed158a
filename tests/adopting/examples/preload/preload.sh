#!/bin/sh
# An unchanged program with mempool as its malloc and operator new: no rebuild, no relink.
set -e
lib=${MEMPOOL_LIB:-/opt/mempool/lib/libmempool-malloc.so}  # or lib/<multiarch>/ under the prefix
app=${APP:-./your-server}
MEMPOOL_VERBOSE=1 LD_PRELOAD="$lib" "$app"     # "mempool: version 0.1.0 active as malloc and ..."
MEMPOOL_SHOW_STATS=1 LD_PRELOAD="$lib" "$app"  # the heap statistics on stderr at exit
