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
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>

#include "../options.hpp"
#include "../os/write_all.hpp"
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

// The dynamic loader's lookups, weak: a fully static program (mempool::override linked
// with -static) has no loader, and a reference would link glibc's static one, whose
// dlopen warns at link time that it needs the shared glibc at run time. Null there:
// names then come from addr2line alone (and the heap profiler's stacks stay numbers).
#pragma weak dladdr
#pragma weak dlsym

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
  void truncate(std::size_t size) noexcept { size_ = size < size_ ? size : size_; }

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
//
// Plain arrays and one growing text, not std::string, std::vector or std::map: those
// reach libstdc++ (its error paths, its red-black tree), and the drop-in library links
// nothing of it. The report runs after the other threads are let go, so its text may
// come from the heap.

// A text that grows in the heap; appends after a failed allocation are dropped.
class Text {
 public:
  Text() noexcept = default;
  Text(const Text&) = delete;
  Text& operator=(const Text&) = delete;
  ~Text() { std::free(data_); }  // NOLINT(cppcoreguidelines-no-malloc): see the class

  void append(const char* s, std::size_t n) noexcept {
    if (size_ + n + 1 > capacity_) {
      const std::size_t capacity = std::max(2 * capacity_, size_ + n + 1 + 256);
      // NOLINTNEXTLINE(cppcoreguidelines-no-malloc): see the class
      auto* grown = static_cast<char*>(std::realloc(data_, capacity));
      if (grown == nullptr) return;
      data_ = grown;
      capacity_ = capacity;
    }
    std::memcpy(data_ + size_, s, n);
    size_ += n;
    data_[size_] = '\0';
  }
  void append(const char* s) noexcept { append(s, std::strlen(s)); }
  __attribute__((format(printf, 2, 3))) void appendf(const char* format, ...) noexcept {
    char line[256];
    va_list args;
    va_start(args, format);
    const int n = std::vsnprintf(line, sizeof line, format, args);
    va_end(args);
    if (n > 0) append(line, std::min(static_cast<std::size_t>(n), sizeof line - 1));
  }
  // Ends the text with a NUL (a string of its own among others) and returns where it began.
  std::size_t end_string(std::size_t begin) noexcept {
    append("", 1);
    return begin;
  }
  // The string at offset ("" past the end: an append that failed).
  [[nodiscard]] const char* at(std::size_t offset) const noexcept {
    return offset < size_ ? data_ + offset : "";
  }
  char* data() noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

// The report is best effort: a descriptor that refuses it loses it (nothing to tell).
void write_all(int fd, const char* text) noexcept {
  detail::write_all(fd, text, std::strlen(text));
}
void write_all(int fd, const Text& text) noexcept {
  detail::write_all(fd, text.at(0), text.size());
}

// The whole of descriptor fd, appended to out.
void read_all(int fd, Text& out) noexcept {
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(chunk, static_cast<std::size_t>(n));
  }
}

struct Leak {
  const ProfileSite* site;
  bool direct;
  std::size_t bytes;
  std::size_t blocks;
};

// One frame of the stacks reported (pc: its return address less one): the object it lies
// in (an offset into the paths' text, kNone when none) and its name (an offset into the
// names' text, kNone until it has one).
constexpr std::size_t kNone = ~std::size_t{0};
struct Frame {
  std::uintptr_t pc;
  std::uintptr_t bias;
  std::size_t object;
  std::size_t name;
};

struct Names {
  Scratch<Frame> frames;  // sorted by pc, each pc once
  Text paths;
  Text text;

  // The name of the frame at pc: "" when it has none.
  [[nodiscard]] const char* of(std::uintptr_t pc) const noexcept {
    const Frame* f = std::lower_bound(frames.begin(), frames.end(), pc,
                                      [](const Frame& a, std::uintptr_t b) { return a.pc < b; });
    return f == frames.end() || f->pc != pc || f->name == kNone ? "" : text.at(f->name);
  }
};

std::uintptr_t pc_of(const ProfileSite* site, std::uint32_t i) noexcept {
  return reinterpret_cast<std::uintptr_t>(site->frames[i]) - 1;
}

// addr2line's "function file:line" for the frames of names.frames that lie in the
// object at names.paths.at(object); none where it has nothing (not installed, no debug
// information).
void addr2line(Names& names, std::size_t object) noexcept {
  const char* path = names.paths.at(object);
  std::size_t count = 0;
  for (const Frame& f : names.frames)
    count += f.object == object ? 1 : 0;
  struct Hex {
    char digits[24];
  };
  Scratch<Hex> hex;
  Scratch<char*> argv;
  Scratch<char*> env;
  std::size_t variables = 0;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    ++variables;
  if (!hex.reserve(count) || !argv.reserve(count + 6) || !env.reserve(variables + 1)) return;
  static char kArgs[4][10] = {"addr2line", "-C", "-f", "-e"};
  for (char* a : kArgs)
    argv.push(a);
  argv.push(const_cast<char*>(path));
  for (const Frame& f : names.frames) {
    if (f.object != object) continue;
    Hex h{};
    std::snprintf(h.digits, sizeof h.digits, "%#" PRIxPTR, f.pc - f.bias);
    hex.push(h);
    argv.push(hex[hex.size() - 1].digits);
  }
  argv.push(nullptr);
  // Its environment without MEMPOOL_LEAK_CHECK: under the drop-in library, addr2line
  // would check itself at exit and start another addr2line, and so on.
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, "MEMPOOL_LEAK_CHECK", 18) != 0) env.push(*e);
  env.push(nullptr);

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t child = 0;
  const int spawned =
      ::posix_spawnp(&child, "addr2line", &actions, nullptr, argv.begin(), env.begin());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  Text text;
  if (spawned == 0) {
    read_all(out[0], text);
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }
  ::close(out[0]);
  if (text.size() == 0) return;
  // Two lines an address: the function, then file:line ("??" and "??:0" when unknown).
  char* at = text.data();
  for (Frame& f : names.frames) {
    if (f.object != object) continue;
    char* function = at;
    char* f_end = std::strchr(function, '\n');
    if (f_end == nullptr) break;
    char* place = f_end + 1;
    char* l_end = std::strchr(place, '\n');
    if (l_end == nullptr) break;
    *f_end = '\0';
    *l_end = '\0';
    at = l_end + 1;
    if (char* d = std::strstr(place, " (discriminator"); d != nullptr) *d = '\0';
    // No file:line (no debug information): the name is only the nearest symbol, and the
    // caller says where the address lies instead.
    if (std::strcmp(function, "??") == 0 || std::strncmp(place, "??", 2) == 0) continue;
    const std::size_t begin = names.text.size();
    names.text.append(function);
    names.text.append(" ");
    names.text.append(place);
    f.name = names.text.end_string(begin);
  }
}

struct ObjectOf {
  std::uintptr_t pc;
  std::uintptr_t bias;
  char path[PATH_MAX];
};

int find_object(dl_phdr_info* info, std::size_t, void* context) noexcept {
  auto* want = static_cast<ObjectOf*>(context);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& h = info->dlpi_phdr[i];
    const std::uintptr_t begin = info->dlpi_addr + h.p_vaddr;
    if (h.p_type != PT_LOAD || want->pc < begin || want->pc >= begin + h.p_memsz) continue;
    if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') {
      std::snprintf(want->path, sizeof want->path, "%s", info->dlpi_name);
    } else {  // the program: its path, for addr2line (another process)
      const ssize_t n = ::readlink("/proc/self/exe", want->path, sizeof want->path - 1);
      want->path[n > 0 ? n : 0] = '\0';
    }
    want->bias = info->dlpi_addr;
    return 1;
  }
  return 0;
}

// __cxa_demangle when the C++ runtime is loaded (the drop-in library does not link it).
using Demangle = char* (*)(const char*, char*, std::size_t*, int*);
Demangle find_demangle() noexcept {
  if (&::dlsym == nullptr) return nullptr;  // weak (above): a fully static program
  return reinterpret_cast<Demangle>(::dlsym(RTLD_DEFAULT, "__cxa_demangle"));
}

// A name for every frame of the leaks reported: "function file:line" (addr2line, from
// debug information), else "symbol (object+0x1f2e)" (dladdr), else "(object+0x1f2e)".
bool symbolize(const Scratch<Leak>& leaks, Names& names) noexcept {
  std::size_t count = 0;
  for (const Leak& l : leaks)
    count += l.site->depth;
  if (!names.frames.reserve(count)) return false;
  for (const Leak& l : leaks) {
    for (std::uint32_t i = 0; i < l.site->depth; ++i)
      names.frames.push({pc_of(l.site, i), 0, kNone, kNone});
  }
  std::sort(names.frames.begin(), names.frames.end(),
            [](const Frame& a, const Frame& b) { return a.pc < b.pc; });
  names.frames.truncate(static_cast<std::size_t>(
      std::unique(names.frames.begin(), names.frames.end(),
                  [](const Frame& a, const Frame& b) { return a.pc == b.pc; }) -
      names.frames.begin()));
  // The object of each frame, its path once in names.paths.
  Scratch<std::size_t> objects;
  if (!objects.reserve(names.frames.size())) return false;
  ObjectOf o{};
  for (Frame& f : names.frames) {
    o.pc = f.pc;
    if (::dl_iterate_phdr(find_object, &o) == 0) continue;
    f.bias = o.bias;
    for (const std::size_t known : objects)
      if (std::strcmp(names.paths.at(known), o.path) == 0) f.object = known;
    if (f.object == kNone) {
      const std::size_t begin = names.paths.size();
      names.paths.append(o.path);
      f.object = names.paths.end_string(begin);
      objects.push(f.object);
    }
  }
  const Demangle demangle = find_demangle();
  for (const std::size_t object : objects) {
    addr2line(names, object);
    for (Frame& f : names.frames) {
      if (f.object != object || f.name != kNone) continue;
      // LeakSanitizer's form: "symbol (object+offset)", the symbol from dladdr (the
      // nearest exported one) when there is one.
      const std::size_t begin = names.text.size();
      Dl_info info{};
      if (&::dladdr != nullptr && ::dladdr(address_as<void>(f.pc), &info) != 0 &&
          info.dli_sname != nullptr) {
        int status = -1;
        char* demangled =
            demangle == nullptr ? nullptr : demangle(info.dli_sname, nullptr, nullptr, &status);
        names.text.append(status == 0 ? demangled : info.dli_sname);
        names.text.append(" ");
        std::free(demangled);  // NOLINT(cppcoreguidelines-no-malloc): __cxa_demangle's
      }
      names.text.append("(");
      names.text.append(names.paths.at(object));  // a path may be longer than appendf's line
      names.text.appendf("+%#" PRIxPTR ")", f.pc - f.bias);
      f.name = names.text.end_string(begin);
    }
  }
  return true;
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

bool suppression_matches(const char* pattern, const char* text) noexcept {
  if (pattern[0] == '^') return glob_matches(pattern + 1, text);
  for (const char* t = text;; ++t) {
    if (glob_matches(pattern, t)) return true;
    if (*t == '\0') return false;
  }
}

struct Suppression {
  const char* pattern;  // in Suppressions::file
  std::size_t blocks = 0;
  std::size_t bytes = 0;
};

struct Suppressions {
  Text file;
  Scratch<Suppression> list;
};

constinit char g_suppressions_path[PATH_MAX] = {};

// The `leak:PATTERN` lines of the suppressions file ('#' starts a comment).
void read_suppressions(Suppressions& out) noexcept {
  if (g_suppressions_path[0] == '\0') return;
  const int fd = ::open(g_suppressions_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    Text line;
    line.append("mempool: leak check: cannot read the suppressions in ");
    line.append(g_suppressions_path);
    line.append("\n");
    write_all(g_report_fd, line);
    return;
  }
  read_all(fd, out.file);
  ::close(fd);
  std::size_t lines = 1;
  for (std::size_t i = 0; i < out.file.size(); ++i)
    lines += out.file.data()[i] == '\n' ? 1 : 0;
  if (out.file.size() == 0 || !out.list.reserve(lines)) return;
  // Each line cut out in place: its blanks trimmed, a NUL at its end.
  char* at = out.file.data();
  char* const end = at + out.file.size();
  while (at < end) {
    char* line_end = std::find(at, end, '\n');
    *line_end = '\0';
    char* line = at;
    at = line_end + 1;
    while (*line == ' ' || *line == '\t')
      ++line;
    for (char* e = line_end; e > line && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r');)
      *--e = '\0';
    if (std::strncmp(line, "leak:", 5) == 0 && line[5] != '\0') out.list.push({line + 5});
  }
}

// The suppression that matches a frame of this leak's stack (its function, file or
// object), or nullptr.
Suppression* suppressed_by(const Leak& l, const Names& names,
                           Scratch<Suppression>& suppressions) noexcept {
  for (Suppression& s : suppressions) {
    for (std::uint32_t i = 0; i < l.site->depth; ++i)
      if (suppression_matches(s.pattern, names.of(pc_of(l.site, i)))) return &s;
  }
  return nullptr;
}

// LeakSanitizer's layout, so that tools and eyes used to it read this one. Returns the
// bytes leaked that no suppression matched.
std::size_t report(Scratch<Leak>& leaks) noexcept {
  std::sort(leaks.begin(), leaks.end(), [](const Leak& a, const Leak& b) {
    if (a.direct != b.direct) return a.direct;
    return a.bytes > b.bytes;
  });
  Names names;
  if (!symbolize(leaks, names)) {
    write_all(g_report_fd, "mempool: leak check: out of memory for the report\n");
    return 0;
  }
  Suppressions suppressions;
  read_suppressions(suppressions);
  std::size_t kept = 0;
  for (const Leak& l : leaks) {
    if (Suppression* s = suppressed_by(l, names, suppressions.list); s != nullptr) {
      s->blocks += l.blocks;
      s->bytes += l.bytes;
    } else {
      leaks[kept++] = l;
    }
  }
  leaks.truncate(kept);
  Text used;
  for (const Suppression& s : suppressions.list) {
    if (s.blocks == 0) continue;
    if (used.size() == 0) {
      used.append(
          "-----------------------------------------------------\nSuppressions used:\n"
          "  count      bytes template\n");
    }
    used.appendf("%7zu %10zu ", s.blocks, s.bytes);
    used.append(s.pattern);
    used.append("\n");
  }
  if (used.size() != 0) used.append("-----------------------------------------------------\n");
  if (leaks.size() == 0) {
    write_all(g_report_fd, used);
    return 0;
  }
  Text text;
  text.append("\n=================================================================\n");
  text.appendf("==%d==ERROR: mempool leak check: detected memory leaks\n",
               static_cast<int>(::getpid()));
  std::size_t bytes = 0;
  std::size_t blocks = 0;
  for (const Leak& l : leaks) {
    text.appendf("\n%s leak of %zu byte(s) in %zu object(s) allocated from:\n",
                 l.direct ? "Direct" : "Indirect", l.bytes, l.blocks);
    for (std::uint32_t i = 0; i < l.site->depth; ++i) {
      const std::uintptr_t pc = pc_of(l.site, i);
      text.appendf("    #%u %#" PRIxPTR " in ", i, pc);
      text.append(names.of(pc));
      text.append("\n");
    }
    bytes += l.bytes;
    blocks += l.blocks;
  }
  if (used.size() != 0) {
    text.append("\n");
    text.append(used.at(0), used.size());
  }
  text.appendf("\nSUMMARY: mempool: %zu byte(s) leaked in %zu allocation(s).\n", bytes, blocks);
  write_all(g_report_fd, text);
  return bytes;
}

// The check itself (see the top of this file): the leaks, grouped, into leaks (empty when
// none). What could not be scanned (threads that did not stop) is said on the report's
// descriptor.
void find_leaks(const ThisThread& self, Scratch<Leak>& leaks) noexcept {
  LoadedObjects objects;
  Scratch<Range> maps;
  Scratch<Block> blocks;
  Scratch<std::uint32_t> work;
  objects.loader_base = ::getauxval(AT_BASE);
  if (!objects.globals.reserve(16384) || !read_mappings(maps) || !map_thread_table()) {
    write_all(g_report_fd, "mempool: leak check: out of memory, not run\n");
    return;
  }
  ::dl_iterate_phdr(add_object, &objects);

  leak_check_lock();
  std::size_t count = 0;
  for (std::size_t b = 0; b < kBuckets; ++b) {
    for (const LeakEntry* e = g_buckets[b]; e != nullptr; e = e->next)
      ++count;
  }
  if (count == 0 || !blocks.reserve(count) || !work.reserve(count)) {
    leak_check_unlock();
    return;
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

  // Grouped by site and kind: one entry a block, sorted, then merged.
  std::size_t leaked = 0;
  for (const Block& b : blocks)
    leaked += b.state == kReachable || b.site == nullptr ? 0 : 1;
  if (leaked == 0) return;
  if (!leaks.reserve(leaked)) {
    write_all(g_report_fd, "mempool: leak check: out of memory for the report\n");
    return;
  }
  for (const Block& b : blocks) {
    if (b.state == kReachable || b.site == nullptr) continue;
    leaks.push({b.site, b.state == kUnreached, b.end - b.begin, 1});
  }
  auto key_less = [](const Leak& a, const Leak& b) {
    return a.site != b.site ? std::less<>()(a.site, b.site) : a.direct < b.direct;
  };
  std::sort(leaks.begin(), leaks.end(), key_less);
  std::size_t groups = 0;
  for (const Leak& l : leaks) {
    if (groups != 0 && leaks[groups - 1].site == l.site && leaks[groups - 1].direct == l.direct) {
      leaks[groups - 1].bytes += l.bytes;
      leaks[groups - 1].blocks += l.blocks;
    } else {
      leaks[groups++] = l;
    }
  }
  leaks.truncate(groups);
}

// The bytes reported (size 0 blocks count 1, as their end does). Out of line, so that its
// locals and its callees' frames, which hold blocks' addresses, lie below check_from_here's
// `self`, where the scan of this thread's stack starts: inlined there, the compiler may put
// them above it (a lost block was then found on the exiting thread's stack, and not reported).
MEMPOOL_NOINLINE std::size_t check_and_report(const ThisThread& self) noexcept {
  Scratch<Leak> leaks;
  find_leaks(self, leaks);
  if (leaks.size() == 0) return 0;
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
constinit Lock g_check_mutex;

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
  std::lock_guard<Lock> lock(g_check_mutex);
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
