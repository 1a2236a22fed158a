// run: any command a user gives (`mempool-bench run -- CMD ARGS...`), under each
// allocator in turn: its wall and CPU time, its peak resident set (the largest
// process of its tree) and minor page faults (of the whole tree); AnonHugePages
// is null (the command exits by itself, nothing is left to read it from). It
// must succeed: a non-zero exit, a signal or the --timeout is a failure of the
// whole run (exit 1), never a number. With --check-output its stdout must also
// be the same under every allocator.
#include <stdexcept>

#include "process.hpp"
#include "workloads.hpp"

namespace mempool_bench {

nlohmann::json run_command(const RunSpec& spec) {
  const AllocatorInfo* a = find_allocator(spec.allocator);
  if (a != nullptr && !a->preload)
    throw Skipped(spec.allocator + " is an in-process API; a command runs through malloc");
  if (a != nullptr && a->program != nullptr)
    throw Skipped(spec.allocator + " is linked into mempool-bench; a command has its own malloc");
  if (spec.command.empty()) throw std::runtime_error("run: no command given");
  // glibc: the C library preloaded, so that a program linked against another
  // malloc runs on glibc's too (as the apps workload does).
  const char* preload = std::getenv("LD_PRELOAD");
  ProcessOptions options;
  options.env =
      environment_with(preload != nullptr && *preload != '\0' ? preload : malloc_library());
  options.timeout_s = spec.timeout_s;
  options.capture_stdout = true;
  const ProcessResult r = run_process(spec.command, options);
  if (!r.ok()) throw std::runtime_error("run: " + failure_message(spec.command, spec.allocator, r));
  const std::string text = command_line(spec.command);
  nlohmann::json out = {{"case", text.size() <= 60 ? text : text.substr(0, 57) + "..."},
                        {"primary", {{"metric", "wall_s"}, {"better", "lower"}}},
                        {"params", {{"command", text}, {"timeout_s", spec.timeout_s}}},
                        {"metrics", program_metrics(r)}};
  if (spec.check_output) out["output_digest"] = output_digest(r.out);
  return out;
}

}  // namespace mempool_bench
