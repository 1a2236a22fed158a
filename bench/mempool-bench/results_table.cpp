// The table of medians printed at the end of a run, and the CSV rows.
#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

#include "driver.hpp"

namespace mempool_bench {

using nlohmann::json;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

namespace {

std::string format_metric(const std::string& metric, double v) {
  char buf[64];
  if (metric.ends_with("rps")) {
    std::snprintf(buf, sizeof buf, "%.4g k/s", v / 1e3);
  } else if (metric == "ops_per_s") {
    std::snprintf(buf, sizeof buf, "%.3g Mops/s", v / 1e6);
  } else if (metric.ends_with("_ns") || metric == "ns_per_op") {
    std::snprintf(buf, sizeof buf, "%.3g ns", v);
  } else if (metric.ends_with("_s")) {
    if (v >= 1) {
      std::snprintf(buf, sizeof buf, "%.3g s", v);
    } else {
      std::snprintf(buf, sizeof buf, "%.3g ms", v * 1e3);
    }
  } else if (metric.ends_with("_kib")) {
    std::snprintf(buf, sizeof buf, "%.3g MiB", v / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  }
  return buf;
}

}  // namespace

// One table per workload: a row per case, a column per allocator, the median of
// the case's primary metric and its ratio to glibc (above 1: better than glibc).
// Programs (apps, run) add their spread (min-max) and peak RSS under each row.
void print_table(const std::vector<json>& records, const std::vector<std::string>& allocators) {
  std::vector<std::string> workloads;
  for (const json& r : records)
    if (std::find(workloads.begin(), workloads.end(), r["workload"]) == workloads.end())
      workloads.push_back(r["workload"]);
  for (const std::string& w : workloads) {
    // The columns: the allocators that ran this workload (in the suite, apps runs
    // no in-process API and the huge-page configurations run bigheap-like cases only).
    std::vector<std::string> columns;
    for (const std::string& a : allocators)
      if (std::any_of(records.begin(), records.end(),
                      [&](const json& r) { return r["workload"] == w && r["allocator"] == a; }))
        columns.push_back(a);
    std::vector<std::string> cases;
    std::map<std::pair<std::string, std::string>, std::vector<double>> values;
    std::map<std::pair<std::string, std::string>, std::vector<double>> rss;
    std::map<std::string, std::vector<std::string>> skipped;     // allocator -> reasons
    std::map<std::string, std::pair<std::string, bool>> metric;  // case -> metric, lower better
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
      const std::string m = r["primary"]["metric"];
      metric[c] = {m, r["primary"]["better"] == "lower"};
      values[{c, r["allocator"]}].push_back(r["metrics"][m].get<double>());
      if (r["metrics"].contains("peak_rss_kib"))
        rss[{c, r["allocator"]}].push_back(r["metrics"]["peak_rss_kib"].get<double>());
    }
    const bool programs = w == "apps" || w == "run";
    std::set<std::string> names;
    for (const auto& [c, m] : metric)
      names.insert(m.first + (m.second ? " (lower is better)" : " (higher is better)"));
    std::string heading;
    for (const std::string& n : names)
      heading += (heading.empty() ? "" : "; ") + n;
    std::printf("\n%s: median %s, in brackets the ratio to glibc (above 1: better)\n", w.c_str(),
                heading.c_str());
    std::printf("  %-24s", "case");
    for (const std::string& a : columns)
      std::printf(" %22s", a.c_str());
    std::printf("\n");
    auto row = [&](const std::string& title, const std::string& c,
                   const std::map<std::pair<std::string, std::string>, std::vector<double>>& from,
                   const std::string& m, bool lower_better, bool spread) {
      std::printf("  %-24s", title.substr(0, 24).c_str());
      const auto base = from.find({c, "glibc"});
      const double glibc = base != from.end() ? median(base->second) : 0.0;
      for (const std::string& a : columns) {
        const auto it = from.find({c, a});
        if (it == from.end()) {
          std::printf(" %22s", "-");
          continue;
        }
        const double v = median(it->second);
        std::string cell;
        if (spread) {
          const auto [lo, hi] = std::minmax_element(it->second.begin(), it->second.end());
          cell = format_metric(m, *lo) + "-" + format_metric(m, *hi);
        } else {
          cell = format_metric(m, v);
          if (glibc > 0 && v > 0) {
            char ratio[32];
            std::snprintf(ratio, sizeof ratio, " (%.2fx)", lower_better ? glibc / v : v / glibc);
            cell += ratio;
          }
        }
        std::printf(" %22s", cell.c_str());
      }
      std::printf("\n");
    };
    for (const std::string& c : cases) {
      const auto m = metric.find(c);
      if (m == metric.end()) {
        row(c, c, values, "", true, false);
        continue;
      }
      row(c, c, values, m->second.first, m->second.second, false);
      if (!programs) continue;
      row("  min-max", c, values, m->second.first, m->second.second, true);
      row("  peak RSS", c, rss, "peak_rss_kib", true, false);
    }
    for (const auto& [a, reasons] : skipped)
      for (const std::string& why : reasons)
        std::printf("  %s skipped: %s\n", a.c_str(), why.c_str());
  }
}

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

}  // namespace

const char* const kCsvHeader =
    "workload,case,allocator,label,repetition,threads,primary_metric,primary_value,ns_per_op,"
    "ops_per_s,wall_s,peak_rss_kib,p50_ns,p99_ns,p999_ns,max_ns,skipped,minor_faults,"
    "anon_huge_kib";

std::string csv_row(const json& r) {
  auto num = [&](const char* key) -> std::string {
    if (!r.contains("metrics") || !r["metrics"].contains(key)) return "";
    if (r["metrics"][key].is_null()) return "";  // anon_huge_kib of a program: not read
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
      << ',' << csv_field(r.value("skipped", "")) << ',' << num("minor_faults") << ','
      << num("anon_huge_kib");
  return row.str();
}

}  // namespace mempool_bench
