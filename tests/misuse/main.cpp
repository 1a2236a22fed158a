// misuse_cases <name>: commits that one misuse; misuse_cases --list: every case,
// one a line ("name<TAB>group<TAB>what<TAB>why out of reach").
#include <sys/personality.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <string>
#include <utility>

#include "misuse.hpp"

namespace misuse {

namespace {

void put(const char* s) {
  const std::size_t n = std::strlen(s);
  for (std::size_t done = 0; done < n;) {
    const ssize_t w = ::write(STDOUT_FILENO, s + done, n - done);
    if (w <= 0) return;
    done += static_cast<std::size_t>(w);
  }
}

const char* errno_name(int error) {
  switch (error) {
    case 0:
      return "0";
    case ENOMEM:
      return "ENOMEM";
    case EINVAL:
      return "EINVAL";
    default:
      return "another errno";
  }
}

// A name or description made here, kept for the life of the program.
const char* keep(std::string text) {
  static std::deque<std::string> kept;
  return kept.emplace_back(std::move(text)).c_str();
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at))
    text.replace(at, from.size(), to);
  return text;
}

}  // namespace

void add(std::vector<Case>& cases, std::span<const Case> more) {
  cases.insert(cases.end(), more.begin(), more.end());
}

void add_grids(std::vector<Case>& cases, std::span<const Grid> grids) {
  static constexpr Size kNone[] = {{"", 0, ""}};
  for (const Grid& grid : grids) {
    for (const Size& e : grid.extents.empty() ? kNone : grid.extents) {
      for (const Size& s : grid.sizes) {
        std::string name = std::string(grid.prefix) + "-";
        if (*e.label != '\0') name += std::string(e.label) + "-";
        std::string what = replace_all(replace_all(grid.what, "{e}", e.text), "{s}", s.text);
        cases.push_back({keep(name + s.label + grid.suffix), grid.run, s.bytes, e.bytes,
                         keep(std::move(what))});
      }
    }
  }
}

void* allocate(std::size_t n) {
  void* p = opaque(std::malloc(opaque(n)));
  if (p == nullptr) setup_failed("malloc returned NULL");
  fill(p, 0, 0, n < 4 * kKiB ? n : 4 * kKiB);
  return p;
}

void release(void* p) {
  std::free(opaque(p));
}

void* reallocate(void* p, std::size_t n) {
  return opaque(std::realloc(opaque(p), opaque(n)));
}

void fill(void* p, std::ptrdiff_t offset, int byte, std::size_t n) {
  std::memset(at(p, offset), byte, n);
  asm volatile("" : : "r"(p) : "memory");
}

char* at(void* p, std::ptrdiff_t offset) {
  return opaque(static_cast<char*>(p) + offset);
}

void churn_other_sizes(std::size_t n) {
  static constexpr std::size_t kSizes[] = {40, 200, 3000, 40000, 300000, 2 * kMiB};
  void* held[4 * std::size(kSizes)];
  std::size_t count = 0;
  for (int round = 0; round < 4; ++round) {
    for (const std::size_t size : kSizes)
      if (size != n) held[count++] = allocate(size);
  }
  for (std::size_t i = 0; i < count; ++i)  // every other one, then the rest
    if (i % 2 == 0) release(held[i]);
  for (std::size_t i = 0; i < count; ++i)
    if (i % 2 == 1) release(held[i]);
}

void say(const char* line) {
  put(line);
  put("\n");
}

void error_return(const char* what) {
  put("misuse: error-return: ");
  say(what);
  std::_Exit(0);
}

void error_return(const char* what, int error) {
  put("misuse: error-return: ");
  put(what);
  put(" ");
  say(errno_name(error));
  std::_Exit(0);
}

void setup_failed(const char* what) {
  put("misuse: setup failed: ");
  say(what);
  std::_Exit(2);
}

// Every run of a case sees the same addresses: glibc's checks of its
// safe-linked lists test address bits (under ASLR a corrupt link passes one time
// in 16), and where an out-of-bounds write lands depends on the layout. So the
// program runs itself again without address randomization, unless MISUSE_ASLR
// is set (or the system refuses). No core dumps either.
void same_addresses_every_run(char** argv) {
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  if (std::getenv("MISUSE_ASLR") != nullptr) return;
  const int current = ::personality(0xffffffff);
  if (current == -1 || (current & ADDR_NO_RANDOMIZE) != 0) return;
  if (::personality(static_cast<unsigned>(current) | ADDR_NO_RANDOMIZE) == -1) return;
  ::execv("/proc/self/exe", argv);
}

}  // namespace misuse

int main(int argc, char** argv) {
  using namespace misuse;
  same_addresses_every_run(argv);
  const struct {
    const char* name;
    void (*add)(std::vector<Case>&);
  } groups[] = {{"double frees", add_double_free_cases},
                {"bad pointers freed", add_bad_pointer_cases},
                {"out of bounds", add_overflow_cases},
                {"after free", add_after_free_cases},
                {"mismatched frees", add_mismatch_cases},
                {"realloc, usable size of bad pointers", add_realloc_cases},
                {"requests to refuse", add_refused_cases}};
  std::vector<Case> cases;
  std::vector<const char*> group_of;
  for (const auto& group : groups) {
    group.add(cases);
    group_of.resize(cases.size(), group.name);
  }
  if (argc != 2) {
    say("usage: misuse_cases <case> | --list");
    return 2;
  }
  const bool list = std::strcmp(argv[1], "--list") == 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (list) {
      for (const char* field : {c.name, "\t", group_of[i], "\t", c.what, "\t"})
        put(field);
      say(c.out_of_reach != nullptr ? c.out_of_reach : "");
    } else if (std::strcmp(argv[1], c.name) == 0) {
      c.run(c);
      say("misuse: reached end");
      return 0;
    }
  }
  if (list) return 0;
  say("misuse_cases: no such case");
  return 2;
}
