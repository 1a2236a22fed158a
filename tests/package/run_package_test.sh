#!/usr/bin/env bash
# The Debian packages as a user gets them: builds them (scripts/package), installs
# them with apt-get, builds a consumer against /usr by CMake and by pkg-config, runs
# python3 with the drop-in preloaded, then purges them and checks nothing is left.
# Needs root (it installs into /usr); exits 77 (skipped) otherwise.
set -euo pipefail
source_dir="$1"
work="$2"
packages=(libmempool-dev libmempool-malloc0 libmempool0)
libdir=/usr/lib/$(gcc -print-multiarch)

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "package test skipped: it installs into /usr with apt-get and needs root"
  exit 77
fi
# One run at a time on this machine: another would install or purge under us.
exec 9>/var/lock/mempool-package-test.lock
flock 9

fail() { echo "package test: $*" >&2; exit 1; }
purge() { apt-get purge -y -qq "${packages[@]}" >/dev/null 2>&1 || true; }
trap purge EXIT
purge  # a previous run may have left them installed

mapfile -t debs < <("$source_dir/scripts/package" | grep '\.deb$')
[ ${#debs[@]} -eq 3 ] || fail "scripts/package made ${#debs[@]} packages, not 3: ${debs[*]}"
for deb in "${debs[@]}"; do
  name=$(dpkg-deb -f "$deb" Package)
  depends=$(dpkg-deb -f "$deb" Depends)
  files=$(dpkg-deb -c "$deb")
  case "$name" in
    libmempool0 | libmempool-malloc0)
      # libmempool-malloc0 ships the drop-ins: libmempool-malloc.so.0 and the hardened one.
      libs=("${name%0}.so.0")
      [ "$name" = libmempool-malloc0 ] && libs+=(libmempool-malloc-hardened.so.0)
      [[ "$depends" == *libc6* ]] || fail "$name: Depends: $depends"
      # The drop-ins need nothing but libc (docs/architecture.md, "The drop-in library").
      if [ "$name" = libmempool-malloc0 ]; then
        [[ "$depends" != *libstdc++6* ]] || fail "$name depends on the C++ runtime: $depends"
      else
        [[ "$depends" == *libstdc++6* ]] || fail "$name: Depends: $depends"
      fi
      for lib in "${libs[@]}"; do
        grep -q "\.$libdir/$lib -> " <<<"$files" || fail "$name has no $libdir/$lib link"
      done
      # Exactly the libraries: each link and the file it names.
      [ "$(grep -c '\.so' <<<"$files")" -eq $((2 * ${#libs[@]})) ] ||
        fail "$name holds more than ${libs[*]}:"$'\n'"$files"
      postinst=$(dpkg-deb --ctrl-tarfile "$deb" | tar xO ./postinst)
      grep -q ldconfig <<<"$postinst" ||
        fail "$name does not run ldconfig"
      ;;
    libmempool-dev)
      [[ "$depends" == *"libmempool0 (= "* ]] || fail "$name: Depends: $depends"
      for f in include/mempool/heap.hpp "${libdir#/usr/}/libmempool.a" "${libdir#/usr/}/libmempool.so " \
        "${libdir#/usr/}/pkgconfig/mempool.pc" "${libdir#/usr/}/cmake/mempool/mempoolConfig.cmake"; do
        grep -q "/usr/$f" <<<"$files" || fail "$name lacks /usr/$f"
      done
      ;;
    *) fail "unexpected package $name" ;;
  esac
done

export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "${debs[@]}" >/dev/null
# Each listing is read whole before grep -q looks at it: grep stops at the first match,
# and under pipefail the writer's SIGPIPE would fail the test (it did, once in CI).
cache=$(ldconfig -p)
grep -q "libmempool.so.0 " <<<"$cache" || fail "ldconfig does not know libmempool.so.0"

rm -rf "$work" && mkdir -p "$work"
cmake -S "$source_dir/tests/install/consumer" -B "$work/cmake" -G Ninja >/dev/null
cmake --build "$work/cmake" >/dev/null
out=$("$work/cmake/consumer")
[[ "$out" == *"heap 1 malloc-is-mempool 0"* ]] || fail "CMake consumer: $out"
# (ldd may name /lib/..., the same directory on a merged /usr.)
deps=$(ldd "$work/cmake/consumer")
grep -q "libmempool.so.0 => /.*/libmempool.so.0" <<<"$deps" ||
  fail "CMake consumer does not load the installed libmempool.so.0"
"$work/cmake/override_consumer" >/dev/null || fail "mempool::override consumer failed"
# MEMPOOL_STATIC: mempool::mempool is libmempool.a.
cmake -S "$source_dir/tests/install/consumer" -B "$work/cmake-static" -G Ninja -DMEMPOOL_STATIC=ON \
  -DWITH_OVERRIDE=OFF >/dev/null
cmake --build "$work/cmake-static" >/dev/null
out=$("$work/cmake-static/consumer")
[[ "$out" == *"heap 1 malloc-is-mempool 0"* ]] || fail "static CMake consumer: $out"
deps=$(ldd "$work/cmake-static/consumer")
grep -q libmempool <<<"$deps" && fail "the MEMPOOL_STATIC consumer needs libmempool"

# shellcheck disable=SC2046  # pkg-config's words are meant to split
g++ -std=c++20 "$source_dir/tests/install/consumer/main.cpp" $(pkg-config --cflags --libs mempool) \
  -o "$work/pc_consumer"
out=$("$work/pc_consumer")
[[ "$out" == *"heap 1 malloc-is-mempool 0"* ]] || fail "pkg-config consumer: $out"

out=$(LD_PRELOAD=$libdir/libmempool-malloc.so.0 MEMPOOL_VERBOSE=1 \
  python3 -c 'print(sum(len(str(i)) for i in range(100000)))' 2>&1)
[[ "$out" == *"active as malloc and operator new"* ]] || fail "python3 did not run on mempool: $out"
[[ "$out" == *$'\n'488890 ]] || fail "python3 under mempool printed: $out"
out=$(LD_PRELOAD=$libdir/libmempool-malloc-hardened.so.0 MEMPOOL_VERBOSE=1 \
  python3 -c 'print(sum(len(str(i)) for i in range(100000)))' 2>&1)
[[ "$out" == *"in this process (hardened)"* ]] || fail "python3 did not run on hardened mempool: $out"
[[ "$out" == *$'\n'488890 ]] || fail "python3 under hardened mempool printed: $out"

apt-get purge -y -qq "${packages[@]}" >/dev/null
left=$(ls -d /usr/include/mempool "$libdir"/libmempool* "$libdir"/cmake/mempool \
  "$libdir"/pkgconfig/mempool*.pc 2>/dev/null || true)
[ -z "$left" ] || fail "left behind after purge: $left"
cache=$(ldconfig -p)
grep -q "libmempool" <<<"$cache" && fail "ldconfig still lists libmempool after purge"
echo "package test passed: ${debs[*]##*/}"
