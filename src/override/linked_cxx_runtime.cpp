// Linked into programs with mempool::override (and its hardened and TLS-pointer forms),
// never into a drop-in library (CMakeLists.txt filters it out): strong references to the
// pieces of the C++ runtime that operator new's slow paths reach through weak ones
// (new_delete_override.cpp). A weak reference brings nothing out of an archive, so a
// fully static program (-static, libstdc++.a) that used none of them itself would have
// no std::bad_alloc to throw from new, and no catch in the nothrow forms.
#include <new>

#if defined(__GLIBCXX__)
// NOLINTBEGIN(readability-identifier-naming): the runtime's names
namespace std {
[[noreturn]] void __throw_bad_alloc();  // libstdc++'s stable ABI (bits/functexcept.h)
}  // namespace std
extern "C" {
void* __cxa_begin_catch(void*) noexcept;
void __cxa_end_catch();
int __gxx_personality_v0();  // only its address is taken
}
// NOLINTEND(readability-identifier-naming)

namespace mempool::detail {
// Kept (used) though nothing reads it: its relocations are the references.
extern void* const kLinkedCxxRuntime[];
[[gnu::used]] void* const kLinkedCxxRuntime[] = {
    reinterpret_cast<void*>(&std::__throw_bad_alloc),
    reinterpret_cast<void*>(&__cxa_begin_catch),
    reinterpret_cast<void*>(&__cxa_end_catch),
    reinterpret_cast<void*>(&__gxx_personality_v0),
};
}  // namespace mempool::detail
#endif
