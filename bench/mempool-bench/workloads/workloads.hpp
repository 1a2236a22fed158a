// mempool-bench's workloads: one file each (workloads/<name>.cpp), each a
// function that runs one measurement in this process and returns its result as
// JSON: {"case": the parameter combination in words, "primary": {"metric",
// "better"}, "metrics": {...}}. The driver (driver.cpp) runs each in a
// child process per allocator and repetition, and adds the rest of the record.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "allocators.hpp"
#include "bench_support.hpp"
#include "latency_histogram.hpp"

namespace mempool_bench {

struct WorkloadInfo {
  const char* name;
  const char* what;
  nlohmann::json (*run)(const RunSpec& spec);
  // The thread counts it runs at when --threads is not given; empty: threads do
  // not apply (the workload decides, as scaling and prodcons do).
  std::vector<int> (*default_threads)();
  // The cases one run of the workload covers, from the options given (spec.size
  // is 0 when --size was not). nullptr: just the options as given.
  std::vector<RunSpec> (*cases)(const RunSpec& given);
  // Runs only through malloc (the allocators that replace it) unless --allocators
  // names others: mempool's in-process APIs have nothing to run (apps, run), or the
  // workload is about malloc replacements (bigheap).
  bool malloc_only = false;
  // Allocators a case runs under by default beyond those run by default (such as
  // jemalloc-thp); nullptr: none.
  std::vector<std::string> (*extra_allocators)(const RunSpec& c) = nullptr;
};

const std::vector<WorkloadInfo>& all_workloads();
const WorkloadInfo* find_workload(const std::string& name);

nlohmann::json run_rounds(const RunSpec& spec);
nlohmann::json run_queue(const RunSpec& spec);
nlohmann::json run_compare(const RunSpec& spec);
nlohmann::json run_throughput(const RunSpec& spec);
nlohmann::json run_micro(const RunSpec& spec);
nlohmann::json run_prodcons(const RunSpec& spec);
nlohmann::json run_fragmentation(const RunSpec& spec);
nlohmann::json run_churn(const RunSpec& spec);
nlohmann::json run_scaling(const RunSpec& spec);
nlohmann::json run_bigbuffers(const RunSpec& spec);
nlohmann::json run_bigheap(const RunSpec& spec);
nlohmann::json run_server(const RunSpec& spec);
nlohmann::json run_handoff(const RunSpec& spec);
nlohmann::json run_xmalloc(const RunSpec& spec);
nlohmann::json run_larson(const RunSpec& spec);
nlohmann::json run_tree(const RunSpec& spec);
nlohmann::json run_cache_thrash(const RunSpec& spec);
nlohmann::json run_cache_scratch(const RunSpec& spec);
nlohmann::json run_apps(const RunSpec& spec);
nlohmann::json run_command(const RunSpec& spec);

// The programs of the apps workload (redis, python, ...), and its cases: one
// per program (given.app: a comma-separated choice, "" for all).
std::vector<std::string> app_names();
std::vector<RunSpec> app_cases(const RunSpec& given);
// The extra allocators of an apps case (redis-bigheap: the huge-page configurations).
std::vector<std::string> app_extra_allocators(const RunSpec& c);
// The huge-page configurations that the large-heap cases (bigheap, redis-bigheap)
// run under by default beside the usual allocators.
std::vector<std::string> huge_page_allocators();

// ---------------------------------------------------------------------------
// Shared by the workloads.

// The allocate-then-free loop of compare and throughput (throughput.cpp):
// spec.threads threads for spec.seconds, immediate or window mode, sizes fixed
// (spec.size) or mixed in [mixed_low, spec.size]; with sample_latency, every
// spec.sample_rate-th op is timed.
nlohmann::json run_alloc_free_loop(const RunSpec& spec, std::size_t mixed_low, bool log_uniform,
                                   bool sample_latency, const std::string& case_text);

// The metrics every timed run has: ops in all threads, wall and CPU seconds, ns
// per op (wall time / ops per thread: what one op costs a thread while all run),
// ops per second (all threads), peak resident set.
nlohmann::json timing_metrics(const Timing& t, std::uint64_t total_ops, int threads);

struct ProcessResult;
// The metrics of a program that ran to its end (apps, run): wall and CPU seconds, peak
// RSS and minor faults; AnonHugePages null, since its /proc entry went with it.
nlohmann::json program_metrics(const ProcessResult& r);

// A KiB count read from /proc, or null where it could not be read (-1).
inline nlohmann::json kib_or_null(long kib) {
  return kib >= 0 ? nlohmann::json(kib) : nlohmann::json(nullptr);
}

// avg, p50, p95, p99, p999, max and the number of samples, in ns.
nlohmann::json latency_json(const LatencyHistogram& h);

// Block sizes drawn in advance (64 Ki of them, from a fixed seed), so every
// allocator sees the same sequence and drawing costs the same for all.
class SizeSequence {
 public:
  // fixed: every size is `size`; otherwise uniform in [low, high], or, with
  // log_uniform, every power of two between them equally likely.
  SizeSequence(const RunSpec& spec, std::size_t low, std::size_t high, bool log_uniform,
               std::uint64_t seed);
  [[nodiscard]] std::size_t operator[](std::size_t i) const noexcept {
    return sizes_[i & (kLength - 1)];
  }
  static constexpr std::size_t kLength = std::size_t{1} << 16;

 private:
  std::vector<std::uint32_t> sizes_;
};

// A small fast generator (xorshift64*) for workload randomness.
class Random {
 public:
  explicit Random(std::uint64_t seed) noexcept : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t next() noexcept {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1Dull;
  }
  // Uniform in [low, high].
  std::uint64_t between(std::uint64_t low, std::uint64_t high) noexcept {
    return low + next() % (high - low + 1);
  }

 private:
  std::uint64_t state_;
};

// with_allocator, and a run this allocator cannot do (Skipped) reported under
// the case it would have measured.
template <class F>
nlohmann::json run_or_skip(const RunSpec& spec, const std::string& case_text, F&& f) {
  try {
    return with_allocator(spec, std::forward<F>(f));
  } catch (const Skipped& e) {
    return {{"case", case_text}, {"skipped", e.what()}};
  }
}

// "64 B", "1 KiB", "256 KiB"; "1 thread", "8 threads".
std::string bytes_text(std::size_t n);
std::string threads_text(int threads);

// Runs step(thread, i) over and over on spec.threads threads, released together:
// for warmup_s unmeasured, then for `seconds` measured (i counts each thread's
// measured ops from 0). The clock is read every kClockEvery steps. Returns the
// measured wall time (warm-up end to the last thread's stop), the process CPU
// time over the whole run, and the measured ops of all threads.
struct TimedResult {
  Timing timing;
  std::uint64_t ops = 0;
};
inline constexpr std::uint64_t kClockEvery = 256;

template <class Prepare, class Step>
TimedResult run_for_seconds(const RunSpec& spec, Prepare prepare, Step step) {
  std::vector<std::uint64_t> ops(static_cast<std::size_t>(spec.threads), 0);
  std::vector<std::int64_t> stops(static_cast<std::size_t>(spec.threads), 0);
  const auto warmup = static_cast<std::int64_t>(spec.warmup_s * 1e9);
  const auto measure = static_cast<std::int64_t>(spec.seconds * 1e9);
  TimedResult r;
  r.timing = run_threads(spec.threads, prepare, [&](int t) {
    const std::int64_t begin = now_ns(CLOCK_MONOTONIC);
    for (std::uint64_t i = 0;; ++i) {  // warm-up
      step(t, i);
      if (i % kClockEvery == 0 && now_ns(CLOCK_MONOTONIC) - begin >= warmup) break;
    }
    const std::int64_t deadline = begin + warmup + measure;
    std::uint64_t i = 0;
    for (;; ++i) {
      step(t, i);
      if (i % kClockEvery == kClockEvery - 1 && now_ns(CLOCK_MONOTONIC) >= deadline) break;
    }
    ops[static_cast<std::size_t>(t)] = i + 1;
    stops[static_cast<std::size_t>(t)] = now_ns(CLOCK_MONOTONIC) - begin - warmup;
  });
  r.timing.wall_ns = *std::max_element(stops.begin(), stops.end());
  for (std::uint64_t n : ops)
    r.ops += n;
  return r;
}

}  // namespace mempool_bench
