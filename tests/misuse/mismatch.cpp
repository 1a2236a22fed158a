// Blocks freed by the wrong function: new[] by delete, malloc by delete and
// delete[], new and new[] by free, and sized deletes whose size is not the
// block's (a derived object through a base without a virtual destructor, a
// size made up, a block that was never allocated).
#include <cstdlib>
#include <new>

#include "misuse.hpp"

namespace misuse {

namespace {

// After the misuse, the program goes on: blocks of n allocated, used, freed,
// so that a free list the misuse broke hands out what it holds.
void use_size(std::size_t n) {
  void* blocks[8];
  for (void*& b : blocks) {
    b = allocate(n);
    fill(b, 0, 0, n);
  }
  for (void* b : blocks)
    release(b);
}

// A destructor makes new[] store the element count before the elements: the
// pointer new[] returns is 8 bytes into the block.
struct Counted {
  long value = 1;
  ~Counted() { opaque(this)->value = 0; }
};

struct Base {
  long id = 1;
};

struct Derived : Base {
  char payload[504] = {};
};

void new_array_delete(const Case& /*c*/) {
  int* a = opaque(new int[16]);
  delete a;  // operator delete(a, sizeof(int))
  use_size(sizeof(int));
}

void new_array_with_cookie_delete(const Case& /*c*/) {
  Counted* a = opaque(new Counted[4]);
  delete a;  // operator delete(a, sizeof(Counted)): 8 bytes into the block
  use_size(sizeof(Counted));
}

void new_array_with_cookie_free(const Case& /*c*/) {
  release(opaque(new Counted[4]));
  use_size(sizeof(Counted));
}

void new_array_free(const Case& c) {
  release(opaque(new char[c.size]));
  use_size(c.size);
}

void new_free(const Case& /*c*/) {
  release(opaque(new Base));
  use_size(sizeof(Base));
}

void malloc_delete(const Case& c) {
  delete opaque(static_cast<Base*>(allocate(c.size)));  // operator delete(p, sizeof(Base))
  use_size(sizeof(Base));
}

void malloc_delete_array(const Case& c) {
  delete[] opaque(static_cast<char*>(allocate(c.size)));
  use_size(c.size);
}

void delete_derived_through_base(const Case& /*c*/) {
  Base* b = opaque(static_cast<Base*>(new Derived));
  delete b;  // operator delete(b, sizeof(Base)), the block is sizeof(Derived)
  use_size(sizeof(Derived));
  use_size(sizeof(Base));
}

// operator new(c.size), operator delete(p, c.extent).
void sized_delete_wrong_size(const Case& c) {
  void* p = opaque(::operator new(c.size));
  ::operator delete(p, opaque(c.extent));
  use_size(c.extent);
}

// Large enough that a block of c.size handed out there stays inside it.
void sized_delete_stack(const Case& c) {
  alignas(16) char local[256] = {};
  ::operator delete(at(local, kPastZeroes), opaque(c.size));
  use_size(c.size);
}

void sized_delete_wild(const Case& c) {
  ::operator delete(reinterpret_cast<void*>(opaque(c.extent)), opaque(c.size));
  use_size(c.size);
}

void aligned_new_plain_delete(const Case& c) {
  void* p = opaque(::operator new (c.size, std::align_val_t{c.extent}));
  ::operator delete(p);
  use_size(c.size);
}

constexpr Case kCases[] = {
    {"new-array-delete", new_array_delete, 0, 0, "new int[16], then delete"},
    {"new-array-delete-cookie", new_array_with_cookie_delete, 0, 0,
     "new T[4] of a T with a destructor (an 8-byte count before the array), then delete"},
    {"new-array-free-cookie", new_array_with_cookie_free, 0, 0,
     "new T[4] of a T with a destructor, then free"},
    {"new-array-free", new_array_free, 64, 0, "new char[64], then free"},
    {"new-free", new_free, 0, 0, "new of an 8-byte object, then free"},
    {"malloc-delete", malloc_delete, 64, 0, "malloc(64), then delete as an 8-byte object"},
    {"malloc-delete-array", malloc_delete_array, 64, 0, "malloc(64), then delete[] as char[]"},
    {"delete-derived-through-base", delete_derived_through_base, 0, 0,
     "delete of a 512-byte Derived through a Base* without a virtual destructor"},
    {"sized-delete-larger-size", sized_delete_wrong_size, 16, 1000,
     "operator new(16), then operator delete(p, 1000), then malloc(1000)"},
    {"sized-delete-smaller-size", sized_delete_wrong_size, 1000, 16,
     "operator new(1000), then operator delete(p, 16), then malloc(16)"},
    {"sized-delete-stack", sized_delete_stack, 64, 0,
     "operator delete(p, 64) of a local array, then malloc(64)"},
    {"sized-delete-wild", sized_delete_wild, 64, 0x12345670,
     "operator delete((void*)0x12345670, 64), then malloc(64)"},
    {"aligned-new-plain-delete", aligned_new_plain_delete, 64, 256,
     "operator new(64, align_val_t{256}), then the unaligned operator delete(p)"},
};

}  // namespace

void add_mismatch_cases(CaseList& cases) {
  cases.add(kCases);
}

}  // namespace misuse
