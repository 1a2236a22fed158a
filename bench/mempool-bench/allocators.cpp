#include "allocators.hpp"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <deque>

namespace mempool_bench {

namespace {

std::vector<AllocatorInfo>& registry() {
  static std::vector<AllocatorInfo> list = {
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

// The names and paths of the given allocators (AllocatorInfo holds C strings): a deque
// does not move what it holds as it grows.
std::deque<std::string>& given_strings() {
  static std::deque<std::string> strings;
  return strings;
}

}  // namespace

const std::vector<AllocatorInfo>& all_allocators() {
  return registry();
}

std::string add_given_allocator(const std::string& name_and_path) {
  const std::size_t eq = name_and_path.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == name_and_path.size())
    return "--preload " + name_and_path + ": expected NAME=PATH";
  const std::string name = name_and_path.substr(0, eq);
  const std::string path = name_and_path.substr(eq + 1);
  for (const char c : name)
    if ((c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' && c != '.')
      return "--preload " + name_and_path + ": NAME may hold a-z, 0-9, '-', '_' and '.'";
  if (find_allocator(name) != nullptr)
    return "--preload " + name_and_path + ": " + name + " is an allocator already";
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr || ::access(resolved, R_OK) != 0)
    return "--preload " + name_and_path + ": no such library: " + path;
  std::deque<std::string>& strings = given_strings();
  const char* stored_name = strings.emplace_back(name).c_str();
  const char* stored_path = strings.emplace_back(resolved).c_str();
  const char* what = strings.emplace_back(std::string("preloaded from ") + resolved).c_str();
  AllocatorInfo a{stored_name, true, {stored_path}, "(given by --preload)", what};
  a.given = true;
  registry().push_back(a);
  return "";
}

std::string given_allocator_argument(std::string_view name) {
  const AllocatorInfo* a = find_allocator(name);
  if (a == nullptr || !a->given) return "";
  return std::string("--preload=") + a->name + "=" + a->libs.front();
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
  if (a.given) {                    // its path, checked when it was given
    *path = a.libs.front();
    return true;
  }
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
