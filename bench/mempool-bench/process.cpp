#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace mempool_bench {

namespace {

constexpr std::size_t kErrTailBytes = 2048;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double seconds(const timeval& t) {
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
}

void fill_usage(ProcessResult& r, const rusage& ru) {
  r.cpu_s = seconds(ru.ru_utime) + seconds(ru.ru_stime);
  r.peak_rss_kib = ru.ru_maxrss;  // KiB on Linux; the largest of the process tree
  r.minor_faults = ru.ru_minflt;  // the sum over the process tree
}

std::vector<char*> pointers(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings)
    out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void redirect(int fd, const char* path, int flags) {
  const int f = ::open(path, flags, 0644);
  if (f >= 0 && f != fd) {
    ::dup2(f, fd);
    ::close(f);
  }
}

struct Started {
  pid_t pid = -1;
  int out = -1;  // read ends, -1 when not captured
  int err = -1;
  double at = 0;
};

// fork + exec in a process group of its own. stdout and stderr go to pipes when
// `capture`, otherwise to options' log file (background) or /dev/null. A failed
// exec is reported here, through a close-on-exec pipe, as an exception.
Started start(const std::vector<std::string>& argv, const ProcessOptions& options, bool capture,
              const std::string& log_path) {
  if (argv.empty()) throw std::runtime_error("no command given");
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  int exec_pipe[2];
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0 ||
      (capture && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)))
    throw std::runtime_error("pipe failed: " + std::string(std::strerror(errno)));
  const std::vector<char*> args = pointers(argv);
  const std::vector<char*> envp = pointers(options.env);
  std::fflush(nullptr);
  Started s;
  s.at = now_s();
  s.pid = ::fork();
  if (s.pid < 0) throw std::runtime_error("fork failed: " + std::string(std::strerror(errno)));
  if (s.pid == 0) {
    ::setpgid(0, 0);
    ::signal(SIGPIPE, SIG_DFL);
    redirect(STDIN_FILENO, options.stdin_path.empty() ? "/dev/null" : options.stdin_path.c_str(),
             O_RDONLY);
    if (capture) {
      ::dup2(options.capture_stdout ? out_pipe[1] : ::open("/dev/null", O_WRONLY), STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
    } else {
      const char* path = log_path.empty() ? "/dev/null" : log_path.c_str();
      redirect(STDOUT_FILENO, path, O_WRONLY | O_CREAT | O_TRUNC);
      ::dup2(STDOUT_FILENO, STDERR_FILENO);
    }
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) {
      const int e = errno;
      [[maybe_unused]] auto n = ::write(exec_pipe[1], &e, sizeof e);
      ::_exit(127);
    }
    ::execvpe(args[0], args.data(), envp.data());
    const int e = errno;
    [[maybe_unused]] auto n = ::write(exec_pipe[1], &e, sizeof e);
    ::_exit(127);
  }
  ::setpgid(s.pid, s.pid);  // also here: no race with a kill before the child ran
  ::close(exec_pipe[1]);
  if (capture) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    s.out = out_pipe[0];
    s.err = err_pipe[0];
  }
  int e = 0;
  const ssize_t got = ::read(exec_pipe[0], &e, sizeof e);
  ::close(exec_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof e)) {
    ::waitpid(s.pid, nullptr, 0);
    if (s.out >= 0) ::close(s.out);
    if (s.err >= 0) ::close(s.err);
    throw std::runtime_error("cannot run " + argv[0] + ": " + std::strerror(e));
  }
  return s;
}

void append_tail(std::string& tail, const char* data, std::size_t n) {
  tail.append(data, n);
  if (tail.size() > kErrTailBytes) tail.erase(0, tail.size() - kErrTailBytes);
}

}  // namespace

bool ProcessResult::ok() const {
  return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string ProcessResult::failure() const {
  if (timed_out) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", wall_s);
    return std::string("took longer than ") + buf + " s (stopped)";
  }
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           ::strsignal(WTERMSIG(status)) + ")";
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) {
    if (!s.empty()) s.push_back(' ');
    const bool quote = a.empty() || a.find(' ') != std::string::npos;
    // append, not operator+: GCC 12 warns falsely (-Wrestrict) on "'" + a + "'".
    if (quote) s.push_back('\'');
    s.append(a);
    if (quote) s.push_back('\'');
  }
  return s;
}

std::string output_digest(const std::string& text) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text)
    h = (h ^ c) * 1099511628211ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string last_line(const std::string& text) {
  std::size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n')
    --end;
  const std::size_t begin = text.rfind('\n', end == 0 ? 0 : end - 1);
  return begin == std::string::npos || begin >= end ? text.substr(0, end)
                                                    : text.substr(begin + 1, end - begin - 1);
}

std::string failure_message(const std::vector<std::string>& argv, const std::string& allocator,
                            const ProcessResult& r) {
  const std::string said = last_line(r.err_tail);
  std::string message = "`";  // built by appending: see command_line
  message.append(command_line(argv)).append("` under ").append(allocator).append(": ");
  message.append(r.failure());
  if (!said.empty()) message.append("; it said: ").append(said);
  return message;
}

std::vector<std::string> environment_with(const std::string& preload,
                                          const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) env.emplace_back(*e);
  if (!preload.empty()) env.push_back("LD_PRELOAD=" + preload);
  for (const std::string& x : extra) {
    const std::string name = x.substr(0, x.find('=') + 1);
    std::erase_if(env, [&](const std::string& e) { return e.rfind(name, 0) == 0; });
    env.push_back(x);
  }
  return env;
}

long minor_faults_self() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

long anon_huge_kib(pid_t pid) {
  const std::string path =
      pid == 0 ? "/proc/self/smaps_rollup" : "/proc/" + std::to_string(pid) + "/smaps_rollup";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];  // about 25 short lines
  std::size_t got = 0;
  for (ssize_t n; got < sizeof buf - 1 && (n = ::read(fd, buf + got, sizeof buf - 1 - got)) > 0;)
    got += static_cast<std::size_t>(n);
  ::close(fd);
  buf[got] = '\0';
  const char* line = std::strstr(buf, "\nAnonHugePages:");
  if (line == nullptr) return -1;
  return std::strtol(line + std::strlen("\nAnonHugePages:"), nullptr, 10);
}

std::string find_program(const std::string& argv0) {
  auto runnable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (argv0.empty()) return "";
  if (argv0.find('/') != std::string::npos) return runnable(argv0) ? argv0 : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t from = 0;
  while (from <= dirs.size()) {
    std::size_t to = dirs.find(':', from);
    if (to == std::string::npos) to = dirs.size();
    const std::string dir = to > from ? dirs.substr(from, to - from) : ".";
    if (runnable(dir + "/" + argv0)) return dir + "/" + argv0;
    from = to + 1;
  }
  return "";
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  const Started s = start(argv, options, true, "");
  ProcessResult r;
  const double deadline = s.at + options.timeout_s;
  pollfd fds[2] = {{s.out, POLLIN, 0}, {s.err, POLLIN, 0}};
  int open_fds = 2;
  bool reaped = false;
  double reaped_at = 0;
  rusage ru{};
  char buf[65536];
  while (open_fds > 0) {
    const double left = deadline - now_s();
    if (left <= 0 && !r.timed_out) {
      ::kill(-s.pid, SIGKILL);
      r.timed_out = true;
    }
    const int wait_ms = r.timed_out ? 100 : static_cast<int>(std::min(left, 0.1) * 1000) + 1;
    const int ready = ::poll(fds, 2, wait_ms);
    if (ready < 0 && errno != EINTR) break;
    for (pollfd& f : fds) {
      if (f.fd < 0 || (f.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = ::read(f.fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(f.fd);
        f.fd = -1;
        --open_fds;
      } else if (&f == &fds[0]) {
        r.out.append(buf, static_cast<std::size_t>(n));
      } else {
        append_tail(r.err_tail, buf, static_cast<std::size_t>(n));
      }
    }
    // The program exited but something it started still holds the pipes: its
    // group goes too (a benchmark leaves nothing behind). Whatever left the group
    // (setsid) and keeps them open is not waited for beyond a second.
    if (ready == 0 && !reaped && ::wait4(s.pid, &r.status, WNOHANG, &ru) == s.pid) {
      reaped = true;
      reaped_at = now_s();
      ::kill(-s.pid, SIGKILL);
    }
    if (reaped && now_s() - reaped_at > 1.0) break;
  }
  for (const pollfd& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  if (!reaped) ::wait4(s.pid, &r.status, 0, &ru);
  r.wall_s = (reaped_at > 0 ? reaped_at : now_s()) - s.at;
  fill_usage(r, ru);
  return r;
}

Background start_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  const Started s = start(argv, options, false, options.log_path);
  return {s.pid, argv[0], s.at};
}

bool still_running(Background& b, ProcessResult* result) {
  if (b.pid < 0) return false;
  rusage ru{};
  if (::wait4(b.pid, &result->status, WNOHANG, &ru) != b.pid) return true;
  result->wall_s = now_s() - b.started_at;
  fill_usage(*result, ru);
  b.pid = -1;
  return false;
}

ProcessResult stop_process(Background& b, double grace_s) {
  ProcessResult r;
  if (b.pid < 0) return r;
  ::kill(b.pid, SIGTERM);
  const double deadline = now_s() + grace_s;
  while (still_running(b, &r)) {
    if (now_s() > deadline) {
      ::kill(-b.pid, SIGKILL);
      r.timed_out = true;
      rusage ru{};
      ::wait4(b.pid, &r.status, 0, &ru);
      r.wall_s = now_s() - b.started_at;
      fill_usage(r, ru);
      b.pid = -1;
      break;
    }
    ::usleep(10000);
  }
  return r;
}

}  // namespace mempool_bench
