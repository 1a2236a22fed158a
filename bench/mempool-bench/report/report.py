#!/usr/bin/python3
"""Turns mempool-bench's results into a Markdown report with plots.

    report.py DIR

Reads DIR/results.jsonl (one JSON object per benchmark run, schema 1), writes
DIR/report.md and PNG plots into DIR/plots/, and prints the path of report.md
followed by the main tables.

Per workload the report has one table per primary metric (rows: cases;
columns: allocators in a fixed order) whose cells are the median of the run's
primary metric over the repetitions, its min-max, and the ratio to glibc in
the metric's own sense (> 1 means better than glibc); the best allocator of
each row is in bold. Its last column, "mempool vs best peer", is mempool's
ratio to the best of glibc, mimalloc, jemalloc and tcmalloc in the same run,
naming that peer. Below it, when the runs have them: for the workloads that
run programs (apps, run; each case in its own primary metric) a table of
mempool against the best peer per case (spreads overlapping or apart, peak
RSS) and redis' requests/s per command; peak resident memory, and beside it
the minor page faults and AnonHugePages of the runs (minor_faults,
anon_huge_kib; "–" where not read), latency percentiles, and the workload's own
counters (queue: sent/dropped/received).
Runs that carry "skipped" are listed in a Skipped section and are not plotted.

Plots: throughput against threads, latency percentiles, peak resident memory,
a summary of every allocator's ratio to glibc, and for apps and run every
allocator against glibc per case (primary metric and peak RSS, with min-max
error bars).

Exit status: 0 on success; 2 (with a one-line message) for a missing or empty
results file or a malformed line; 1 if matplotlib is missing (report.md is
written anyway, without plots).
"""

import os
import sys

# The modules beside this script, wherever it is run from.
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from formatting import escape  # noqa: E402
from plots import import_pyplot, make_plots, matplotlib_missing  # noqa: E402
from programs import program_sections  # noqa: E402
from results import InputError, load_runs, primary_rows  # noqa: E402
from tables import (extra_table, header_section, latency_tables, main_table,  # noqa: E402
                    rss_table, skipped_section, warnings_section)


def plot_images(files):
    return [f"![{os.path.basename(f)}](plots/{os.path.basename(f)})" for f in files] + [""]


def build_report(runs, directory, tables, plots):
    """report.md's lines. plots: {workload or "summary": [png paths]}."""
    measured = [r for r in runs if "skipped" not in r]
    lines = header_section(runs, directory)
    lines += warnings_section(runs)
    if plots.get("summary"):
        lines += ["Summary: every allocator's median primary metric against glibc's "
                  "(> 1: better than glibc).", ""] + plot_images(plots["summary"])
    for workload, metric_tables in tables.items():
        wruns = [r for r in measured if r["workload"] == workload]
        lines += [f"## {escape(workload)}", ""]
        for rows in metric_tables:
            lines += main_table(rows)
        lines += program_sections(workload, metric_tables, wruns)
        lines += rss_table(wruns)
        lines += latency_tables(wruns)
        lines += extra_table(workload, wruns)
        if plots.get(workload):
            lines += ["### Plots", ""] + plot_images(plots[workload])
    lines += skipped_section(runs)
    return lines


def stdout_summary(tables):
    """The main tables, as in report.md."""
    lines = []
    for workload, metric_tables in tables.items():
        lines += [f"## {workload}", ""]
        for rows in metric_tables:
            lines += main_table(rows)
    return lines


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if len(argv) != 2:
        print(f"usage: {os.path.basename(argv[0])} DIR (reads DIR/results.jsonl)", file=sys.stderr)
        return 2
    directory = argv[1]
    try:
        runs = load_runs(directory)
    except InputError as e:
        print(f"report.py: {e}", file=sys.stderr)
        return 2

    tables = primary_rows([r for r in runs if "skipped" not in r])
    plt = import_pyplot()
    plots = make_plots(plt, runs, tables, os.path.join(directory, "plots")) if plt else {}
    report = os.path.join(directory, "report.md")
    with open(report, "w", encoding="utf-8") as f:
        f.write("\n".join(build_report(runs, directory, tables, plots)).rstrip() + "\n")

    print(report)
    print()
    print("\n".join(stdout_summary(tables)).rstrip())
    if plt is None:
        return matplotlib_missing("report.py", "report.md has no plots")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
