// micro: the foundation issue's three loops on 24-byte objects, as
// bench/micro/pools_benchmark.cpp runs them, for the allocator of the run (one thread):
//   Single  one allocation, then its free, per iteration
//   Bulk    10,000 allocations, then 10,000 frees, per iteration
//   Churn   5,000 objects live; per iteration free the 100 oldest and allocate
//           100 in their place
// The same treatment as there: the object is constructed (its three words
// written) and its pointer passed through benchmark::DoNotOptimize. Google
// Benchmark runs them in process and prints nothing: a reporter keeps each one's
// real time per iteration, given per allocate-and-free pair (Bulk's / 10,000,
// Churn's / 100). Each runs at least a third of --seconds (--quick: 0.01 s)
// after --warmup, set through MinTime and MinWarmUpTime, which read the same in
// every version of the library (the --benchmark_min_time flag's format changed
// in 1.8).
#include <benchmark/benchmark.h>

#include <iostream>
#include <map>
#include <new>

#include "micro_shapes.hpp"
#include "workloads.hpp"

namespace mempool_bench {

namespace {

std::uint64_t g_failed = 0;  // bitmap-pool returns nullptr when full

template <class A>
Obj* make(std::uint64_t v) {
  void* m = A::allocate(sizeof(Obj));
  if (m == nullptr) [[unlikely]] {
    ++g_failed;
    return nullptr;
  }
  return ::new (m) Obj{v, v + 1, v + 2};
}

template <class A>
void drop(Obj* p) {
  if (p != nullptr) A::deallocate(p, sizeof(Obj));
}

template <class A>
void single(benchmark::State& state) {
  std::uint64_t v = 0;
  for (auto _ : state) {
    Obj* p = make<A>(v++);
    benchmark::DoNotOptimize(p);
    drop<A>(p);
  }
}

template <class A>
void bulk(benchmark::State& state) {
  std::vector<Obj*> live(kBulk);
  for (auto _ : state) {
    for (std::size_t i = 0; i < kBulk; ++i) {
      Obj* p = make<A>(i);
      benchmark::DoNotOptimize(p);
      live[i] = p;
    }
    for (Obj* p : live)
      drop<A>(p);
  }
}

// Oldest first: the 100 freed together are the next 100 slots of the ring.
template <class A>
void churn(benchmark::State& state) {
  std::vector<Obj*> live(kChurnLive);
  std::uint64_t v = 0;
  for (Obj*& p : live) {
    p = make<A>(v++);
    benchmark::DoNotOptimize(p);
  }
  std::size_t next = 0;
  for (auto _ : state) {
    for (std::size_t j = 0; j < kChurnStep; ++j)
      drop<A>(live[next + j]);
    for (std::size_t j = 0; j < kChurnStep; ++j) {
      Obj* p = make<A>(v++);
      benchmark::DoNotOptimize(p);
      live[next + j] = p;
    }
    next = (next + kChurnStep) % kChurnLive;
  }
  for (Obj* p : live)
    drop<A>(p);
}

// Keeps each benchmark's real time per iteration (ns) and iterations; prints nothing.
class Capture : public benchmark::BenchmarkReporter {
 public:
  struct Result {
    double ns = 0;
    std::int64_t iterations = 0;
  };
  bool ReportContext(const Context& /*context*/) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Iteration)
        results[r.run_name.function_name] = {r.GetAdjustedRealTime(), r.iterations};
  }
  std::map<std::string, Result> results;
};

template <class A>
nlohmann::json measure(const RunSpec& spec, const std::string& case_text) {
  char name[] = "mempool-bench";
  char* argv[] = {name, nullptr};
  int argc = 1;
  benchmark::Initialize(&argc, argv);
  const double min_time = spec.quick ? 0.01 : spec.seconds / 3;
  for (auto [n, fn] : {std::pair{"Single", &single<A>}, std::pair{"Bulk", &bulk<A>},
                       std::pair{"Churn", &churn<A>}}) {
    benchmark::RegisterBenchmark(n, fn)
        ->Unit(benchmark::kNanosecond)
        ->MinTime(min_time)
        ->MinWarmUpTime(spec.warmup_s);
  }
  Capture capture;
  capture.SetOutputStream(&std::cerr);  // stdout carries the driver's JSON line only
  capture.SetErrorStream(&std::cerr);
  benchmark::RunSpecifiedBenchmarks(&capture);
  benchmark::Shutdown();

  const Capture::Result single_r = capture.results["Single"];
  const Capture::Result bulk_r = capture.results["Bulk"];
  const Capture::Result churn_r = capture.results["Churn"];
  const double single_ns = single_r.ns;
  const double bulk_ns = bulk_r.ns / kBulk;
  const double churn_ns = churn_r.ns / kChurnStep;
  const auto pairs = [](const Capture::Result& r, std::size_t per) {
    return static_cast<std::uint64_t>(r.iterations) * per;
  };
  const std::uint64_t ops = pairs(single_r, 1) + pairs(bulk_r, kBulk) + pairs(churn_r, kChurnStep);
  const double wall_s = (single_r.ns * static_cast<double>(single_r.iterations) +
                         bulk_r.ns * static_cast<double>(bulk_r.iterations) +
                         churn_r.ns * static_cast<double>(churn_r.iterations)) *
                        1e-9;
  nlohmann::json metrics = {{"single_ns", single_ns},
                            {"bulk_ns", bulk_ns},
                            {"churn_ns", churn_ns},
                            {"ops", ops},
                            {"wall_s", wall_s},
                            {"ops_per_s", single_ns > 0 ? 1e9 / single_ns : 0.0},
                            {"peak_rss_kib", peak_rss_kib()},
                            {"failed_allocations", g_failed}};
  return {{"case", case_text},
          {"primary", {{"metric", "single_ns"}, {"better", "lower"}}},
          {"params",
           {{"size", sizeof(Obj)},
            {"bulk", kBulk},
            {"churn_live", kChurnLive},
            {"churn_step", kChurnStep},
            {"min_time", min_time},
            {"warmup", spec.warmup_s}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_micro(const RunSpec& given) {
  RunSpec spec = given;
  spec.threads = 1;
  spec.mixed = false;
  spec.size = sizeof(Obj);  // the fixed-size pools' block
  const std::string text = "Single/Bulk/Churn, 24 B";
  return run_or_skip(spec, text, [&]<class A>() { return measure<A>(spec, text); });
}

}  // namespace mempool_bench
