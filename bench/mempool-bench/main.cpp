// mempool-bench: the benchmark report. Runs each workload for each allocator in a
// child process of its own (the preloaded mallocs under LD_PRELOAD, mempool's own
// APIs in process), interleaved (A B C A B C ...) and repeated, writes every run
// as a JSON line and a CSV row, and prints the medians. `report DIR` turns saved
// results into report.md and plots (report/report.py); `run -- CMD ARGS...`
// measures any program under every allocator, and `run --profile -- CMD` draws
// what it holds at exit, and at its peak, by call site (profile.cpp). See --help.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "driver.hpp"
#include "process.hpp"
#include "workloads/workloads.hpp"

namespace mempool_bench {
namespace {

// Every allocator's name (what --allocators accepts).
std::vector<std::string> allocator_names() {
  std::vector<std::string> names;
  for (const AllocatorInfo& a : all_allocators())
    names.emplace_back(a.name);
  return names;
}

std::vector<std::string> command_names() {
  std::vector<std::string> names = {"suite", "report"};
  for (const WorkloadInfo& w : all_workloads())
    names.emplace_back(w.name);
  return names;
}

constexpr const char* kUsage =
    "usage: mempool-bench <workload>|suite|report DIR|run [--profile] -- CMD ARGS... [options]; "
    "see --help";

int usage_error(const std::string& what) {
  std::fprintf(stderr, "mempool-bench: %s\n%s\n", what.c_str(), kUsage);
  return kUsageError;
}

// `run`: the command must be there before anything runs (exit 2 otherwise).
int check_run_command(const Options& o) {
  if (o.command != "run") {
    if (!o.run_command.empty()) return usage_error("only run takes a command after --");
    return 0;
  }
  if (o.run_command.empty())
    return usage_error("run needs a command after --, e.g. mempool-bench run -- python3 x.py");
  if (find_program(o.run_command.front()).empty())
    return usage_error("run: no such command: " + o.run_command.front() +
                       " (not found in PATH, or not executable)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  // Everything after the first "--" is run's command, untouched by the parser.
  int own = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      own = i;
      o.run_command.assign(argv + i + 1, argv + argc);
      break;
    }
  }
  // --preload NAME=PATH adds an allocator, which --allocators must then accept: taken
  // before the parser is built with the list of names.
  for (int i = 1; i < own; ++i) {
    std::string given;
    if (std::strncmp(argv[i], "--preload=", 10) == 0) {
      given = argv[i] + 10;
    } else if (std::strcmp(argv[i], "--preload") == 0 && i + 1 < own) {
      given = argv[++i];
    } else {
      continue;
    }
    if (const std::string bad = add_given_allocator(given); !bad.empty()) return usage_error(bad);
  }
  CLI::App app{"mempool-bench: mempool against glibc, mimalloc, jemalloc and tcmalloc"};
  app.add_option("command", o.command,
                 "a workload, 'suite' (the headline subset; with --full, every workload), 'report' "
                 "or 'run' (-- CMD ARGS...)")
      ->check(CLI::IsMember(command_names()));
  app.add_option("dir", o.report_dir, "report: the folder of saved results");
  app.add_option("--allocators", o.allocators,
                 "comma-separated (default: every one installed but mempool-hardened, "
                 "mempool-profile, jemalloc-thp and mempool-thp-never, which "
                 "run where a workload asks: bigheap, redis-bigheap)")
      ->delimiter(',')
      ->check(CLI::IsMember(allocator_names()));
  app.add_option("--preload", o.preloads,
                 "NAME=PATH: the malloc library at PATH (a build of your own, another version, "
                 "another allocator) run as allocator NAME beside the others, preloaded as they "
                 "are; repeatable");
  app.add_option("--threads", o.threads, "comma-separated thread counts (default 1)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  app.add_option("--size", o.size, "bytes per block (default: the workload's)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  app.add_option("--size-dist", o.size_dist, "fixed or mixed")
      ->check(CLI::IsMember({"fixed", "mixed"}));
  app.add_option("--mode", o.mode, "immediate or window")
      ->check(CLI::IsMember({"immediate", "window"}));
  app.add_option("--window", o.window, "live blocks per thread in window mode")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24));
  app.add_option("--replace", o.replace,
                 "bigbuffers: free the old buffer before or after its replacement is allocated "
                 "(default: both cases)")
      ->check(CLI::IsMember({"free-first", "new-first"}));
  app.add_option("--warmup", o.warmup, "seconds before measuring")->check(CLI::Range(0.0, 3600.0));
  app.add_option("--seconds", o.seconds, "seconds measured")->check(CLI::Range(0.001, 3600.0));
  app.add_option("--repeat", o.repeat, "repetitions (median quoted)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000}));
  app.add_option("--sample-rate", o.sample_rate, "time every n-th operation")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  app.add_option("--apps", o.apps, "apps: comma-separated programs (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(app_names()));
  app.add_option("--timeout", o.timeout,
                 "apps and run: seconds one program run may take before it is stopped (600)")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_flag("--check-output", o.check_output,
               "run: the command's stdout must be the same under every allocator");
  app.add_flag("--profile", o.profile,
               "run: the command once under mempool's heap profiler (or tcmalloc's, with "
               "--allocators=tcmalloc); what each process holds at exit by call site, and at its "
               "peak (mempool's): a table and a flame graph (PNG) in OUT/profile/");
  app.add_option("--profile-rate", o.profile_rate,
                 "run --profile: mempool's mean sampling interval in bytes (524288)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40));
  app.add_option("--label", o.label, "a name for this run, kept in the results");
  app.add_option("--format", o.format, "table, csv or json (stdout)")
      ->check(CLI::IsMember({"table", "csv", "json"}));
  app.add_option("--out", o.out, "folder for results.jsonl and results.csv");
  app.add_flag("--quick", o.quick, "short runs, 1 repetition: a smoke test");
  app.add_flag("--full", o.full,
               "suite: every workload at every thread count (about 50 minutes on 2 cores), "
               "not the headline subset (about 7)");
  app.add_flag("--list", o.list, "workloads and allocators");
  app.add_flag("--dry-run", o.dry_run,
               "print each case with its allocators and the number of runs; run nothing");
  app.add_flag("--child", o.child)->group("");  // internal
  try {
    app.parse(own, argv);
    if (o.list) {
      print_list();
      return 0;
    }
    if (o.command.empty())
      throw CLI::ValidationError("command", "name a workload, 'suite', 'report' or 'run'");
    if (o.command == "report") {
      if (o.report_dir.empty())
        throw CLI::ValidationError("dir", "report needs the results folder");
      return run_report(o.report_dir);
    }
    if (!o.report_dir.empty()) throw CLI::ValidationError("dir", "only report takes a folder");
    if (o.full && o.command != "suite") throw CLI::ValidationError("--full", "only suite takes it");
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return usage_error(e.what());
  }
  if (const int bad = check_run_command(o); bad != 0) return bad;
  if (const std::string bad = profile_options_problem(o); !bad.empty()) return usage_error(bad);
  if (o.profile) return run_profile(o);
  const bool threads_given = !o.threads.empty();
  if (o.threads.empty()) o.threads = {1};
  if (o.child) return run_child(o);
  if (o.quick) {
    o.repeat = app.count("--repeat") != 0 ? o.repeat : 1;
    o.warmup = app.count("--warmup") != 0 ? o.warmup : 0.02;
    o.seconds = app.count("--seconds") != 0 ? o.seconds : 0.1;
  }
  std::vector<Part> parts;
  if (o.command == "suite") {
    if (app.count("--repeat") == 0) o.repeat = o.quick ? 1 : 3;
    if (app.count("--seconds") == 0 && !o.quick) o.seconds = 0.3;
    if (app.count("--warmup") == 0 && !o.quick) o.warmup = 0.05;
    parts = o.full || o.quick ? suite_parts(base_spec(o)) : headline_parts(base_spec(o));
    if (threads_given)
      for (Part& p : parts)
        if (p.given.workload != "apps") p.threads = o.threads;
  } else {
    parts.push_back({base_spec(o), threads_given ? o.threads : std::vector<int>{}});
  }
  return run_plan_for(o, parts);
}

}  // namespace mempool_bench

int main(int argc, char** argv) {
  return mempool_bench::main(argc, argv);
}
