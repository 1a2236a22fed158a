// apps: real programs from Debian's packages, each run under the allocator of
// the run (the child's own LD_PRELOAD is passed on to the program; the load
// generators and checkers run under glibc):
//   redis, redis-pipelined  redis-server driven by redis-benchmark over loopback,
//                           GET SET LPUSH LPOP SADD HSET ZADD, 100-byte values,
//                           100,000 random keys, 1 and 16 requests in flight
//   redis-bigheap           redis-server holding 1,000,000 keys of 100 bytes (a
//                           Lua script stores them), then 1,000,000 random GETs,
//                           16 in flight: a large heap of small blocks read at
//                           random, where huge pages matter (also run under
//                           jemalloc-thp and mempool-thp-never by default)
//   python                  CPython on dicts, strings and JSON (apps/python_workload.py)
//   sqlite                  sqlite3 inserting, indexing and querying a file database
//   gxx                     g++ -O2 of a mid-size C++ file, then the program it made
// Under glibc the C library itself is preloaded: Debian's redis-server links
// libjemalloc.so.2, and would otherwise run on jemalloc in the glibc column.
// Each checks its result (a wrong one is a failure, not a number) and records
// a digest of its output, which the driver compares across allocators. The
// command line is kept in params.command; peak RSS is the program's own (the
// largest process of its tree), minor_faults those of its tree (from wait4).
// anon_huge_kib (AnonHugePages) is read from /proc/<pid>/smaps_rollup of
// redis-server just before it is stopped; the programs that exit by themselves
// (python, sqlite, gxx) leave nothing to read it from when wait4 returns, and
// record null. mempool's in-process APIs have no program to run: skipped.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "process.hpp"
#include "workloads.hpp"

#ifndef MEMPOOL_BENCH_APPS_DIR
#define MEMPOOL_BENCH_APPS_DIR "bench/mempool-bench/workloads/apps"
#endif

namespace mempool_bench {

namespace {

using nlohmann::json;

// A folder of its own under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/mempool-bench-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("apps: cannot make a temporary folder in " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string app_file(const char* name) {
  return std::string(MEMPOOL_BENCH_APPS_DIR) + "/" + name;
}

// What the program runs under: the child's own preload (the allocator's library),
// or for glibc the C library itself, preloaded so that a program linked against
// another malloc (Debian's redis-server links libjemalloc.so.2) really runs on
// glibc's: a preloaded library comes first in the symbol search.
std::string preload() {
  const char* p = std::getenv("LD_PRELOAD");
  return p != nullptr && *p != '\0' ? p : malloc_library();
}

// The environment of what runs beside the measured program (load generators,
// checkers, the program g++ made): no preload, and none of the allocator's own
// settings (jemalloc-thp's MALLOC_CONF would reach redis-benchmark, which links
// jemalloc).
std::vector<std::string> plain_environment(const RunSpec& spec) {
  std::vector<std::string> env = environment_with("");
  for (const std::string& x : allocator_env(spec.allocator)) {
    const std::string name = x.substr(0, x.find('=') + 1);
    std::erase_if(env, [&](const std::string& e) { return e.rfind(name, 0) == 0; });
  }
  return env;
}

void require_program(const std::string& program, const char* package) {
  if (find_program(program).empty())
    throw Skipped(program + " is not installed (Debian: apt-get install " + package + ")");
}

void require_preloaded_allocator(const RunSpec& spec) {
  const AllocatorInfo* a = find_allocator(spec.allocator);
  if (a != nullptr && !a->preload)
    throw Skipped(spec.allocator + " is an in-process API; programs run through malloc");
  if (a != nullptr && a->program != nullptr)
    throw Skipped(spec.allocator + " is linked into mempool-bench; a program has its own malloc");
}

// Runs argv under the allocator; a failure is an error naming the program.
ProcessResult run_checked(const RunSpec& spec, const std::vector<std::string>& argv,
                          ProcessOptions options) {
  const ProcessResult r = run_process(argv, options);
  if (!r.ok()) throw std::runtime_error("apps: " + failure_message(argv, spec.allocator, r));
  return r;
}

json program_result(const std::string& name, const std::vector<std::string>& argv,
                    const ProcessResult& r, const std::string& output) {
  return {{"case", name},
          {"primary", {{"metric", "wall_s"}, {"better", "lower"}}},
          {"params", {{"command", command_line(argv)}}},
          {"output_digest", output_digest(output)},
          // AnonHugePages: null, the program exited by itself (see the top of this file).
          {"metrics", program_metrics(r)}};
}

ProcessOptions options_for(const RunSpec& spec, const std::string& cwd) {
  ProcessOptions o;
  o.env = environment_with(preload());
  o.timeout_s = spec.timeout_s;
  o.cwd = cwd;
  return o;
}

json python_app(const RunSpec& spec) {
  require_program("/usr/bin/python3", "python3");
  const TempDir dir;
  const std::vector<std::string> argv = {"/usr/bin/python3", app_file("python_workload.py"),
                                         spec.quick ? "2000" : "40000"};
  const ProcessResult r = run_checked(spec, argv, options_for(spec, dir.path()));
  if (last_line(r.out).rfind("ok ", 0) != 0)
    throw std::runtime_error("apps: python under " + spec.allocator +
                             " printed a wrong result: " + last_line(r.out));
  return program_result("python", argv, r, r.out);
}

json sqlite_app(const RunSpec& spec) {
  require_program("sqlite3", "sqlite3");
  const TempDir dir;
  const std::string script = dir.path() + "/script";
  std::ofstream(script) << ".parameter set @rows " << (spec.quick ? 5000 : 150000) << "\n.read "
                        << app_file("sqlite_workload.sql") << "\n";
  const std::vector<std::string> argv = {"sqlite3", dir.path() + "/bench.db"};
  ProcessOptions options = options_for(spec, dir.path());
  options.stdin_path = script;
  const ProcessResult r = run_checked(spec, argv, options);
  // The last two lines: integrity_check's "ok" and the script's own check.
  const std::string check = last_line(r.out);
  const std::string before = last_line(r.out.substr(0, r.out.rfind(check)));
  if (check != "ok" || before != "ok")
    throw std::runtime_error("apps: sqlite3 under " + spec.allocator +
                             " gave a wrong result: " + before + " / " + check);
  return program_result("sqlite", argv, r, r.out);
}

json gxx_app(const RunSpec& spec) {
  require_program("g++", "g++");
  const TempDir dir;
  const std::string exe = dir.path() + "/program";
  // --quick: a file with no header, for a smoke test in well under a second.
  std::string source = app_file("compile_workload.cpp");
  if (spec.quick) {
    source = dir.path() + "/quick.cpp";
    std::ofstream(source) << "extern \"C\" int puts(const char*);\nint main() { puts(\"ok\"); }\n";
  }
  const std::vector<std::string> argv = {"g++", "-std=c++20", "-O2", source, "-o", exe};
  const ProcessResult r = run_checked(spec, argv, options_for(spec, dir.path()));
  // What it made runs under glibc: the compiler's output is what is checked.
  ProcessOptions plain = options_for(spec, dir.path());
  plain.env = plain_environment(spec);
  const ProcessResult ran = run_checked(spec, {exe}, plain);
  if (last_line(ran.out) != "ok")
    throw std::runtime_error("apps: the program g++ made under " + spec.allocator +
                             " printed a wrong result: " + last_line(ran.out));
  return program_result("gxx", argv, r, ran.out);
}

// --- redis

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("apps: no free port on 127.0.0.1");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

// The preloaded library must be mapped in the server, or we would measure glibc.
bool maps_library(pid_t pid, const std::string& library) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(library) != std::string::npos) return true;
  return false;
}

const std::vector<std::string> kRedisTests = {"SET",  "GET",  "LPUSH", "LPOP",
                                              "SADD", "HSET", "ZADD"};

// redis-benchmark --csv: "test","rps",... one line per test.
std::map<std::string, double> parse_redis_csv(const std::string& out) {
  std::map<std::string, double> rps;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() < 2 || line[0] != '"') continue;
    const std::size_t name_end = line.find('"', 1);
    const std::size_t value_begin = line.find('"', name_end + 1);
    if (name_end == std::string::npos || value_begin == std::string::npos) continue;
    const std::string name = line.substr(1, name_end - 1);
    const double v = std::atof(line.c_str() + value_begin + 1);
    // "LPUSH (needed to benchmark LPOP)" and the like: the first word.
    const std::string test = name.substr(0, name.find(' '));
    if (v > 0 && !rps.contains(test)) rps[test] = v;
  }
  return rps;
}

// A redis-server on a free loopback port, its files in dir, running under the
// allocator (checked: the preloaded library is mapped in it). Its THP setting is
// left to the allocator: Redis would otherwise turn THP off for itself where the
// kernel's mode is "always" (disable-thp, Redis 7).
struct RedisServer {
  std::vector<std::string> argv;
  int port = 0;
  Background process;
};

RedisServer start_redis(const RunSpec& spec, const TempDir& dir) {
  require_program("redis-server", "redis-server");
  require_program("redis-benchmark", "redis-tools");
  require_program("redis-cli", "redis-tools");
  RedisServer server;
  server.port = free_loopback_port();
  server.argv = {"redis-server",
                 "--port",
                 std::to_string(server.port),
                 "--bind",
                 "127.0.0.1",
                 "--save",
                 "",
                 "--appendonly",
                 "no",
                 "--disable-thp",
                 "no",
                 "--dir",
                 dir.path(),
                 "--databases",
                 "1"};
  ProcessOptions options = options_for(spec, dir.path());
  options.log_path = dir.path() + "/server.log";
  Background& b = server.process;
  b = start_process(server.argv, options);
  ProcessResult gone;
  const std::string lib = preload();
  for (int tries = 0; !accepts(server.port); ++tries) {
    if (!still_running(b, &gone) || tries > 1000) {
      stop_process(b, 1);
      std::ifstream log(options.log_path);
      std::stringstream said;
      said << log.rdbuf();
      throw std::runtime_error("apps: redis-server under " + spec.allocator +
                               " did not start: " + last_line(said.str()));
    }
    ::usleep(10000);
  }
  if (!maps_library(b.pid, lib)) {
    stop_process(b, 1);
    throw std::runtime_error("apps: redis-server did not load " + lib);
  }
  return server;
}

// Stops the server (after reading its AnonHugePages, in *anon_huge: -1 when it
// cannot be read); a server that does not stop cleanly is an error, as is
// `failure` (what went wrong while it ran, "" for nothing).
ProcessResult stop_redis(const RunSpec& spec, RedisServer& server, const std::string& failure,
                         long* anon_huge) {
  *anon_huge = anon_huge_kib(server.process.pid);
  const ProcessResult r = stop_process(server.process, 10);
  if (!failure.empty()) throw std::runtime_error(failure);
  if (!WIFEXITED(r.status) || r.timed_out)
    throw std::runtime_error("apps: redis-server under " + spec.allocator +
                             " did not stop cleanly: " + r.failure());
  return r;
}

json redis_app(const RunSpec& spec, int pipeline) {
  const std::string name = pipeline > 1 ? "redis-pipelined" : "redis";
  const TempDir dir;
  RedisServer server = start_redis(spec, dir);
  const int port = server.port;
  ProcessOptions client = options_for(spec, dir.path());
  client.env = plain_environment(spec);  // the load generator as it is, for every allocator
  const int requests = pipeline > 1 ? (spec.quick ? 5000 : 200000) : (spec.quick ? 1000 : 25000);
  const std::vector<std::string> bench = {"redis-benchmark",
                                          "-h",
                                          "127.0.0.1",
                                          "-p",
                                          std::to_string(port),
                                          "-P",
                                          std::to_string(pipeline),
                                          "-d",
                                          "100",
                                          "-r",
                                          "100000",
                                          "-n",
                                          std::to_string(requests),
                                          "-t",
                                          "set,get,lpush,lpop,sadd,hset,zadd",
                                          "--csv"};
  std::map<std::string, double> rps;
  std::string failure;
  std::string check;
  try {
    const ProcessResult r = run_checked(spec, bench, client);
    rps = parse_redis_csv(r.out);
    // What was stored reads back, after all those writes.
    const std::string cli = "redis-cli";
    const std::string p = std::to_string(port);
    run_checked(spec, {cli, "-p", p, "set", "mempool:check", "stored-by-mempool-bench"}, client);
    check = run_checked(spec, {cli, "-p", p, "get", "mempool:check"}, client).out;
    check += run_checked(spec, {cli, "-p", p, "hlen", "myhash"}, client).out;
  } catch (const std::exception& e) {
    failure = e.what();
  }
  long anon_huge = -1;
  const ProcessResult server_result = stop_redis(spec, server, failure, &anon_huge);
  for (const std::string& t : kRedisTests)
    if (!rps.contains(t))
      throw std::runtime_error("apps: redis-benchmark under " + spec.allocator + " gave no " + t +
                               " result");
  if (check.rfind("stored-by-mempool-bench\n", 0) != 0 || std::atoi(check.c_str() + 24) <= 0)
    throw std::runtime_error("apps: redis-server under " + spec.allocator +
                             " returned a wrong value: " + check);
  json metrics = {{"peak_rss_kib", server_result.peak_rss_kib},
                  {"minor_faults", server_result.minor_faults},
                  {"anon_huge_kib", kib_or_null(anon_huge)},
                  {"server_cpu_s", server_result.cpu_s}};
  double log_sum = 0;
  for (const std::string& t : kRedisTests) {
    std::string key = "rps_" + t;
    std::transform(key.begin(), key.end(), key.begin(), ::tolower);
    metrics[key] = rps[t];
    log_sum += std::log(rps[t]);
  }
  metrics["geomean_rps"] = std::exp(log_sum / static_cast<double>(kRedisTests.size()));
  return {{"case", name},
          {"primary", {{"metric", "geomean_rps"}, {"better", "higher"}}},
          {"params",
           {{"command", command_line(server.argv) + " <- " + command_line(bench)},
            {"requests", requests}}},
          {"output_digest", output_digest(check.substr(0, 24))},
          {"metrics", metrics}};
}

// A number in INFO's "name:value" lines (-1 when it is not there).
long long info_field(const std::string& info, const std::string& name) {
  const std::size_t at = info.find(name + ":");
  return at == std::string::npos ? -1 : std::atoll(info.c_str() + at + name.size() + 1);
}

// Stores keys "key:%012d" (as redis-benchmark -r names them) for 0 <= i < ARGV[1],
// each a string of ARGV[2] bytes, in one server-side loop: the server's own
// allocations (keys, values, dict entries), no client in the way.
constexpr const char* kFillScript =
    "local v = string.rep('x', tonumber(ARGV[2])) "
    "for i = 0, tonumber(ARGV[1]) - 1 do redis.call('SET', string.format('key:%012d', i), v) end "
    "return tonumber(ARGV[1])";

json redis_bigheap_app(const RunSpec& spec) {
  const TempDir dir;
  const long keys = spec.quick ? 20000 : 1000000;
  const long gets = spec.quick ? 20000 : 1000000;
  const int value_bytes = 100;
  RedisServer server = start_redis(spec, dir);
  const std::string p = std::to_string(server.port);
  ProcessOptions client = options_for(spec, dir.path());
  client.env = plain_environment(spec);  // the load generator as it is, for every allocator
  const std::vector<std::string> bench = {
      "redis-benchmark",    "-h", "127.0.0.1",          "-p", p,     "-P",   "16", "-r",
      std::to_string(keys), "-n", std::to_string(gets), "-t", "get", "--csv"};
  std::string failure;
  double fill_s = 0;
  std::string stored;
  std::string info;
  std::map<std::string, double> rps;
  try {
    const ProcessResult fill = run_checked(spec,
                                           {"redis-cli", "-p", p, "eval", kFillScript, "0",
                                            std::to_string(keys), std::to_string(value_bytes)},
                                           client);
    fill_s = fill.wall_s;
    stored = run_checked(spec, {"redis-cli", "-p", p, "dbsize"}, client).out;
    const ProcessResult r = run_checked(spec, bench, client);
    rps = parse_redis_csv(r.out);
    info = run_checked(spec, {"redis-cli", "-p", p, "info", "stats"}, client).out;
    stored += run_checked(spec, {"redis-cli", "-p", p, "strlen", "key:000000000042"}, client).out;
  } catch (const std::exception& e) {
    failure = e.what();
  }
  long anon_huge = -1;
  const ProcessResult server_result = stop_redis(spec, server, failure, &anon_huge);
  // Every key stored, every GET a hit: the lookups really happened.
  const std::string expected = std::to_string(keys) + "\n" + std::to_string(value_bytes) + "\n";
  const long long hits = info_field(info, "keyspace_hits");
  const long long misses = info_field(info, "keyspace_misses");
  if (stored != expected || hits < gets || misses != 0 || !rps.contains("GET"))
    throw std::runtime_error("apps: redis-server under " + spec.allocator +
                             " gave a wrong result: dbsize and strlen " + stored + ", hits " +
                             std::to_string(hits) + " of " + std::to_string(gets) + ", misses " +
                             std::to_string(misses));
  return {{"case", "redis-bigheap"},
          {"primary", {{"metric", "get_rps"}, {"better", "higher"}}},
          {"params",
           {{"command", command_line(server.argv) + " <- " + command_line(bench)},
            {"keys", keys},
            {"value_bytes", value_bytes},
            {"gets", gets}}},
          {"output_digest", output_digest(stored)},
          {"metrics",
           {{"get_rps", rps["GET"]},
            {"fill_s", fill_s},
            {"keyspace_hits", hits},
            {"peak_rss_kib", server_result.peak_rss_kib},
            {"minor_faults", server_result.minor_faults},
            {"anon_huge_kib", kib_or_null(anon_huge)},
            {"server_cpu_s", server_result.cpu_s}}}};
}

struct App {
  const char* name;
  json (*run)(const RunSpec& spec);
};

const std::vector<App>& apps() {
  static const std::vector<App> list = {
      {"redis", [](const RunSpec& s) { return redis_app(s, 1); }},
      {"redis-pipelined", [](const RunSpec& s) { return redis_app(s, 16); }},
      {"redis-bigheap", redis_bigheap_app},
      {"python", python_app},
      {"sqlite", sqlite_app},
      {"gxx", gxx_app},
  };
  return list;
}

}  // namespace

std::vector<std::string> app_names() {
  std::vector<std::string> names;
  for (const App& a : apps())
    names.emplace_back(a.name);
  return names;
}

std::vector<RunSpec> app_cases(const RunSpec& given) {
  std::vector<RunSpec> out;
  const std::string wanted = "," + given.app + ",";  // --apps: a comma-separated list
  for (const App& a : apps()) {
    if (!given.app.empty() && wanted.find("," + std::string(a.name) + ",") == std::string::npos)
      continue;
    RunSpec s = given;
    s.app = a.name;
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> app_extra_allocators(const RunSpec& c) {
  return c.app == "redis-bigheap" ? huge_page_allocators() : std::vector<std::string>{};
}

json run_apps(const RunSpec& spec) {
  for (const App& a : apps()) {
    if (spec.app != a.name) continue;
    try {
      require_preloaded_allocator(spec);
      return a.run(spec);
    } catch (const Skipped& e) {
      return {{"case", a.name}, {"skipped", e.what()}};
    }
  }
  throw std::runtime_error("apps: no program named '" + spec.app + "'");
}

}  // namespace mempool_bench
