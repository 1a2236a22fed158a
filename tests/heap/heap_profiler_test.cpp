// The heap profiler (src/heap/heap_profiler.cpp): its estimates by site, its
// profile file, and that sampled blocks behave as any other block (usable size,
// sized free, realloc, calloc, alignment), across threads and fork(). Each test
// runs in a fresh process, the profiler set up by the environment as a user would.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "support/test_support.hpp"

using mempool_test::kMiB;

// The allocation sites, found again in the profile by their names (the test program
// exports its symbols, so dladdr names them): extern "C", never inlined nor cloned.
extern "C" {
__attribute__((noipa)) void profiled_small_blocks(std::vector<void*>& out, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes / 64; ++i)
    out.push_back(mp_malloc(64));
}
__attribute__((noipa)) void profiled_large_blocks(std::vector<void*>& out, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes / kMiB; ++i)
    out.push_back(mp_malloc(kMiB));
}
__attribute__((noipa)) void profiled_inline_api(std::vector<void*>& out, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes / 48; ++i)
    out.push_back(mempool::allocate(48));  // the hit path inlined here (a constant size)
}
__attribute__((noipa)) void profiled_in_child(std::vector<void*>& out, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes / 256; ++i)
    out.push_back(mp_malloc(256));
}
// Not a tail call, so that the function is on the stack during the free.
__attribute__((noipa)) void profiled_free(void* p) {
  mp_free(p);
  asm volatile("" ::: "memory");
}
__attribute__((noipa)) void profiled_free_again(void* p) {
  mp_free(p);
  asm volatile("" ::: "memory");
}
__attribute__((noipa)) void profiled_peak_blocks(std::vector<void*>& out, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes / 1024; ++i)
    out.push_back(mp_malloc(1024));
}
__attribute__((noipa)) void profiled_in_thread(std::vector<void*>& out, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes / 128; ++i)
    out.push_back(mp_malloc(128));
}
}

namespace {

// One line of a profile: in use and allocated (estimates), and the function holding
// the first frame.
struct SiteLine {
  unsigned long long live_count = 0, live_bytes = 0, total_count = 0, total_bytes = 0;
  std::string function;
};

struct Profile {
  bool ok = false;
  unsigned long long live_bytes = 0, total_bytes = 0;  // the header's
  std::vector<SiteLine> sites;
  bool has_maps = false;
};

Profile read_profile(const std::string& path) {
  Profile p;
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return p;
  unsigned long long a = 0, b = 0, c = 0, d = 0;
  if (std::sscanf(line.c_str(), "heap profile: %llu: %llu [%llu: %llu] @ heapprofile", &a, &b, &c,
                  &d) != 4)
    return p;
  p.live_bytes = b;
  p.total_bytes = d;
  while (std::getline(in, line)) {
    if (line == "MAPPED_LIBRARIES:") {
      p.has_maps = true;
      break;
    }
    if (line.empty()) continue;
    SiteLine s;
    char at = 0;
    std::istringstream fields(line);
    char colon = 0, bracket = 0;
    fields >> s.live_count >> colon >> s.live_bytes >> bracket >> s.total_count >> colon >>
        s.total_bytes >> bracket >> at;
    std::string first;
    fields >> first;
    // The first frame is the call's address (the return address less 1).
    Dl_info info{};
    void* pc = reinterpret_cast<void*>(  // NOLINT(performance-no-int-to-ptr): an address read
        std::stoull(first, nullptr, 16));
    if (::dladdr(pc, &info) != 0 && info.dli_sname != nullptr) s.function = info.dli_sname;
    p.sites.push_back(s);
  }
  p.ok = true;
  return p;
}

// The sum over the lines whose first frame is in `function`.
SiteLine site_named(const Profile& p, const char* function) {
  SiteLine sum;
  sum.function = function;
  for (const SiteLine& s : p.sites) {
    if (s.function != function) continue;
    sum.live_count += s.live_count;
    sum.live_bytes += s.live_bytes;
    sum.total_count += s.total_count;
    sum.total_bytes += s.total_bytes;
  }
  return sum;
}

std::string profile_path(const char* name) {
  return ::testing::TempDir() + "mempool_profile_" + name + "_" + std::to_string(::getpid());
}

double relative_error(unsigned long long estimate, std::size_t truth) {
  return std::fabs(static_cast<double>(estimate) - static_cast<double>(truth)) /
         static_cast<double>(truth);
}

// The rate the estimate tests use. An estimate of B bytes in use rests on about B/R
// samples, a Poisson count: its relative standard deviation is sqrt(R/B). For 32 MiB
// at 16 KiB that is 1/sqrt(2048) = 2.2%, so the ±10% bound is 4.5 deviations (a false
// failure once in 10^5 runs). At the default rate (512 KiB) it would be 12%: the
// profile is a picture of where the memory is, not an exact count.
constexpr const char* kTestRate = "16384";
constexpr double kTolerance = 0.10;

[[noreturn]] void estimates_child() {
  ::setenv("MEMPOOL_PROFILE_RATE", kTestRate, 1);  // NOLINT(concurrency-mt-unsafe): one thread
  std::vector<void*> small, large, inline_api, freed;
  small.reserve(32 * kMiB / 64);
  inline_api.reserve(32 * kMiB / 48);
  freed.reserve(16 * kMiB / 64);
  profiled_small_blocks(small, 32 * kMiB);
  profiled_large_blocks(large, 24 * kMiB);
  profiled_inline_api(inline_api, 32 * kMiB / 48 * 48);
  // 16 MiB allocated and freed (sized, as C++ does): gone from what is in use.
  profiled_small_blocks(freed, 16 * kMiB);
  for (void* p : freed)
    mempool::deallocate(p, 64);
  const std::string path = profile_path("estimates");
  CHILD_CHECK(mempool::profile_dump(path.c_str()), "profile_dump: errno %d", errno);
  const Profile p = read_profile(path);
  ::unlink(path.c_str());
  CHILD_CHECK(p.ok && p.has_maps, "the profile does not parse");

  const SiteLine s = site_named(p, "profiled_small_blocks");
  // 48 MiB allocated there in all, 32 MiB still in use.
  CHILD_CHECK(relative_error(s.live_bytes, 32 * kMiB) <= kTolerance,
              "small blocks: %llu bytes in use estimated, 32 MiB true", s.live_bytes);
  CHILD_CHECK(relative_error(s.live_count, 32 * kMiB / 64) <= kTolerance,
              "small blocks: %llu in use estimated, %zu true", s.live_count, 32 * kMiB / 64);
  CHILD_CHECK(relative_error(s.total_bytes, 48 * kMiB) <= kTolerance,
              "small blocks: %llu bytes allocated estimated, 48 MiB true", s.total_bytes);
  // A block of 1 MiB is sampled with probability 1 - e^-64 at this rate: every one,
  // each standing for itself.
  const SiteLine l = site_named(p, "profiled_large_blocks");
  CHILD_CHECK(l.live_count == 24 && l.live_bytes == 24 * kMiB, "large blocks: %llu, %llu bytes",
              l.live_count, l.live_bytes);
  // The inline hit path (mempool::allocate of a constant size) counts too.
  const SiteLine i = site_named(p, "profiled_inline_api");
  CHILD_CHECK(relative_error(i.live_bytes, 32 * kMiB / 48 * 48) <= kTolerance,
              "inline API: %llu bytes in use estimated, 32 MiB true", i.live_bytes);
  // Nothing but these sites (and the vectors' few) allocated.
  CHILD_CHECK(relative_error(p.live_bytes, 88 * kMiB) <= kTolerance,
              "in all: %llu bytes in use estimated, 88 MiB true", p.live_bytes);
  for (void* q : small)
    mp_free(q);
  for (void* q : large)
    mp_free(q);
  for (void* q : inline_api)
    mempool::deallocate(q);
  ::_exit(0);
}

TEST(HeapProfiler, EstimatesTheBytesInUseBySite) {
  IN_FRESH_PROCESS(estimates_child());
}

// Every allocation sampled (a rate of 1 byte): each block is a span of its own, and
// must still behave as the block the program asked for.
[[noreturn]] void every_block_child() {
  ::setenv("MEMPOOL_PROFILE_RATE", "1", 1);  // NOLINT(concurrency-mt-unsafe): one thread
  void* warm = mp_malloc(100);               // the heap starts, options read
  mp_free(warm);
  void* p = mp_malloc(100);
  CHILD_CHECK(reinterpret_cast<std::uintptr_t>(p) % 8192 == 0, "%p is not a sample's own page", p);
  const std::size_t usable = mp_usable_size(p);
  // The class's size, as if not sampled (programs that count malloc_usable_size see
  // no difference), not the page's.
  CHILD_CHECK(usable >= 100 && usable < 256, "usable size %zu", usable);
  mempool_test::fill_pattern(p, 100, 1);
  // realloc keeps the bytes, to a small and to a large size.
  p = mp_realloc(p, 40);
  CHILD_CHECK(mempool_test::first_mismatch(p, 40, 1) == mempool_test::kNoMismatch,
              "realloc to 40 lost bytes");
  p = mp_realloc(p, 300000);
  CHILD_CHECK(mempool_test::first_mismatch(p, 40, 1) == mempool_test::kNoMismatch,
              "realloc to 300000 lost bytes");
  mp_free(p);
  auto* z = static_cast<unsigned char*>(mp_calloc(1000, 1));
  for (int i = 0; i < 1000; ++i)
    CHILD_CHECK(z[i] == 0, "calloc byte %d is %u", i, z[i]);
  mp_free(z);
  void* a = mp_aligned_alloc(4096, 100);
  CHILD_CHECK(reinterpret_cast<std::uintptr_t>(a) % 4096 == 0, "aligned_alloc gave %p", a);
  mp_free(a);
  // Sized frees of samples (the page map answers, not the size): many, then the blocks
  // allocated after them must be whole.
  std::vector<void*> blocks;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 2000; ++i) {
      blocks.push_back(mempool::allocate(64));
      mempool_test::fill_pattern(blocks.back(), 64, static_cast<std::uint64_t>(i));
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      CHILD_CHECK(mempool_test::first_mismatch(blocks[i], 64, i) == mempool_test::kNoMismatch,
                  "block %zu changed", i);
      mempool::deallocate(blocks[i], 64);
    }
    blocks.clear();
  }
  const std::string path = profile_path("every");
  CHILD_CHECK(mempool::profile_dump(path.c_str()), "profile_dump: errno %d", errno);
  const Profile prof = read_profile(path);
  ::unlink(path.c_str());
  // Nothing is in use but the vector's own buffer, which is not the heap's.
  CHILD_CHECK(prof.ok && prof.live_bytes == 0, "%llu bytes in use", prof.live_bytes);
  // Each sample stands for 1 / (1 - e^(-n)) blocks: 1 for every size here.
  CHILD_CHECK(prof.total_bytes == 2 * 100 + 40 + 300000 + 1000 + 100 + 3 * 2000 * 64,
              "%llu bytes allocated", prof.total_bytes);
  ::_exit(0);
}

TEST(HeapProfiler, SampledBlocksBehaveAsAnyBlock) {
  IN_FRESH_PROCESS(every_block_child());
}

// Threads allocate, hand their blocks to another thread, which frees them; thread
// churn; a fork whose child profiles itself into its own file (%p).
[[noreturn]] void threads_and_fork_child() {
  const std::string pattern = profile_path("fork") + "_%p";
  ::setenv("MEMPOOL_PROFILE_RATE", kTestRate, 1);   // NOLINT(concurrency-mt-unsafe): one thread
  ::setenv("MEMPOOL_PROFILE", pattern.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
  constexpr int kThreads = 8;
  constexpr std::size_t kPerThread = 8 * kMiB;
  std::vector<std::vector<void*>> kept(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&kept, t] { profiled_in_thread(kept[t], kPerThread); });
  for (std::thread& t : threads)
    t.join();
  threads.clear();
  // New threads free half of the blocks that threads now gone allocated.
  for (int t = 0; t < kThreads; t += 2) {
    threads.emplace_back([&kept, t] {
      for (void* p : kept[(t + 1) % kThreads])
        mp_free(p);
    });
  }
  for (std::thread& t : threads)
    t.join();

  const pid_t child = ::fork();
  if (child == 0) {
    std::vector<void*> mine;
    profiled_in_child(mine, 32 * kMiB);
    std::exit(0);  // NOLINT(concurrency-mt-unsafe): the exit dump, MEMPOOL_PROFILE with its pid
  }
  int status = 0;
  CHILD_CHECK(
      ::waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
      "the forked child failed: status %d", status);
  const std::string child_path = profile_path("fork") + "_" + std::to_string(child);
  const Profile c = read_profile(child_path);
  ::unlink(child_path.c_str());
  CHILD_CHECK(c.ok, "the child wrote no profile at %s", child_path.c_str());
  const SiteLine in_child = site_named(c, "profiled_in_child");
  CHILD_CHECK(relative_error(in_child.live_bytes, 32 * kMiB) <= kTolerance,
              "child: %llu bytes in use estimated, 32 MiB true", in_child.live_bytes);
  // Its peak profile beside it: the heap at its highest, 64 MiB (the threads' blocks
  // before half were freed, inherited; or those left and the child's), to within a
  // sixteenth.
  const std::string child_peak_path = child_path + ".peak";
  const Profile cp = read_profile(child_peak_path);
  ::unlink(child_peak_path.c_str());
  CHILD_CHECK(cp.ok, "the child wrote no peak profile at %s", child_peak_path.c_str());
  CHILD_CHECK(cp.live_bytes >= 64 * kMiB * (1 - 1.0 / 16 - kTolerance) &&
                  cp.live_bytes <= 64 * kMiB * (1 + kTolerance),
              "child at its peak: %llu bytes estimated, 60-64 MiB true", cp.live_bytes);
  const std::string path = profile_path("threads");
  CHILD_CHECK(mempool::profile_dump(path.c_str()), "profile_dump: errno %d", errno);
  const Profile p = read_profile(path);
  ::unlink(path.c_str());
  CHILD_CHECK(site_named(p, "profiled_in_child").total_bytes == 0,
              "the child's site in the parent");
  const SiteLine in_threads = site_named(p, "profiled_in_thread");
  CHILD_CHECK(relative_error(in_threads.total_bytes, kThreads * kPerThread) <= kTolerance,
              "threads: %llu bytes allocated estimated, 64 MiB true", in_threads.total_bytes);
  CHILD_CHECK(relative_error(in_threads.live_bytes, kThreads * kPerThread / 2) <= kTolerance,
              "threads: %llu bytes in use estimated, 32 MiB true", in_threads.live_bytes);
  ::_exit(0);
}

// The peak profile: 48 MiB allocated at one site and freed, then 32 MiB at another. The
// heap at its peak holds the first (to within a sixteenth: the last snapshot may lag the
// true peak by that much), the heap now only the second.
[[noreturn]] void peak_child() {
  ::setenv("MEMPOOL_PROFILE_RATE", kTestRate, 1);  // NOLINT(concurrency-mt-unsafe): one thread
  std::vector<void*> peak, after;
  peak.reserve(48 * kMiB / 1024);
  after.reserve(32 * kMiB / 64);
  profiled_peak_blocks(peak, 48 * kMiB);
  for (void* p : peak)
    mp_free(p);
  profiled_small_blocks(after, 32 * kMiB);
  const std::string at_peak_path = profile_path("peak");
  const std::string now_path = profile_path("now");
  CHILD_CHECK(mp_profile_dump_peak(at_peak_path.c_str()) == 0, "profile_dump_peak: errno %d",
              errno);
  CHILD_CHECK(mempool::profile_dump(now_path.c_str()), "profile_dump: errno %d", errno);
  const Profile at_peak = read_profile(at_peak_path);
  const Profile now = read_profile(now_path);
  ::unlink(at_peak_path.c_str());
  ::unlink(now_path.c_str());
  CHILD_CHECK(at_peak.ok && now.ok, "the profiles do not parse");
  const SiteLine big = site_named(at_peak, "profiled_peak_blocks");
  CHILD_CHECK(big.live_bytes >= 48 * kMiB * (1 - 1.0 / 16 - kTolerance) &&
                  big.live_bytes <= 48 * kMiB * (1 + kTolerance),
              "at the peak: %llu bytes estimated, 45-48 MiB true", big.live_bytes);
  CHILD_CHECK(site_named(at_peak, "profiled_small_blocks").live_bytes == 0,
              "the later site at the peak");
  // Every sample of the first site was freed: its estimate is exactly 0 again.
  CHILD_CHECK(site_named(now, "profiled_peak_blocks").live_bytes == 0, "the freed site now");
  const SiteLine small = site_named(now, "profiled_small_blocks");
  CHILD_CHECK(relative_error(small.live_bytes, 32 * kMiB) <= kTolerance,
              "now: %llu bytes estimated, 32 MiB true", small.live_bytes);
  for (void* p : after)
    mp_free(p);
  ::_exit(0);
}

TEST(HeapProfiler, PeakProfileHoldsTheHeapAtItsHighest) {
  IN_FRESH_PROCESS(peak_child());
}

// A profile the file refuses is a failed dump with the file's errno, not a short file
// reported written: /dev/full refuses every write with ENOSPC.
[[noreturn]] void full_device_child() {
  ::setenv("MEMPOOL_PROFILE_RATE", kTestRate, 1);  // NOLINT(concurrency-mt-unsafe): one thread
  std::vector<void*> small;
  profiled_small_blocks(small, 4 * kMiB);
  errno = 0;
  CHILD_CHECK(!mempool::profile_dump("/dev/full"), "profile_dump to /dev/full succeeded");
  CHILD_CHECK(errno == ENOSPC, "profile_dump to /dev/full: errno %d", errno);
  const int peak = mp_profile_dump_peak("/dev/full");
  CHILD_CHECK(peak == ENOSPC, "mp_profile_dump_peak to /dev/full: %d", peak);
  // And the profiler still writes where it can.
  const std::string path = profile_path("after_full");
  CHILD_CHECK(mempool::profile_dump(path.c_str()), "profile_dump: errno %d", errno);
  const Profile p = read_profile(path);
  ::unlink(path.c_str());
  CHILD_CHECK(p.ok && p.has_maps, "the profile does not parse");
  for (void* q : small)
    mp_free(q);
  ::_exit(0);
}

TEST(HeapProfiler, DumpToAFullDeviceFails) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full here";
  IN_FRESH_PROCESS(full_device_child());
}

TEST(HeapProfiler, ThreadsCrossThreadFreesAndFork) {
  IN_FRESH_PROCESS(threads_and_fork_child());
}

// google-pprof (Debian google-perftools), the reader the profile is for, names the site
// that holds the most first: 24 MiB in 1 MiB blocks against 4 MiB in 64-byte ones.
[[noreturn]] void pprof_child(const std::string& path) {
  ::setenv("MEMPOOL_PROFILE_RATE", kTestRate, 1);  // NOLINT(concurrency-mt-unsafe): one thread
  std::vector<void*> large, small;
  profiled_large_blocks(large, 24 * kMiB);
  profiled_small_blocks(small, 4 * kMiB);
  CHILD_CHECK(mempool::profile_dump(path.c_str()), "profile_dump: errno %d", errno);
  ::_exit(0);
}

TEST(HeapProfiler, PprofNamesTheLargestSiteFirst) {
  if (std::system("google-pprof --help >/dev/null 2>&1") != 0)  // NOLINT(cert-env33-c)
    GTEST_SKIP() << "google-pprof is not installed (Debian: google-perftools)";
  // The fresh process runs this test from its start: it takes the path from here.
  const char* given = std::getenv("MEMPOOL_TEST_PPROF_PATH");  // NOLINT(concurrency-mt-unsafe)
  const std::string path = given != nullptr ? given : profile_path("pprof");
  ::setenv("MEMPOOL_TEST_PPROF_PATH", path.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
  IN_FRESH_PROCESS(pprof_child(path));
  ::unsetenv("MEMPOOL_TEST_PPROF_PATH");  // NOLINT(concurrency-mt-unsafe)
  char self[4096] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof self - 1), 0);
  const std::string command = "google-pprof --text " + std::string(self) + " " + path + " 2>&1";
  std::FILE* out = ::popen(command.c_str(), "r");  // NOLINT(cert-env33-c)
  ASSERT_NE(out, nullptr);
  std::string text;
  char line[512];
  while (std::fgets(line, sizeof line, out) != nullptr)
    text += line;
  ::pclose(out);
  ::unlink(path.c_str());
  // "Total: 28.0 MB", then the sites by flat bytes, the largest first.
  const std::size_t total = text.find("Total:");
  ASSERT_NE(total, std::string::npos) << text;
  const std::size_t first = text.find('\n', total) + 1;
  const std::string top = text.substr(first, text.find('\n', first) - first);
  EXPECT_NE(top.find("profiled_large_blocks"), std::string::npos) << text;
}

// A misused sampled block: the one-line report, then the stacks that allocated it and
// (a double free) first freed it, named. Every block sampled here (a rate of 1).
TEST(HeapProfilerDeathTest, MisuseReportsSayWhere) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ::setenv("MEMPOOL_PROFILE_RATE", "1", 1);  // NOLINT(concurrency-mt-unsafe)
        std::vector<void*> blocks;
        profiled_small_blocks(blocks, 64);
        profiled_free(blocks[0]);
        profiled_free_again(blocks[0]);
      },
      "mempool: heap: [^\n]*double free[^\n]*\n"
      "mempool: heap: the block was allocated at:\n    #0 [^\n]*profiled_small_blocks[^\n]*\n"
      "(.*\n)*mempool: heap: and first freed at:\n    #0 [^\n]*profiled_free\\+");
  // A block in use: its allocation stack (an interior pointer's free).
  EXPECT_DEATH(
      {
        ::setenv("MEMPOOL_PROFILE_RATE", "1", 1);  // NOLINT(concurrency-mt-unsafe)
        std::vector<void*> blocks;
        profiled_large_blocks(blocks, kMiB);
        mp_free(static_cast<char*>(blocks[0]) + 64);
      },
      "middle of a block[^\n]*\n"
      "mempool: heap: the block was allocated at:\n    #0 [^\n]*profiled_large_blocks");
}

TEST(HeapProfiler, DumpFailsWhenOff) {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): no thread sets the environment
  if (std::getenv("MEMPOOL_PROFILE") != nullptr || std::getenv("MEMPOOL_PROFILE_RATE") != nullptr)
    GTEST_SKIP() << "the profiler is on in this environment";
  errno = 0;
  EXPECT_FALSE(mempool::profile_dump("/dev/null"));
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(mp_profile_dump("/dev/null"), EINVAL);
  EXPECT_FALSE(mempool::profile_dump_peak("/dev/null"));
  EXPECT_EQ(mp_profile_dump_peak("/dev/null"), EINVAL);
}

}  // namespace
