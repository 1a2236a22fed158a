// handoff: threads allocate and free random sizes from 16 B to 16 KiB
// (every power of two equally likely) in a window of 256 live blocks each; of
// the blocks that leave a window, every other one is handed to the next thread
// (in batches of 64, through a mailbox) and freed there. Half of all frees are
// of blocks another thread allocated, over the size range where thread caches,
// central lists and page allocation all take part. Primary: ns per allocation
// (per thread, all threads running); peak RSS.
#include <mutex>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

constexpr std::size_t kWindow = 256;
constexpr std::size_t kBatch = 64;
constexpr std::size_t kMostBatches = 64;  // a full mailbox: free locally instead
constexpr std::size_t kLow = 16;
constexpr std::size_t kHigh = 16 * 1024;

struct Block {
  void* p = nullptr;
  std::size_t n = 0;
};

struct alignas(64) Mailbox {
  std::mutex lock;
  std::vector<std::vector<Block>> batches;
};

template <class A>
nlohmann::json handoff(const RunSpec& spec, const std::string& text) {
  const auto threads = static_cast<std::size_t>(spec.threads);
  std::vector<Mailbox> mail(threads);
  std::vector<std::vector<Block>> windows(threads, std::vector<Block>(kWindow));
  std::vector<std::vector<Block>> outgoing(threads);
  std::vector<std::unique_ptr<SizeSequence>> sizes(threads);
  std::vector<Random> randoms;
  for (std::size_t t = 0; t < threads; ++t)
    randoms.emplace_back(t + 21);
  std::vector<std::uint64_t> failed(threads, 0);
  auto prepare = [&](int t) {
    const auto i = static_cast<std::size_t>(t);
    sizes[i] = std::make_unique<SizeSequence>(spec, kLow, kHigh, true, i + 1);
    outgoing[i].reserve(kBatch);
  };
  auto receive = [&](std::size_t me) {
    std::vector<std::vector<Block>> got;
    {
      std::lock_guard<std::mutex> hold(mail[me].lock);
      got.swap(mail[me].batches);
    }
    for (const std::vector<Block>& batch : got)
      for (const Block& b : batch)
        A::deallocate(b.p, b.n);
  };
  auto step = [&](int t, std::uint64_t i) {
    const auto me = static_cast<std::size_t>(t);
    const std::size_t n = (*sizes[me])[i];
    Block& slot = windows[me][randoms[me].next() % kWindow];
    if (slot.p != nullptr) {
      if (threads > 1 && (i & 1) != 0) {
        outgoing[me].push_back(slot);
        if (outgoing[me].size() == kBatch) {
          Mailbox& next = mail[(me + 1) % threads];
          std::unique_lock<std::mutex> hold(next.lock);
          if (next.batches.size() < kMostBatches) {
            next.batches.push_back(std::move(outgoing[me]));
            hold.unlock();
          } else {
            hold.unlock();
            for (const Block& b : outgoing[me])
              A::deallocate(b.p, b.n);
          }
          outgoing[me].clear();
          outgoing[me].reserve(kBatch);
        }
      } else {
        A::deallocate(slot.p, slot.n);
      }
    }
    slot = {A::allocate(n), n};
    if (slot.p == nullptr) {
      ++failed[me];
    } else {
      touch(slot.p, n, static_cast<unsigned char>(i));
    }
    if (i % kBatch == 0) receive(me);
  };
  const TimedResult r = run_for_seconds(spec, prepare, step);
  for (std::size_t t = 0; t < threads; ++t) {
    receive(t);
    for (const Block& b : outgoing[t])
      A::deallocate(b.p, b.n);
    for (const Block& b : windows[t])
      if (b.p != nullptr) A::deallocate(b.p, b.n);
  }
  nlohmann::json metrics = timing_metrics(r.timing, r.ops, spec.threads);
  std::uint64_t total_failed = 0;
  for (std::uint64_t f : failed)
    total_failed += f;
  metrics["failed_allocations"] = total_failed;
  return {{"case", text},
          {"primary", {{"metric", "ns_per_op"}, {"better", "lower"}}},
          {"params", {{"window", kWindow}, {"batch", kBatch}, {"low", kLow}, {"high", kHigh}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_handoff(const RunSpec& given) {
  RunSpec spec = given;
  spec.mixed = true;
  const std::string text = "16 B-16 KiB, " + threads_text(spec.threads);
  return run_or_skip(spec, text, [&]<class A>() { return handoff<A>(spec, text); });
}

}  // namespace mempool_bench
