#include "allocators.hpp"

#include <unistd.h>

namespace mempool_bench {

const std::vector<AllocatorInfo>& all_allocators() {
  static const std::vector<AllocatorInfo> list = {
      {"glibc", true, {}, "libc6", "glibc's malloc, as the system has it"},
      {"mimalloc", true, {"libmimalloc.so.2", "libmimalloc.so"}, "libmimalloc-dev", "mimalloc"},
      {"jemalloc", true, {"libjemalloc.so.2", "libjemalloc.so"}, "libjemalloc-dev", "jemalloc"},
      // The peers' opt-in huge pages: jemalloc asks for them (madvise) for its
      // extents and its metadata. Run where a workload asks (bigheap, redis-bigheap).
      {"jemalloc-thp",
       true,
       {"libjemalloc.so.2", "libjemalloc.so"},
       "libjemalloc-dev",
       "jemalloc with MALLOC_CONF=thp:always,metadata_thp:always (huge pages)",
       false,
       {"MALLOC_CONF=thp:always,metadata_thp:always"}},
      {"tcmalloc",
       true,
       {"libtcmalloc_minimal.so.4", "libtcmalloc.so.4"},
       "libgoogle-perftools-dev",
       "tcmalloc (gperftools)"},
      {"mempool",
       true,
       {"libmempool-malloc.so"},
       "(this build)",
       "mempool as malloc: libmempool-malloc.so"},
      // mempool's heap as before issue 26: no transparent huge pages.
      {"mempool-thp-never",
       true,
       {"libmempool-malloc.so"},
       "(this build)",
       "mempool as malloc with MEMPOOL_THP=never (no huge pages)",
       false,
       {"MEMPOOL_THP=never"}},
      // The heap profiler on at its default rate, no dump: its cost (issue 28).
      {"mempool-profile",
       true,
       {"libmempool-malloc.so"},
       "(this build)",
       "mempool as malloc with the heap profiler on (MEMPOOL_PROFILE_RATE=512K): only when "
       "asked for by --allocators",
       false,
       {"MEMPOOL_PROFILE_RATE=524288"}},
      {"mempool-hardened",
       true,
       {"libmempool-malloc-hardened.so"},
       "(this build)",
       "mempool as malloc, hardened (docs/options.md): only when asked for by --allocators",
       false},
      // The hit paths through the thread cache's address, not a %fs: prefix: as fast on
      // the Intel Xeon measured, slower on the AMD EPYCs (docs/options.md,
      // MEMPOOL_TLS_POINTER). Run both on a new CPU to choose.
      {"mempool-tls-pointer",
       true,
       {"libmempool-malloc-tls-pointer.so"},
       "(this build)",
       "mempool as malloc, its thread cache through a pointer "
       "(libmempool-malloc-tls-pointer.so, docs/options.md): only when asked for by --allocators",
       false},
      // malloc linked into the program rather than preloaded (bench/mempool-bench/CMakeLists.txt):
      // the form a program gets from mempool::override, or from a peer's static archive.
      {"mempool-linked",
       true,
       {},
       "(this build)",
       "mempool as malloc linked into the program (mempool::override, run as "
       "mempool-bench-linked): only when asked for by --allocators",
       false,
       {},
       "mempool-bench-linked"},
      {"jemalloc-linked",
       true,
       {"libjemalloc.a"},
       "libjemalloc-dev",
       "jemalloc's static archive linked into the program (mempool-bench-jemalloc-linked): "
       "only when asked for by --allocators",
       false,
       {},
       "mempool-bench-jemalloc-linked"},
      {"tcmalloc-linked",
       true,
       {"libtcmalloc_minimal.a"},
       "libgoogle-perftools-dev",
       "tcmalloc's static archive linked into the program (mempool-bench-tcmalloc-linked): "
       "only when asked for by --allocators",
       false,
       {},
       "mempool-bench-tcmalloc-linked"},
      {"mempool-heap", false, {}, "", "mempool::allocate / deallocate, in process"},
      {"object-pool", false, {}, "", "mempool::FixedPool (one thread, one size), in process"},
      {"bitmap-pool", false, {}, "", "mempool::BitmapPool (one size, fixed capacity), in process"},
      {"size-class-pool", false, {}, "", "mempool::SizeClassPool::global(), sized free"},
      {"std-pmr", false, {}, "", "std::pmr::synchronized_pool_resource, in process"},
  };
  return list;
}

const AllocatorInfo* find_allocator(std::string_view name) {
  for (const AllocatorInfo& a : all_allocators())
    if (name == a.name) return &a;
  return nullptr;
}

std::vector<std::string> allocator_env(std::string_view name) {
  const AllocatorInfo* a = find_allocator(name);
  if (a == nullptr) return {};
  return {a->env.begin(), a->env.end()};
}

bool locate_library(const AllocatorInfo& a, const std::string& exe_dir, std::string* path,
                    std::string* why) {
  path->clear();
  if (a.program != nullptr && ::access((exe_dir + "/" + a.program).c_str(), X_OK) != 0) {
    *why = std::string(a.program) + " not built next to mempool-bench" +
           (std::string_view(a.package) == "(this build)"
                ? std::string()
                : std::string(" (it needs ") + a.libs.front() + "; Debian: apt-get install " +
                      a.package + ")");
    return false;
  }
  if (a.libs.empty()) return true;  // glibc, or in process: nothing to preload
  std::vector<std::string> dirs = {"/usr/lib/x86_64-linux-gnu",
                                   "/lib/x86_64-linux-gnu",
                                   "/usr/lib/aarch64-linux-gnu",
                                   "/usr/lib64",
                                   "/usr/lib",
                                   "/usr/local/lib"};
  // mempool's own libraries: beside the tool, or one folder up in a build tree.
  const bool ours = std::string_view(a.package) == "(this build)";
  if (ours) dirs = {exe_dir, exe_dir + "/..", exe_dir + "/../lib"};
  for (const char* lib : a.libs) {
    for (const std::string& d : dirs) {
      const std::string candidate = d + "/" + lib;
      if (::access(candidate.c_str(), R_OK) == 0) {
        char resolved[4096];
        *path = ::realpath(candidate.c_str(), resolved) != nullptr ? resolved : candidate;
        return true;
      }
    }
  }
  *why = std::string("not installed (none of ") + a.libs.front() +
         "... found; Debian: apt-get install " + a.package + ")";
  if (ours) *why = std::string(a.libs.front()) + " not built next to mempool-bench";
  return false;
}

}  // namespace mempool_bench
