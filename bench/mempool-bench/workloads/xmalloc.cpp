// xmalloc: many-to-one frees, after xmalloc-test (Lever and Boreham). Half the
// threads (at least 1) allocate small blocks (16 to 128 B), write them and hand
// them in batches of 256 through one shared queue to the other half, which
// check and free them: every block is freed by a thread that did not allocate
// it, in bulk, while its allocator keeps allocating. What it costs an allocator
// to take back memory another thread freed (remote free lists, the owner's
// page or span reclaimed, or a cache that grows on one side and empties on the
// other). The producers run for --seconds after --warmup; the consumers until
// the queue is empty. Primary: ns per block (the wall time over the blocks one
// producer allocated: what a block costs an allocating and a freeing thread
// together); peak RSS.
#include <atomic>
#include <mutex>
#include <thread>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

constexpr std::size_t kLow = 16;
constexpr std::size_t kHigh = 128;
constexpr std::size_t kBatch = 256;
constexpr std::size_t kMostBatches = 64;  // producers wait beyond this: memory stays bounded

struct Block {
  void* p = nullptr;
  std::size_t n = 0;
};

// Counted by one thread each, on a cache line of its own.
struct alignas(64) Counters {
  std::uint64_t allocated = 0;  // all blocks, warm-up included
  std::uint64_t measured = 0;   // those allocated after the warm-up
  std::uint64_t freed_elsewhere = 0;
  std::uint64_t failed = 0;
  std::uint64_t corrupt = 0;
  std::int64_t stop_ns = 0;
};

// A block's first word holds its size and its producer, so the consumer can
// give the size back (sized pools need it) and check who allocated it; the last
// byte is written too.
std::uint64_t header(std::size_t n, std::size_t producer) {
  return static_cast<std::uint64_t>(n) | (static_cast<std::uint64_t>(producer) << 32);
}
unsigned char last_byte(std::size_t n) {
  return static_cast<unsigned char>(n ^ 0x5A);
}

template <class A>
nlohmann::json xmalloc(const RunSpec& spec, std::size_t producers, const std::string& text) {
  const auto threads = static_cast<std::size_t>(spec.threads);
  std::mutex lock;
  // Full batches, oldest first: a ring of kMostBatches, under the lock.
  std::vector<std::vector<Block>> queue(kMostBatches);
  std::size_t head = 0;
  std::size_t count = 0;
  // Emptied batches, back to the producers: the batches' own memory is not
  // allocated and freed across threads beside the blocks.
  std::vector<std::vector<Block>> spare;
  std::atomic<std::size_t> queued{0};  // read without the lock to wait
  std::atomic<std::size_t> producing{producers};
  std::vector<Counters> counters(threads);
  std::vector<std::unique_ptr<SizeSequence>> sizes(threads);
  const auto warmup = static_cast<std::int64_t>(spec.warmup_s * 1e9);
  const auto measure = static_cast<std::int64_t>(spec.seconds * 1e9);

  auto prepare = [&](int t) {
    const auto i = static_cast<std::size_t>(t);
    if (i < producers) sizes[i] = std::make_unique<SizeSequence>(spec, kLow, kHigh, false, i + 1);
  };
  auto produce = [&](std::size_t me, std::int64_t begin) {
    Counters& c = counters[me];
    const SizeSequence& size = *sizes[me];
    std::vector<Block> batch;
    batch.reserve(kBatch);
    std::uint64_t i = 0;
    for (bool measuring = false;;) {
      const std::int64_t now = now_ns(CLOCK_MONOTONIC) - begin;
      if (now >= warmup + measure) break;
      measuring = now >= warmup;
      for (std::size_t k = 0; k < kBatch; ++k, ++i) {
        const std::size_t n = size[i];
        void* p = A::allocate(n);
        if (p == nullptr) {
          ++c.failed;
          continue;
        }
        *static_cast<std::uint64_t*>(p) = header(n, me);
        static_cast<unsigned char*>(p)[n - 1] = last_byte(n);
        escape(p);
        batch.push_back({p, n});
      }
      c.allocated += batch.size();
      if (measuring) c.measured += batch.size();
      for (Backoff backoff;; backoff.wait()) {
        if (queued.load(std::memory_order_relaxed) >= kMostBatches) continue;
        std::lock_guard<std::mutex> hold(lock);
        if (count == kMostBatches) continue;  // another producer filled it first
        queue[(head + count) % kMostBatches] = std::move(batch);
        queued.store(++count, std::memory_order_relaxed);
        batch.clear();
        if (!spare.empty()) {
          batch.swap(spare.back());
          spare.pop_back();
        } else {
          batch.reserve(kBatch);
        }
        break;
      }
    }
    producing.fetch_sub(1, std::memory_order_release);
  };
  auto consume = [&](std::size_t me) {
    Counters& c = counters[me];
    Backoff backoff;
    std::vector<Block> batch;
    for (;;) {
      {
        std::lock_guard<std::mutex> hold(lock);
        if (batch.capacity() != 0) {  // the last one, emptied
          batch.clear();
          spare.push_back(std::move(batch));
          batch = {};
        }
        if (count != 0) {
          batch = std::move(queue[head]);
          queue[head] = {};
          head = (head + 1) % kMostBatches;
          queued.store(--count, std::memory_order_relaxed);
        }
      }
      if (batch.empty()) {
        // Every producer gone and nothing queued (checked after they left): done.
        if (producing.load(std::memory_order_acquire) == 0 &&
            queued.load(std::memory_order_relaxed) == 0)
          break;
        backoff.wait();
        continue;
      }
      for (const Block& b : batch) {
        const std::uint64_t h = *static_cast<const std::uint64_t*>(b.p);
        const auto* bytes = static_cast<const unsigned char*>(b.p);
        if ((h >> 32) >= producers || h != header(b.n, h >> 32) ||
            bytes[b.n - 1] != last_byte(b.n)) {
          ++c.corrupt;
          continue;  // not freed: it is not what was handed over
        }
        if ((h >> 32) != me) ++c.freed_elsewhere;
        A::deallocate(b.p, b.n);
      }
    }
  };

  Timing timing = run_threads(spec.threads, prepare, [&](int t) {
    const auto me = static_cast<std::size_t>(t);
    const std::int64_t begin = now_ns(CLOCK_MONOTONIC);
    if (me < producers) {
      produce(me, begin);
    } else {
      consume(me);
    }
    counters[me].stop_ns = now_ns(CLOCK_MONOTONIC) - begin - warmup;
  });
  Counters total;
  for (const Counters& c : counters) {
    total.allocated += c.allocated;
    total.measured += c.measured;
    total.freed_elsewhere += c.freed_elsewhere;
    total.failed += c.failed;
    total.corrupt += c.corrupt;
    total.stop_ns = std::max(total.stop_ns, c.stop_ns);
  }
  timing.wall_ns = total.stop_ns;  // warm-up end to the last consumer's stop
  nlohmann::json metrics = timing_metrics(timing, total.measured, static_cast<int>(producers));
  metrics["blocks_allocated"] = total.allocated;
  metrics["blocks_freed_elsewhere"] = total.freed_elsewhere;
  metrics["failed_allocations"] = total.failed;
  metrics["corrupt_blocks"] = total.corrupt;
  return {{"case", text},
          {"threads", spec.threads},
          {"primary", {{"metric", "ns_per_op"}, {"better", "lower"}}},
          {"params",
           {{"producers", producers},
            {"consumers", threads - producers},
            {"batch", kBatch},
            {"low", kLow},
            {"high", kHigh}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_xmalloc(const RunSpec& given) {
  RunSpec spec = given;
  spec.mixed = true;
  spec.threads = std::max(2, spec.threads);  // one allocates, another frees
  const auto producers = static_cast<std::size_t>(spec.threads / 2);
  const std::size_t consumers = static_cast<std::size_t>(spec.threads) - producers;
  const std::string text = "16-128 B, " + std::to_string(producers) + " -> " +
                           std::to_string(consumers) + (consumers == 1 ? " thread" : " threads");
  return run_or_skip(spec, text, [&]<class A>() { return xmalloc<A>(spec, producers, text); });
}

}  // namespace mempool_bench
