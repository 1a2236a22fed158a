#include "workloads.hpp"
namespace mempool_bench {
nlohmann::json run_rounds(const RunSpec&) {
  throw Skipped("todo");
}
nlohmann::json run_queue(const RunSpec&) {
  throw Skipped("todo");
}
nlohmann::json run_micro(const RunSpec&) {
  throw Skipped("todo");
}
nlohmann::json run_prodcons(const RunSpec&) {
  throw Skipped("todo");
}
nlohmann::json run_fragmentation(const RunSpec&) {
  throw Skipped("todo");
}
nlohmann::json run_churn(const RunSpec&) {
  throw Skipped("todo");
}
nlohmann::json run_scaling(const RunSpec&) {
  throw Skipped("todo");
}
}  // namespace mempool_bench
