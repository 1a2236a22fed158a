// A program that leaks (or keeps) memory in one way per case, for the leak check's test
// (run_leak_check.py): run under mempool's drop-in library with MEMPOOL_LEAK_CHECK=1,
// and built with -fsanitize=leak for LeakSanitizer's verdict on the same program.
// Usage: leak_cases CASE (the cases are in kCases below). Each case's allocation sites
// are extern "C" functions that are never inlined, so that a report names them.
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// Keeps the compiler from dropping an allocation whose pointer is lost.
void escape(void* p) {
  asm volatile("" : : "r"(p) : "memory");
}

// Overwrites the dead stack below the caller, where a leaked pointer could linger
// (a checker would take it for a live reference: every checker's limit).
__attribute__((noinline)) void scrub_stack() {
  volatile char bytes[64 * 1024];
  for (char& b : const_cast<char(&)[sizeof bytes]>(bytes))
    b = 0;
  asm volatile("" : : "r"(&bytes[0]) : "memory");
}

struct Node {
  Node* next;
  char payload[24];
};

int g_pipe[2];  // threads wait on it until the process ends

}  // namespace

// Volatile, so that no store to them is dropped (nothing in the program reads them).
void* volatile g_kept = nullptr;               // a global
thread_local void* volatile t_kept = nullptr;  // a thread-local

extern "C" {

__attribute__((noinline)) void leak_direct() {
  escape(std::malloc(1024));
}

__attribute__((noinline)) Node* make_child() {
  auto* child = static_cast<Node*>(std::malloc(sizeof(Node)));
  child->next = nullptr;
  return child;
}

// A lost parent (direct) that holds the only pointer to its child (indirect).
__attribute__((noinline)) void leak_parent_and_child() {
  auto* parent = static_cast<Node*>(std::calloc(2, sizeof(Node)));
  parent->next = make_child();
  escape(parent);
}

// Two blocks pointing to each other, nothing else pointing to them: both indirect.
__attribute__((noinline)) void leak_cycle() {
  auto* a = static_cast<Node*>(std::malloc(sizeof(Node)));
  auto* b = static_cast<Node*>(std::malloc(sizeof(Node)));
  a->next = b;
  b->next = a;
  escape(a);
}

__attribute__((noinline)) void leak_many() {
  for (int i = 0; i < 100; ++i)
    escape(std::malloc(48));
}

__attribute__((noinline)) void leak_new_array() {
  escape(new int[100]);
}

// Kept: a global pointing to a chain of two blocks.
__attribute__((noinline)) void keep_in_global() {
  auto* head = static_cast<Node*>(std::malloc(sizeof(Node)));
  head->next = make_child();
  g_kept = head;
}

__attribute__((noinline)) void keep_in_thread_local() {
  t_kept = std::malloc(4096);
}

// Kept: on the stack of a thread that is still running (blocked in read) at exit, or in
// its thread-local.
__attribute__((noinline)) void* thread_keeping_on_stack(void* ready) {
  void* volatile kept = std::malloc(2048);
  static_cast<void>(write(*static_cast<int*>(ready), "x", 1));
  char c;
  static_cast<void>(read(g_pipe[0], &c, 1));  // never written: blocks until exit
  escape(kept);
  return nullptr;
}
__attribute__((noinline)) void* thread_keeping_in_thread_local(void* ready) {
  t_kept = std::malloc(3072);
  static_cast<void>(write(*static_cast<int*>(ready), "x", 1));
  char c;
  static_cast<void>(read(g_pipe[0], &c, 1));
  return nullptr;
}
// Lost by a thread that has ended. The second block of its span: the first one's address
// is its span's, which the heap's code on another thread may leave in a vector register
// (freeing a neighbour), and a lazy PLT resolution may spill onto the stack, where a
// conservative scan would take it for a reference (the program is linked with -z now too).
__attribute__((noinline)) void* thread_leaking(void*) {
  void* first = std::malloc(512);
  escape(first);  // (or the compiler drops the pair)
  escape(std::malloc(512));
  std::free(first);
  return nullptr;
}

}  // extern "C"

namespace {

void start_waiting_thread(void* (*body)(void*)) {
  if (pipe(g_pipe) != 0) std::abort();
  int ready[2];
  if (pipe(ready) != 0) std::abort();
  pthread_t t;
  if (pthread_create(&t, nullptr, body, &ready[1]) != 0) std::abort();
  char c;
  if (read(ready[0], &c, 1) != 1) std::abort();
  pthread_detach(t);
}

void run(const std::string& name) {
  if (name == "none") {
    void* p = std::malloc(100);
    std::free(p);
  } else if (name == "direct") {
    leak_direct();
  } else if (name == "indirect") {
    leak_parent_and_child();
  } else if (name == "cycle") {
    leak_cycle();
  } else if (name == "many") {
    leak_many();
  } else if (name == "new") {
    leak_new_array();
  } else if (name == "global") {
    keep_in_global();
  } else if (name == "thread_local") {
    keep_in_thread_local();
  } else if (name == "thread_stack") {
    start_waiting_thread(thread_keeping_on_stack);
  } else if (name == "thread_tls") {
    start_waiting_thread(thread_keeping_in_thread_local);
  } else if (name == "ended_thread") {
    pthread_t t;
    if (pthread_create(&t, nullptr, thread_leaking, nullptr) != 0) std::abort();
    pthread_join(t, nullptr);
  } else {
    std::fprintf(stderr, "leak_cases: no case %s\n", name.c_str());
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: leak_cases CASE\n");
    return 2;
  }
  // Buffered (stdout is a pipe in the test): the leak check's exit must still write it.
  // Before the case, so that the buffer's allocation leaves no address on the stack
  // that a case's block may later have.
  std::printf("leak_cases %s: ", argv[1]);
  run(argv[1]);
  scrub_stack();
  std::printf("done\n");
  return 0;
}
