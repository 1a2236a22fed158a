// SizeClassPool against new/delete and std::pmr::synchronized_pool_resource on
// the bucketed-pool workload of issue 3 (a plain program, not Google Benchmark).
//
// Workload, per thread: `rounds` (100) rounds of `iterations` (10,000)
// iterations. An iteration of "small" allocates objects of 4, 20, 40 and 80
// bytes, then frees the four; one of "large" allocates a 1024-byte object, then
// frees it. Every object has its first and last byte written and its pointer
// passed through benchmark::DoNotOptimize (which also clobbers memory) before it
// is freed. With N threads (1, 2, 4, 8) every thread runs the whole workload on
// the same allocator; the time is the wall time (std::chrono::steady_clock) from
// the moment all threads have reached a barrier to the moment all have been
// joined. One thread runs on the process's main thread (no thread is created).
//
// Allocators, all seen through allocate(n) and deallocate(p, n):
//   NewDelete         ::operator new(n), sized ::operator delete(p, n) (glibc)
//   SizeClassPool     mempool::SizeClassPool::global()
//   SynchronizedPool  one std::pmr::synchronized_pool_resource (default options)
//                     shared by all threads; alignof(std::max_align_t)
//   NoAllocatorFloor  no allocator: the loop, the writes and DoNotOptimize on
//                     per-thread buffers (the best any allocator could do; no target)
// Built with -fno-allocation-dce so that GCC cannot delete the new/delete pairs.
//
// Isolation: every measurement runs in a fresh process (this program re-executed
// from /proc/self/exe with --child), so none inherits another's heap, and glibc's
// malloc, which takes slower (locked, atomic) paths for good once a process has
// created a second thread, is at its best in every 1-thread run. Repetitions are
// interleaved (the whole sweep of kinds x threads x allocators once, then again),
// so a burst of load elsewhere on the machine hits one repetition of every
// configuration rather than every repetition of one; bench/summarize.py takes the
// medians and prints the ratio table.
//
//   size_class_benchmark [--rounds N] [--iterations N] [--repetitions N]
//                        [--threads 1,2,4,8] [--kinds small,large] [--out FILE]
//   size_class_benchmark --child ALLOCATOR KIND THREADS --rounds N --iterations N
//
// The parent prints one line per measurement and writes a JSON document to
// --out (default: size_class.json): the context (date, CPUs, load averages at
// start and end, workload) and every run with its wall time and the CPU time its
// process used over the same interval (all threads, user + system: a busy machine
// shows as CPU/wall below min(threads, CPUs)). The default run takes 35 to 50 s
// on 2 cores; scripts/bench --quick passes --rounds 10 --repetitions 3 (a few
// seconds).
#include <benchmark/benchmark.h>
#include <gnu/libc-version.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory_resource>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_args.hpp"
#include "mempool/size_class_pool.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kSmallSizes[] = {4, 20, 40, 80};
constexpr std::size_t kSmallCount = std::size(kSmallSizes);
static_assert(kSmallCount == 4, "run_small names the four sizes");
constexpr std::size_t kLargeSize = 1024;

constexpr const char* kAllocators[] = {"NewDelete", "SizeClassPool", "SynchronizedPool",
                                       "NoAllocatorFloor"};
constexpr const char* kKinds[] = {"small", "large"};

// The first and last byte written, the pointer escaped; the same for every allocator.
inline void touch(void* p, std::size_t n, unsigned char v) {
  auto* b = static_cast<unsigned char*>(p);
  b[0] = v;
  b[n - 1] = v;
  benchmark::DoNotOptimize(b);
}

struct NewDelete {
  void* allocate(std::size_t n) { return ::operator new(n); }
  void deallocate(void* p, std::size_t n) { ::operator delete(p, n); }
};

struct SizeClass {
  mempool::SizeClassPool* pool;
  void* allocate(std::size_t n) { return pool->allocate(n); }
  void deallocate(void* p, std::size_t n) { pool->deallocate(p, n); }
};

struct Synchronized {
  std::pmr::synchronized_pool_resource* resource;
  void* allocate(std::size_t n) { return resource->allocate(n, alignof(std::max_align_t)); }
  void deallocate(void* p, std::size_t n) { resource->deallocate(p, n, alignof(std::max_align_t)); }
};

// Each thread's own buffer, a slot per size; deallocate() does nothing.
struct Floor {
  alignas(64) unsigned char slots[kSmallCount][kLargeSize];
  void* allocate(std::size_t n) {
    return slots[n <= kSmallSizes[0] ? 0 : n <= kSmallSizes[1] ? 1 : n <= kSmallSizes[2] ? 2 : 3];
  }
  void deallocate(void* p, std::size_t /*n*/) { benchmark::DoNotOptimize(p); }
};

// One object of N bytes: allocated, written, escaped.
template <std::size_t N, class A>
[[gnu::always_inline]] inline void* make(A& alloc, unsigned char v) {
  void* p = alloc.allocate(N);
  touch(p, N, v);
  return p;
}

// One iteration of "small": the four objects allocated in turn, then freed in
// the same order. Written out per size (a pack expansion), so every size is a
// constant, as in `new T`, whatever the compiler's unrolling heuristics; any
// allocator inlined here may fold its size computation.
template <class A, std::size_t... N>
[[gnu::always_inline]] inline void small_iteration(A& alloc, unsigned char v) {
  void* p[] = {make<N>(alloc, v)...};  // braced lists evaluate left to right
  std::size_t k = 0;
  (alloc.deallocate(p[k++], N), ...);
}

// One thread's whole workload on its own copy of the allocator handle (nothing
// the threads share is written but the allocator's own state).
template <class A>
void run_small(A& alloc, std::size_t rounds, std::size_t iterations) {
  for (std::size_t r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < iterations; ++i) {
      small_iteration<A, kSmallSizes[0], kSmallSizes[1], kSmallSizes[2], kSmallSizes[3]>(
          alloc, static_cast<unsigned char>(i));
    }
  }
}

template <class A>
void run_large(A& alloc, std::size_t rounds, std::size_t iterations) {
  for (std::size_t r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < iterations; ++i)
      alloc.deallocate(make<kLargeSize>(alloc, static_cast<unsigned char>(i)), kLargeSize);
  }
}

// CPU time of the whole process (all its threads), user and system.
std::int64_t process_cpu_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct Times {
  std::int64_t wall_ns;
  std::int64_t cpu_ns;
};

// Wall and process CPU nanoseconds for `threads` threads each running the
// workload on `shared`.
template <class A>
Times measure(const A& shared, bool small, int threads, std::size_t rounds,
              std::size_t iterations) {
  const auto body = [&] {
    A local = shared;
    if (small) {
      run_small(local, rounds, iterations);
    } else {
      run_large(local, rounds, iterations);
    }
  };
  Clock::time_point start;
  std::int64_t cpu_start = 0;
  const auto elapsed = [&] {
    const std::int64_t cpu_end = process_cpu_ns();
    return Times{std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(),
                 cpu_end - cpu_start};
  };
  if (threads == 1) {
    cpu_start = process_cpu_ns();
    start = Clock::now();
    body();
    return elapsed();
  }
  // The completion step runs once every thread has arrived, before any is released.
  std::barrier sync(threads, [&]() noexcept {
    cpu_start = process_cpu_ns();
    start = Clock::now();
  });
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      sync.arrive_and_wait();
      body();
    });
  }
  for (std::thread& t : pool)
    t.join();
  return elapsed();
}

Times run_child(std::string_view allocator, bool small, int threads, std::size_t rounds,
                std::size_t iterations) {
  if (allocator == "NewDelete") {
    return measure(NewDelete{}, small, threads, rounds, iterations);
  }
  if (allocator == "SizeClassPool") {
    return measure(SizeClass{&mempool::SizeClassPool::global()}, small, threads, rounds,
                   iterations);
  }
  if (allocator == "SynchronizedPool") {
    std::pmr::synchronized_pool_resource resource;
    return measure(Synchronized{&resource}, small, threads, rounds, iterations);
  }
  if (allocator == "NoAllocatorFloor") {
    return measure(Floor{}, small, threads, rounds, iterations);
  }
  return Times{-1, -1};
}

[[noreturn]] void usage_error(const char* what) {
  std::fprintf(stderr,
               "size_class_benchmark: %s\n"
               "usage: size_class_benchmark [--rounds N] [--iterations N] [--repetitions N]\n"
               "           [--threads 1,2,4,8] [--kinds small,large] [--out FILE]\n",
               what);
  std::exit(2);
}

std::size_t parse_count(const char* s) {
  if (const auto v = mempool_bench::parse_positive(s)) return *v;
  usage_error("expected a positive number");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= s.size()) {
    const std::size_t comma = s.find(',', begin);
    const std::size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > begin) out.push_back(s.substr(begin, end - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

struct Options {
  std::size_t rounds = 100;
  std::size_t iterations = 10'000;
  std::size_t repetitions = 5;
  std::vector<int> threads = {1, 2, 4, 8};
  std::vector<std::string> kinds = {"small", "large"};
  std::string out = "size_class.json";
};

struct Run {
  std::string kind;
  int threads;
  std::string allocator;
  std::size_t repetition;
  std::int64_t wall_ns;
  std::int64_t cpu_ns;
};

// Runs one measurement in a fresh copy of this program; false if it failed.
bool spawn_child(const Options& o, const std::string& allocator, const std::string& kind,
                 int threads, Run& run) {
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("size_class_benchmark: pipe");
    return false;
  }
  const std::string threads_text = std::to_string(threads);
  const std::string rounds_text = std::to_string(o.rounds);
  const std::string iterations_text = std::to_string(o.iterations);
  const char* args[] = {"size_class_benchmark",  "--child",  allocator.c_str(),   kind.c_str(),
                        threads_text.c_str(),    "--rounds", rounds_text.c_str(), "--iterations",
                        iterations_text.c_str(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr,
                             const_cast<char* const*>(args), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    std::fprintf(stderr, "size_class_benchmark: cannot run /proc/self/exe: %s\n",
                 std::strerror(rc));
    return false;
  }
  std::string text;
  char buf[256];
  for (;;) {
    const ssize_t got = read(fds[0], buf, sizeof buf);
    if (got > 0) {
      text.append(buf, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      std::perror("size_class_benchmark: waitpid");
      return false;
    }
  }
  const char* wall = std::strstr(text.c_str(), "wall_ns=");
  const char* cpu = std::strstr(text.c_str(), "cpu_ns=");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || wall == nullptr || cpu == nullptr) {
    std::fprintf(stderr, "size_class_benchmark: %s %s %d threads failed (%s %d)\n",
                 allocator.c_str(), kind.c_str(), threads,
                 WIFSIGNALED(status) ? "signal" : "exit status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    return false;
  }
  run = Run{kind,
            threads,
            allocator,
            0,
            std::strtoll(wall + 8, nullptr, 10),
            std::strtoll(cpu + 7, nullptr, 10)};
  return true;
}

std::string load_average() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return "null";
  char text[64];
  std::snprintf(text, sizeof text, "[%.2f, %.2f, %.2f]", load[0], load[1], load[2]);
  return text;
}

bool write_json(const Options& o, const std::vector<Run>& runs, const std::string& date,
                const std::string& load_start, const std::string& load_end, double seconds) {
  std::FILE* f = std::fopen(o.out.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "size_class_benchmark: cannot write %s: %s\n", o.out.c_str(),
                 std::strerror(errno));
    return false;
  }
  std::fprintf(f, "{\n  \"benchmark\": \"size_class_benchmark\",\n  \"context\": {\n");
  std::fprintf(f, "    \"date\": \"%s\",\n", date.c_str());
  std::fprintf(f, "    \"num_cpus\": %u,\n", std::thread::hardware_concurrency());
  std::fprintf(f, "    \"load_avg_start\": %s,\n", load_start.c_str());
  std::fprintf(f, "    \"load_avg_end\": %s,\n", load_end.c_str());
  std::fprintf(f, "    \"seconds\": %.1f,\n", seconds);
  std::fprintf(f, "    \"compiler\": \"%s\",\n", __VERSION__);
  std::fprintf(f, "    \"glibc\": \"%s\",\n", gnu_get_libc_version());
  std::fprintf(f, "    \"rounds\": %zu,\n", o.rounds);
  std::fprintf(f, "    \"iterations\": %zu,\n", o.iterations);
  std::fprintf(f, "    \"repetitions\": %zu,\n", o.repetitions);
  std::fprintf(f, "    \"small_sizes\": [4, 20, 40, 80],\n");
  std::fprintf(f, "    \"large_size\": %zu,\n", kLargeSize);
  std::fprintf(f, "    \"isolation\": \"one process per measurement\"\n  },\n");
  std::fprintf(f, "  \"runs\": [\n");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    std::fprintf(f,
                 "    {\"kind\": \"%s\", \"threads\": %d, \"allocator\": \"%s\", "
                 "\"repetition\": %zu, \"wall_ns\": %lld, \"cpu_ns\": %lld}%s\n",
                 r.kind.c_str(), r.threads, r.allocator.c_str(), r.repetition,
                 static_cast<long long>(r.wall_ns), static_cast<long long>(r.cpu_ns),
                 i + 1 < runs.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  return std::fclose(f) == 0;
}

int parent(const Options& o) {
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&now));
  const std::string load_start = load_average();
  const auto started = Clock::now();
  std::printf(
      "size_class_benchmark: %zu rounds x %zu iterations per thread, %zu repetitions, "
      "one process per measurement; load average at start %s\n",
      o.rounds, o.iterations, o.repetitions, load_start.c_str());
  std::vector<Run> runs;
  for (std::size_t rep = 0; rep < o.repetitions; ++rep) {
    for (const std::string& kind : o.kinds) {
      for (int threads : o.threads) {
        for (const char* allocator : kAllocators) {
          Run run;
          if (!spawn_child(o, allocator, kind, threads, run)) return 1;
          run.repetition = rep;
          std::printf("rep %zu/%zu  %-5s %d thread%s  %-16s  wall %9.2f ms  cpu %9.2f ms\n",
                      rep + 1, o.repetitions, kind.c_str(), threads, threads == 1 ? " " : "s",
                      allocator, static_cast<double>(run.wall_ns) / 1e6,
                      static_cast<double>(run.cpu_ns) / 1e6);
          std::fflush(stdout);
          runs.push_back(run);
        }
      }
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const std::string load_end = load_average();
  std::printf("done in %.1f s; load average at end %s; JSON: %s\n", seconds, load_end.c_str(),
              o.out.c_str());
  return write_json(o, runs, date, load_start, load_end, seconds) ? 0 : 1;
}

bool known(std::string_view name, const auto& names) {
  for (const char* n : names) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const char* child_allocator = nullptr;
  const char* child_kind = nullptr;
  int child_threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error("an option lacks its value");
      return argv[++i];
    };
    if (a == "--child") {
      if (i + 3 >= argc) usage_error("--child ALLOCATOR KIND THREADS");
      child_allocator = argv[++i];
      child_kind = argv[++i];
      child_threads = static_cast<int>(parse_count(argv[++i]));
    } else if (a == "--rounds") {
      o.rounds = parse_count(value());
    } else if (a == "--iterations") {
      o.iterations = parse_count(value());
    } else if (a == "--repetitions") {
      o.repetitions = parse_count(value());
    } else if (a == "--threads") {
      o.threads.clear();
      for (const std::string& t : split(value()))
        o.threads.push_back(static_cast<int>(parse_count(t.c_str())));
      if (o.threads.empty()) usage_error("--threads needs at least one count");
    } else if (a == "--kinds") {
      o.kinds = split(value());
      for (const std::string& k : o.kinds) {
        if (!known(k, kKinds)) usage_error("--kinds takes small and/or large");
      }
      if (o.kinds.empty()) usage_error("--kinds needs at least one kind");
    } else if (a == "--out") {
      o.out = value();
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: size_class_benchmark [--rounds N] [--iterations N] [--repetitions N]\n"
          "           [--threads 1,2,4,8] [--kinds small,large] [--out FILE]\n"
          "defaults: 100 rounds x 10000 iterations per thread, 5 repetitions, "
          "threads 1,2,4,8, kinds small,large, out size_class.json\n");
      return 0;
    } else {
      usage_error("unknown argument");
    }
  }
  if (child_allocator == nullptr) return parent(o);

  if (!known(child_allocator, kAllocators)) usage_error("unknown allocator");
  if (!known(child_kind, kKinds)) usage_error("unknown kind");
  const Times t = run_child(child_allocator, std::string_view(child_kind) == "small", child_threads,
                            o.rounds, o.iterations);
  std::printf("wall_ns=%lld cpu_ns=%lld\n", static_cast<long long>(t.wall_ns),
              static_cast<long long>(t.cpu_ns));
  return 0;
}
