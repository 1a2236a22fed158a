#!/bin/sh
# Runs memcheck_programs under valgrind's memcheck and checks its report: the leaks
# and the uses after free of a MEMPOOL_VALGRIND=ON build are reported with the
# functions that made them, and correct use gives no error at all.
#   run_memcheck.sh VALGRIND PROGRAM WORK_DIR
set -u
valgrind=$1
program=$2
work=$3
mkdir -p "$work"

fail() {
  echo "run_memcheck: $*" >&2
  exit 1
}
# expect LOG REGEX WHAT
expect() {
  grep -Eq "$2" "$1" || { cat "$1" >&2; fail "$3: no line matching /$2/ in $1"; }
}
run() {  # run NAME EXIT_CODE_WANTED [MEMCHECK OPTIONS]
  name=$1
  want=$2
  shift 2
  "$valgrind" --tool=memcheck --leak-check=full --show-leak-kinds=definite \
    --errors-for-leak-kinds=definite --error-exitcode=99 --num-callers=40 "$@" \
    "$program" "$name" >"$work/$name.log" 2>&1
  rc=$?
  [ "$rc" = "$want" ] || { cat "$work/$name.log" >&2; fail "$name: exit status $rc, want $want"; }
}

run leak 99 --show-leak-kinds=definite,reachable
# Each lost block in a loss record of its own, with the function that allocated it.
for f in leak_from_the_c_api leak_from_the_cxx_api leak_from_a_fixed_pool \
  leak_from_a_concurrent_pool; do
  awk -v f="$f" '/are definitely lost/ { lost = 1 } /^==[0-9]+== $/ { lost = 0 }
    lost && index($0, f) { found = 1 } END { exit !found }' "$work/leak.log" ||
    { cat "$work/leak.log" >&2; fail "leak: no 'definitely lost' record names $f"; }
done
expect "$work/leak.log" "definitely lost: 4,320 bytes in 4 blocks" \
  "leak: 96 + 4096 + 48 + 80 bytes lost"
# The large block is its span's start, which the span record holds: reachable.
expect "$work/leak.log" "1,048,576 bytes in 1 blocks are still reachable" "leak: the large block"

run use-after-free 99
expect "$work/use-after-free.log" "Invalid write of size 1" "use-after-free: the write"
expect "$work/use-after-free.log" "is 10 bytes inside a block of size 64 free'd" \
  "use-after-free: the heap block named"
expect "$work/use-after-free.log" "Invalid read of size 8" "use-after-free: the read"
expect "$work/use-after-free.log" "is 0 bytes inside a block of size 32 free'd" \
  "use-after-free: the pool block named"
expect "$work/use-after-free.log" "write_after_free_in_the_heap" "use-after-free: the writer"
expect "$work/use-after-free.log" "read_after_free_in_a_pool" "use-after-free: the reader"

run clean 0
expect "$work/clean.log" "ERROR SUMMARY: 0 errors" "clean: no error"
echo "run_memcheck: memcheck reports the leaks and uses after free, and nothing in correct use"
