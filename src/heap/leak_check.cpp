// The leak check: which blocks the program can no longer reach, by allocation stack.
//
// LeakSanitizer's method and conventions. Every block is tracked while the check is on
// (MEMPOOL_LEAK_CHECK=1): the profiler's slow path takes each allocation's stack, and a
// table from address to site and size holds the blocks in use. At exit (an atexit
// handler registered as the heap starts, so it runs after the program's own handlers
// and static destructors), the check:
//   1. locks the table (no block comes or goes any more) and copies it, sorted;
//   2. stops every other thread with a signal (kStopSignal), whose handler saves the
//      thread's registers and stack pointer and waits;
//   3. marks the blocks reachable from the roots: the writable segments of every loaded
//      object (globals), each thread's stack from its stack pointer up with its
//      registers, and its static TLS; blocks the dynamic loader allocated (its link
//      maps, TLS vectors, dynamic TLS) are roots too, as they are for LeakSanitizer,
//      since the loader's own memory that points to them is not scanned; then whatever
//      a reachable block points to, by any aligned word inside it (interior pointers
//      count);
//   4. among the blocks left, a block another one points to is an indirect leak, the
//      others are direct leaks (a cycle with nothing else pointing in is indirect);
//   5. lets the threads go, and reports the leaks grouped by stack and kind, largest
//      first, with function names (dladdr, or addr2line with file:line when it is
//      installed), then exits with MEMPOOL_LEAK_CHECK_EXITCODE (23) if it found any.
// Pointers the program keeps only in memory it mapped itself, or hides (xor, tagged
// high bits), are not seen: their blocks are reported (LeakSanitizer has the same rule).
#include "leak_check.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <string.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../options.hpp"
#include "central_cache.hpp"
#include "heap_profiler.hpp"
#include "mempool/detail/lock.hpp"
#include "mempool/detail/os.hpp"
#include "mempool/heap.hpp"
#include "mempool/mempool.h"
#include "metadata.hpp"
#include "page_heap.hpp"
#include "page_map.hpp"
#include "span.hpp"

extern "C" char** environ;

namespace mempool::detail {

constinit bool g_leak_check = false;

namespace {

// --- the table of blocks in use ---------------------------------------------------------

struct LeakEntry {
  LeakEntry* next;
  std::uintptr_t address;
  std::size_t size;
  const ProfileSite* site;
};

// 2^20 chains (8 MiB of address space, touched as used) under 256 locks: a checker's
// table, sized for a few million blocks in use before the chains grow long.
constexpr unsigned kBucketBits = 20;
constexpr std::size_t kBuckets = std::size_t{1} << kBucketBits;
constexpr std::size_t kStripes = 256;
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;  // entries are carved from these

struct alignas(64) Stripe {
  Lock lock;
  LeakEntry* spare = nullptr;  // entries freed under this lock, for reuse
};

constinit LeakEntry** g_buckets = nullptr;
constinit Stripe g_stripes[kStripes];
constinit Lock g_chunk_lock;
constinit char* g_chunk_next = nullptr;
constinit char* g_chunk_end = nullptr;
constinit int g_exit_code = 23;
constinit int g_report_fd = STDERR_FILENO;  // a copy taken at start (the program may close 2)

std::size_t bucket_of(std::uintptr_t address) noexcept {
  return static_cast<std::size_t>(((address >> 4) * 0x9e3779b97f4a7c15u) >> (64 - kBucketBits));
}

Stripe& stripe_of(std::size_t bucket) noexcept {
  return g_stripes[bucket % kStripes];
}

// An entry for stripe s (its lock held), nullptr when out of memory.
LeakEntry* new_entry(Stripe& s) noexcept {
  if (LeakEntry* e = s.spare; e != nullptr) {
    s.spare = e->next;
    return e;
  }
  std::lock_guard<Lock> lock(g_chunk_lock);
  if (g_chunk_next == nullptr ||
      static_cast<std::size_t>(g_chunk_end - g_chunk_next) < sizeof(LeakEntry)) {
    auto* chunk = static_cast<char*>(os_map(kChunkBytes));
    if (chunk == nullptr) return nullptr;
    g_chunk_next = chunk;
    g_chunk_end = chunk + kChunkBytes;
  }
  auto* e = reinterpret_cast<LeakEntry*>(g_chunk_next);
  g_chunk_next += sizeof(LeakEntry);
  return e;
}

// --- scratch memory and the process's mappings -------------------------------------------

// Memory for the check itself, mapped and unmapped whole: the check allocates nothing
// from the heap while other threads are stopped (one may hold a heap lock).
template <typename T>
class Scratch {
 public:
  Scratch() noexcept = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (data_ != nullptr) os_unmap(data_, bytes_);
  }
  bool reserve(std::size_t capacity) noexcept {
    bytes_ = (std::max<std::size_t>(capacity, 1) * sizeof(T) + 4095) & ~std::size_t{4095};
    data_ = static_cast<T*>(os_map(bytes_));
    capacity_ = data_ == nullptr ? 0 : capacity;
    return data_ != nullptr;
  }
  bool push(const T& v) noexcept {
    if (size_ == capacity_) return false;
    data_[size_++] = v;
    return true;
  }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }
  T pop() noexcept { return data_[--size_]; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  std::size_t bytes_ = 0;
};

struct Range {
  std::uintptr_t begin;
  std::uintptr_t end;
};

// /proc/self/maps, sorted by address: the bounds of a thread's stack and TLS.
bool read_mappings(Scratch<Range>& out) noexcept {
  if (!out.reserve(65536)) return false;
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[8192];
  std::size_t used = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buffer + used, sizeof buffer - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += static_cast<std::size_t>(n);
    std::size_t line = 0;
    for (std::size_t i = 0; i < used; ++i) {
      if (buffer[i] != '\n') continue;
      buffer[i] = '\0';
      unsigned long begin = 0;
      unsigned long end = 0;
      char perms[5] = {};
      if (std::sscanf(buffer + line, "%lx-%lx %4s", &begin, &end, perms) == 3 && perms[0] == 'r')
        out.push({begin, end});
      line = i + 1;
    }
    std::memmove(buffer, buffer + line, used - line);
    used -= line;
  }
  ::close(fd);
  return true;
}

// The readable mapping holding address a, or {0, 0}.
Range mapping_of(const Scratch<Range>& maps, std::uintptr_t a) noexcept {
  std::size_t lo = 0;
  std::size_t hi = maps.size();
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (maps[mid].end <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < maps.size() && maps[lo].begin <= a) return maps[lo];
  return {0, 0};
}

// The writable segments of every loaded object, the loader's code, and the size of the
// static TLS blocks (a thread's TLS lies below its thread pointer on x86-64).
struct LoadedObjects {
  Scratch<Range> globals;
  Range loader{0, 0};
  std::uintptr_t loader_base = 0;
  std::size_t tls_bytes = 0;
};

int add_object(dl_phdr_info* info, std::size_t, void* context) noexcept {
  auto& objects = *static_cast<LoadedObjects*>(context);
  const bool is_loader = info->dlpi_addr == objects.loader_base && objects.loader_base != 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& h = info->dlpi_phdr[i];
    const std::uintptr_t begin = info->dlpi_addr + h.p_vaddr;
    const std::uintptr_t end = begin + h.p_memsz;
    if (h.p_type == PT_TLS) objects.tls_bytes += (h.p_memsz + 63) & ~ElfW(Xword){63};
    if (h.p_type != PT_LOAD) continue;
    if ((h.p_flags & PF_W) != 0) objects.globals.push({begin, end});
    if (is_loader && (h.p_flags & PF_X) != 0) objects.loader = {begin, end};
  }
  return 0;
}

// --- stopping the other threads ----------------------------------------------------------

// SIGPWR, as the Boehm collector stops threads on Linux: no libc or runtime uses it.
constexpr int kStopSignal = SIGPWR;
constexpr std::size_t kMaxThreads = 8192;

enum : int { kAsked = 0, kStopped = 1, kGone = 2 };

struct StoppedThread {
  pid_t tid = 0;
  std::atomic<int> state{kAsked};
  std::uintptr_t sp = 0;  // the interrupted stack pointer
  std::uintptr_t tp = 0;  // the thread pointer (pthread_self)
  ucontext_t context{};   // the registers
};

// Mapped on the first check and never unmapped: a thread that did not stop in time may
// still run the handler later, which reads it.
constinit StoppedThread* g_threads = nullptr;
constinit std::atomic<std::size_t> g_thread_count{0};
constinit std::atomic<int> g_resume{0};

bool map_thread_table() noexcept {
  if (g_threads == nullptr)
    g_threads = static_cast<StoppedThread*>(os_map(kMaxThreads * sizeof(StoppedThread)));
  return g_threads != nullptr;
}

pid_t current_tid() noexcept {
  return static_cast<pid_t>(::syscall(SYS_gettid));
}

std::uintptr_t interrupted_sp(const ucontext_t& uc,
                              [[maybe_unused]] std::uintptr_t fallback) noexcept {
#if defined(__x86_64__)
  return static_cast<std::uintptr_t>(uc.uc_mcontext.gregs[REG_RSP]);
#elif defined(__aarch64__)
  return static_cast<std::uintptr_t>(uc.uc_mcontext.sp);
#else
  (void)uc;
  return fallback;
#endif
}

void on_stop_signal(int, siginfo_t*, void* context) {
  const int saved_errno = errno;
  const pid_t tid = current_tid();
  const std::size_t n = g_thread_count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    StoppedThread& t = g_threads[i];
    if (t.tid != tid || t.state.load(std::memory_order_relaxed) != kAsked) continue;
    std::memcpy(&t.context, context, sizeof(ucontext_t));
    volatile char here = 0;
    t.sp = interrupted_sp(t.context, reinterpret_cast<std::uintptr_t>(&here));
    t.tp = static_cast<std::uintptr_t>(::pthread_self());  // glibc: the descriptor's address
    t.state.store(kStopped, std::memory_order_release);
    while (g_resume.load(std::memory_order_acquire) == 0)
      ::syscall(SYS_futex, reinterpret_cast<int*>(&g_resume), FUTEX_WAIT_PRIVATE, 0, nullptr);
    break;
  }
  errno = saved_errno;
}

// Stops every thread but this one; false when the threads cannot be listed. The
// threads that did not stop within a second (the signal blocked) are named on the
// report's descriptor: their stacks are not scanned.
bool stop_other_threads(struct sigaction* old_action) noexcept {
  g_resume.store(0, std::memory_order_relaxed);
  g_thread_count.store(0, std::memory_order_relaxed);
  struct sigaction action {};
  action.sa_sigaction = on_stop_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigfillset(&action.sa_mask);
  if (::sigaction(kStopSignal, &action, old_action) != 0) return false;
  const int dir = ::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    ::sigaction(kStopSignal, old_action, nullptr);
    return false;
  }
  const pid_t self = current_tid();
  std::size_t n = 0;
  alignas(8) char buffer[4096];
  for (;;) {
    const long got = ::syscall(SYS_getdents64, dir, buffer, sizeof buffer);
    if (got <= 0) break;
    for (long offset = 0; offset < got;) {
      // struct linux_dirent64: inode (8), offset (8), record length (2), type (1), name.
      unsigned short length = 0;
      std::memcpy(&length, buffer + offset + 16, sizeof length);
      const char* name = buffer + offset + 19;
      offset += length;
      if (name[0] < '0' || name[0] > '9') continue;
      const auto tid = static_cast<pid_t>(std::strtol(name, nullptr, 10));
      if (tid == self || n == kMaxThreads) continue;
      g_threads[n].tid = tid;
      g_threads[n].state.store(kAsked, std::memory_order_relaxed);
      ++n;
    }
  }
  ::close(dir);
  g_thread_count.store(n, std::memory_order_release);
  const pid_t pid = ::getpid();
  for (std::size_t i = 0; i < n; ++i) {
    if (::syscall(SYS_tgkill, pid, g_threads[i].tid, kStopSignal) != 0)
      g_threads[i].state.store(kGone, std::memory_order_relaxed);
  }
  // Wait up to a second; a thread that ends meanwhile is gone.
  for (int round = 0; round < 1000; ++round) {
    bool waiting = false;
    for (std::size_t i = 0; i < n; ++i) {
      StoppedThread& t = g_threads[i];
      if (t.state.load(std::memory_order_acquire) != kAsked) continue;
      if (::syscall(SYS_tgkill, pid, t.tid, 0) != 0) {
        t.state.store(kGone, std::memory_order_relaxed);
        continue;
      }
      waiting = true;
    }
    if (!waiting) return true;
    const timespec millisecond{0, 1000000};
    ::nanosleep(&millisecond, nullptr);
  }
  return true;
}

// Lets the stopped threads go. The handler stays installed if a thread never stopped:
// its signal may still be pending, and SIGPWR's default action ends the process.
void resume_other_threads(const struct sigaction& old_action) noexcept {
  g_resume.store(1, std::memory_order_release);
  ::syscall(SYS_futex, reinterpret_cast<int*>(&g_resume), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
            nullptr, 0);
  bool all_stopped = true;
  for (std::size_t i = 0; i < g_thread_count.load(std::memory_order_relaxed); ++i)
    all_stopped = all_stopped && g_threads[i].state.load(std::memory_order_acquire) != kAsked;
  if (all_stopped) ::sigaction(kStopSignal, &old_action, nullptr);
}

// --- marking -------------------------------------------------------------------------------

enum : std::uint8_t { kUnreached = 0, kReachable = 1, kIndirect = 2 };

struct Block {
  std::uintptr_t begin;
  std::uintptr_t end;  // begin + max(size, 1)
  const ProfileSite* site;
  std::uint8_t state;
};

class Marker {
 public:
  Marker(Scratch<Block>& blocks, Scratch<std::uint32_t>& work) noexcept
      : blocks_(blocks), work_(work) {
    if (blocks.size() != 0) {
      lowest_ = blocks[0].begin;
      for (const Block& b : blocks)
        highest_ = std::max(highest_, b.end);
    }
  }

  // The block holding address v, or -1.
  [[nodiscard]] long find(std::uintptr_t v) const noexcept {
    if (v < lowest_ || v >= highest_) return -1;
    std::size_t lo = 0;
    std::size_t hi = blocks_.size();
    while (lo < hi) {  // the first block starting above v
      const std::size_t mid = (lo + hi) / 2;
      if (blocks_[mid].begin <= v) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo == 0 || v >= blocks_[lo - 1].end) return -1;
    return static_cast<long>(lo - 1);
  }

  // Every aligned word of [begin, end) that points into a block marks it `to` (from
  // kUnreached only); reachable ones are queued for their own scan. `self`: the block
  // being scanned (its pointers to itself do not count), or -1.
  __attribute__((no_sanitize("address", "thread", "hwaddress"))) void scan(std::uintptr_t begin,
                                                                           std::uintptr_t end,
                                                                           std::uint8_t to,
                                                                           long self) noexcept {
    begin = (begin + sizeof(void*) - 1) & ~(sizeof(void*) - 1);
    for (std::uintptr_t a = begin; a + sizeof(void*) <= end; a += sizeof(void*)) {
      const std::uintptr_t v = *address_as<const volatile std::uintptr_t>(a);
      if (v < lowest_ || v >= highest_) continue;
      const long i = find(v);
      if (i < 0 || i == self || blocks_[i].state != kUnreached) continue;
      blocks_[i].state = to;
      if (to == kReachable) work_.push(static_cast<std::uint32_t>(i));
    }
  }

  void mark_root(std::size_t i) noexcept {
    if (blocks_[i].state != kUnreached) return;
    blocks_[i].state = kReachable;
    work_.push(static_cast<std::uint32_t>(i));
  }

  // Scans the queued blocks until none is left.
  void flood() noexcept {
    while (work_.size() != 0) {
      const std::uint32_t i = work_.pop();
      scan(blocks_[i].begin, blocks_[i].end, kReachable, static_cast<long>(i));
    }
  }

 private:
  Scratch<Block>& blocks_;
  Scratch<std::uint32_t>& work_;
  std::uintptr_t lowest_ = 0;
  std::uintptr_t highest_ = 0;
};

// The thread pointer's TLS: the static TLS blocks below it, the thread's descriptor
// (its TLS vector) above, inside the mapping that holds it.
void scan_tls(Marker& m, const Scratch<Range>& maps, std::uintptr_t tp,
              std::size_t tls_bytes) noexcept {
  const Range r = mapping_of(maps, tp);
  if (r.end == 0) return;
  const std::size_t below = tls_bytes + 4096;  // glibc's surplus for dlopen()ed objects
  const std::uintptr_t begin = tp - r.begin > below ? tp - below : r.begin;
  const std::uintptr_t end = r.end - tp > 4096 ? tp + 4096 : r.end;
  m.scan(begin, end, kReachable, -1);
}

// A thread's stack from its stack pointer (less the red zone below it, where an
// interrupted function may keep data) to the top of
// the mapping holding it; for a thread whose descriptor (at tp) tops its stack, as
// glibc's threads', to just past the descriptor: an unrelated mapping that the kernel
// merged above it is not scanned.
void scan_stack(Marker& m, const Scratch<Range>& maps, std::uintptr_t sp, std::uintptr_t tp,
                std::uintptr_t red_zone) noexcept {
  const Range r = mapping_of(maps, sp);
  if (r.end == 0) return;
  const std::uintptr_t begin = sp - r.begin > red_zone ? sp - red_zone : r.begin;
  std::uintptr_t end = r.end;
  if (tp > sp && tp < r.end && r.end - tp > 4096) end = tp + 4096;
  m.scan(begin, end, kReachable, -1);
}

// The calling thread's registers as the check began (ThisThread), and its stack from
// there up: the check's own frames, below, hold addresses of blocks that must not count.
struct ThisThread {
  ucontext_t registers;
};

void scan_this_thread(Marker& m, const Scratch<Range>& maps, const ThisThread& self,
                      std::size_t tls_bytes) noexcept {
  m.scan(reinterpret_cast<std::uintptr_t>(&self.registers),
         reinterpret_cast<std::uintptr_t>(&self.registers + 1), kReachable, -1);
  const auto tp = static_cast<std::uintptr_t>(::pthread_self());
  scan_stack(m, maps, reinterpret_cast<std::uintptr_t>(&self), tp, 0);
  scan_tls(m, maps, tp, tls_bytes);
}

template <typename T>
Range range_of(const T& object) noexcept {
  const auto begin = reinterpret_cast<std::uintptr_t>(&object);
  return {begin, begin + sizeof(T)};
}

// The globals, less the heap's own state: the page heap, the central cache and the page
// map hold the addresses of spans and free runs, and a span's start is the address of its
// first block, which would then always look reachable.
void scan_globals(Marker& m, const Scratch<Range>& globals) noexcept {
  Range excluded[] = {range_of(g_page_heap), range_of(g_central_cache), range_of(g_page_map),
                      range_of(PageMap::root()), range_of(g_metadata)};
  std::sort(std::begin(excluded), std::end(excluded),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (const Range& r : globals) {
    std::uintptr_t at = r.begin;
    for (const Range& x : excluded) {
      if (x.end <= at || x.begin >= r.end) continue;
      if (x.begin > at) m.scan(at, x.begin, kReachable, -1);
      at = std::max(at, x.end);
    }
    if (at < r.end) m.scan(at, r.end, kReachable, -1);
  }
}

bool loader_allocated(const Block& b, const Range& loader) noexcept {
  if (b.site == nullptr || b.site->depth == 0) return false;
  const auto pc = reinterpret_cast<std::uintptr_t>(b.site->frames[0]);
  return pc >= loader.begin && pc < loader.end;
}

// --- the report ----------------------------------------------------------------------------

struct Leak {
  const ProfileSite* site;
  bool direct;
  std::size_t bytes;
  std::size_t blocks;
};

// "function file:line" for each address of one object, from addr2line; empty strings
// where it has nothing (not installed, no debug information).
std::vector<std::string> addr2line(const std::string& object,
                                   const std::vector<std::uintptr_t>& offsets) {
  std::vector<std::string> lines(offsets.size());
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return lines;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args = {"addr2line", "-C", "-f", "-e", object};
  for (const std::uintptr_t o : offsets) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "%#" PRIxPTR, o);
    args.emplace_back(hex);
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  // Its environment without MEMPOOL_LEAK_CHECK: under the drop-in library, addr2line
  // would check itself at exit and start another addr2line, and so on.
  std::vector<char*> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, "MEMPOOL_LEAK_CHECK", 18) != 0) env.push_back(*e);
  env.push_back(nullptr);
  pid_t child = 0;
  const int spawned =
      ::posix_spawnp(&child, "addr2line", &actions, nullptr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  std::string text;
  if (spawned == 0) {
    char chunk[4096];
    for (;;) {
      const ssize_t n = ::read(out[0], chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(chunk, static_cast<std::size_t>(n));
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }
  ::close(out[0]);
  // Two lines an address: the function, then file:line ("??" and "??:0" when unknown).
  std::size_t at = 0;
  for (std::string& line : lines) {
    const std::size_t f = text.find('\n', at);
    if (f == std::string::npos) break;
    const std::size_t l = text.find('\n', f + 1);
    if (l == std::string::npos) break;
    const std::string function = text.substr(at, f - at);
    std::string place = text.substr(f + 1, l - f - 1);
    if (const std::size_t d = place.find(" (discriminator"); d != std::string::npos)
      place.resize(d);
    at = l + 1;
    // No file:line (no debug information): the name is only the nearest symbol, and the
    // caller says where the address lies instead.
    if (function == "??" || place.rfind("??", 0) == 0) continue;
    line = function;
    line.append(" ").append(place);
  }
  return lines;
}

struct ObjectOf {
  std::string path;
  std::uintptr_t bias = 0;
};

int find_object(dl_phdr_info* info, std::size_t, void* context) noexcept {
  auto* want = static_cast<std::pair<std::uintptr_t, ObjectOf*>*>(context);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& h = info->dlpi_phdr[i];
    const std::uintptr_t begin = info->dlpi_addr + h.p_vaddr;
    if (h.p_type != PT_LOAD || want->first < begin || want->first >= begin + h.p_memsz) continue;
    if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') {
      want->second->path = info->dlpi_name;
    } else {  // the program: its path, for addr2line (another process)
      char path[PATH_MAX];
      const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
      want->second->path = n > 0 ? std::string(path, static_cast<std::size_t>(n)) : "";
    }
    want->second->bias = info->dlpi_addr;
    return 1;
  }
  return 0;
}

// A name for every frame of the leaks reported: "function file:line" (addr2line, from
// debug information), else "symbol (object+0x1f2e)" (dladdr), else "(object+0x1f2e)".
std::map<std::uintptr_t, std::string> symbolize(const std::vector<Leak>& leaks) {
  std::map<std::uintptr_t, std::string> names;
  std::map<std::string, std::vector<std::uintptr_t>> by_object;  // pcs per object
  std::map<std::uintptr_t, ObjectOf> objects;
  for (const Leak& l : leaks) {
    for (std::uint32_t i = 0; i < l.site->depth; ++i) {
      const std::uintptr_t pc = reinterpret_cast<std::uintptr_t>(l.site->frames[i]) - 1;
      if (names.count(pc) != 0) continue;
      names[pc] = "";
      ObjectOf o;
      std::pair<std::uintptr_t, ObjectOf*> want{pc, &o};
      if (::dl_iterate_phdr(find_object, &want) == 0) continue;
      by_object[o.path].push_back(pc);
      objects[pc] = o;
    }
  }
  for (auto& [path, pcs] : by_object) {
    std::vector<std::uintptr_t> offsets;
    for (const std::uintptr_t pc : pcs)
      offsets.push_back(pc - objects[pc].bias);
    const std::vector<std::string> lines = addr2line(path, offsets);
    for (std::size_t i = 0; i < pcs.size(); ++i) {
      if (!lines[i].empty()) {
        names[pcs[i]] = lines[i];
        continue;
      }
      // LeakSanitizer's form: "symbol (object+offset)", the symbol from dladdr (the
      // nearest exported one) when there is one.
      Dl_info info{};
      char offset[40];
      std::snprintf(offset, sizeof offset, "+%#" PRIxPTR ")", offsets[i]);
      const bool named =
          ::dladdr(address_as<void>(pcs[i]), &info) != 0 && info.dli_sname != nullptr;
      std::string symbol;
      if (named) {
        int status = 0;
        char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
        symbol = std::string(status == 0 ? demangled : info.dli_sname) + " ";
        std::free(demangled);  // NOLINT(cppcoreguidelines-no-malloc): __cxa_demangle's
      }
      names[pcs[i]] = symbol.append("(").append(path).append(offset);
    }
  }
  return names;
}

void write_all(int fd, const std::string& text) noexcept {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    done += static_cast<std::size_t>(w);
  }
}

// --- suppressions (MEMPOOL_LEAK_CHECK_SUPPRESSIONS) ------------------------------------

// LeakSanitizer's suppression patterns: `*` matches any run of characters, `^` and `$`
// anchor the start and the end; otherwise the pattern may match anywhere in the text.
bool glob_matches(const char* p, const char* t) noexcept {
  for (; *p != '\0'; ++p, ++t) {
    if (*p == '*') {
      for (;; ++t) {
        if (glob_matches(p + 1, t)) return true;
        if (*t == '\0') return false;
      }
    }
    if (*p == '$' && p[1] == '\0') return *t == '\0';
    if (*t != *p) return false;
  }
  return true;  // the rest of the text is free
}

bool suppression_matches(const std::string& pattern, const std::string& text) noexcept {
  if (!pattern.empty() && pattern[0] == '^') return glob_matches(pattern.c_str() + 1, text.c_str());
  for (std::size_t at = 0; at <= text.size(); ++at)
    if (glob_matches(pattern.c_str(), text.c_str() + at)) return true;
  return false;
}

struct Suppression {
  std::string pattern;
  std::size_t blocks = 0;
  std::size_t bytes = 0;
};

constinit char g_suppressions_path[PATH_MAX] = {};

// The `leak:PATTERN` lines of the suppressions file ('#' starts a comment).
std::vector<Suppression> read_suppressions() {
  std::vector<Suppression> out;
  if (g_suppressions_path[0] == '\0') return out;
  const int fd = ::open(g_suppressions_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    write_all(g_report_fd, std::string("mempool: leak check: cannot read the suppressions in ") +
                               g_suppressions_path + "\n");
    return out;
  }
  std::string text;
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fd);
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    line.erase(0, line.find_first_not_of(" \t"));
    line.erase(line.find_last_not_of(" \t\r") + 1);
    if (line.rfind("leak:", 0) == 0 && line.size() > 5) out.push_back({line.substr(5)});
  }
  return out;
}

// The suppression that matches a frame of this leak's stack (its function, file or
// object), or nullptr.
Suppression* suppressed_by(const Leak& l, const std::map<std::uintptr_t, std::string>& names,
                           std::vector<Suppression>& suppressions) noexcept {
  for (Suppression& s : suppressions) {
    for (std::uint32_t i = 0; i < l.site->depth; ++i) {
      const auto name = names.find(reinterpret_cast<std::uintptr_t>(l.site->frames[i]) - 1);
      if (name != names.end() && suppression_matches(s.pattern, name->second)) return &s;
    }
  }
  return nullptr;
}

// LeakSanitizer's layout, so that tools and eyes used to it read this one. Returns the
// bytes leaked that no suppression matched.
std::size_t report(std::vector<Leak>& leaks) {
  std::sort(leaks.begin(), leaks.end(), [](const Leak& a, const Leak& b) {
    if (a.direct != b.direct) return a.direct;
    return a.bytes > b.bytes;
  });
  const std::map<std::uintptr_t, std::string> names = symbolize(leaks);
  std::vector<Suppression> suppressions = read_suppressions();
  std::vector<Leak> kept;
  for (const Leak& l : leaks) {
    if (Suppression* s = suppressed_by(l, names, suppressions); s != nullptr) {
      s->blocks += l.blocks;
      s->bytes += l.bytes;
    } else {
      kept.push_back(l);
    }
  }
  std::string used;
  for (const Suppression& s : suppressions) {
    if (s.blocks == 0) continue;
    char row[64];
    std::snprintf(row, sizeof row, "%7zu %10zu ", s.blocks, s.bytes);
    used.append(row).append(s.pattern).append("\n");
  }
  if (!used.empty()) {
    used =
        "-----------------------------------------------------\nSuppressions used:\n"
        "  count      bytes template\n" +
        used + "-----------------------------------------------------\n";
  }
  leaks.swap(kept);
  if (leaks.empty()) {
    write_all(g_report_fd, used);
    return 0;
  }
  std::string text = "\n=================================================================\n";
  char line[160];
  std::snprintf(line, sizeof line, "==%d==ERROR: mempool leak check: detected memory leaks\n",
                static_cast<int>(::getpid()));
  text += line;
  std::size_t bytes = 0;
  std::size_t blocks = 0;
  for (const Leak& l : leaks) {
    std::snprintf(line, sizeof line, "\n%s leak of %zu byte(s) in %zu object(s) allocated from:\n",
                  l.direct ? "Direct" : "Indirect", l.bytes, l.blocks);
    text += line;
    for (std::uint32_t i = 0; i < l.site->depth; ++i) {
      const std::uintptr_t pc = reinterpret_cast<std::uintptr_t>(l.site->frames[i]) - 1;
      const auto name = names.find(pc);
      std::snprintf(line, sizeof line, "    #%u %#" PRIxPTR " in ", i, pc);
      text += line;
      text += name != names.end() ? name->second : "";
      text += "\n";
    }
    bytes += l.bytes;
    blocks += l.blocks;
  }
  if (!used.empty()) text.append("\n").append(used);
  std::snprintf(line, sizeof line, "\nSUMMARY: mempool: %zu byte(s) leaked in %zu allocation(s).\n",
                bytes, blocks);
  text += line;
  write_all(g_report_fd, text);
  return bytes;
}

// The check itself (see the top of this file): the leaks, grouped, or an empty list.
// What could not be scanned (threads that did not stop) is said on the report's descriptor.
std::vector<Leak> find_leaks(const ThisThread& self) {
  LoadedObjects objects;
  Scratch<Range> maps;
  Scratch<Block> blocks;
  Scratch<std::uint32_t> work;
  objects.loader_base = ::getauxval(AT_BASE);
  if (!objects.globals.reserve(16384) || !read_mappings(maps) || !map_thread_table()) {
    write_all(g_report_fd, "mempool: leak check: out of memory, not run\n");
    return {};
  }
  ::dl_iterate_phdr(add_object, &objects);

  leak_check_lock();
  std::size_t count = 0;
  for (std::size_t b = 0; b < kBuckets; ++b) {
    for (const LeakEntry* e = g_buckets[b]; e != nullptr; e = e->next)
      ++count;
  }
  std::vector<Leak> leaks;
  if (count == 0 || !blocks.reserve(count) || !work.reserve(count)) {
    leak_check_unlock();
    return leaks;
  }
  for (std::size_t b = 0; b < kBuckets; ++b) {
    for (const LeakEntry* e = g_buckets[b]; e != nullptr; e = e->next)
      blocks.push({e->address, e->address + (e->size == 0 ? 1 : e->size), e->site, kUnreached});
  }
  std::sort(blocks.begin(), blocks.end(),
            [](const Block& a, const Block& b) { return a.begin < b.begin; });

  struct sigaction old_action {};
  const bool stopped = stop_other_threads(&old_action);
  Marker m(blocks, work);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    if (loader_allocated(blocks[i], objects.loader)) m.mark_root(i);
  scan_globals(m, objects.globals);
  scan_this_thread(m, maps, self, objects.tls_bytes);
  std::size_t unscanned = 0;
  for (std::size_t i = 0; i < g_thread_count.load(std::memory_order_relaxed); ++i) {
    const StoppedThread& t = g_threads[i];
    const int state = t.state.load(std::memory_order_acquire);
    if (state == kAsked) ++unscanned;
    if (state != kStopped) continue;
    m.scan(reinterpret_cast<std::uintptr_t>(&t.context),
           reinterpret_cast<std::uintptr_t>(&t.context + 1), kReachable, -1);
    scan_stack(m, maps, t.sp, t.tp, 128);  // the x86-64 ABI's red zone
    scan_tls(m, maps, t.tp, objects.tls_bytes);
  }
  m.flood();
  // What is left is leaked; what a leaked block points to is an indirect leak.
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].state != kReachable)
      m.scan(blocks[i].begin, blocks[i].end, kIndirect, static_cast<long>(i));
  }
  if (stopped) resume_other_threads(old_action);
  leak_check_unlock();

  if (!stopped) {
    write_all(g_report_fd,
              "mempool: leak check: the threads could not be stopped: only this "
              "thread's stack was scanned\n");
  }
  if (unscanned != 0) {
    char line[160];
    std::snprintf(line, sizeof line,
                  "mempool: leak check: %zu thread(s) did not stop (the signal %d blocked?): "
                  "their stacks were not scanned\n",
                  unscanned, kStopSignal);
    write_all(g_report_fd, line);
  }

  // Grouped by site and kind.
  std::map<std::pair<const ProfileSite*, bool>, Leak> groups;
  for (const Block& b : blocks) {
    if (b.state == kReachable) continue;
    const bool direct = b.state == kUnreached;
    Leak& l = groups[{b.site, direct}];
    l.site = b.site;
    l.direct = direct;
    l.bytes += b.end - b.begin;
    ++l.blocks;
  }
  for (auto& [key, leak] : groups)
    if (leak.site != nullptr) leaks.push_back(leak);
  return leaks;
}

// The bytes reported (size 0 blocks count 1, as their end does).
std::size_t check_and_report(const ThisThread& self) noexcept {
  std::vector<Leak> leaks = find_leaks(self);
  if (leaks.empty()) return 0;
  return report(leaks);
}

// The registers first, before the check loads any block's address into one. Out of
// line: getcontext() returns twice as far as the compiler knows.
MEMPOOL_NOINLINE std::size_t check_from_here() noexcept {
  ThisThread self{};  // zeroed: getcontext() leaves parts of it (the vector registers) as they were
  ::getcontext(&self.registers);
  return check_and_report(self);
}

// Serializes checks (one at exit, any number on demand).
constinit std::mutex g_check_mutex;

void check_at_exit() noexcept {
  const std::size_t leaked = leak_check_run();
  if (leaked != 0 && g_exit_code != 0) {
    // The program's buffered output first, as a normal exit would write it.
    std::fflush(nullptr);
    ::_exit(g_exit_code);
  }
}

}  // namespace

void leak_check_configure(int exit_code, const char* suppressions) noexcept {
  if (g_buckets == nullptr) {
    // NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers
    g_buckets = static_cast<LeakEntry**>(os_map(kBuckets * sizeof(LeakEntry*)));
    if (g_buckets == nullptr) {
      write_stderr_line("MEMPOOL_LEAK_CHECK: out of memory for its table; the check is off");
      return;
    }
  }
  g_exit_code = exit_code;
  if (suppressions != nullptr)
    std::snprintf(g_suppressions_path, sizeof g_suppressions_path, "%s", suppressions);
  g_leak_check = true;
}

void leak_check_start() noexcept {
  if (!g_leak_check) return;
  const int copy = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (copy >= 0) g_report_fd = copy;
  std::atexit(check_at_exit);
}

void leak_track(const void* p, std::size_t n, const ProfileSite* site) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const std::size_t b = bucket_of(address);
  Stripe& s = stripe_of(b);
  std::lock_guard<Lock> lock(s.lock);
  for (LeakEntry* e = g_buckets[b]; e != nullptr; e = e->next) {
    if (e->address == address) {  // freed untracked (a cache filled before the check began)
      e->size = n;
      e->site = site;
      return;
    }
  }
  LeakEntry* e = new_entry(s);
  if (e == nullptr) return;
  *e = {g_buckets[b], address, n, site};
  g_buckets[b] = e;
}

void* leak_resize(void* p, std::size_t n) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const std::size_t b = bucket_of(address);
  std::lock_guard<Lock> lock(stripe_of(b).lock);
  for (LeakEntry* e = g_buckets[b]; e != nullptr; e = e->next) {
    if (e->address == address) {
      e->size = n;
      break;
    }
  }
  return p;
}

const ProfileSite* leak_untrack(const void* p) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const std::size_t b = bucket_of(address);
  Stripe& s = stripe_of(b);
  std::lock_guard<Lock> lock(s.lock);
  for (LeakEntry** link = &g_buckets[b]; *link != nullptr; link = &(*link)->next) {
    LeakEntry* e = *link;
    if (e->address != address) continue;
    *link = e->next;
    const ProfileSite* site = e->site;
    e->next = s.spare;
    s.spare = e;
    return site;
  }
  return nullptr;
}

const ProfileSite* leak_site_of(const void* p) noexcept {
  if (!g_leak_check) return nullptr;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const std::size_t b = bucket_of(address);
  std::lock_guard<Lock> lock(stripe_of(b).lock);
  for (const LeakEntry* e = g_buckets[b]; e != nullptr; e = e->next)
    if (e->address == address) return e->site;
  return nullptr;
}

MEMPOOL_NOINLINE void leak_scrub_stack() noexcept {
  // 8 KiB: deeper than the heap's slow paths go below their caller.
  char dead[8192];
  ::explicit_bzero(dead, sizeof dead);
  asm volatile("" : : "r"(dead) : "memory");
}

void leak_check_lock() noexcept {
  for (Stripe& s : g_stripes)
    s.lock.lock();
  g_chunk_lock.lock();
}

void leak_check_unlock() noexcept {
  g_chunk_lock.unlock();
  for (Stripe& s : g_stripes)
    s.lock.unlock();
}

std::size_t leak_check_run() noexcept {
  if (!g_leak_check) return 0;
  std::lock_guard<std::mutex> lock(g_check_mutex);
  // What the check allocates (the report, addr2line's spawn) is not tracked.
  const bool was_busy = heap_profiler_set_busy(true);
  const std::size_t leaked = check_from_here();
  heap_profiler_set_busy(was_busy);
  return leaked;
}

}  // namespace mempool::detail

namespace mempool {

std::size_t leak_check() noexcept {
  return detail::leak_check_run();
}

}  // namespace mempool

extern "C" size_t mp_leak_check(void) noexcept {
  return mempool::leak_check();
}
