#include "mempool/detail/error.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace mempool::detail {

namespace {

// Appends s to buf at *pos, never past cap - 1.
void append(char* buf, std::size_t cap, std::size_t* pos, const char* s) noexcept {
  while (*s != '\0' && *pos + 1 < cap)
    buf[(*pos)++] = *s++;
}

void append_hex(char* buf, std::size_t cap, std::size_t* pos, std::uintptr_t v) noexcept {
  char digits[2 + 2 * sizeof v + 1];
  std::size_t n = 0;
  do {
    digits[n++] = "0123456789abcdef"[v & 0xf];
    v >>= 4;
  } while (v != 0);
  append(buf, cap, pos, "0x");
  while (n > 0 && *pos + 1 < cap)
    buf[(*pos)++] = digits[--n];
}

}  // namespace

void fatal_misuse(const char* allocator, const void* ptr, const char* problem) noexcept {
  report_misuse(allocator, ptr, problem);
  std::abort();
}

void report_misuse(const char* allocator, const void* ptr, const char* problem) noexcept {
  char line[256];
  std::size_t pos = 0;
  append(line, sizeof line, &pos, "mempool: ");
  append(line, sizeof line, &pos, allocator);
  append(line, sizeof line, &pos, ": ");
  append(line, sizeof line, &pos, problem);
  append(line, sizeof line, &pos, " (pointer ");
  append_hex(line, sizeof line, &pos, reinterpret_cast<std::uintptr_t>(ptr));
  append(line, sizeof line, &pos, ")\n");
  // A short write to a broken stderr is not worth handling: the caller aborts.
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line, pos);
}

}  // namespace mempool::detail
