// The workload registry and what the workloads share.
#include "process.hpp"
#include "workloads.hpp"

#include <cstdio>
#include <thread>

namespace mempool_bench {

namespace {

std::vector<int> one_thread() {
  return {1};
}
std::vector<int> one_and_all_cores() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return cores > 1 ? std::vector<int>{1, cores} : std::vector<int>{1};
}
std::vector<int> rounds_threads() {
  return {1, 2, 4, 8};
}
// scaling: 1, 2, 4, ... and twice the cores (the last even if not a power of two).
std::vector<int> scaling_threads() {
  const int top = 2 * std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<int> out;
  for (int t = 1; t < top; t *= 2)
    out.push_back(t);
  out.push_back(top);
  return out;
}
// server, handoff, xmalloc and larson: blocks cross threads, so at least 2; then
// 4x the cores.
std::vector<int> crossing_threads() {
  const int cores = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  return {cores, 4 * cores};
}
std::vector<int> no_threads() {
  return {};
}
std::vector<std::string> bigheap_allocators(const RunSpec& /*c*/) {
  return huge_page_allocators();
}

// compare: 4, 64 and 4096 bytes, and mixed 8-256 bytes, unless --size or
// --size-dist narrows it.
std::vector<RunSpec> compare_cases(const RunSpec& given) {
  if (given.size != 0 || given.mixed) return {given};
  std::vector<RunSpec> out;
  for (std::size_t n : {4, 64, 4096}) {
    RunSpec s = given;
    s.size = n;
    out.push_back(s);
  }
  RunSpec mixed = given;
  mixed.mixed = true;
  mixed.size = 256;
  out.push_back(mixed);
  return out;
}

// rounds: small (4, 20, 40, 80 B: "mixed") and large (1 KiB), unless --size or
// --size-dist picks one.
std::vector<RunSpec> rounds_cases(const RunSpec& given) {
  if (given.size != 0 || given.mixed) return {given};
  RunSpec small = given;
  small.mixed = true;
  RunSpec large = given;
  large.size = 1024;
  return {small, large};
}

// bigbuffers: the old buffer freed before its replacement is allocated, and after
// it (as `buf = std::make_unique<char[]>(n)` does), unless --replace picks one.
std::vector<RunSpec> bigbuffers_cases(const RunSpec& given) {
  if (!given.replace.empty()) return {given};
  RunSpec free_first = given;
  free_first.replace = "free-first";
  RunSpec new_first = given;
  new_first.replace = "new-first";
  return {free_first, new_first};
}

}  // namespace

const std::vector<WorkloadInfo>& all_workloads() {
  static const std::vector<WorkloadInfo> list = {
      {"rounds", "T threads x R rounds x K iterations of 4, 20, 40, 80 B (small) or 1 KiB (large)",
       run_rounds, rounds_threads, rounds_cases},
      {"queue", "a message pipeline: T producers and T consumers, 64-slot queue, 64 B messages",
       run_queue, one_thread, nullptr},
      {"compare",
       "allocate then free at once: 4, 64, 4096 B and mixed 8-256 B; 1 thread and all cores",
       run_compare, one_and_all_cores, compare_cases},
      {"throughput",
       "fixed or mixed sizes, immediate free or a window of live blocks, for --seconds",
       run_throughput, one_thread, nullptr},
      {"micro", "Single, Bulk and Churn of 24 B objects (Google Benchmark)", run_micro, no_threads,
       nullptr},
      {"prodcons", "one thread allocates 64 B, another frees: ops/s and resident memory",
       run_prodcons, no_threads, nullptr},
      {"fragmentation", "bursts of random sizes and lifetimes: peak resident vs peak live bytes",
       run_fragmentation, no_threads, nullptr},
      {"churn", "short-lived threads allocate and free, then exit: resident memory after",
       run_churn, no_threads, nullptr},
      {"scaling", "throughput over 1, 2, 4, ... 2x the cores", run_scaling, scaling_threads,
       nullptr},
      {"bigbuffers", "20 live buffers of 5-25 MiB, one replaced by a new zero-filled one at a time",
       run_bigbuffers, no_threads, bigbuffers_cases},
      {"bigheap",
       "a 275 MiB hash table of 3 M keys (48 B nodes and values), then 10 M random lookups",
       run_bigheap, no_threads, nullptr, true, bigheap_allocators},
      {"server", "Larson-style: threads replace random blocks (8-1000 B) in a shared array",
       run_server, crossing_threads, nullptr},
      {"handoff", "16 B-16 KiB in per-thread windows, every other block freed by the next thread",
       run_handoff, crossing_threads, nullptr},
      {"xmalloc", "many-to-one: half the threads allocate 16-128 B, the other half free them",
       run_xmalloc, crossing_threads, nullptr},
      {"larson",
       "Larson: random 8-1000 B blocks replaced in per-thread slots; new threads take over",
       run_larson, crossing_threads, nullptr},
      {"tree", "a Barnes-Hut step: an octree of 65,536 bodies built, walked and freed, 1 thread",
       run_tree, no_threads, nullptr},
      {"cache-thrash", "allocator-induced false sharing: each thread writes its own 8 B blocks",
       run_cache_thrash, one_and_all_cores, nullptr},
      {"cache-scratch", "cache-thrash, each thread first freeing a block the main thread allocated",
       run_cache_scratch, one_and_all_cores, nullptr},
      {"apps",
       "real programs: redis-server under redis-benchmark (1 and 16 in flight; 1 M keys), "
       "CPython, sqlite3, g++",
       run_apps, no_threads, app_cases, true, app_extra_allocators},
      {"run", "any command: mempool-bench run -- CMD ARGS... (time and peak RSS)", run_command,
       no_threads, nullptr, true},
  };
  return list;
}

const WorkloadInfo* find_workload(const std::string& name) {
  for (const WorkloadInfo& w : all_workloads())
    if (name == w.name) return &w;
  return nullptr;
}

std::vector<std::string> huge_page_allocators() {
  return {"jemalloc-thp", "mempool-thp-never"};
}

nlohmann::json program_metrics(const ProcessResult& r) {
  return {{"wall_s", r.wall_s},
          {"cpu_s", r.cpu_s},
          {"peak_rss_kib", r.peak_rss_kib},
          {"minor_faults", r.minor_faults},
          {"anon_huge_kib", nullptr}};
}

nlohmann::json timing_metrics(const Timing& t, std::uint64_t total_ops, int threads) {
  const double wall_s = static_cast<double>(t.wall_ns) * 1e-9;
  const double per_thread = static_cast<double>(total_ops) / threads;
  return {{"ops", total_ops},
          {"wall_s", wall_s},
          {"cpu_s", static_cast<double>(t.cpu_ns) * 1e-9},
          {"ns_per_op", per_thread > 0 ? static_cast<double>(t.wall_ns) / per_thread : 0.0},
          {"ops_per_s", wall_s > 0 ? static_cast<double>(total_ops) / wall_s : 0.0},
          {"peak_rss_kib", peak_rss_kib()},
          {"rss_before_kib", t.rss_before_kib}};
}

nlohmann::json latency_json(const LatencyHistogram& h) {
  return {{"avg", h.mean()},           {"p50", h.percentile(0.50)},   {"p95", h.percentile(0.95)},
          {"p99", h.percentile(0.99)}, {"p999", h.percentile(0.999)}, {"max", h.max()},
          {"samples", h.count()}};
}

SizeSequence::SizeSequence(const RunSpec& spec, std::size_t low, std::size_t high, bool log_uniform,
                           std::uint64_t seed)
    : sizes_(kLength) {
  Random rng(seed);
  for (std::uint32_t& s : sizes_) {
    std::size_t n = spec.size;
    if (spec.mixed) {
      if (log_uniform) {
        // A power of two between low and high, then uniform inside it.
        const unsigned lo = 63 - static_cast<unsigned>(__builtin_clzll(low));
        const unsigned hi = 63 - static_cast<unsigned>(__builtin_clzll(high));
        const unsigned e = lo + static_cast<unsigned>(rng.next() % (hi - lo + 1));
        const std::size_t base = std::size_t{1} << e;
        n = base + rng.next() % base;
        n = n < low ? low : (n > high ? high : n);
      } else {
        n = rng.between(low, high);
      }
    }
    s = static_cast<std::uint32_t>(n);
  }
}

std::string bytes_text(std::size_t n) {
  char buf[32];
  if (constexpr std::size_t kMiB = std::size_t{1} << 20; n >= kMiB && n % kMiB == 0) {
    std::snprintf(buf, sizeof buf, "%zu MiB", n >> 20);
  } else if (n >= 1024 && n % 1024 == 0) {
    std::snprintf(buf, sizeof buf, "%zu KiB", n >> 10);
  } else {
    std::snprintf(buf, sizeof buf, "%zu B", n);
  }
  return buf;
}

std::string threads_text(int threads) {
  return std::to_string(threads) + (threads == 1 ? " thread" : " threads");
}

}  // namespace mempool_bench
