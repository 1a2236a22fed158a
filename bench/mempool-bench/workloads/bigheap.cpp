// bigheap: a large heap of small blocks, read at random: a chained hash table of
// 3,000,000 keys, each a 48-byte node (key, chain link, value pointer and three
// words of its own, as a small object has) and a 48-byte value, 6,000,000
// blocks and 275 MiB in all (--quick: 700,000 keys, 64 MiB), built from random
// keys, then 10,000,000 lookups of random keys present (--quick: 1,000,000).
// Each lookup follows a bucket, a node or two and a value, far apart in a heap
// much larger than what the TLB covers with 4 KiB pages: the case transparent
// huge pages are for (issue 26). Primary: the wall time of the lookups; beside
// it the build time, peak RSS, the minor page faults of the process and its
// AnonHugePages, both read while the table is live. A checksum over the values
// found proves the lookups were made. It runs through malloc (the allocators
// that replace it; mempool's in-process heap when --allocators names it), and
// by default also under jemalloc-thp and mempool-thp-never.
#include <time.h>

#include <cstring>

#include "process.hpp"
#include "workloads.hpp"

namespace mempool_bench {

namespace {

struct Value {
  std::uint64_t words[6];
};

struct Node {
  std::uint64_t key;
  Node* next;
  Value* value;
  std::uint64_t own[3];  // what a small object holds beside its links
};
static_assert(sizeof(Node) == 48 && sizeof(Value) == 48);

// A bijection (splitmix64's finalizer): distinct indices give distinct keys,
// and the low bits of a key pick its bucket.
constexpr std::uint64_t key_of(std::uint64_t i) noexcept {
  std::uint64_t z = i + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr std::uint64_t payload_of(std::uint64_t key) noexcept {
  return key * 0x2545F4914F6CDD1Dull + 1;
}

double seconds_since(std::int64_t start_ns) {
  return static_cast<double>(now_ns(CLOCK_MONOTONIC) - start_ns) * 1e-9;
}

template <class A>
nlohmann::json bigheap(std::size_t keys, std::size_t lookups, const std::string& text) {
  std::size_t buckets = 1;
  while (buckets * 3 < keys * 4)  // load factor at most 0.75
    buckets *= 2;
  const std::size_t bucket_bytes = buckets * sizeof(Node*);
  std::uint64_t failed = 0;
  const std::int64_t cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID);

  // Build: the nodes and values in key order, which is random in the buckets.
  const std::int64_t build_start = now_ns(CLOCK_MONOTONIC);
  auto** table = static_cast<Node**>(A::allocate(bucket_bytes));
  if (table == nullptr) throw std::runtime_error("bigheap: no memory for the bucket array");
  escape(table);
  std::memset(table, 0, bucket_bytes);
  for (std::size_t i = 0; i < keys; ++i) {
    auto* node = static_cast<Node*>(A::allocate(sizeof(Node)));
    auto* value = static_cast<Value*>(A::allocate(sizeof(Value)));
    if (node == nullptr || value == nullptr) {
      ++failed;
      if (node != nullptr) A::deallocate(node, sizeof(Node));
      if (value != nullptr) A::deallocate(value, sizeof(Value));
      continue;
    }
    const std::uint64_t key = key_of(i);
    for (std::uint64_t& w : value->words)
      w = payload_of(key);
    Node*& head = table[key & (buckets - 1)];
    *node = {key, head, value, {i, 0, 0}};
    head = node;
  }
  const double build_s = seconds_since(build_start);

  // Lookups of random keys, all present.
  Random rng(26);
  std::uint64_t found = 0;
  std::uint64_t sum = 0;
  std::uint64_t expected = 0;
  const std::int64_t lookup_start = now_ns(CLOCK_MONOTONIC);
  for (std::size_t n = 0; n < lookups; ++n) {
    const std::uint64_t key = key_of(rng.next() % keys);
    expected += payload_of(key);
    for (Node* node = table[key & (buckets - 1)]; node != nullptr; node = node->next) {
      if (node->key == key) {
        sum += node->value->words[n % 6];
        ++node->own[1];  // a lookup count, as a cache entry keeps
        ++found;
        break;
      }
    }
  }
  const double lookup_s = seconds_since(lookup_start);
  const double cpu_s = static_cast<double>(now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu) * 1e-9;
  // Read while the table is live: freeing may return memory to the OS.
  const long rss = peak_rss_kib();
  const long faults = minor_faults_self();
  const long huge = anon_huge_kib(0);

  const std::int64_t free_start = now_ns(CLOCK_MONOTONIC);
  for (std::size_t b = 0; b < buckets; ++b) {
    for (Node* node = table[b]; node != nullptr;) {
      Node* next = node->next;
      A::deallocate(node->value, sizeof(Value));
      A::deallocate(node, sizeof(Node));
      node = next;
    }
  }
  A::deallocate(table, bucket_bytes);
  const double free_s = seconds_since(free_start);

  const std::size_t heap_bytes = keys * (sizeof(Node) + sizeof(Value)) + bucket_bytes;
  return {{"case", text},
          {"primary", {{"metric", "lookup_s"}, {"better", "lower"}}},
          {"params",
           {{"keys", keys},
            {"lookups", lookups},
            {"node_bytes", sizeof(Node)},
            {"value_bytes", sizeof(Value)},
            {"buckets", buckets},
            {"heap_bytes", heap_bytes}}},
          {"metrics",
           {{"lookup_s", lookup_s},
            {"ns_per_lookup", lookup_s * 1e9 / static_cast<double>(lookups)},
            {"build_s", build_s},
            {"free_s", free_s},
            {"wall_s", build_s + lookup_s},
            {"cpu_s", cpu_s},
            {"peak_rss_kib", rss},
            {"minor_faults", faults},
            {"anon_huge_kib", kib_or_null(huge)},
            {"found", found},
            {"failed_allocations", failed},
            {"checksum_ok", found == lookups && sum == expected}}}};
}

}  // namespace

nlohmann::json run_bigheap(const RunSpec& given) {
  RunSpec spec = given;
  spec.threads = 1;
  spec.mixed = true;  // nodes, values and the bucket array: the fixed-size pools skip
  const std::size_t keys = spec.quick ? 700'000 : 3'000'000;
  const std::size_t lookups = spec.quick ? 1'000'000 : 10'000'000;
  // Short enough for the console table's 24 columns; the rest is in params.
  const std::string text =
      std::to_string(keys / 1000) + " k keys, " + std::to_string(lookups / 1'000'000) + " M gets";
  return run_or_skip(spec, text, [&]<class A>() { return bigheap<A>(keys, lookups, text); });
}

}  // namespace mempool_bench
