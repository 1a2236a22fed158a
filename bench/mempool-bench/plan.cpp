// The plan: which runs, in which order, and the arguments of each child.
#include <algorithm>
#include <thread>
#include <utility>

#include "driver.hpp"
#include "workloads/workloads.hpp"

namespace mempool_bench {

RunSpec base_spec(const Options& o) {
  RunSpec spec;
  spec.workload = o.command;
  spec.allocator = o.allocators.empty() ? "" : o.allocators.front();
  spec.threads = o.threads.empty() ? 1 : o.threads.front();
  spec.size = o.size;
  spec.mixed = o.size_dist == "mixed";
  spec.window = o.mode == "window";
  spec.window_size = o.window;
  spec.replace = o.replace;
  spec.warmup_s = o.warmup;
  spec.seconds = o.seconds;
  spec.sample_rate = o.sample_rate;
  spec.quick = o.quick;
  for (const std::string& a : o.apps)
    spec.app += (spec.app.empty() ? "" : ",") + a;
  spec.command = o.run_command;
  spec.timeout_s = o.timeout;
  spec.check_output = o.check_output;
  return spec;
}

std::vector<std::string> child_args(const std::string& exe, const RunSpec& s) {
  std::vector<std::string> a = {exe,
                                s.workload,
                                "--child",
                                "--allocators=" + s.allocator,
                                "--threads=" + std::to_string(s.threads),
                                std::string("--size-dist=") + (s.mixed ? "mixed" : "fixed"),
                                std::string("--mode=") + (s.window ? "window" : "immediate"),
                                "--window=" + std::to_string(s.window_size),
                                "--warmup=" + std::to_string(s.warmup_s),
                                "--seconds=" + std::to_string(s.seconds),
                                "--sample-rate=" + std::to_string(s.sample_rate),
                                "--timeout=" + std::to_string(s.timeout_s)};
  if (s.size != 0) a.push_back("--size=" + std::to_string(s.size));
  if (s.quick) a.emplace_back("--quick");
  if (!s.app.empty()) a.push_back("--apps=" + s.app);
  if (!s.replace.empty()) a.push_back("--replace=" + s.replace);
  if (s.check_output) a.emplace_back("--check-output");
  // The child checks --allocators against its own list, which must have this one too.
  if (std::string given = given_allocator_argument(s.allocator); !given.empty())
    a.push_back(std::move(given));
  if (!s.command.empty()) {
    a.emplace_back("--");
    a.insert(a.end(), s.command.begin(), s.command.end());
  }
  return a;
}

std::vector<std::string> case_allocators(const RunSpec& c,
                                         const std::vector<std::string>& available,
                                         bool explicit_list) {
  if (explicit_list) return available;
  const WorkloadInfo* info = find_workload(c.workload);
  const std::vector<std::string> extra =
      info->extra_allocators != nullptr ? info->extra_allocators(c) : std::vector<std::string>{};
  std::vector<std::string> out;
  for (const std::string& name : available) {
    const AllocatorInfo* a = find_allocator(name);
    const bool asked = std::find(extra.begin(), extra.end(), name) != extra.end();
    if (asked || (a->by_default && (a->preload || !info->malloc_only))) out.push_back(name);
  }
  return out;
}

std::vector<std::string> default_allocators(const std::vector<Part>& parts) {
  std::vector<std::string> extra;
  for (const Part& part : parts) {
    const WorkloadInfo* info = find_workload(part.given.workload);
    if (info->extra_allocators == nullptr) continue;
    const std::vector<RunSpec> cases =
        info->cases != nullptr ? info->cases(part.given) : std::vector<RunSpec>{part.given};
    for (const RunSpec& c : cases)
      for (const std::string& name : info->extra_allocators(c))
        extra.push_back(name);
  }
  std::vector<std::string> out;
  for (const AllocatorInfo& a : all_allocators())
    if (a.by_default || std::find(extra.begin(), extra.end(), a.name) != extra.end())
      out.emplace_back(a.name);
  return out;
}

std::vector<Run> plan_runs(const std::vector<Part>& parts, std::size_t repeat,
                           const std::vector<std::string>& allocators, bool explicit_list) {
  std::size_t most = repeat;
  for (const Part& part : parts)
    most = std::max(most, part.min_repeat);
  std::vector<Run> runs;
  for (std::size_t rep = 0; rep < most; ++rep) {
    for (const Part& part : parts) {
      if (rep >= std::max(repeat, part.min_repeat)) continue;
      const WorkloadInfo* info = find_workload(part.given.workload);
      const std::vector<RunSpec> cases =
          info->cases != nullptr ? info->cases(part.given) : std::vector<RunSpec>{part.given};
      std::vector<int> threads = !part.threads.empty() ? part.threads : info->default_threads();
      if (threads.empty()) threads = {1};  // the workload picks its own threads
      for (const RunSpec& c : cases) {
        const std::vector<std::string> names = case_allocators(c, allocators, explicit_list);
        for (int t : threads) {
          for (const std::string& a : names) {
            Run r{c, rep};
            r.spec.threads = t;
            r.spec.allocator = a;
            runs.push_back(r);
          }
        }
      }
    }
  }
  return runs;
}

namespace {

// One workload of a suite, at the given thread counts (empty: the workload's own).
Part workload_part(const RunSpec& base, const char* workload, std::vector<int> threads) {
  Part p{base, std::move(threads)};
  p.given.workload = workload;
  return p;
}

// throughput as the suites run it: mixed sizes (8 B to 256 KiB) in a window of live
// blocks, the case the other workloads do not cover.
Part mixed_window_throughput(const RunSpec& base, std::vector<int> threads) {
  Part p = workload_part(base, "throughput", std::move(threads));
  p.given.mixed = true;
  p.given.window = true;
  return p;
}

}  // namespace

std::vector<Part> headline_parts(const RunSpec& base) {
  auto part = [&](const char* workload, std::vector<int> threads) {
    return workload_part(base, workload, std::move(threads));
  };
  Part compare64 = part("compare", {1});
  compare64.given.size = 64;
  Part compare_mixed = part("compare", {1});
  compare_mixed.given.mixed = true;
  compare_mixed.given.size = 256;
  // The programs whose time the allocator moves most; g++ costs 9 s a run but is
  // the compiler of "real programs decide". redis with one request in flight
  // (each request waits for its answer over the loopback) and redis-bigheap (a
  // million keys loaded first) are in --full.
  Part apps = part("apps", {});
  if (base.app.empty()) apps.given.app = "redis-pipelined,python,sqlite,gxx";
  const int cores = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  return {apps,
          compare64,
          compare_mixed,
          part("micro", {}),
          part("rounds", {1}),
          mixed_window_throughput(base, {1}),
          part("server", {cores}),
          part("churn", {}),
          part("fragmentation", {})};
}

std::vector<Part> suite_parts(const RunSpec& base) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto part = [&](const char* workload, std::vector<int> threads) {
    return workload_part(base, workload, std::move(threads));
  };
  std::vector<Part> parts = {part("rounds", {1, 2, 4}),
                             part("queue", {1}),
                             part("compare", {1, cores}),
                             mixed_window_throughput(base, {1, cores}),
                             part("micro", {}),
                             part("prodcons", {}),
                             part("fragmentation", {}),
                             part("churn", {}),
                             part("scaling", {}),
                             part("bigbuffers", {}),
                             part("server", {}),
                             part("handoff", {}),
                             part("xmalloc", {}),
                             part("larson", {}),
                             part("tree", {}),
                             part("cache-thrash", {}),
                             part("cache-scratch", {}),
                             part("apps", {})};
  // Real programs swing by 15% and more between runs: at least 5 repetitions,
  // so that their spread (min-max) says whether a difference is real.
  if (!base.quick) parts.back().min_repeat = 5;
  return parts;
}

}  // namespace mempool_bench
