// The text of the exceptions the pools' constructors throw. Apart from error.cpp,
// which the drop-in library links: this one needs std::string, and the drop-in
// links nothing of libstdc++ (docs/architecture.md, "The drop-in library").
#include <string>

#include "mempool/detail/error.hpp"

namespace mempool::detail {

std::string argument_message(const char* allocator, const char* what) {
  std::string m = "mempool::";
  m += allocator;
  m += ": ";
  m += what;
  return m;
}

}  // namespace mempool::detail
