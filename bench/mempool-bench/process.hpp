// Running other programs: mempool-bench's own children (one measurement each),
// the real programs of the apps workload and the command of `run`. A program
// runs in a process group of its own, so a timeout ends it and everything it
// started; its peak resident set and minor page faults come from wait4 (of the
// process and the descendants it waited for, cc1plus under g++ for instance).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace mempool_bench {

struct ProcessOptions {
  std::vector<std::string> env;  // the whole environment (see environment_with)
  double timeout_s = 600;        // then SIGKILL to the process group
  std::string stdin_path;        // "" : /dev/null
  std::string cwd;               // "" : this process's
  bool capture_stdout = true;    // otherwise to /dev/null
  std::string log_path;          // start_process: stdout and stderr go here ("" : /dev/null)
};

struct ProcessResult {
  int status = 0;  // as from waitpid
  bool timed_out = false;
  std::string out;
  std::string err_tail;  // the last lines of stderr, for messages
  double wall_s = 0;
  double cpu_s = 0;  // user + system, descendants included
  long peak_rss_kib = 0;
  long minor_faults = 0;  // ru_minflt from wait4: the process and the descendants it waited for
  [[nodiscard]] bool ok() const;
  // "exit status 3", "killed by signal 9", "took longer than 5 s".
  [[nodiscard]] std::string failure() const;
};

// argv as a shell would show it ('quoted' where a word has a space).
std::string command_line(const std::vector<std::string>& argv);
// A fingerprint of a program's output (FNV-1a, 64 bits, hex).
std::string output_digest(const std::string& text);
// The last line of a text, without its newline.
std::string last_line(const std::string& text);
// "`CMD` under ALLOCATOR: exit status 3; it said: LAST STDERR LINE".
std::string failure_message(const std::vector<std::string>& argv, const std::string& allocator,
                            const ProcessResult& r);

// This process's environment with LD_PRELOAD removed, then `preload` (when not
// empty) and `extra` ("NAME=value") added.
std::vector<std::string> environment_with(const std::string& preload,
                                          const std::vector<std::string>& extra = {});

// The minor page faults of this process so far (getrusage: all its threads).
long minor_faults_self();
// AnonHugePages of a process in KiB, from /proc/<pid>/smaps_rollup (pid 0: this
// process); -1 when it cannot be read (gone, no procfs, no permission).
long anon_huge_kib(pid_t pid);

// The path execvp would run for argv0 ("" when there is none).
std::string find_program(const std::string& argv0);

// Runs argv to completion (or the timeout). Throws std::runtime_error when it
// cannot be started (naming the program and the reason).
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options);

// A program left running (a server): started, then stopped by stop_process.
struct Background {
  pid_t pid = -1;
  std::string argv0;
  double started_at = 0;  // steady clock, seconds
};
Background start_process(const std::vector<std::string>& argv, const ProcessOptions& options);
// True while it has not exited (reaping it, with its result, when it has).
bool still_running(Background& b, ProcessResult* result);
// SIGTERM, then SIGKILL after grace_s; the result (peak RSS) once it is gone.
ProcessResult stop_process(Background& b, double grace_s);

}  // namespace mempool_bench
