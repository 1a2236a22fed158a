#include "mempool/concurrent_fixed_pool.hpp"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "mempool/detail/atomic_stack.hpp"
#include "mempool/detail/block_layout.hpp"
#include "mempool/detail/chunk_arena.hpp"
#include "mempool/detail/error.hpp"
#include "mempool/detail/os.hpp"

namespace mempool {

namespace {

constexpr const char* kName = "ConcurrentFixedPool";

// About 8 KiB per batch, between 8 and 256 blocks: enough that a burst of a few
// hundred frees and allocations stays inside the shard (a shard keeps up to two
// batches), small enough that a shard strands little.
std::size_t batch_for(std::size_t block_size) noexcept {
  return std::clamp<std::size_t>(std::size_t{8} * 1024 / block_size, 8, 256);
}

}  // namespace

struct ConcurrentFixedPool::State final : detail::ThreadExitListener {
  State(detail::BlockLayout layout, Shard* shard_array)
      : arena(layout, detail::kChecked),
        shards(shard_array),
        batch(batch_for(layout.size)),
        whole_batches(layout.size >= 2 * sizeof(void*)) {
    // The mapping is zero-filled, which is an empty shard; only the two reserved
    // ones are written, so a pool costs RSS only for the shards threads use.
    shards[detail::kNoSlotYet].count = kReserved;
    shards[detail::kSharedSlot].count = kReserved;
    detail::register_thread_exit_listener(this);
  }
  ~State() {
    detail::unregister_thread_exit_listener(this);
    detail::os_unmap(shards, shards_bytes());
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  static std::size_t shards_bytes() noexcept { return sizeof(Shard) * detail::kThreadSlots; }

  // The exiting thread's blocks go to the depot for the others.
  void on_thread_exit(std::uint32_t slot) noexcept override {
    Shard& s = shards[slot];
    if (s.free.empty()) return;  // never used here: don't touch its page
    while (s.count >= batch)
      give_batch(s);
    const detail::FreeChain rest = s.free.take_all();
    depot_add(rest.count);
    singles.push_chain(rest);
    s.count = 0;
  }

  // Blocks in the depot, for live_blocks(): updated on every slow-path move.
  void depot_add(std::size_t n) noexcept {
    depot_blocks.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  }
  void depot_sub(std::size_t n) noexcept {
    depot_blocks.fetch_sub(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  }

  // Moves `batch` blocks from the shard (which holds at least that many) to the
  // depot: as one batch when blocks can carry the second link, else as a chain of
  // singles. One CAS either way.
  void give_batch(Shard& s) noexcept {
    detail::FreeChain chain = s.free.pop_chain(batch);
    s.count -= static_cast<std::uint32_t>(chain.count);
    depot_add(chain.count);
    if (whole_batches) {
      detail::set_pool_next(chain.last, nullptr);
      batches.push(chain.first);
    } else {
      singles.push_chain(chain);
    }
  }

  // Fills an empty shard from the depot: a whole batch in one CAS, else up to
  // `batch` singles. False when the depot is empty.
  bool take_from_depot(Shard& s) noexcept {
    if (whole_batches) {
      if (detail::FreeBlock* first = batches.pop()) {
        depot_sub(batch);
        s.free.assign(first);
        s.count = static_cast<std::uint32_t>(batch);
        return true;
      }
    }
    for (std::size_t i = 0; i < batch; ++i) {
      void* p = singles.pop();
      if (p == nullptr) break;
      depot_sub(1);
      s.free.push(p);
      ++s.count;
    }
    return !s.free.empty();
  }

  // Takes everything out of the depot, lets the arena unmap the chunks whose
  // blocks are all there, and puts the rest back (as whole batches again where
  // possible). Growth waits on the mutex meanwhile.
  std::size_t release_free_chunks() noexcept {
    std::lock_guard<std::mutex> lock(grow_mutex);
    // Gather the depot into one intrusive list first: no allocation, so nothing
    // can be lost between the depot and the list.
    detail::FreeList all;
    std::size_t n = 0;
    while (detail::FreeBlock* b = batches.pop()) {
      const detail::FreeChain c = detail::chain_from(b);
      n += c.count;
      all.push_chain(c);
    }
    const detail::FreeChain loose = singles.pop_all();
    n += loose.count;
    all.push_chain(loose);
    depot_sub(n);
    std::vector<void*> blocks;
    try {
      blocks.reserve(n);
    } catch (const std::bad_alloc&) {
      depot_add(n);
      singles.push_chain(all.take_all());  // no memory to sort them: release nothing
      return 0;
    }
    for (detail::FreeBlock* b = all.head(); b != nullptr; b = detail::pool_next(b))
      blocks.push_back(b);
    const std::size_t released = arena.release_free_chunks(blocks);
    carved.fetch_sub(n - blocks.size(), std::memory_order_relaxed);  // unmapped with their chunks
    depot_add(blocks.size());
    std::size_t i = 0;
    for (; whole_batches && blocks.size() - i >= batch; i += batch) {
      batches.push(link(blocks, i, i + batch).first);
    }
    singles.push_chain(link(blocks, i, blocks.size()));
    return released;
  }

  // blocks[from .. to) as a nullptr-terminated chain.
  static detail::FreeChain link(const std::vector<void*>& blocks, std::size_t from,
                                std::size_t to) noexcept {
    detail::FreeChain chain;
    if (from == to) return chain;
    for (std::size_t k = from; k + 1 < to; ++k) {
      detail::set_pool_next(static_cast<detail::FreeBlock*>(blocks[k]),
                            static_cast<detail::FreeBlock*>(blocks[k + 1]));
    }
    chain.first = static_cast<detail::FreeBlock*>(blocks[from]);
    chain.last = static_cast<detail::FreeBlock*>(blocks[to - 1]);
    detail::set_pool_next(chain.last, nullptr);
    chain.count = to - from;
    return chain;
  }

  // Cold: fresh blocks under the growth mutex. Empty when the OS refuses.
  detail::FreeChain grow(std::size_t n) noexcept {
    std::lock_guard<std::mutex> lock(grow_mutex);
    detail::FreeChain chain = arena.carve(n);
    carved.fetch_add(chain.count, std::memory_order_relaxed);
    return chain;
  }

  // The depot: full batches (exactly `batch` blocks each, nullptr-terminated), and
  // single blocks (from threads without a shard, exits, and pools of 8-byte blocks,
  // which cannot carry a second link).
  alignas(detail::kCacheLine) detail::BatchStack batches;
  alignas(detail::kCacheLine) detail::AtomicStack singles;
  alignas(detail::kCacheLine) mutable std::mutex grow_mutex;
  detail::ChunkArena arena;  // guarded by grow_mutex
  Shard* shards;             // kThreadSlots shards, mapped (zero pages until touched)
  std::size_t batch;
  bool whole_batches;
  // live_blocks() = carved - depot_blocks - the blocks in the shards.
  std::atomic<std::uint64_t> carved{0};
  std::atomic<std::int64_t> depot_blocks{0};
};

ConcurrentFixedPool::ConcurrentFixedPool(std::size_t block_size, std::size_t alignment,
                                         std::size_t shard_bytes) {
  const detail::BlockLayout layout = detail::make_block_layout(kName, block_size, alignment);
  auto* shard_array = static_cast<Shard*>(detail::os_map(State::shards_bytes()));
  if (shard_array == nullptr) throw std::bad_alloc();
  try {
    state_ = std::make_unique<State>(layout, shard_array);
  } catch (...) {
    detail::os_unmap(shard_array, State::shards_bytes());
    throw;
  }
  shards_ = shard_array;
  const std::size_t batch = state_->batch;
  const std::size_t batches = std::clamp<std::size_t>(shard_bytes / layout.size / batch, 2, 4096);
  limit_ = static_cast<std::uint32_t>(batches * batch);
  detail::checker_pool_created(state_.get());
}

ConcurrentFixedPool::ConcurrentFixedPool(ConcurrentFixedPool&& other) noexcept
    : shards_(std::exchange(other.shards_, nullptr)),
      limit_(other.limit_),
      state_(std::move(other.state_)) {}

ConcurrentFixedPool& ConcurrentFixedPool::operator=(ConcurrentFixedPool&& other) noexcept {
  if (this != &other) {
    if (state_) detail::checker_pool_destroyed(state_.get());
    state_ = std::move(other.state_);
    shards_ = std::exchange(other.shards_, nullptr);
    limit_ = other.limit_;
  }
  return *this;
}

ConcurrentFixedPool::~ConcurrentFixedPool() {
  if (state_) detail::checker_pool_destroyed(state_.get());
}

void ConcurrentFixedPool::tell_checker_allocated(void* p) const noexcept {
  detail::checker_pool_allocated(state_.get(), p, state_->arena.layout().size);
}

void ConcurrentFixedPool::tell_checker_freed(void* p) const noexcept {
  detail::checker_pool_freed(state_.get(), p, state_->arena.layout().size);
}

void* ConcurrentFixedPool::allocate_slow() noexcept {
  std::uint32_t slot = detail::tls_thread_slot;
  if (slot == detail::kNoSlotYet) {
    slot = detail::acquire_thread_slot();
    if (!shards_[slot].free.empty()) return pop_local(shards_[slot]);
  }
  State& st = *state_;
  if (slot == detail::kSharedSlot) {
    // No shard of its own: one block at a time from the depot, or a fresh batch
    // whose surplus goes to the depot.
    void* p = st.singles.pop();
    if (p != nullptr) st.depot_sub(1);
    if (p == nullptr && st.whole_batches) {
      if (detail::FreeBlock* first = st.batches.pop()) {
        p = first;
        st.depot_sub(1);  // the rest of the batch stays in the depot, as singles
        st.singles.push_chain(detail::chain_from(detail::pool_next(first)));
      }
    }
    if (p == nullptr) {
      detail::FreeChain fresh = st.grow(st.batch);
      if (fresh.empty()) return nullptr;
      p = fresh.first;
      if (fresh.count > 1) {
        st.depot_add(fresh.count - 1);
        st.singles.push_chain(
            detail::FreeChain{detail::pool_next(fresh.first), fresh.last, fresh.count - 1});
      }
    }
    if constexpr (detail::kChecked) mark_allocated(p);
    if constexpr (detail::kMemoryChecker) tell_checker_allocated(p);
    return p;
  }
  // Refill the empty shard: first what other threads gave back, then fresh blocks.
  Shard& s = shards_[slot];
  if (!st.take_from_depot(s)) {
    const detail::FreeChain fresh = st.grow(st.batch);
    if (fresh.empty()) return nullptr;
    s.free.push_chain(fresh);
    s.count = static_cast<std::uint32_t>(fresh.count);
  }
  return pop_local(s);
}

void* ConcurrentFixedPool::allocate_slow_or_throw() {
  void* p = allocate_slow();
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void ConcurrentFixedPool::deallocate_slow(void* p) noexcept {
  std::uint32_t slot = detail::tls_thread_slot;
  if (slot == detail::kNoSlotYet) slot = detail::acquire_thread_slot();
  State& st = *state_;
  if (slot == detail::kSharedSlot) {
    st.depot_add(1);
    st.singles.push(p);
    return;
  }
  Shard& s = shards_[slot];
  if (s.count >= limit_) st.give_batch(s);  // full: a batch goes to the depot
  push_local(s, p);
}

void ConcurrentFixedPool::check_free(void* p) noexcept {
  State& st = *state_;
  std::lock_guard<std::mutex> lock(st.grow_mutex);
  if (!st.arena.owns(p)) detail::fatal_misuse(kName, p, "free of a pointer not from this pool");
  if (!st.arena.mark_free(p)) detail::fatal_misuse(kName, p, "double free");
}

void ConcurrentFixedPool::mark_allocated(void* p) noexcept {
  State& st = *state_;
  std::lock_guard<std::mutex> lock(st.grow_mutex);
  st.arena.mark_allocated(p);
}

bool ConcurrentFixedPool::owns(const void* p) const noexcept {
  std::lock_guard<std::mutex> lock(state_->grow_mutex);
  return state_->arena.owns(p);
}

std::size_t ConcurrentFixedPool::block_size() const noexcept {
  return state_->arena.layout().size;
}
std::size_t ConcurrentFixedPool::alignment() const noexcept {
  return state_->arena.layout().alignment;
}
std::size_t ConcurrentFixedPool::bytes_reserved() const noexcept {
  std::lock_guard<std::mutex> lock(state_->grow_mutex);
  return state_->arena.bytes_reserved();
}
std::size_t ConcurrentFixedPool::batch_size() const noexcept {
  return state_->batch;
}

std::uint64_t ConcurrentFixedPool::live_blocks() const noexcept {
  const State& st = *state_;
  // Shards first, then the depot, then carved: a block moving meanwhile is more
  // likely counted twice as free than missed, and the result is clamped at 0.
  std::int64_t cached = 0;
  // Reading a shard no thread ever used maps the shared zero page: no memory.
  for (std::uint32_t slot = 1; slot < detail::kSharedSlot; ++slot) {
#if defined(__SANITIZE_THREAD__)
    cached += shards_[slot].count.load(std::memory_order_relaxed);
#else
    cached += __atomic_load_n(&shards_[slot].count, __ATOMIC_RELAXED);
#endif
  }
  const std::int64_t depot = st.depot_blocks.load(std::memory_order_relaxed);
  const auto carved = static_cast<std::int64_t>(st.carved.load(std::memory_order_relaxed));
  const std::int64_t live = carved - depot - cached;
  return live > 0 ? static_cast<std::uint64_t>(live) : 0;
}

std::size_t ConcurrentFixedPool::release() noexcept {
  State& st = *state_;
  const std::uint32_t slot = detail::tls_thread_slot;
  if (slot != detail::kNoSlotYet && slot != detail::kSharedSlot) st.on_thread_exit(slot);
  return st.release_free_chunks();
}

}  // namespace mempool
