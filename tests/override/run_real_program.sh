#!/usr/bin/env bash
# Runs a real program twice, without and then with a malloc replacement in LD_PRELOAD,
# and checks that both runs succeed and print the same. Real programs allocate in ways
# unit tests do not (realloc chains, memalign, threads, fork+exec, huge buffers).
#
# Usage: run_real_program.sh <absolute path to preload .so> <program> <scratch dir>
#   program: python | git | gxx | sort | awk | tar_gzip | perl
# Exit status: 0 same output, 1 failure (explained on stderr), 2 bad arguments,
# 77 program not installed (ctest's skip code).
# The run_* functions are called as "run_$program", which shellcheck cannot follow.
# shellcheck disable=SC2317
set -euo pipefail

usage() {
  echo "usage: $0 <absolute path to preload .so> python|git|gxx|sort|awk|tar_gzip|perl <scratch dir>" >&2
  exit 2
}
[[ $# -eq 3 ]] || usage
preload=$1 program=$2 scratch=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

skip() {
  echo "$program: skipped: $*"
  exit 77
}
need() {
  command -v "$1" >/dev/null || skip "$1 is not installed"
}
fail() {
  echo "$program: FAILED: $*" >&2
  exit 1
}

# A missing or unloadable .so makes ld.so print a warning and run the program anyway,
# which would pass without testing anything.
[[ $preload == /* && -f $preload ]] || fail "no preload library at '$preload' (an absolute path is needed)"

# The same environment for both runs: nothing preloaded already, no library statistics
# or option lines on stderr, no locale or time zone in the output.
unset LD_PRELOAD MEMPOOL_SHOW_STATS MEMPOOL_VERBOSE
export LC_ALL=C TZ=UTC

# Runs one command of the program under test, preloaded in the second run only, and
# counts the preloaded ones (in a file: some run in pipelines, in subshells).
preload_env=()
tested() {
  [[ ${#preload_env[@]} -eq 0 ]] || echo "$1" >>"$dir/with.tested"
  env "${preload_env[@]}" "$@"
}

# Deterministic lines "k<key> <number> <word>-<word>" (about 30 bytes each) for the
# sort, awk and tar tests. The Park-Miller generator stays exact in awk's doubles.
generate_lines() {
  awk -v n="$1" 'BEGIN {
    x = 1
    alpha = "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
    for (i = 0; i < n; i++) {
      x = x * 16807 % 2147483647; key = x % 300000
      x = x * 16807 % 2147483647; value = x % 1000000
      x = x * 16807 % 2147483647
      printf "k%06d %d %s-%s\n", key, value, substr(alpha, x % 26 + 1, 4 + x % 9),
             substr(alpha, x % 23 + 1, 3 + x % 7)
    }
  }'
}

# One workload per program: each runs in a fresh work directory, reads its input from
# $input and prints what is compared.
run_python() {
  # Debian's python3 (not a pyenv shim), without the user's site-packages.
  tested PYTHONHASHSEED=0 /usr/bin/python3 -s "$here/python_workload.py"
}

run_perl() {
  tested perl "$here/perl_workload.pl"
}

run_gxx() {
  # cc1plus once, then as and ld on its output; the .s, the executable and its output
  # are all deterministic.
  tested g++ -std=c++20 -O1 -S -o workload.s "$here/gxx_workload.cpp"
  tested g++ -o workload workload.s
  sha256sum workload.s workload
  tested ./workload
}

run_git() {
  # No system or user configuration; fixed dates so every hash is the same.
  export HOME=$PWD XDG_CONFIG_HOME=$PWD/.config GIT_CONFIG_NOSYSTEM=1
  tested git -c init.defaultBranch=main init -q repo
  cd repo
  tested git config user.name "mempool test"
  tested git config user.email "test@mempool.invalid"
  local c
  for c in 1 2 3 4; do
    # Commit c rewrites every (c+1)th of 300 files of 100 lines and, after the
    # first, deletes one of the 10 directories.
    mkdir -p dir{0..9}
    awk -v c="$c" 'BEGIN {
      for (i = 0; i < 300; i++) {
        if (c > 1 && i % (c + 1) != 0) continue
        file = "dir" (i % 10) "/file" i ".txt"
        for (j = 0; j < 100; j++) printf "line %d of file %d, commit %d: %d\n", j, i, c, (i * j * c) % 9973 > file
        close(file)
      }
    }'
    [[ $c -eq 1 ]] || rm -r "dir$((c + 5))"
    tested git add -A
    tested GIT_AUTHOR_DATE="2024-01-0${c}T12:00:00Z" GIT_COMMITTER_DATE="2024-01-0${c}T12:00:00Z" \
      git commit -q -m "commit $c"
  done
  tested git log --stat --format=fuller
  tested git log -p | sha256sum
  tested git gc --quiet
  tested git fsck --full --strict
  tested git rev-list --all --objects | sha256sum
}

run_sort() {
  tested sort -t ' ' -k2,2n -k1,1 "$input/data" | sha256sum
  tested sort -u "$input/data" | wc -l
}

run_awk() {
  # Associative arrays of about 300000 keys, and strings that keep growing.
  # shellcheck disable=SC2016 # an awk program: awk expands the $ fields
  tested awk '{
      n[$1]++; sum[$1] += $2; seen[$3]++
      tail[$1] = substr(tail[$1] $3, 1, 40)
    }
    END {
      for (k in n) printf "%s %d %d %s\n", k, n[k], sum[k], tail[k]
      for (w in seen) words++
      printf "words %d\n", words
    }' "$input/data" | sort
}

run_tar_gzip() {
  # Fixed metadata and gzip -n, so the archive is the same byte for byte.
  tested tar --sort=name --format=gnu --mtime=@0 --owner=0 --group=0 --numeric-owner \
    -cf - -C "$input" tree | tested gzip -n -6 >archive.tar.gz
  sha256sum archive.tar.gz
  tested gzip -dc archive.tar.gz | tested tar -tvf -
  mkdir out
  tested gzip -dc archive.tar.gz | tested tar -xf - -C out
  diff -r "$input/tree" out/tree
  echo "round trip: same files"
}

case $program in
  python) [[ -x /usr/bin/python3 ]] || skip "/usr/bin/python3 is not installed" ;;
  git) need git ;;
  gxx) need g++ ;;
  sort) need sort ;;
  awk) need awk ;;
  tar_gzip) need tar; need gzip ;;
  perl) perl -MDigest::SHA -e 1 2>/dev/null || skip "perl with Digest::SHA is not installed" ;;
  *) usage ;;
esac

dir=$scratch/$program
rm -rf "$dir"
mkdir -p "$dir/input"
dir=$(cd "$dir" && pwd) # absolute, as the workloads cd into their own directories
input=$dir/input
# The input of the sort, awk and tar tests, made once and not under the preload.
case $program in
  sort | awk) generate_lines 1000000 >"$input/data" ;;
  tar_gzip)
    mkdir "$input/tree"
    generate_lines 1000000 | split -l 50000 - "$input/tree/part."
    ;;
esac

# run_once <name>: runs the workload in $dir/<name>, output in $dir/<name>.out and .err,
# exit status in $dir/<name>.status. The status is read with set +e, not with `||`:
# bash ignores set -e inside a command whose status is tested, which would let a
# failing step in the middle of a workload go unnoticed.
run_once() {
  mkdir "$dir/$1"
  set +e
  (set -e; cd "$dir/$1"; "run_$program") >"$dir/$1.out" 2>"$dir/$1.err"
  echo $? >"$dir/$1.status"
  set -e
}
run_once without
# The proof that mempool was the allocator in the run with the preload: with
# MEMPOOL_SHOW_STATS=1 every process that loaded it prints its statistics table on stderr
# at exit, so with.err holds at least one table a preloaded command (more where a
# command starts others: g++ its compiler, assembler and linker, git its helpers).
preload_env=("LD_PRELOAD=$preload" "MEMPOOL_SHOW_STATS=1")
run_once with

without_status=$(<"$dir/without.status") with_status=$(<"$dir/with.status")
problems=
problem() { problems+="${problems:+; }$*"; }
[[ $without_status -eq 0 ]] || problem "exit status $without_status without the preload"
[[ $with_status -eq 0 ]] || problem "exit status $with_status with the preload"
[[ -s $dir/without.out ]] || problem "no output without the preload"
cmp -s "$dir/without.out" "$dir/with.out" || problem "outputs differ"
messages=$(grep -e '^mempool:' -e 'cannot be preloaded' "$dir/with.err" | head -n 10) || true
[[ -z $messages ]] || problem "messages from the preload"
commands=$(wc -l <"$dir/with.tested" 2>/dev/null || echo 0)
tables=$(grep -c '^mempool heap statistics$' "$dir/with.err") || true
mapped=$(grep -c '^  = mapped  *[0-9.]* MiB' "$dir/with.err") || true
[[ $commands -ge 1 && $tables -ge $commands && $mapped -ge $commands ]] ||
  problem "mempool not proven the allocator: $tables statistics tables on stderr for $commands preloaded commands"

if [[ -z $problems ]]; then
  echo "$program: same output with and without $preload ($(wc -l <"$dir/with.out") lines);" \
    "mempool's statistics from $tables processes of $commands preloaded commands"
  exit 0
fi
{
  echo "$program: FAILED: $problems (preload $preload, files in $dir)"
  [[ -z $messages ]] || printf '%s\n' "--- messages from the preload (first 10)" "$messages"
  for run in without with; do
    [[ $(<"$dir/$run.status") -eq 0 ]] || { echo "--- stderr $run the preload (last 10 lines)"; tail -n 10 "$dir/$run.err"; }
  done
  cmp -s "$dir/without.out" "$dir/with.out" || {
    echo "--- diff without.out with.out (first 20 lines)"
    diff "$dir/without.out" "$dir/with.out" | head -n 20
  }
} >&2 || true
exit 1
