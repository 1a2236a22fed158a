// misuse_cases <name>: commits that one misuse; misuse_cases --list: every case,
// one a line ("name<TAB>group<TAB>what<TAB>why out of reach").
#include <sys/personality.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>

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

}  // namespace

void CaseList::push(const Case& c) {
  if (count_ == kMaxCases) setup_failed("more cases than CaseList holds");
  groups_[count_] = group_;
  cases_[count_++] = c;
}

void CaseList::add(std::span<const Case> more) {
  for (const Case& c : more)
    push(c);
}

void CaseList::append(const char* text, const char* e, const char* s) {
  for (const char* t = text; *t != '\0'; ++t) {
    if (t[0] == '{' && (t[1] == 'e' || t[1] == 's') && t[2] == '}') {
      append(t[1] == 'e' ? e : s);
      t += 2;
    } else if (used_ + 1 < sizeof text_) {
      text_[used_++] = *t;
    } else {
      setup_failed("more text than CaseList holds");
    }
  }
}

const char* CaseList::finish() {
  if (used_ == sizeof text_) setup_failed("more text than CaseList holds");
  text_[used_++] = '\0';
  const char* made = text_ + start_;
  start_ = used_;
  return made;
}

void CaseList::add_grids(std::span<const Grid> grids) {
  static constexpr Size kNone[] = {{"", 0, ""}};
  for (const Grid& grid : grids) {
    for (const Size& e : grid.extents.empty() ? kNone : grid.extents) {
      for (const Size& s : grid.sizes) {
        append(grid.prefix);
        append("-");
        if (*e.label != '\0') {
          append(e.label);
          append("-");
        }
        append(s.label);
        append(grid.suffix);
        const char* name = finish();
        append(grid.what, e.text, s.text);
        push({name, grid.run, s.bytes, e.bytes, finish()});
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

void overwrite(void* p, std::ptrdiff_t offset, int byte, std::size_t n) {
  volatile char* bytes = at(p, offset);
  const auto value = static_cast<char>(byte);
  for (std::size_t i = 0; i < n; ++i)
    bytes[i] = bytes[i] == value ? static_cast<char>(~value) : value;
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
    void (*add)(CaseList&);
  } groups[] = {{"double frees", add_double_free_cases},
                {"bad pointers freed", add_bad_pointer_cases},
                {"out of bounds", add_overflow_cases},
                {"after free", add_after_free_cases},
                {"mismatched frees", add_mismatch_cases},
                {"realloc, usable size of bad pointers", add_realloc_cases},
                {"requests to refuse", add_refused_cases}};
  static CaseList cases;
  for (const auto& group : groups) {
    cases.begin_group(group.name);
    group.add(cases);
  }
  if (argc != 2) {
    say("usage: misuse_cases <case> | --list");
    return 2;
  }
  const bool list = std::strcmp(argv[1], "--list") == 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (list) {
      for (const char* field : {c.name, "\t", cases.group(i), "\t", c.what, "\t"})
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
