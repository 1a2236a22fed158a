// mempool-bench's driver: the options, the plan of runs (plan.cpp), the child
// processes that make each measurement (driver.cpp), the machine recorded with
// every run (machine_info.cpp) and the tables printed at the end
// (results_table.cpp). main.cpp parses the command line.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "allocators.hpp"

namespace mempool_bench {

inline constexpr int kUsageError = 2;

struct Options {
  std::string command;  // a workload, "suite", "report" or "run"
  std::string report_dir;
  std::vector<std::string> allocators;
  std::vector<std::string> preloads;  // --preload NAME=PATH (added before parsing: main.cpp)
  std::vector<int> threads;
  std::size_t size = 0;  // 0: the workload's own
  std::string size_dist = "fixed";
  std::string mode = "immediate";
  std::size_t window = 1024;
  std::string replace;  // bigbuffers: "free-first", "new-first" ("": both)
  double warmup = 0.2;
  double seconds = 1.0;
  std::size_t repeat = 5;
  std::size_t sample_rate = 64;
  std::vector<std::string> apps;         // apps: which programs (empty: all)
  std::vector<std::string> run_command;  // run: the command after --
  double timeout = 600;                  // apps and run: seconds per program run
  bool check_output = false;             // run: stdout must match across allocators
  bool profile = false;                  // run: once, under a heap profiler (profile.cpp)
  std::size_t profile_rate = 0;          // run --profile: mean bytes between samples (0: default)
  std::string label;
  std::string format = "table";
  std::string out = "bench-results";
  bool quick = false;
  bool full = false;     // suite: every workload, not the headline subset
  bool dry_run = false;  // print the plan of runs, run nothing
  bool list = false;
  bool child = false;  // internal: run one measurement, print its JSON line
};

// --- plan.cpp: which runs, in which order.
struct Run {
  RunSpec spec;
  std::size_t repetition = 0;
};

// One workload of a plan: its options, the thread counts it runs at (empty: the
// workload's defaults), and the fewest repetitions it gets.
struct Part {
  RunSpec given;
  std::vector<int> threads;
  std::size_t min_repeat = 0;
};

// The measurement the options describe (the first allocator and thread count).
RunSpec base_spec(const Options& o);
// The arguments that make a child run spec.
std::vector<std::string> child_args(const std::string& exe, const RunSpec& s);
// The allocators of one case, of those available: all of them when --allocators
// named them (explicit_list); otherwise those run by default (only the ones that
// replace malloc for a malloc_only workload) and the extras the case asks for.
std::vector<std::string> case_allocators(const RunSpec& c,
                                         const std::vector<std::string>& available,
                                         bool explicit_list);
// What runs when --allocators does not say: every allocator run by default, and
// the extras that the parts' cases ask for (jemalloc-thp for bigheap, ...).
std::vector<std::string> default_allocators(const std::vector<Part>& parts);
// Interleaved: every run of one repetition (each part's cases and thread
// counts, each of the case's allocators in turn), then the next repetition.
std::vector<Run> plan_runs(const std::vector<Part>& parts, std::size_t repeat,
                           const std::vector<std::string>& allocators, bool explicit_list);
// The suite's default: the real programs and one case of each classic pool
// workload, single-threaded where a thread count is a choice, plus a cross-thread
// server, short-lived threads and fragmentation (about 7 minutes on 2 cores at 3
// repetitions).
std::vector<Part> headline_parts(const RunSpec& base);
// suite --full: every workload but bigheap and run, at every thread count
// (about 50 minutes on 2 cores at 3 repetitions, programs 5).
std::vector<Part> suite_parts(const RunSpec& base);

// --- machine_info.cpp
// CPU, cores, kernel, compiler, build type, glibc, and each allocator's version
// (libraries: name -> the preloaded file, "" for none).
nlohmann::json machine_info(const std::map<std::string, std::string>& libraries);

// --- results_table.cpp
double median(std::vector<double> v);
// The widest line printed on the console: a terminal wraps anything wider into noise.
inline constexpr std::size_t kConsoleWidth = 120;
// text in lines of at most kConsoleWidth (but for a longer word), the next ones
// indented by indent.
void print_wrapped(const std::string& text, std::size_t indent);
// Per workload, a table of the malloc replacements and one of the in-process APIs
// (each with glibc): a row per case measured, a column per allocator measured, the
// median and its ratio to glibc (without glibc, to the row's best), '*' on the best;
// then why runs were skipped. No line wider than kConsoleWidth: case names cut in
// their middle, the columns in blocks that each repeat the case column.
void print_table(const std::vector<nlohmann::json>& records,
                 const std::vector<std::string>& allocators);
extern const char* const kCsvHeader;
std::string csv_row(const nlohmann::json& r);

// --- driver.cpp
std::string exe_path();
std::string exe_dir();
int run_child(const Options& o);
// Replaces this process with /usr/bin/python3 running one of the report's
// scripts (report/NAME) on args; 1 (said on stderr) when it cannot.
int exec_report_script(const std::string& name, const std::vector<std::string>& args);
int run_report(const std::string& dir);
void print_list();
// Runs the plan, writes results.jsonl and results.csv under o.out, prints the
// table (or CSV or JSON lines). 0, or 1 when a run failed (said on stderr).
int run_plan_for(const Options& o, const std::vector<Part>& parts);

// --- profile.cpp: run --profile -- CMD
// What is wrong with the options of --profile, or "".
std::string profile_options_problem(const Options& o);
// Runs the command once under the heap profiler of mempool (or of tcmalloc, when
// --allocators names it), which writes the in-use heap of each of its processes
// at exit into OUT/profile/; then the table of the top call sites and a flame
// graph of each (report/heap_profile.py). 0, or 1 (said on stderr).
int run_profile(const Options& o);

}  // namespace mempool_bench
