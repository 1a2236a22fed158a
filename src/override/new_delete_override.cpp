// operator new and delete of the whole process, every C++17 form, over the
// general heap. The throwing forms loop on the new-handler as the standard says
// ([new.delete.single]) and throw std::bad_alloc when there is none; the
// nothrow forms run the same loop and answer nullptr instead.
//
// The drop-in library links nothing of the C++ runtime, so that a C program
// (redis, CPython, sqlite, every process a compiler driver starts) does not load
// libstdc++ for it (docs/architecture.md, "The drop-in library"). What the slow
// paths need of the runtime, the new-handler, throwing std::bad_alloc and
// catching in the nothrow forms, is referenced weakly: a C++ program has
// libstdc++ loaded before this library is bound, and those references find it.
// A C program that loads C++ later (a plugin through dlopen) finds the first two
// through dlsym, and its nothrow forms answer nullptr without the new-handler.
#include <dlfcn.h>

#include <cstddef>
#include <new>

#include "../heap/heap_internal.hpp"
#include "../options.hpp"
#include "mempool/heap.hpp"

// libstdc++'s std::get_new_handler and std::__throw_bad_alloc (its stable ABI),
// and the catch's runtime, all weak: null where libstdc++ was not loaded when
// this library was.
extern "C" {
__attribute__((weak)) std::new_handler mempool_runtime_get_new_handler() noexcept
    __asm__("_ZSt15get_new_handlerv");
[[noreturn]] __attribute__((weak)) void mempool_runtime_throw_bad_alloc() __asm__(
    "_ZSt17__throw_bad_allocv");
// NOLINTBEGIN(readability-identifier-naming): the runtime's names
__attribute__((weak)) void* __cxa_begin_catch(void*) noexcept;
__attribute__((weak)) void __cxa_end_catch();
// NOLINTEND(readability-identifier-naming)
}
// The personality routine is the compiler's own reference, made weak here.
__asm__(".weak __gxx_personality_v0");
// The dynamic loader's lookups too: a fully static program has none, and a weak
// reference brings nothing in; there the runtime is linked in, or not at all. (dlopen is
// not named at all, but found through dlsym: libc.a's warns at link time, wherever it
// is referenced, that it needs the shared glibc at run time.)
#pragma weak dlsym
#pragma weak dlclose

using namespace mempool::detail;

namespace {

// The runtime's function `name` (libstdc++'s, else libc++'s `libcxx_name`): the weak
// reference, else a global lookup, else libstdc++ when a library loaded it into a scope
// of its own (dlopen without RTLD_GLOBAL).
template <typename F>
F runtime_function(F weak, const char* name, const char* libcxx_name) noexcept {
  if (weak != nullptr) return weak;
  if (&::dlsym == nullptr) return nullptr;  // a fully static program
  void* f = ::dlsym(RTLD_DEFAULT, name);
  if (f == nullptr) f = ::dlsym(RTLD_DEFAULT, libcxx_name);
  using Dlopen = void* (*)(const char*, int);
  const auto open =
      f == nullptr ? reinterpret_cast<Dlopen>(::dlsym(RTLD_DEFAULT, "dlopen")) : nullptr;
  if (void* runtime = open != nullptr ? open("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD) : nullptr;
      runtime != nullptr) {
    f = ::dlsym(runtime, name);
    ::dlclose(runtime);  // loaded by another: this only drops the reference NOLOAD took
  }
  return reinterpret_cast<F>(f);
}

std::new_handler current_new_handler() noexcept {
  // libc++ keeps std::get_new_handler in namespace std as well.
  const auto get = runtime_function(&mempool_runtime_get_new_handler, "_ZSt15get_new_handlerv",
                                    "_ZSt15get_new_handlerv");
  return get == nullptr ? nullptr : get();
}

[[noreturn]] MEMPOOL_NOINLINE void throw_bad_alloc() {
  const auto raise = runtime_function(&mempool_runtime_throw_bad_alloc, "_ZSt17__throw_bad_allocv",
                                      "_ZNSt3__117__throw_bad_allocEv");
  if (raise != nullptr) raise();
  // Only a program that calls operator new without a C++ runtime gets here.
  write_stderr_line(
      "operator new: out of memory, and no C++ runtime loaded to throw "
      "std::bad_alloc");
  std::abort();
}

// alignment 0: the default (16 from 16 bytes on).
MEMPOOL_NOINLINE MEMPOOL_ALLOCATION_ENTRY void* new_slow(std::size_t n, std::size_t alignment) {
  for (;;) {
    void* p = alignment == 0 ? heap_allocate(n) : heap_allocate_aligned(n, alignment);
    if (MEMPOOL_LIKELY(p != nullptr)) return p;
    const std::new_handler handler = current_new_handler();
    if (handler == nullptr) throw_bad_alloc();
    handler();  // frees memory, throws, or ends the program
  }
}

MEMPOOL_NOINLINE MEMPOOL_ALLOCATION_ENTRY void* new_nothrow_slow(std::size_t n,
                                                                 std::size_t alignment) noexcept {
  // No catch runtime bound (C++ came later, through dlopen): the try below could not
  // stop what a new-handler throws, so the handler is not called and the answer is
  // nullptr, as when it gives up.
  if (&__cxa_begin_catch == nullptr)
    return alignment == 0 ? heap_allocate(n) : heap_allocate_aligned(n, alignment);
  try {
    return new_slow(n, alignment);
  } catch (...) {
    return nullptr;
  }
}

MEMPOOL_ALWAYS_INLINE void* new_default(std::size_t n) {
  if (void* p = heap_try_hit(n); MEMPOOL_LIKELY(p != nullptr)) return p;
  return new_slow(n, 0);
}

MEMPOOL_ALWAYS_INLINE void* new_default_nothrow(std::size_t n) noexcept {
  if (void* p = heap_try_hit(n); MEMPOOL_LIKELY(p != nullptr)) return p;
  return new_nothrow_slow(n, 0);
}

std::size_t as_size(std::align_val_t alignment) noexcept {
  return static_cast<std::size_t>(alignment);
}

}  // namespace

MEMPOOL_HOT_ENTRY void* operator new(std::size_t n) {
  return new_default(n);
}
MEMPOOL_HOT_ENTRY void* operator new[](std::size_t n) {
  return new_default(n);
}
MEMPOOL_ALLOCATION_ENTRY void* operator new(std::size_t n, const std::nothrow_t& /*tag*/) noexcept {
  return new_default_nothrow(n);
}
MEMPOOL_ALLOCATION_ENTRY void* operator new[](std::size_t n,
                                              const std::nothrow_t& /*tag*/) noexcept {
  return new_default_nothrow(n);
}
MEMPOOL_ALLOCATION_ENTRY void* operator new(std::size_t n, std::align_val_t alignment) {
  return new_slow(n, as_size(alignment));
}
MEMPOOL_ALLOCATION_ENTRY void* operator new[](std::size_t n, std::align_val_t alignment) {
  return new_slow(n, as_size(alignment));
}
MEMPOOL_ALLOCATION_ENTRY void* operator new(std::size_t n, std::align_val_t alignment,
                                            const std::nothrow_t& /*tag*/) noexcept {
  return new_nothrow_slow(n, as_size(alignment));
}
MEMPOOL_ALLOCATION_ENTRY void* operator new[](std::size_t n, std::align_val_t alignment,
                                              const std::nothrow_t& /*tag*/) noexcept {
  return new_nothrow_slow(n, as_size(alignment));
}

MEMPOOL_HOT_ENTRY void operator delete(void* p) noexcept {
  heap_free(p);
}
MEMPOOL_HOT_ENTRY void operator delete[](void* p) noexcept {
  heap_free(p);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete(void* p, const std::nothrow_t& /*tag*/) noexcept {
  heap_free(p);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete[](void* p, const std::nothrow_t& /*tag*/) noexcept {
  heap_free(p);
}
// Sized: the size names the class, so the page map is not read (checked builds
// verify it).
MEMPOOL_HOT_ENTRY void operator delete(void* p, std::size_t n) noexcept {
  heap_free_sized(p, n);
}
MEMPOOL_HOT_ENTRY void operator delete[](void* p, std::size_t n) noexcept {
  heap_free_sized(p, n);
}
// Aligned blocks may sit in a larger class than their size names: look them up.
MEMPOOL_ALLOCATION_ENTRY void operator delete(void* p, std::align_val_t /*alignment*/) noexcept {
  heap_free(p);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete[](void* p, std::align_val_t /*alignment*/) noexcept {
  heap_free(p);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete(void* p, std::size_t n,
                                              std::align_val_t alignment) noexcept {
  mempool::deallocate(p, n, alignment);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete[](void* p, std::size_t n,
                                                std::align_val_t alignment) noexcept {
  mempool::deallocate(p, n, alignment);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete(void* p, std::align_val_t /*alignment*/,
                                              const std::nothrow_t& /*tag*/) noexcept {
  heap_free(p);
}
MEMPOOL_ALLOCATION_ENTRY void operator delete[](void* p, std::align_val_t /*alignment*/,
                                                const std::nothrow_t& /*tag*/) noexcept {
  heap_free(p);
}
