// The driver: runs each measurement in a child process of its own (this
// program with --child, under LD_PRELOAD for the allocators that replace
// malloc), checks that the preload took effect and that programs gave the same
// output under every allocator, and records every run.
#include "driver.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "process.hpp"
#include "workloads/workloads.hpp"

namespace mempool_bench {

#ifndef MEMPOOL_BENCH_REPORT_SCRIPT
#define MEMPOOL_BENCH_REPORT_SCRIPT "bench/mempool-bench/report/report.py"
#endif

using nlohmann::json;

std::string exe_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "mempool-bench";
  buf[n] = '\0';
  return buf;
}

std::string exe_dir() {
  return std::filesystem::path(exe_path()).parent_path().string();
}

// The child: one measurement, its JSON on stdout. A program that failed or
// gave a wrong result (apps, run) throws: said on stderr, exit status 1.
int run_child(const Options& o) {
  const WorkloadInfo* w = find_workload(o.command);
  const RunSpec spec = base_spec(o);
  json result;
  try {
    result = w->run(spec);
  } catch (const Skipped& e) {
    result = {{"skipped", e.what()}};
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  // The faults and huge pages of the child itself, where the workload did not
  // measure them (bigheap does while its heap is live; programs give their own).
  if (result.contains("metrics") && result["metrics"].is_object()) {
    json& m = result["metrics"];
    if (!m.contains("minor_faults")) m["minor_faults"] = minor_faults_self();
    if (!m.contains("anon_huge_kib")) m["anon_huge_kib"] = kib_or_null(anon_huge_kib(0));
  }
  result["malloc_from"] = malloc_library();
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

namespace {

// Runs one measurement in a child; its JSON line. A child that fails or hangs
// is an error naming the run (and what it said on stderr).
// program: the child's program ("" for mempool-bench itself).
json spawn_child(const RunSpec& spec, const std::string& preload, const std::string& program,
                 double timeout_s) {
  const std::vector<std::string> args = child_args(program.empty() ? exe_path() : program, spec);
  ProcessOptions options;
  options.env = environment_with(preload, allocator_env(spec.allocator));
  options.timeout_s = timeout_s;
  const ProcessResult r = run_process(args, options);
  std::string command;
  for (std::size_t i = 1; i < args.size(); ++i)
    command += " " + args[i];
  if (!r.ok()) {
    // A child that failed cleanly (exit status 1) said why in one line, naming
    // the program and the allocator; anything else is reported with its run.
    const std::string said = last_line(r.err_tail);
    if (!r.timed_out && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 1 && !said.empty())
      throw std::runtime_error(said);
    throw std::runtime_error(spec.workload + " under " + spec.allocator + " failed (" +
                             r.failure() + ")" + (said.empty() ? "" : ": " + said) +
                             "\n  the run:" + command);
  }
  try {
    return json::parse(r.out);
  } catch (const json::exception&) {
    throw std::runtime_error("run printed no result:" + command + "\n" + r.out);
  }
}

struct Available {
  std::vector<std::string> names;
  // name -> library ("" for none): preloaded, or for a linked allocator the archive
  // (machine_info's versions)
  std::map<std::string, std::string> preload;
  std::map<std::string, std::string> program;  // name -> the child's program ("" for this one)
};

Available available_allocators(const std::vector<std::string>& wanted, bool explicit_list) {
  Available av;
  for (const std::string& name : wanted) {
    const AllocatorInfo* a = find_allocator(name);
    std::string path;
    std::string why;
    if (!locate_library(*a, exe_dir(), &path, &why)) {
      std::fprintf(stderr, "note: %s skipped: %s\n", name.c_str(), why.c_str());
      if (explicit_list) std::fprintf(stderr, "      (asked for by --allocators)\n");
      continue;
    }
    av.names.push_back(name);
    av.preload[name] = path;
    av.program[name] = a->program != nullptr ? exe_dir() + "/" + a->program : "";
  }
  return av;
}

class Progress {
 public:
  explicit Progress(const std::vector<Run>& runs)
      : total_(runs.size()),
        tty_(::isatty(STDERR_FILENO) != 0),
        log_(std::any_of(runs.begin(), runs.end(), [&](const Run& r) {
          return r.spec.workload != runs.front().spec.workload;
        })) {}
  // On a terminal, one line rewritten for every run; into a log (CI, a pipe), a
  // line each time the workload of a suite changes, so that the log shows where
  // it is (one workload's runs say nothing: a failure stays one line).
  void show(std::size_t done, const Run& r) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double left =
        done == 0 ? 0 : elapsed / static_cast<double>(done) * static_cast<double>(total_ - done);
    if (!tty_) {
      if (!log_ || r.spec.workload == last_workload_) return;
      last_workload_ = r.spec.workload;
      std::fprintf(stderr, "[%zu/%zu] %s (%.0f s so far)\n", done + 1, total_,
                   r.spec.workload.c_str(), elapsed);
      return;
    }
    std::fprintf(stderr, "\r\033[K[%zu/%zu] %s %s, %d thread%s; about %.0f s left", done + 1,
                 total_, r.spec.workload.c_str(), r.spec.allocator.c_str(), r.spec.threads,
                 r.spec.threads == 1 ? "" : "s", left);
  }
  void finish() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::size_t total_;
  bool tty_;
  bool log_;
  std::string last_workload_;
  Clock::time_point start_ = Clock::now();
};

// A program's output must not depend on the allocator: the first digest seen
// for a case is the reference ("" when the record has none, or it matches).
std::string output_mismatch(std::map<std::string, std::pair<std::string, std::string>>& seen,
                            const json& record, const std::string& allocator) {
  if (!record.contains("output_digest")) return "";
  const std::string key = record.value("workload", "") + "/" + record.value("case", "");
  const std::string digest = record["output_digest"];
  const auto [it, first] = seen.try_emplace(key, digest, allocator);
  if (first || it->second.first == digest) return "";
  return record.value("case", "") + ": the output under " + allocator +
         " differs from the output under " + it->second.second +
         " (a wrong result is a failure, not a number)";
}

// How long the parent waits for one child.
double child_timeout(const RunSpec& s) {
  if (s.workload == "apps" || s.workload == "run") return s.timeout_s * 4 + 60;
  return std::ceil(s.warmup_s + s.seconds) * 20 + 120;
}

int run_plan(const Options& o, const std::vector<Run>& runs, const Available& av) {
  std::filesystem::create_directories(o.out);
  const std::string jsonl_path = o.out + "/results.jsonl";
  const std::string csv_path = o.out + "/results.csv";
  std::ofstream jsonl(jsonl_path);
  std::ofstream csv(csv_path);
  csv << kCsvHeader << '\n';
  const json machine = machine_info(av.preload);
  std::vector<json> records;
  std::map<std::string, std::pair<std::string, std::string>> digests;
  Progress progress(runs);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    progress.show(i, r);
    const std::string& program = av.program.at(r.spec.allocator);
    const std::string lib = program.empty() ? av.preload.at(r.spec.allocator) : "";
    json record;
    try {
      record = spawn_child(r.spec, lib, program, child_timeout(r.spec));
    } catch (const std::exception& e) {
      progress.finish();
      std::fprintf(stderr, "mempool-bench: %s\n", e.what());
      return 1;
    }
    // A preloaded malloc that did not take effect, or a program that does not define
    // malloc, would measure glibc under the allocator's name.
    const std::string& expected = program.empty() ? lib : program;
    if (!expected.empty() && record.value("malloc_from", "") != expected) {
      progress.finish();
      std::fprintf(stderr, "mempool-bench: %s: malloc came from %s, not %s (%s)\n",
                   r.spec.allocator.c_str(), record.value("malloc_from", "?").c_str(),
                   expected.c_str(), program.empty() ? "LD_PRELOAD failed" : "not linked in");
      return 1;
    }
    json full = {
        {"schema", 1},       {"workload", r.spec.workload}, {"allocator", r.spec.allocator},
        {"label", o.label},  {"repetition", r.repetition},  {"threads", r.spec.threads},
        {"machine", machine}};
    if (const std::vector<std::string> env = allocator_env(r.spec.allocator); !env.empty())
      full["allocator_env"] = env;
    for (auto it = record.begin(); it != record.end(); ++it)
      full[it.key()] = it.value();
    jsonl << full.dump() << '\n';
    csv << csv_row(full) << '\n';
    const std::string mismatch = output_mismatch(digests, full, r.spec.allocator);
    if (!mismatch.empty()) {
      progress.finish();
      std::fprintf(stderr, "mempool-bench: %s\n", mismatch.c_str());
      return 1;
    }
    records.push_back(std::move(full));
  }
  progress.finish();
  if (o.format == "json") {
    for (const json& r : records)
      std::printf("%s\n", r.dump().c_str());
  } else if (o.format == "csv") {
    std::printf("%s\n", kCsvHeader);
    for (const json& r : records)
      std::printf("%s\n", csv_row(r).c_str());
  } else {
    print_table(records, av.names);
    std::printf("\n");
    print_wrapped(
        std::to_string(records.size()) + " runs; results in " + jsonl_path + " and " + csv_path, 2);
  }
  return 0;
}

// --dry-run: each case of the first repetition with its allocators, then the
// number of runs, so that what a suite will do can be seen before it runs.
void print_plan(const std::vector<Run>& runs) {
  std::string line;
  std::string last;
  std::size_t repetitions = 0;
  for (const Run& r : runs) {
    repetitions = std::max(repetitions, r.repetition + 1);
    if (r.repetition != 0) continue;
    const RunSpec& s = r.spec;
    std::string what = s.workload;
    if (!s.app.empty()) what += " " + s.app;
    if (s.size != 0)
      what += std::string(s.mixed ? " mixed up to " : " ") + std::to_string(s.size) + " B";
    if (!s.replace.empty()) what += " " + s.replace;
    what += ", " + std::to_string(s.threads) + (s.threads == 1 ? " thread:" : " threads:");
    if (what != last) {
      if (!line.empty()) std::printf("%s\n", line.c_str());
      line = what;
      last = what;
    }
    if (line.size() + 1 + s.allocator.size() > 120) {  // a terminal's width
      std::printf("%s\n", line.c_str());
      line = "   ";
    }
    line += " " + s.allocator;
  }
  if (!line.empty()) std::printf("%s\n", line.c_str());
  std::printf("%zu runs in %zu repetitions\n", runs.size(), repetitions);
}

}  // namespace

int run_plan_for(const Options& o, const std::vector<Part>& parts) {
  const bool explicit_list = !o.allocators.empty();
  const std::vector<std::string> wanted = explicit_list ? o.allocators : default_allocators(parts);
  Available av = available_allocators(wanted, explicit_list);
  const std::vector<Run> runs = plan_runs(parts, o.repeat, av.names, explicit_list);
  // The table's columns: the allocators that run (apps has no in-process API).
  std::erase_if(av.names, [&](const std::string& name) {
    return std::none_of(runs.begin(), runs.end(),
                        [&](const Run& r) { return r.spec.allocator == name; });
  });
  if (av.names.empty()) {
    std::fprintf(stderr, "mempool-bench: none of the allocators asked for is available\n");
    return 1;
  }
  if (o.dry_run) {
    print_plan(runs);
    return 0;
  }
  return run_plan(o, runs, av);
}

int exec_report_script(const std::string& name, const std::vector<std::string>& args) {
  const std::string script =
      std::filesystem::path(MEMPOOL_BENCH_REPORT_SCRIPT).replace_filename(name).string();
  std::vector<char*> argv = {const_cast<char*>("/usr/bin/python3"),
                             const_cast<char*>(script.c_str())};
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(argv[0], argv.data());
  std::fprintf(stderr,
               "mempool-bench: cannot run /usr/bin/python3 %s (Debian: python3-matplotlib)\n",
               script.c_str());
  return 1;
}

int run_report(const std::string& dir) {
  return exec_report_script("report.py", {dir});
}

void print_list() {
  std::printf("workloads:\n");
  for (const WorkloadInfo& w : all_workloads())
    std::printf("  %-14s %s\n", w.name, w.what);
  std::printf("allocators:\n");
  for (const AllocatorInfo& a : all_allocators()) {
    std::string path;
    std::string why;
    const bool ok = locate_library(a, exe_dir(), &path, &why);
    std::printf("  %-16s %s%s\n", a.name, a.what, ok ? "" : ("  [" + why + "]").c_str());
  }
}

}  // namespace mempool_bench
