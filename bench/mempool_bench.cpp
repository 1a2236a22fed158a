// mempool-bench: the benchmark report. Runs each workload for each allocator in a
// child process of its own (the preloaded mallocs under LD_PRELOAD, mempool's own
// APIs in process), interleaved (A B C A B C ...) and repeated, writes every run
// as a JSON line and a CSV row, and prints the medians. `report DIR` turns saved
// results into report.md and plots (bench/report.py). See --help.
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "workloads.hpp"

extern char** environ;

namespace mempool_bench {
namespace {

using nlohmann::json;

#ifndef MEMPOOL_BENCH_BUILD_TYPE
#define MEMPOOL_BENCH_BUILD_TYPE "unknown"
#endif
#ifndef MEMPOOL_BENCH_VERSION
#define MEMPOOL_BENCH_VERSION "unknown"
#endif
#ifndef MEMPOOL_BENCH_REPORT_SCRIPT
#define MEMPOOL_BENCH_REPORT_SCRIPT "bench/report.py"
#endif

constexpr int kUsageError = 2;

struct Options {
  std::string command;  // a workload, "suite" or "report"
  std::string report_dir;
  std::vector<std::string> allocators;
  std::vector<int> threads;
  std::size_t size = 0;  // 0: the workload's own
  std::string size_dist = "fixed";
  std::string mode = "immediate";
  std::size_t window = 1024;
  double warmup = 0.2;
  double seconds = 1.0;
  std::size_t repeat = 5;
  std::size_t sample_rate = 64;
  std::string label;
  std::string format = "table";
  std::string out = "bench-results";
  bool quick = false;
  bool list = false;
  bool child = false;  // internal: run one measurement, print its JSON line
};

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

// The measurement the options describe (the first allocator and thread count).
RunSpec base_spec(const Options& o) {
  RunSpec spec;
  spec.workload = o.command;
  spec.allocator = o.allocators.empty() ? "" : o.allocators.front();
  spec.threads = o.threads.empty() ? 1 : o.threads.front();
  spec.size = o.size;
  spec.mixed = o.size_dist == "mixed";
  spec.window = o.mode == "window";
  spec.window_size = o.window;
  spec.warmup_s = o.warmup;
  spec.seconds = o.seconds;
  spec.sample_rate = o.sample_rate;
  spec.quick = o.quick;
  return spec;
}

// ---------------------------------------------------------------------------
// The machine, recorded with every run.

std::string first_line_with(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  }
  return "unknown";
}

// The first line a shell command prints, "" when it fails.
std::string command_line_output(const std::string& command) {
  std::FILE* f = ::popen(command.c_str(), "r");
  if (f == nullptr) return "";
  char buf[512] = {};
  const bool got = std::fgets(buf, sizeof buf, f) != nullptr;
  ::pclose(f);
  std::string line = got ? buf : "";
  while (!line.empty() && (line.back() == '\n' || line.back() == ' '))
    line.pop_back();
  return line;
}

// The version of what an allocator runs: glibc's and mempool's own, or the
// Debian package that installed a preloaded library.
std::string library_version(const std::string& name, const std::string& path) {
  if (name == "glibc") return gnu_get_libc_version();
  if (name == "std-pmr") return "libstdc++ " + std::to_string(_GLIBCXX_RELEASE);
  if (path.empty() || name == "mempool") return MEMPOOL_BENCH_VERSION;
  const std::string owner = command_line_output("dpkg-query -S '" + path + "' 2>/dev/null");
  const std::string package = owner.substr(0, owner.find(':'));
  if (package.empty()) return "unknown";
  const std::string version =
      command_line_output("dpkg-query -W -f='${Version}' '" + package + "' 2>/dev/null");
  return version.empty() ? "unknown" : version;
}

json machine_info(const std::map<std::string, std::string>& libraries) {
  utsname u{};
  ::uname(&u);
  json versions = json::object();
  for (const auto& [name, path] : libraries)
    versions[name] = library_version(name, path);
#ifdef __clang__
  const std::string compiler = std::string("clang ") + __clang_version__;
#else
  const std::string compiler = std::string("GCC ") + __VERSION__;
#endif
  return {{"cpu", first_line_with("/proc/cpuinfo", "model name")},
          {"cores", std::thread::hardware_concurrency()},
          {"kernel", std::string(u.release)},
          {"compiler", compiler},
          {"build_type", MEMPOOL_BENCH_BUILD_TYPE},
          {"glibc", gnu_get_libc_version()},
          {"libraries", versions}};
}

// ---------------------------------------------------------------------------
// The child: one measurement.

int run_child(const Options& o) {
  const WorkloadInfo* w = find_workload(o.command);
  const RunSpec spec = base_spec(o);
  json result;
  try {
    result = w->run(spec);
  } catch (const Skipped& e) {
    result = {{"skipped", e.what()}};
  }
  result["malloc_from"] = malloc_library();
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

// Runs this program as a child with args (and LD_PRELOAD = preload when not
// empty); returns its one JSON line. A child that fails or hangs (the alarm)
// is an error naming the run.
json spawn_child(const std::vector<std::string>& args, const std::string& preload, int timeout_s) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) env_strings.emplace_back(*e);
  if (!preload.empty()) env_strings.push_back("LD_PRELOAD=" + preload);
  std::vector<char*> argv;
  std::vector<char*> envp;
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env_strings)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(pipefd[1], STDOUT_FILENO);
    ::alarm(static_cast<unsigned>(timeout_s));  // a hung run dies of SIGALRM
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(pipefd[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof buf)) > 0)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::string command;
  for (std::size_t i = 1; i < args.size(); ++i)
    command += " " + args[i];
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ostringstream why;
    if (WIFSIGNALED(status)) {
      why << "killed by signal " << WTERMSIG(status)
          << (WTERMSIG(status) == SIGALRM
                  ? " (took longer than " + std::to_string(timeout_s) + " s)"
                  : "");
    } else {
      why << "exit status " << WEXITSTATUS(status);
    }
    throw std::runtime_error("run failed (" + why.str() + "):" + command);
  }
  try {
    return json::parse(out);
  } catch (const json::exception&) {
    throw std::runtime_error("run printed no result:" + command + "\n" + out);
  }
}

// ---------------------------------------------------------------------------
// The plan: which runs, in which order.

struct Run {
  RunSpec spec;
  std::size_t repetition = 0;
};

std::vector<std::string> child_args(const RunSpec& s) {
  std::vector<std::string> a = {exe_path(),
                                s.workload,
                                "--child",
                                "--allocators=" + s.allocator,
                                "--threads=" + std::to_string(s.threads),
                                std::string("--size-dist=") + (s.mixed ? "mixed" : "fixed"),
                                std::string("--mode=") + (s.window ? "window" : "immediate"),
                                "--window=" + std::to_string(s.window_size),
                                "--warmup=" + std::to_string(s.warmup_s),
                                "--seconds=" + std::to_string(s.seconds),
                                "--sample-rate=" + std::to_string(s.sample_rate)};
  if (s.size != 0) a.push_back("--size=" + std::to_string(s.size));
  if (s.quick) a.emplace_back("--quick");
  return a;
}

// One workload of a plan: its options, and the thread counts it runs at (empty:
// the workload's defaults).
struct Part {
  RunSpec given;
  std::vector<int> threads;
};

// Interleaved: every run of one repetition (each part's cases and thread
// counts, each allocator in turn), then the next repetition.
std::vector<Run> plan_runs(const std::vector<Part>& parts, std::size_t repeat,
                           const std::vector<std::string>& allocators) {
  std::vector<Run> runs;
  for (std::size_t rep = 0; rep < repeat; ++rep) {
    for (const Part& part : parts) {
      const WorkloadInfo* info = find_workload(part.given.workload);
      const std::vector<RunSpec> cases =
          info->cases != nullptr ? info->cases(part.given) : std::vector<RunSpec>{part.given};
      std::vector<int> threads = !part.threads.empty() ? part.threads : info->default_threads();
      if (threads.empty()) threads = {1};  // the workload picks its own threads
      for (const RunSpec& c : cases) {
        for (int t : threads) {
          for (const std::string& a : allocators) {
            Run r{c, rep};
            r.spec.threads = t;
            r.spec.allocator = a;
            runs.push_back(r);
          }
        }
      }
    }
  }
  return runs;
}

// The suite: every workload once, sized to take about 5 minutes on 2 cores
// with every allocator installed (3 repetitions of 0.3 s measurements, unless
// --repeat, --seconds or --warmup say otherwise).
std::vector<Part> suite_parts(const RunSpec& base) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto part = [&](const char* workload, std::vector<int> threads) {
    Part p{base, std::move(threads)};
    p.given.workload = workload;
    return p;
  };
  std::vector<Part> parts = {
      part("rounds", {1, 2, 4}),      part("queue", {1}), part("compare", {1, cores}),
      part("throughput", {1, cores}), part("micro", {}),  part("prodcons", {}),
      part("fragmentation", {}),      part("churn", {}),  part("scaling", {})};
  // throughput: mixed sizes (8 B to 256 KiB) in a window of live blocks, the
  // case the others do not cover.
  parts[3].given.mixed = true;
  parts[3].given.window = true;
  return parts;
}

// ---------------------------------------------------------------------------
// Output: the table of medians, CSV rows.

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

std::string format_metric(const std::string& metric, double v) {
  char buf[64];
  if (metric == "ops_per_s") {
    std::snprintf(buf, sizeof buf, "%.3g Mops/s", v / 1e6);
  } else if (metric.ends_with("_ns") || metric == "ns_per_op") {
    std::snprintf(buf, sizeof buf, "%.3g ns", v);
  } else if (metric.ends_with("_s")) {
    std::snprintf(buf, sizeof buf, "%.3g ms", v * 1e3);
  } else if (metric.ends_with("_kib")) {
    std::snprintf(buf, sizeof buf, "%.3g MiB", v / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  }
  return buf;
}

// One table per workload: a row per case, a column per allocator, the median of
// the primary metric and its ratio to glibc (above 1: better than glibc).
void print_table(const std::vector<json>& records, const std::vector<std::string>& allocators) {
  std::vector<std::string> workloads;
  for (const json& r : records)
    if (std::find(workloads.begin(), workloads.end(), r["workload"]) == workloads.end())
      workloads.push_back(r["workload"]);
  for (const std::string& w : workloads) {
    std::vector<std::string> cases;
    std::map<std::pair<std::string, std::string>, std::vector<double>> values;
    std::map<std::string, std::vector<std::string>> skipped;  // allocator -> reasons
    std::string metric;
    bool lower_better = true;
    for (const json& r : records) {
      if (r["workload"] != w) continue;
      const std::string c = r.value("case", "");
      if (std::find(cases.begin(), cases.end(), c) == cases.end()) cases.push_back(c);
      if (r.contains("skipped")) {
        auto& reasons = skipped[r["allocator"]];
        if (std::find(reasons.begin(), reasons.end(), r["skipped"]) == reasons.end())
          reasons.push_back(r["skipped"]);
        continue;
      }
      metric = r["primary"]["metric"];
      lower_better = r["primary"]["better"] == "lower";
      values[{c, r["allocator"]}].push_back(r["metrics"][metric].get<double>());
    }
    std::printf(
        "\n%s: median %s (%s is better), in brackets the ratio to glibc (above 1: better)\n",
        w.c_str(), metric.c_str(), lower_better ? "lower" : "higher");
    std::printf("  %-24s", "case");
    for (const std::string& a : allocators)
      std::printf(" %22s", a.c_str());
    std::printf("\n");
    for (const std::string& c : cases) {
      std::printf("  %-24s", c.c_str());
      const auto base = values.find({c, "glibc"});
      const double glibc = base != values.end() ? median(base->second) : 0.0;
      for (const std::string& a : allocators) {
        const auto it = values.find({c, a});
        if (it == values.end()) {
          std::printf(" %22s", "-");
          continue;
        }
        const double m = median(it->second);
        std::string cell = format_metric(metric, m);
        if (glibc > 0 && m > 0) {
          char ratio[32];
          std::snprintf(ratio, sizeof ratio, " (%.2fx)", lower_better ? glibc / m : m / glibc);
          cell += ratio;
        }
        std::printf(" %22s", cell.c_str());
      }
      std::printf("\n");
    }
    for (const auto& [a, reasons] : skipped)
      for (const std::string& why : reasons)
        std::printf("  %s skipped: %s\n", a.c_str(), why.c_str());
  }
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

const char* kCsvHeader =
    "workload,case,allocator,label,repetition,threads,primary_metric,primary_value,ns_per_op,"
    "ops_per_s,wall_s,peak_rss_kib,p50_ns,p99_ns,p999_ns,max_ns,skipped";

std::string csv_row(const json& r) {
  auto num = [&](const char* key) -> std::string {
    if (!r.contains("metrics") || !r["metrics"].contains(key)) return "";
    return r["metrics"][key].dump();
  };
  auto latency = [&](const char* key) -> std::string {
    if (!r.contains("metrics") || !r["metrics"].contains("latency_ns")) return "";
    return r["metrics"]["latency_ns"][key].dump();
  };
  std::string metric = r.contains("primary") ? r["primary"]["metric"].get<std::string>() : "";
  std::ostringstream row;
  row << csv_field(r["workload"]) << ',' << csv_field(r.value("case", "")) << ','
      << csv_field(r["allocator"]) << ',' << csv_field(r.value("label", "")) << ','
      << r["repetition"].get<std::size_t>() << ',' << r["threads"].get<int>() << ',' << metric
      << ',' << (metric.empty() ? "" : num(metric.c_str())) << ',' << num("ns_per_op") << ','
      << num("ops_per_s") << ',' << num("wall_s") << ',' << num("peak_rss_kib") << ','
      << latency("p50") << ',' << latency("p99") << ',' << latency("p999") << ',' << latency("max")
      << ',' << csv_field(r.value("skipped", ""));
  return row.str();
}

// ---------------------------------------------------------------------------
// The parent: run the plan.

struct Available {
  std::vector<std::string> names;
  std::map<std::string, std::string> preload;  // name -> library ("" for none)
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
  }
  return av;
}

class Progress {
 public:
  explicit Progress(std::size_t total) : total_(total), tty_(::isatty(STDERR_FILENO) != 0) {}
  void show(std::size_t done, const Run& r) {
    if (!tty_) return;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double left =
        done == 0 ? 0 : elapsed / static_cast<double>(done) * static_cast<double>(total_ - done);
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
  Clock::time_point start_ = Clock::now();
};

int run_plan(const Options& o, const std::vector<Run>& runs, const Available& av) {
  std::filesystem::create_directories(o.out);
  const std::string jsonl_path = o.out + "/results.jsonl";
  const std::string csv_path = o.out + "/results.csv";
  std::ofstream jsonl(jsonl_path);
  std::ofstream csv(csv_path);
  csv << kCsvHeader << '\n';
  const json machine = machine_info(av.preload);
  std::vector<json> records;
  Progress progress(runs.size());
  const int timeout_s = static_cast<int>(std::ceil(o.warmup + o.seconds)) * 20 + 120;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    progress.show(i, r);
    json record;
    try {
      record = spawn_child(child_args(r.spec), av.preload.at(r.spec.allocator), timeout_s);
    } catch (const std::exception& e) {
      progress.finish();
      std::fprintf(stderr, "mempool-bench: %s\n", e.what());
      return 1;
    }
    // A preloaded malloc that did not take effect would measure glibc under its name.
    const std::string& lib = av.preload.at(r.spec.allocator);
    if (!lib.empty() && record.value("malloc_from", "") != lib) {
      progress.finish();
      std::fprintf(stderr, "mempool-bench: %s: malloc came from %s, not %s (LD_PRELOAD failed)\n",
                   r.spec.allocator.c_str(), record.value("malloc_from", "?").c_str(), lib.c_str());
      return 1;
    }
    json full = {
        {"schema", 1},       {"workload", r.spec.workload}, {"allocator", r.spec.allocator},
        {"label", o.label},  {"repetition", r.repetition},  {"threads", r.spec.threads},
        {"machine", machine}};
    for (auto it = record.begin(); it != record.end(); ++it)
      full[it.key()] = it.value();
    jsonl << full.dump() << '\n';
    csv << csv_row(full) << '\n';
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
    std::printf("\n%zu runs; results in %s and %s\n", records.size(), jsonl_path.c_str(),
                csv_path.c_str());
  }
  return 0;
}

int run_report(const std::string& dir) {
  const std::string script = MEMPOOL_BENCH_REPORT_SCRIPT;
  std::vector<char*> argv = {const_cast<char*>("/usr/bin/python3"),
                             const_cast<char*>(script.c_str()), const_cast<char*>(dir.c_str()),
                             nullptr};
  std::fflush(nullptr);
  ::execv(argv[0], argv.data());
  std::fprintf(stderr,
               "mempool-bench: cannot run /usr/bin/python3 %s (Debian: python3-matplotlib)\n",
               script.c_str());
  return 1;
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

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"mempool-bench: mempool against glibc, mimalloc, jemalloc and tcmalloc"};
  app.add_option("command", o.command, "a workload, 'suite' (the default set) or 'report'")
      ->check(CLI::IsMember(command_names()));
  app.add_option("dir", o.report_dir, "report: the folder of saved results");
  app.add_option("--allocators", o.allocators, "comma-separated (default: every one installed)")
      ->delimiter(',')
      ->check(CLI::IsMember(allocator_names()));
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
  app.add_option("--warmup", o.warmup, "seconds before measuring")->check(CLI::Range(0.0, 3600.0));
  app.add_option("--seconds", o.seconds, "seconds measured")->check(CLI::Range(0.001, 3600.0));
  app.add_option("--repeat", o.repeat, "repetitions (median quoted)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000}));
  app.add_option("--sample-rate", o.sample_rate, "time every n-th operation")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  app.add_option("--label", o.label, "a name for this run, kept in the results");
  app.add_option("--format", o.format, "table, csv or json (stdout)")
      ->check(CLI::IsMember({"table", "csv", "json"}));
  app.add_option("--out", o.out, "folder for results.jsonl and results.csv");
  app.add_flag("--quick", o.quick, "short runs, 1 repetition: a smoke test");
  app.add_flag("--list", o.list, "workloads and allocators");
  app.add_flag("--child", o.child)->group("");  // internal
  try {
    app.parse(argc, argv);
    if (o.list) {
      print_list();
      return 0;
    }
    if (o.command.empty())
      throw CLI::ValidationError("command", "name a workload, 'suite' or 'report'");
    if (o.command == "report") {
      if (o.report_dir.empty())
        throw CLI::ValidationError("dir", "report needs the results folder");
      return run_report(o.report_dir);
    }
    if (!o.report_dir.empty()) throw CLI::ValidationError("dir", "only report takes a folder");
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(
        stderr,
        "mempool-bench: %s\nusage: mempool-bench <workload>|suite|report [options]; see --help\n",
        e.what());
    return kUsageError;
  }
  const bool threads_given = !o.threads.empty();
  if (o.threads.empty()) o.threads = {1};
  if (o.child) return run_child(o);
  if (o.quick) {
    o.repeat = app.count("--repeat") != 0 ? o.repeat : 1;
    o.warmup = app.count("--warmup") != 0 ? o.warmup : 0.02;
    o.seconds = app.count("--seconds") != 0 ? o.seconds : 0.1;
  }
  const bool explicit_list = !o.allocators.empty();
  if (!explicit_list) o.allocators = allocator_names();
  const Available av = available_allocators(o.allocators, explicit_list);
  if (av.names.empty()) {
    std::fprintf(stderr, "mempool-bench: none of the allocators asked for is available\n");
    return 1;
  }
  std::vector<Part> parts;
  if (o.command == "suite") {
    if (app.count("--repeat") == 0) o.repeat = o.quick ? 1 : 3;
    if (app.count("--seconds") == 0 && !o.quick) o.seconds = 0.3;
    if (app.count("--warmup") == 0 && !o.quick) o.warmup = 0.05;
    parts = suite_parts(base_spec(o));
    if (threads_given)
      for (Part& p : parts)
        p.threads = o.threads;
  } else {
    parts.push_back({base_spec(o), threads_given ? o.threads : std::vector<int>{}});
  }
  return run_plan(o, plan_runs(parts, o.repeat, av.names), av);
}

}  // namespace mempool_bench

int main(int argc, char** argv) {
  return mempool_bench::main(argc, argv);
}
