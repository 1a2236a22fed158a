// throughput: each thread allocates and frees for --seconds after --warmup:
// fixed or mixed sizes (8 B to --size, default 256 KiB, every power of two
// equally likely), freed at once (immediate) or replacing a random slot of a
// window of live blocks (window). ops/s, and latency percentiles of every
// --sample-rate-th operation (its allocate, write and free, clock reads
// included: about 20 ns).
#include <time.h>

#include <memory>

#include <numeric>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

struct Block {
  void* p = nullptr;
  std::size_t n = 0;
};

template <class A>
nlohmann::json loop(const RunSpec& spec, std::size_t mixed_low, bool log_uniform,
                    bool sample_latency, const std::string& case_text) {
  const auto threads = static_cast<std::size_t>(spec.threads);
  std::vector<std::unique_ptr<SizeSequence>> sizes(threads);
  std::vector<std::vector<Block>> windows(threads);
  std::vector<LatencyHistogram> histograms(sample_latency ? threads : 0);
  std::vector<std::uint64_t> failed(threads, 0);
  std::vector<Random> randoms;
  for (std::size_t t = 0; t < threads; ++t)
    randoms.emplace_back(t + 1);
  const std::size_t rate = spec.sample_rate;

  auto prepare = [&](int t) {
    const auto i = static_cast<std::size_t>(t);
    sizes[i] = std::make_unique<SizeSequence>(spec, mixed_low, spec.size, log_uniform, i + 1);
    if (spec.window) {
      windows[i].resize(spec.window_size);
      for (std::size_t k = 0; k < spec.window_size; ++k) {
        const std::size_t n = (*sizes[i])[k];
        windows[i][k] = {A::allocate(n), n};
        if (windows[i][k].p != nullptr) touch(windows[i][k].p, n, 1);
      }
    }
  };
  auto one_op = [&](std::size_t t, std::uint64_t i) {
    const std::size_t n = (*sizes[t])[i];
    if (spec.window) {
      Block& slot = windows[t][randoms[t].next() % spec.window_size];
      if (slot.p != nullptr) A::deallocate(slot.p, slot.n);
      slot = {A::allocate(n), n};
      if (slot.p == nullptr) {
        ++failed[t];
        return;
      }
      touch(slot.p, n, static_cast<unsigned char>(i));
    } else {
      void* p = A::allocate(n);
      if (p == nullptr) {
        ++failed[t];
        return;
      }
      touch(p, n, static_cast<unsigned char>(i));
      A::deallocate(p, n);
    }
  };
  auto step = [&](int t, std::uint64_t i) {
    const auto ti = static_cast<std::size_t>(t);
    if (sample_latency && i % rate == 0) {
      const std::int64_t begin = now_ns(CLOCK_MONOTONIC);
      one_op(ti, i);
      histograms[ti].record(static_cast<std::uint64_t>(now_ns(CLOCK_MONOTONIC) - begin));
    } else {
      one_op(ti, i);
    }
  };
  const TimedResult r = run_for_seconds(spec, prepare, step);
  for (std::size_t t = 0; t < threads; ++t)
    for (const Block& b : windows[t])
      if (b.p != nullptr) A::deallocate(b.p, b.n);

  nlohmann::json metrics = timing_metrics(r.timing, r.ops, spec.threads);
  metrics["failed_allocations"] = std::accumulate(failed.begin(), failed.end(), std::uint64_t{0});
  if (sample_latency) {
    LatencyHistogram all;
    for (const LatencyHistogram& h : histograms)
      all.merge(h);
    metrics["latency_ns"] = latency_json(all);
  }
  return {{"case", case_text},
          {"primary", {{"metric", "ns_per_op"}, {"better", "lower"}}},
          {"params",
           {{"size", spec.size},
            {"size_dist", spec.mixed ? "mixed" : "fixed"},
            {"mode", spec.window ? "window" : "immediate"},
            {"window", spec.window_size},
            {"warmup", spec.warmup_s},
            {"seconds", spec.seconds},
            {"sample_rate", spec.sample_rate}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_alloc_free_loop(const RunSpec& spec, std::size_t mixed_low, bool log_uniform,
                                   bool sample_latency, const std::string& case_text) {
  return run_or_skip(spec, case_text, [&]<class A>() {
    return loop<A>(spec, mixed_low, log_uniform, sample_latency, case_text);
  });
}

nlohmann::json run_throughput(const RunSpec& given) {
  RunSpec spec = given;
  if (spec.size == 0) spec.size = spec.mixed ? std::size_t{256} << 10 : 64;
  const std::size_t low = spec.size < 8 ? spec.size : 8;
  std::string text = spec.mixed ? "8 B-" + bytes_text(spec.size) : bytes_text(spec.size);
  text += spec.window ? ", window of " + std::to_string(spec.window_size) : ", immediate";
  text += ", " + threads_text(spec.threads);
  return run_alloc_free_loop(spec, low, true, true, text);
}

}  // namespace mempool_bench
