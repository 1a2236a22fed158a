// The machine, recorded with every run: CPU (name, family and model: a name
// such as "AMD EPYC" alone does not say which generation), kernel, compiler, the
// commit measured, the date, and the version of each allocator measured.
#include <gnu/libc-version.h>
#include <sys/utsname.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

#include "driver.hpp"

namespace mempool_bench {

#ifndef MEMPOOL_BENCH_BUILD_TYPE
#define MEMPOOL_BENCH_BUILD_TYPE "unknown"
#endif
#ifndef MEMPOOL_BENCH_VERSION
#define MEMPOOL_BENCH_VERSION "unknown"
#endif
#ifndef MEMPOOL_BENCH_SOURCE_DIR
#define MEMPOOL_BENCH_SOURCE_DIR "."
#endif

using nlohmann::json;

namespace {

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

// A number from /proc/cpuinfo ("cpu family", "model"), -1 where there is none.
int cpuinfo_number(const char* key) {
  const std::string v = first_line_with("/proc/cpuinfo", key);
  return v.empty() || v.find_first_not_of("0123456789") != std::string::npos ? -1 : std::stoi(v);
}

// The commit of the tree the benchmark was built from ("-dirty" with changes not
// committed), or "unknown" outside a git checkout.
std::string source_commit() {
  const std::string c = command_line_output(std::string("git -C '") + MEMPOOL_BENCH_SOURCE_DIR +
                                            "' describe --always --dirty --abbrev=10 2>/dev/null");
  return c.empty() ? "unknown" : c;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm t{};
  ::gmtime_r(&now, &t);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &t);
  return buf;
}

// The version of what an allocator runs: glibc's and mempool's own, or the
// Debian package that installed a preloaded library (a --preload library: its path).
std::string library_version(const std::string& name, const std::string& path) {
  if (name == "glibc") return gnu_get_libc_version();
  if (name == "std-pmr") return "libstdc++ " + std::to_string(_GLIBCXX_RELEASE);
  if (const AllocatorInfo* a = find_allocator(name); a != nullptr && a->given) return path;
  if (path.empty() || name.starts_with("mempool")) return MEMPOOL_BENCH_VERSION;
  const std::string owner = command_line_output("dpkg-query -S '" + path + "' 2>/dev/null");
  const std::string package = owner.substr(0, owner.find(':'));
  if (package.empty()) return "unknown";
  const std::string version =
      command_line_output("dpkg-query -W -f='${Version}' '" + package + "' 2>/dev/null");
  return version.empty() ? "unknown" : version;
}

}  // namespace

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
          {"cpu_family", cpuinfo_number("cpu family")},
          {"cpu_model", cpuinfo_number("model\t")},
          {"cores", std::thread::hardware_concurrency()},
          {"kernel", std::string(u.release)},
          {"compiler", compiler},
          {"build_type", MEMPOOL_BENCH_BUILD_TYPE},
          {"glibc", gnu_get_libc_version()},
          {"commit", source_commit()},
          {"date", utc_now()},
          {"libraries", versions}};
}

}  // namespace mempool_bench
