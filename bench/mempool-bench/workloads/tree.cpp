// tree: an N-body step (Barnes-Hut, as in Olden's and mimalloc-bench's barnes),
// one thread. Every step builds an octree of 65,536 bodies (one 80-byte node
// per body and per cell: about 100,000 nodes, allocated in the bodies' random
// order, not the tree's), walks it twice (the centre of mass of every cell, then
// the force on one body in 64, opening cells nearer than twice their size),
// frees it all, and moves the bodies a little. Where the allocator puts the
// nodes decides how many cache lines and pages the walks touch; freeing a whole
// tree at once is what an allocator's free path and its page reuse do in bulk.
// Steps run for --seconds after --warmup. One node size: the fixed-size pools
// run it too. Primary: ns per node (built, walked and freed); the time per step
// and its three parts; peak RSS.
#include <cmath>

#include "workloads.hpp"

namespace mempool_bench {

namespace {

constexpr std::size_t kBodies = 65'536;
constexpr std::size_t kForceEvery = 64;  // the bodies whose force is walked: one in this many
constexpr float kTheta = 0.5F;           // open a cell nearer than its size / kTheta
constexpr int kMaxDepth = 24;            // below this, bodies merge (float precision ends there)

struct Node {
  Node* child[8];       // all null: a leaf (a body)
  float x, y, z, mass;  // a leaf: its body; a cell: its centre of mass
};

struct Body {
  float x, y, z;
};

struct Counts {
  std::uint64_t allocated = 0;
  std::uint64_t walked = 0;
  std::uint64_t freed = 0;
  std::uint64_t failed = 0;
};

template <class A>
class Tree {
 public:
  explicit Tree(Counts* counts) : counts_(counts) {}

  void insert(const Body& b) {
    Node** slot = &root_;
    float cx = 0.5F, cy = 0.5F, cz = 0.5F, half = 0.5F;
    for (int depth = 0;; ++depth) {
      Node* n = *slot;
      if (n == nullptr) {
        *slot = leaf(b.x, b.y, b.z, 1.0F);
        return;
      }
      if (is_leaf(n)) {
        if (depth == kMaxDepth) {
          n->mass += 1.0F;
          return;
        }
        // The leaf becomes a cell: its body moves into a new leaf below it.
        Node* moved = leaf(n->x, n->y, n->z, n->mass);
        if (moved == nullptr) {
          n->mass += 1.0F;  // kept, merged, so that no body is lost
          return;
        }
        n->child[octant(*moved, cx, cy, cz)] = moved;
      }
      const int o = octant(b.x, b.y, b.z, cx, cy, cz);
      half *= 0.5F;
      cx += (o & 1) != 0 ? half : -half;
      cy += (o & 2) != 0 ? half : -half;
      cz += (o & 4) != 0 ? half : -half;
      slot = &n->child[o];
    }
  }

  // The centre of mass of every cell, written into it; the root's mass.
  float centre_of_mass() { return root_ != nullptr ? mass_of(root_) : 0.0F; }

  // The force on a body (G and masses 1), the walk of Barnes-Hut.
  double force(const Body& b) const { return force_on(b, root_, 1.0F); }

  void clear() {
    if (root_ != nullptr) release(root_);
    root_ = nullptr;
  }

 private:
  static bool is_leaf(const Node* n) {
    for (const Node* c : n->child)
      if (c != nullptr) return false;
    return true;
  }
  static int octant(float x, float y, float z, float cx, float cy, float cz) {
    return (x >= cx ? 1 : 0) | (y >= cy ? 2 : 0) | (z >= cz ? 4 : 0);
  }
  static int octant(const Node& n, float cx, float cy, float cz) {
    return octant(n.x, n.y, n.z, cx, cy, cz);
  }

  Node* leaf(float x, float y, float z, float mass) {
    auto* n = static_cast<Node*>(A::allocate(sizeof(Node)));
    if (n == nullptr) {
      ++counts_->failed;
      return nullptr;
    }
    ++counts_->allocated;
    for (Node*& c : n->child)
      c = nullptr;
    n->x = x;
    n->y = y;
    n->z = z;
    n->mass = mass;
    escape(n);
    return n;
  }

  float mass_of(Node* n) {
    ++counts_->walked;
    if (is_leaf(n)) return n->mass;
    float m = 0, x = 0, y = 0, z = 0;
    for (Node* c : n->child) {
      if (c == nullptr) continue;
      const float cm = mass_of(c);
      m += cm;
      x += cm * c->x;
      y += cm * c->y;
      z += cm * c->z;
    }
    n->x = x / m;
    n->y = y / m;
    n->z = z / m;
    n->mass = m;
    return m;
  }

  double force_on(const Body& b, const Node* n, float size) const {
    if (n == nullptr) return 0;
    const float dx = n->x - b.x, dy = n->y - b.y, dz = n->z - b.z;
    const float d2 = dx * dx + dy * dy + dz * dz + 1e-6F;  // softened: no division by 0
    if (is_leaf(n) || size * size < kTheta * kTheta * d2) return n->mass / d2;
    double f = 0;
    for (const Node* c : n->child)
      f += force_on(b, c, size * 0.5F);
    return f;
  }

  void release(Node* n) {
    for (Node* c : n->child)
      if (c != nullptr) release(c);
    ++counts_->freed;
    A::deallocate(n, sizeof(Node));
  }

  Node* root_ = nullptr;
  Counts* counts_;
};

template <class A>
nlohmann::json tree(const RunSpec& spec, const std::string& text) {
  std::vector<Body> bodies(kBodies);
  Random random(7);
  auto unit = [&] { return static_cast<float>(random.next() >> 40) * 0x1p-24F; };  // [0, 1)
  for (Body& b : bodies)
    b = {unit(), unit(), unit()};
  Counts counts;
  Tree<A> t(&counts);
  bool mass_ok = true;
  double checksum = 0;
  std::int64_t build_ns = 0, walk_ns = 0, free_ns = 0;
  std::uint64_t steps = 0;
  std::uint64_t measured_nodes = 0;

  auto step = [&](bool measured) {
    const std::uint64_t before = counts.allocated;
    const std::int64_t t0 = now_ns(CLOCK_MONOTONIC);
    for (const Body& b : bodies)
      t.insert(b);
    const std::int64_t t1 = now_ns(CLOCK_MONOTONIC);
    mass_ok = mass_ok && t.centre_of_mass() == static_cast<float>(kBodies);
    for (std::size_t i = 0; i < kBodies; i += kForceEvery)
      checksum += t.force(bodies[i]);
    const std::int64_t t2 = now_ns(CLOCK_MONOTONIC);
    t.clear();
    const std::int64_t t3 = now_ns(CLOCK_MONOTONIC);
    // The bodies drift, so that the next tree is not this one again.
    for (Body& b : bodies) {
      for (float* c : {&b.x, &b.y, &b.z}) {
        *c += (unit() - 0.5F) * 0x1p-8F;
        *c -= std::floor(*c);  // back into [0, 1)
      }
    }
    if (!measured) return;
    ++steps;
    measured_nodes += counts.allocated - before;
    build_ns += t1 - t0;
    walk_ns += t2 - t1;
    free_ns += t3 - t2;
  };

  const auto warmup = static_cast<std::int64_t>(spec.warmup_s * 1e9);
  const auto measure = static_cast<std::int64_t>(spec.seconds * 1e9);
  const std::int64_t begin = now_ns(CLOCK_MONOTONIC);
  do {
    step(false);
  } while (now_ns(CLOCK_MONOTONIC) - begin < warmup);
  Timing timing;
  timing.rss_before_kib = current_rss_kib();
  const std::int64_t cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  const std::int64_t wall = now_ns(CLOCK_MONOTONIC);
  do {
    step(true);
  } while (now_ns(CLOCK_MONOTONIC) - wall < measure);
  timing.wall_ns = now_ns(CLOCK_MONOTONIC) - wall;
  timing.cpu_ns = now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu;
  escape(&checksum);

  nlohmann::json metrics = timing_metrics(timing, measured_nodes, 1);
  const auto per_step = [&](std::int64_t ns) {
    return static_cast<double>(ns) * 1e-9 / static_cast<double>(steps);
  };
  metrics["steps"] = steps;
  metrics["nodes_per_step"] = measured_nodes / steps;
  metrics["step_s"] = per_step(timing.wall_ns);
  metrics["step_build_s"] = per_step(build_ns);
  metrics["step_walk_s"] = per_step(walk_ns);
  metrics["step_free_s"] = per_step(free_ns);
  metrics["nodes_allocated"] = counts.allocated;  // all steps, warm-up included
  metrics["nodes_walked"] = counts.walked;
  metrics["nodes_freed"] = counts.freed;
  metrics["mass_ok"] = mass_ok;
  metrics["failed_allocations"] = counts.failed;
  return {{"case", text},
          {"threads", 1},
          {"primary", {{"metric", "ns_per_op"}, {"better", "lower"}}},
          {"params",
           {{"bodies", kBodies},
            {"node_bytes", sizeof(Node)},
            {"force_every", kForceEvery},
            {"theta", kTheta}}},
          {"metrics", metrics}};
}

}  // namespace

nlohmann::json run_tree(const RunSpec& given) {
  RunSpec spec = given;
  spec.threads = 1;
  spec.mixed = false;
  spec.size = sizeof(Node);  // the fixed-size pools' block
  // bitmap-pool's capacity: a whole tree is live at once (about 1.5 nodes a body).
  spec.window_size = 2 * kBodies;
  const std::string text = "65,536 bodies, " + bytes_text(sizeof(Node)) + " nodes";
  return run_or_skip(spec, text, [&]<class A>() { return tree<A>(spec, text); });
}

}  // namespace mempool_bench
