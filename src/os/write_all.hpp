// Writing to a file descriptor with no allocation and no stdio: the heap profile, the
// leak check's report. stdio's FILE may be closed already when they write (at exit), and
// its buffers come from malloc, which may be this heap.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace mempool::detail {

// The whole of [text, text + size) to fd, again after a short write or EINTR; false
// when the descriptor refused (what was written before stays written).
inline bool write_all(int fd, const char* text, std::size_t size) noexcept {
  for (std::size_t done = 0; done < size;) {
    const ssize_t w = ::write(fd, text + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace mempool::detail
