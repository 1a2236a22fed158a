// run --profile -- CMD: the command once under a heap profiler that writes, as
// each of its processes exits, what it holds in the gperftools heap-profile
// text format (one file per process, OUT/profile/*.heap); then
// report/heap_profile.py symbolizes them (google-pprof) and writes the table
// of the top call sites and a flame graph of each. The profilers, and how each
// is asked for its profile, are in heap_profilers() alone.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "driver.hpp"
#include "process.hpp"

namespace mempool_bench {

namespace {

struct HeapProfiler {
  const char* allocator;          // as --allocators names it
  std::vector<const char*> libs;  // the library that has the profiler, to preload
  std::size_t default_rate;       // mean bytes between samples; 0: every allocation
  // The environment that makes the library write, at the exit of each
  // process, a profile of what it holds into DIR/*.heap (rate 0: its default).
  std::vector<std::string> (*env)(const std::string& dir, std::size_t rate);
};

// The longest line printed (the script's tables keep to it too).
constexpr std::size_t kLineWidth = 120;
// Never a dump of tcmalloc's on the way, only the one at exit (bytes).
constexpr const char* kNever = "4611686018427387904";

const std::vector<HeapProfiler>& heap_profilers() {
  static const std::vector<HeapProfiler> list = {
      // mempool's sampling profiler: DIR/heap.PID.heap, estimates scaled from the samples.
      {"mempool",
       {"libmempool-malloc.so"},
       524288,
       [](const std::string& dir, std::size_t rate) {
         std::vector<std::string> env = {"MEMPOOL_PROFILE=" + dir + "/heap.%p.heap"};
         if (rate != 0) env.push_back("MEMPOOL_PROFILE_RATE=" + std::to_string(rate));
         return env;
       }},
      // tcmalloc's (the full library; _minimal has none) records every allocation:
      // DIR/heap.0001.heap, and DIR/heap_PID.0001.heap from the processes it starts.
      {"tcmalloc",
       {"libtcmalloc.so.4", "libtcmalloc.so"},
       0,
       [](const std::string& dir, std::size_t /*rate*/) {
         return std::vector<std::string>{"HEAPPROFILE=" + dir + "/heap",
                                         std::string("HEAP_PROFILE_ALLOCATION_INTERVAL=") + kNever,
                                         std::string("HEAP_PROFILE_INUSE_INTERVAL=") + kNever};
       }},
  };
  return list;
}

const HeapProfiler* find_profiler(const std::string& allocator) {
  for (const HeapProfiler& p : heap_profilers())
    if (allocator == p.allocator) return &p;
  return nullptr;
}

const HeapProfiler& chosen_profiler(const Options& o) {
  return *find_profiler(o.allocators.empty() ? "mempool" : o.allocators.front());
}

bool is_profile_output(const std::filesystem::path& p) {
  return p.extension() == ".heap" || p.extension() == ".png" || p.filename() == "profile.md";
}

// The folder's profiles, tables and graphs of an earlier run go: what the
// script reads is this run's alone.
void clear_profile_dir(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file() && is_profile_output(entry.path()))
      std::filesystem::remove(entry.path());
}

std::size_t count_profiles(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    n += entry.is_regular_file() && entry.path().extension() == ".heap" ? 1 : 0;
  return n;
}

}  // namespace

std::string profile_options_problem(const Options& o) {
  if (!o.profile)
    return o.profile_rate != 0 ? "--profile-rate needs --profile (run --profile -- CMD)" : "";
  if (o.command != "run") return "only run takes --profile (run --profile -- CMD)";
  if (o.check_output) return "run --profile runs the command once: nothing to --check-output";
  std::string names;
  for (const HeapProfiler& p : heap_profilers())
    names += std::string(names.empty() ? "" : " or ") + p.allocator;
  if (o.allocators.size() > 1 || (o.allocators.size() == 1 && !find_profiler(o.allocators[0])))
    return "run --profile: --allocators names one allocator with a heap profiler: " + names;
  if (o.profile_rate != 0 && chosen_profiler(o).default_rate == 0)
    return std::string("--profile-rate: ") + chosen_profiler(o).allocator +
           "'s heap profiler records every allocation";
  return "";
}

int run_profile(const Options& o) {
  const HeapProfiler& profiler = chosen_profiler(o);
  AllocatorInfo info = *find_allocator(profiler.allocator);
  info.libs = profiler.libs;
  std::string library;
  std::string why;
  if (!locate_library(info, exe_dir(), &library, &why)) {
    std::fprintf(stderr, "mempool-bench: run --profile: %s\n", why.c_str());
    return 1;
  }
  const std::filesystem::path dir = std::filesystem::absolute(o.out) / "profile";
  try {
    clear_profile_dir(dir);
  } catch (const std::filesystem::filesystem_error& e) {
    std::fprintf(stderr, "mempool-bench: run --profile: %s\n", e.what());
    return 1;
  }
  const std::size_t rate = o.profile_rate != 0 ? o.profile_rate : profiler.default_rate;
  std::vector<std::string> env = profiler.env(dir.string(), o.profile_rate);
  for (const std::string& e : allocator_env(profiler.allocator))
    env.push_back(e);
  ProcessOptions options;
  options.env = environment_with(library, env);
  options.timeout_s = o.timeout;
  options.capture_stdout = false;
  const std::string command = command_line(o.run_command);
  std::string said = "profiling `" + command + "` under " + profiler.allocator + "'s heap profiler";
  if (said.size() > kLineWidth) said = said.substr(0, kLineWidth - 3) + "...";
  std::printf("%s\n", said.c_str());
  ProcessResult r;
  try {
    r = run_process(o.run_command, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mempool-bench: run --profile: %s\n", e.what());
    return 1;
  }
  if (!r.ok()) {
    std::fprintf(stderr, "mempool-bench: run --profile: %s\n",
                 failure_message(o.run_command, profiler.allocator, r).c_str());
    return 1;
  }
  if (count_profiles(dir) == 0) {
    std::fprintf(stderr,
                 "mempool-bench: run --profile: `%s` under %s wrote no heap profile into %s "
                 "(%s has no heap profiler, or the program left without exit())\n",
                 command.c_str(), profiler.allocator, dir.c_str(), library.c_str());
    return 1;
  }
  return exec_report_script("heap_profile.py",
                            {dir.string(), "--command", command, "--allocator", profiler.allocator,
                             "--rate", std::to_string(rate)});
}

}  // namespace mempool_bench
