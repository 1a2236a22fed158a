// A library the override test loads and unloads again and again: it allocates
// at load (a global's constructor), hands blocks across the boundary both ways
// and frees at unload, all through whichever malloc the process has.
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {
std::vector<std::string> g_names(64, std::string(100, 'x'));  // freed by dlclose
}  // namespace

extern "C" {

// A block of n bytes from new[], each byte set to `fill`; the caller frees it
// with delete[].
char* library_new_bytes(std::size_t n, char fill) {
  char* p = new char[n];
  std::memset(p, fill, n);
  return p;
}

// A malloc'd copy of text; the caller frees it with free.
char* library_strdup(const char* text) {
  return ::strdup(text);
}

// Checks that every byte of a block the caller made with malloc is `fill`, then
// frees it here.
bool library_check_and_free(char* p, std::size_t n, char fill) {
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i)
    ok = ok && p[i] == fill;
  std::free(p);
  return ok && g_names.size() == 64;
}

// operator new of n bytes (too many) with a new-handler that gives up on its third
// call: the number of calls, or -1 if std::bad_alloc did not come after them. A C
// program that loads this library loads the C++ runtime only then, after the drop-in
// library was bound (tests/override/c_program_test.c).
int library_new_fails_after_handler(std::size_t n) {
  static int calls = 0;
  calls = 0;
  std::set_new_handler([] {
    if (++calls == 3) std::set_new_handler(nullptr);
  });
  try {
    void* p = ::operator new(n);
    ::operator delete(p);
    return -1;
  } catch (const std::bad_alloc&) {
    return calls;
  }
}

// operator new(n, std::nothrow) of n bytes (too many) with a new-handler that throws:
// 1 for the nullptr answer, 0 for a block. Nothing may escape.
int library_nothrow_new_with_throwing_handler(std::size_t n) {
  std::set_new_handler([] { throw std::bad_alloc(); });
  void* p = ::operator new(n, std::nothrow);
  std::set_new_handler(nullptr);
  ::operator delete(p);
  return p == nullptr ? 1 : 0;
}

}  // extern "C"
