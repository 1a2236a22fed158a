// prodcons: one thread allocates 64-byte blocks and passes them through a ring
// to another, which frees them: every block crosses threads, the pattern that
// makes a thread-caching allocator hoard or slow down. ns per block, ops/s and
// the resident set at 10% and 50% of the run and at its end: it must stay flat.
// 5,000,000 blocks (--quick: 200,000), after an untimed tenth of that.
#include "workloads.hpp"

namespace mempool_bench {

namespace {

template <class A>
nlohmann::json prodcons(const RunSpec& spec, const std::string& case_text) {
  const std::size_t ops = spec.quick ? 200'000 : 5'000'000;
  auto allocate = [](std::size_t n) { return A::allocate(n); };
  auto release = [](void* p) { A::deallocate(p, kProdconsSize); };
  prodcons_loop(ops / 10, allocate, release);  // warm-up: both threads' caches, the pages
  const ProdconsResult r = prodcons_loop(ops, allocate, release);
  nlohmann::json metrics = timing_metrics(r.timing, ops, 1);
  const std::vector<long>& s = r.rss_samples_kib;
  const long start = s.front();
  const long middle = s[s.size() / 2];
  const long end = s.back();
  metrics["rss_start_kib"] = start;  // the 10% sample: the pipeline is full by then
  metrics["rss_middle_kib"] = middle;
  metrics["rss_end_kib"] = end;
  metrics["rss_flat"] = end <= start + start / 10 + 256;
  metrics["checksum_ok"] = r.checksum_ok;
  return {{"case", case_text},
          {"threads", 2},
          {"primary", {{"metric", "ns_per_op"}, {"better", "lower"}}},
          {"params", {{"size", kProdconsSize}, {"blocks", ops}, {"ring", SpscRing::kCapacity}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_prodcons(const RunSpec& given) {
  RunSpec spec = given;
  spec.size = kProdconsSize;
  spec.threads = 2;  // a producer and a consumer
  spec.mixed = false;
  const std::string text = "64 B, producer -> consumer";
  return run_or_skip(spec, text, [&]<class A>() { return prodcons<A>(spec, text); });
}

}  // namespace mempool_bench
