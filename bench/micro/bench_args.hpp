// Command-line parsing shared by the plain bench programs (size_class_benchmark,
// heap_benchmark).
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <optional>

namespace mempool_bench {

// A positive decimal count; nothing for anything else (empty, trailing junk, 0,
// overflow).
inline std::optional<std::size_t> parse_positive(const char* s) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v == 0) return std::nullopt;
  return static_cast<std::size_t>(v);
}

}  // namespace mempool_bench
