// The table of medians printed at the end of a run, and the CSV rows.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
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

// Words to lines of at most kConsoleWidth characters (but for a longer word),
// the text's own indent kept on the first line and `indent` on the next ones.
void print_wrapped(const std::string& text, std::size_t indent) {
  std::string line(std::min(text.size(), text.find_first_not_of(' ')), ' ');
  std::size_t bare = line.size();  // the line's length before its first word
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    if (line.size() > bare && line.size() + 1 + word.size() > kConsoleWidth) {
      std::printf("%s\n", line.c_str());
      line.assign(indent, ' ');
      bare = indent;
    } else if (line.size() > bare) {
      line += ' ';
    }
    line += word;
  }
  std::printf("%s\n", line.c_str());
}

namespace {

// The case column's usual width; wider only where shorter names would collide.
constexpr std::size_t kCaseWidth = 28;

// x in [0, 999.5): three significant digits, never an exponent (a unit is chosen
// so that x is below 1000; only the largest unit can exceed it).
std::string three_digits(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, x < 9.995 ? "%.2f" : x < 99.95 ? "%.1f" : "%.0f", x);
  return buf;
}

struct Scale {
  double unit;  // in the metric's own unit
  const char* suffix;
};

// The units a metric is shown in, smallest first.
std::vector<Scale> scales(const std::string& metric) {
  if (metric.ends_with("rps") || metric == "ops_per_s")
    return {{1, "/s"}, {1e3, "k/s"}, {1e6, "M/s"}, {1e9, "G/s"}};
  if (metric.ends_with("_ns") || metric == "ns_per_op")
    return {{1, "ns"}, {1e3, "us"}, {1e6, "ms"}, {1e9, "s"}};
  if (metric.ends_with("_s")) return {{1e-9, "ns"}, {1e-6, "us"}, {1e-3, "ms"}, {1, "s"}};
  if (metric.ends_with("_kib"))
    return {{1.0 / 1024, "B"}, {1, "KiB"}, {1024, "MiB"}, {1 << 20, "GiB"}, {1 << 30, "TiB"}};
  return {{1, ""}, {1e3, "k"}, {1e6, "M"}, {1e9, "G"}};
}

// The smallest unit that keeps v below 1000 of it.
Scale scale_for(const std::string& metric, double v) {
  const std::vector<Scale> s = scales(metric);
  for (const Scale& x : s)
    if (v / x.unit < 999.5) return x;
  return s.back();
}

// A median with a compact unit: "12.3M/s", "8.44ms", "1.02GiB".
std::string format_metric(const std::string& metric, double v) {
  const Scale s = scale_for(metric, v);
  return three_digits(v / s.unit) + s.suffix;
}

// A spread in the unit of its top: "8.12-9.70ms".
std::string format_spread(const std::string& metric, double lo, double hi) {
  const Scale s = scale_for(metric, hi);
  return three_digits(lo / s.unit) + "-" + three_digits(hi / s.unit) + s.suffix;
}

// A ratio to the reference, as wide as a median's number at most.
std::string format_ratio(double r) {
  return r < 999.5 ? three_digits(r) + "x" : ">999x";
}

// A case name cut to width with "..." in its middle, its start and its end kept
// at word boundaries where it can ("8 B-256 KiB..., 1 thread"): the last part
// is the thread count.
std::string shorten(const std::string& name, std::size_t width) {
  if (name.size() <= width) return name;
  const std::size_t keep = width - 3;
  // The end: the longest last part (after ", ") or else last words, within half.
  std::size_t tail = 0;
  for (const char* sep : {", ", " "}) {
    for (std::size_t pos = name.rfind(sep); pos != std::string::npos && pos > 0;
         pos = name.rfind(sep, pos - 1)) {
      if (name.size() - pos > keep / 2 + 2) break;
      tail = name.size() - pos;
    }
    if (tail > 0) break;
  }
  if (tail == 0) tail = keep / 3;
  std::string head = name.substr(0, keep - tail);
  // Not in the middle of a word or number ("4..." for "40"), unless it is most of the start.
  if (std::isalnum(static_cast<unsigned char>(name[head.size()]))) {
    const std::size_t cut = head.find_last_of(" ,");
    if (cut != std::string::npos && cut >= head.size() / 2) head.resize(cut);
  }
  head.erase(head.find_last_not_of(", ") + 1);
  return head + "..." + name.substr(name.size() - tail);
}

using Samples = std::map<std::pair<std::string, std::string>, std::vector<double>>;

struct Row {
  std::string title;
  std::vector<std::string> cells;  // a column each: the text, then its marker ('*' or ' ')
};

// One row of medians: each cell the median, its ratio to the reference column
// (glibc) or, with none, to the best of the row, and '*' on the best.
Row median_row(const std::string& title, const std::string& c, const Samples& from,
               const std::vector<std::string>& columns, const std::string& reference,
               const std::string& metric, bool lower_better) {
  std::vector<std::optional<double>> med;
  for (const std::string& a : columns) {
    const auto it = from.find({c, a});
    med.push_back(it == from.end() ? std::nullopt : std::optional(median(it->second)));
  }
  std::optional<double> best;
  std::size_t present = 0;
  for (const auto& v : med) {
    if (!v) continue;
    ++present;
    if (!best || (lower_better ? *v < *best : *v > *best)) best = v;
  }
  std::optional<double> ref = best;
  std::size_t ref_column = columns.size();
  if (!reference.empty()) {
    ref_column = std::find(columns.begin(), columns.end(), reference) - columns.begin();
    ref = med[ref_column];
  }
  Row row{title, {}};
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (!med[i]) {
      row.cells.push_back("- ");
      continue;
    }
    const double v = *med[i];
    std::string cell = format_metric(metric, v);
    // The reference's own ratio is 1 by definition: left out.
    const bool is_ref = reference.empty() ? v == *best : i == ref_column;
    if (ref && *ref > 0 && v > 0 && !is_ref) {
      cell += ' ';
      cell += format_ratio(lower_better ? *ref / v : v / *ref);
    }
    row.cells.push_back(cell + (present > 1 && v == *best ? "*" : " "));
  }
  return row;
}

// The spread (min-max) of a program's runs.
Row spread_row(const std::string& c, const Samples& from, const std::vector<std::string>& columns,
               const std::string& metric) {
  Row row{"  min-max", {}};
  for (const std::string& a : columns) {
    const auto it = from.find({c, a});
    if (it == from.end()) {
      row.cells.push_back("- ");
      continue;
    }
    const auto [lo, hi] = std::minmax_element(it->second.begin(), it->second.end());
    row.cells.push_back(format_spread(metric, *lo, *hi) + " ");
  }
  return row;
}

// The columns' blocks for a case column of case_w: [first, end) each, as few as
// keep every line within kConsoleWidth, their columns as even in number as that
// allows (no block of one column after one of six).
std::vector<std::pair<std::size_t, std::size_t>> blocks(const std::vector<std::size_t>& width,
                                                        std::size_t case_w) {
  auto pack = [&](std::size_t most) {  // at most `most` columns a block
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (std::size_t first = 0; first < width.size();) {
      std::size_t end = first;
      std::size_t used = 2 + case_w;
      while (end < width.size() && end - first < most &&
             (end == first || used + 3 + width[end] <= kConsoleWidth))
        used += 3 + width[end++];  // two spaces, the text, the marker
      out.push_back({first, end});
      first = end;
    }
    return out;
  };
  const std::size_t fewest = pack(width.size()).size();
  for (std::size_t most = (width.size() + fewest - 1) / std::max<std::size_t>(fewest, 1);; ++most) {
    auto out = pack(most);
    if (out.size() == fewest) return out;
  }
}

// The case column's width: the longest name where that adds no block of columns,
// else names shortened to kCaseWidth or so, but never two cases alike (so that a
// row never needs its full name).
std::size_t case_width(const std::vector<Row>& rows, const std::vector<std::size_t>& width) {
  std::size_t longest = 0;
  for (const Row& r : rows)
    longest = std::max(longest, r.title.size());
  auto unique = [&](std::size_t w) {
    std::set<std::string> seen;
    for (const Row& r : rows)
      if (!r.title.starts_with("  ") && !seen.insert(shorten(r.title, w)).second) return false;
    return true;
  };
  std::size_t w = std::min(longest, std::max<std::size_t>(kCaseWidth, 10));
  while (w < longest && !unique(w))
    ++w;
  const std::size_t fewest = blocks(width, w).size();
  for (std::size_t wider = longest; wider > w; --wider)
    if (blocks(width, wider).size() == fewest && unique(wider)) return wider;
  return w;
}

// The rows under a header of the columns, in as many blocks of columns as it
// takes to keep each line within kConsoleWidth, each block with the case column.
void print_blocks(const std::vector<std::string>& columns, const std::vector<Row>& rows) {
  std::vector<std::size_t> width;  // the widest text of each column, its marker apart
  for (std::size_t i = 0; i < columns.size(); ++i) {
    std::size_t w = columns[i].size();
    for (const Row& r : rows)
      w = std::max(w, r.cells[i].size() - 1);
    width.push_back(w);
  }
  const std::size_t case_w = std::max<std::size_t>(case_width(rows, width), 4);
  auto print_line = [](std::string line) {
    line.erase(line.find_last_not_of(' ') + 1);
    std::printf("%s\n", line.c_str());
  };
  char buf[256];
  for (const auto& [first, end] : blocks(width, case_w)) {
    if (first > 0) std::printf("\n");
    std::string header = "  case" + std::string(case_w - 4, ' ');
    for (std::size_t i = first; i < end; ++i) {
      std::snprintf(buf, sizeof buf, "  %*s ", static_cast<int>(width[i]), columns[i].c_str());
      header += buf;
    }
    print_line(header);
    for (const Row& r : rows) {
      const std::string title = shorten(r.title, case_w);
      std::string line = "  " + title + std::string(case_w - title.size(), ' ');
      for (std::size_t i = first; i < end; ++i) {
        const std::string& cell = r.cells[i];
        std::snprintf(buf, sizeof buf, "  %*s%c", static_cast<int>(width[i]),
                      cell.substr(0, cell.size() - 1).c_str(), cell.back());
        line += buf;
      }
      print_line(line);
    }
  }
}

}  // namespace

// Per workload, the allocators that replace malloc (LD_PRELOAD) in one table and
// mempool's in-process APIs against glibc and std-pmr in another: a row per case,
// a column per allocator, the median of the case's primary metric and its ratio
// to glibc (to the row's best without glibc), '*' on the best. Programs (apps,
// run) add their spread (min-max) and peak RSS under each row. No line is wider
// than kConsoleWidth: long case names are shortened, columns split into blocks.
void print_table(const std::vector<json>& records, const std::vector<std::string>& allocators) {
  std::vector<std::string> workloads;
  for (const json& r : records)
    if (std::find(workloads.begin(), workloads.end(), r["workload"]) == workloads.end())
      workloads.push_back(r["workload"]);
  for (const std::string& w : workloads) {
    // The columns: the allocators with a measurement of this workload (in the suite,
    // apps runs no in-process API and the huge-page configurations run bigheap-like
    // cases only); one that was skipped throughout is in the lines of the skipped.
    std::vector<std::string> columns;
    for (const std::string& a : allocators)
      if (std::any_of(records.begin(), records.end(), [&](const json& r) {
            return r["workload"] == w && r["allocator"] == a && !r.contains("skipped");
          }))
        columns.push_back(a);
    std::vector<std::string> cases;
    Samples values;
    Samples rss;
    std::map<std::string, std::vector<std::string>> skipped;     // allocator -> reasons
    std::map<std::string, std::pair<std::string, bool>> metric;  // case -> metric, lower better
    for (const json& r : records) {
      if (r["workload"] != w) continue;
      if (r.contains("skipped")) {
        auto& reasons = skipped[r["allocator"]];
        if (std::find(reasons.begin(), reasons.end(), r["skipped"]) == reasons.end())
          reasons.push_back(r["skipped"]);
        continue;
      }
      // A row per case measured at least once: the others are in the lines of the skipped.
      const std::string c = r.value("case", "");
      if (std::find(cases.begin(), cases.end(), c) == cases.end()) cases.push_back(c);
      const std::string m = r["primary"]["metric"];
      metric[c] = {m, r["primary"]["better"] == "lower"};
      values[{c, r["allocator"]}].push_back(r["metrics"][m].get<double>());
      if (r["metrics"].contains("peak_rss_kib"))
        rss[{c, r["allocator"]}].push_back(r["metrics"]["peak_rss_kib"].get<double>());
    }
    const bool programs = w == "apps" || w == "run";
    // The metrics, those where higher is better then those where lower is.
    std::string heading;
    for (const bool lower : {false, true}) {
      std::set<std::string> names;
      for (const auto& [c, m] : metric)
        if (m.second == lower) names.insert(m.first);
      std::string list;
      for (const std::string& n : names)
        list += (list.empty() ? "" : ", ") + n;
      if (list.empty()) continue;
      heading += (heading.empty() ? "" : "; ") + list +
                 (lower ? " (lower is better)" : " (higher is better)");
    }
    // The two groups: glibc is the baseline of both.
    std::vector<std::string> malloc_columns;
    std::vector<std::string> api_columns;
    for (const std::string& a : columns) {
      const AllocatorInfo* info = find_allocator(a);
      if (info == nullptr || info->preload) malloc_columns.push_back(a);
      if (info != nullptr && !info->preload) api_columns.push_back(a);
    }
    std::stable_partition(api_columns.begin(), api_columns.end(),
                          [](const std::string& a) { return a == "std-pmr"; });
    const bool with_glibc = std::find(columns.begin(), columns.end(), "glibc") != columns.end();
    if (with_glibc && !api_columns.empty()) api_columns.insert(api_columns.begin(), "glibc");
    std::vector<std::pair<std::string, std::vector<std::string>>> groups;
    // glibc's malloc alone is shown in the in-process table; nothing measured, no table.
    if (!columns.empty() && (api_columns.empty() || malloc_columns.size() > (with_glibc ? 1u : 0u)))
      groups.push_back({"malloc replacements (LD_PRELOAD)", malloc_columns});
    if (!api_columns.empty()) groups.push_back({"in-process APIs", api_columns});
    for (const auto& [group, cols] : groups) {
      const bool glibc_here = std::find(cols.begin(), cols.end(), "glibc") != cols.end();
      const std::string reference = glibc_here ? "glibc" : "";
      std::printf("\n");
      print_wrapped(w + ", " + group + ": median " + heading, 4);
      print_wrapped(std::string("  cells: the median and its ratio to ") +
                        (glibc_here ? "glibc (above 1: better than glibc)"
                                    : "the best of the row (1: the best)") +
                        "; * the best of the row",
                    4);
      std::vector<Row> rows;
      for (const std::string& c : cases) {
        const auto& [name, lower_better] = metric.at(c);
        rows.push_back(median_row(c, c, values, cols, reference, name, lower_better));
        if (!programs) continue;
        rows.push_back(spread_row(c, values, cols, name));
        rows.push_back(median_row("  peak RSS", c, rss, cols, reference, "peak_rss_kib", true));
      }
      print_blocks(cols, rows);
    }
    for (const auto& [a, reasons] : skipped)
      for (const std::string& why : reasons)
        print_wrapped("  " + a + " skipped: " + why, 4);
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
