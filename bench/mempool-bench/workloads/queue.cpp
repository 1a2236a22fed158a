// queue: a message pipeline (fixedPoolAlloc's). P producers and P consumers
// (P = --threads) share a bounded queue of 64 slots under a mutex. A producer
// tick allocates a 64-byte message, fills 1-64 random bytes of it and enqueues
// it, or frees it (dropped) when the queue is full; a consumer dequeues a
// message, checks and frees it, then spins 1-5 iterations. Every 64 iterations
// each thread sleeps 50-200 us, so caches go cold as in a real service.
// Enqueue latency runs from before the allocation to the message in the queue
// (or dropped); dequeue latency from before the lock to after the free. Every
// operation is timed into a histogram. 100,000 ticks per producer (--quick:
// 5,000). Checks sent + dropped == P x ticks and received == sent.
#include <time.h>

#include <array>
#include <atomic>
#include <mutex>
#include <thread>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

constexpr std::size_t kMessage = 64;
constexpr std::size_t kSlots = 64;

class BoundedQueue {
 public:
  bool push(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (count_ == kSlots) return false;
    slots_[(head_ + count_++) % kSlots] = p;
    return true;
  }
  void* pop() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (count_ == 0) return nullptr;
    void* p = slots_[head_];
    head_ = (head_ + 1) % kSlots;
    --count_;
    return p;
  }

 private:
  std::mutex mutex_;
  std::array<void*, kSlots> slots_{};
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

// Byte 0 holds the length n (1-64); bytes 1..n-1 hold n ^ 0x5a.
void fill(unsigned char* m, std::size_t n) {
  m[0] = static_cast<unsigned char>(n);
  for (std::size_t i = 1; i < n; ++i)
    m[i] = static_cast<unsigned char>(n ^ 0x5a);
}
bool intact(const unsigned char* m) {
  const std::size_t n = m[0];
  if (n < 1 || n > kMessage) return false;
  for (std::size_t i = 1; i < n; ++i)
    if (m[i] != static_cast<unsigned char>(n ^ 0x5a)) return false;
  return true;
}

void idle_now_and_then(std::uint64_t iteration, Random& rng) {
  if (iteration % 64 == 63)
    std::this_thread::sleep_for(std::chrono::microseconds(rng.between(50, 200)));
}

template <class A>
nlohmann::json queue(const RunSpec& spec, const std::string& case_text) {
  const int producers = spec.threads;
  const std::uint64_t ticks = spec.quick ? 5'000 : 100'000;
  BoundedQueue q;
  std::atomic<int> producers_left{producers};
  const auto threads = static_cast<std::size_t>(2 * producers);
  std::vector<LatencyHistogram> enqueue(threads), dequeue(threads);
  std::vector<std::uint64_t> sent(threads, 0), dropped(threads, 0), received(threads, 0),
      corrupt(threads, 0), failed(threads, 0);

  const Timing t = run_threads(
      2 * producers, [](int) {},
      [&](int thread) {
        const auto i = static_cast<std::size_t>(thread);
        Random rng(i + 1);
        if (thread < producers) {
          for (std::uint64_t k = 0; k < ticks; ++k) {
            const std::int64_t begin = now_ns(CLOCK_MONOTONIC);
            auto* m = static_cast<unsigned char*>(A::allocate(kMessage));
            if (m == nullptr) {
              ++failed[i];
              ++dropped[i];
            } else {
              fill(m, rng.between(1, kMessage));
              if (q.push(m)) {
                ++sent[i];
              } else {
                A::deallocate(m, kMessage);
                ++dropped[i];
              }
            }
            enqueue[i].record(static_cast<std::uint64_t>(now_ns(CLOCK_MONOTONIC) - begin));
            idle_now_and_then(k, rng);
          }
          producers_left.fetch_sub(1, std::memory_order_release);
          return;
        }
        for (std::uint64_t k = 0;; ++k) {
          const std::int64_t begin = now_ns(CLOCK_MONOTONIC);
          void* p = q.pop();
          if (p == nullptr) {
            if (producers_left.load(std::memory_order_acquire) == 0 && (p = q.pop()) == nullptr)
              break;
            if (p == nullptr) {
              std::this_thread::yield();
              continue;
            }
          }
          if (!intact(static_cast<unsigned char*>(p))) ++corrupt[i];
          A::deallocate(p, kMessage);
          dequeue[i].record(static_cast<std::uint64_t>(now_ns(CLOCK_MONOTONIC) - begin));
          ++received[i];
          for (std::uint64_t spin = rng.between(1, 5); spin > 0; --spin)
            escape(&spin);
          idle_now_and_then(k, rng);
        }
      });

  LatencyHistogram enq, deq, all;
  std::uint64_t total_sent = 0, total_dropped = 0, total_received = 0, total_corrupt = 0,
                total_failed = 0;
  for (std::size_t i = 0; i < threads; ++i) {
    enq.merge(enqueue[i]);
    deq.merge(dequeue[i]);
    total_sent += sent[i];
    total_dropped += dropped[i];
    total_received += received[i];
    total_corrupt += corrupt[i];
    total_failed += failed[i];
  }
  all.merge(enq);
  all.merge(deq);
  const std::uint64_t expected = static_cast<std::uint64_t>(producers) * ticks;
  nlohmann::json metrics = timing_metrics(t, total_sent + total_dropped, producers);
  metrics["sent"] = total_sent;
  metrics["dropped"] = total_dropped;
  metrics["received"] = total_received;
  metrics["corrupt_messages"] = total_corrupt;
  metrics["failed_allocations"] = total_failed;
  metrics["invariants_ok"] = total_sent + total_dropped == expected &&
                             total_received <= total_sent && total_received == total_sent &&
                             total_corrupt == 0;
  metrics["enqueue_latency_ns"] = latency_json(enq);
  metrics["dequeue_latency_ns"] = latency_json(deq);
  metrics["latency_ns"] = latency_json(all);
  metrics["p99_ns"] = all.percentile(0.99);
  return {{"case", case_text},
          {"primary", {{"metric", "p99_ns"}, {"better", "lower"}}},
          {"params",
           {{"producers", producers},
            {"consumers", producers},
            {"ticks", ticks},
            {"slots", kSlots},
            {"size", kMessage}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_queue(const RunSpec& given) {
  RunSpec spec = given;
  spec.size = kMessage;
  spec.mixed = false;
  const int p = spec.threads;
  const std::string text = std::to_string(p) + (p == 1 ? " producer, " : " producers, ") +
                           std::to_string(p) + (p == 1 ? " consumer" : " consumers");
  spec.threads = 2 * p;  // what the pools must serve (object-pool cannot)
  return run_or_skip(spec, text, [&]<class A>() {
    RunSpec as_run = spec;
    as_run.threads = p;
    return queue<A>(as_run, text);
  });
}

}  // namespace mempool_bench
