#include "mempool/allocator.hpp"

namespace mempool {

std::pmr::memory_resource* default_resource() noexcept {
  // Never destroyed, like the pool under it: containers in static objects may
  // free into it during static destruction.
  static PoolResource<Heap>* const resource = new PoolResource<Heap>(Heap::global());
  return resource;
}

}  // namespace mempool
