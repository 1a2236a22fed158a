#!/usr/bin/python3
"""Turns mempool-bench's results into a Markdown report with plots.

    report.py DIR

Reads DIR/results.jsonl (one JSON object per benchmark run, schema 1), writes
DIR/report.md and PNG plots into DIR/plots/, and prints the path of report.md,
that of plots/summary.png and the headline tables (no line over 120
characters): mempool against the best peer (the best of glibc, mimalloc,
jemalloc and tcmalloc) in each real program (apps, run), then in every other
case.

report.md opens with what matters: the machine (CPU with its family and model
numbers, cores, kernel, compiler, build, glibc, commit, date, where the
records have them); the summary heat map (plots/summary.png: one row per
case, real programs first, one column per allocator; each cell the
allocator's median primary metric as a ratio to the best of its row, in the
metric's sense, 1.00 being the best; grey where it did not run); a paragraph
that says where mempool is ahead of the best peer or within 5% of it, and where
it is behind by more than 5%, within the spread (its min-max overlapping the
peer's) or not; mempool against the best peer per case (median, the peer and
its median, the ratio, whether the min-max spreads overlap, the peak RSS of
both), the real programs first, then the other cases; and the list of cases
where mempool loses, the furthest behind first. Where mempool's malloc did not
run (pool workloads), its best pool (mempool-heap, object-pool, bitmap-pool,
size-class-pool) stands for it against the best of glibc and std-pmr.

Then the runs: their date, label, allocators (version, environment, where
malloc came from) and repetitions, and per workload one table per primary
metric (rows: cases; columns: allocators in a fixed order) whose cells are the
median of the run's primary metric over the repetitions, its min-max, and the
ratio to glibc in the metric's own sense (> 1 means better than glibc); the
best allocator of each row is in bold. Its last column, "mempool vs best
peer", is mempool's ratio to the best peer in the same run, naming that peer.
Below it, when the runs have them: for the workloads that run programs (apps,
run; each case in its own primary metric) a table of mempool against the best
peer per case (spreads overlapping or apart, peak RSS) and redis' requests/s
per command; peak resident memory, and beside it the minor page faults and
AnonHugePages of the runs (minor_faults, anon_huge_kib; "–" where not read),
latency percentiles, and the workload's own counters (queue:
sent/dropped/received).
Runs that carry "skipped" are listed in a Skipped section and are not plotted.

Plots: the summary heat map; throughput against threads, latency percentiles,
peak resident memory, and for apps and run every allocator against glibc per
case (primary metric and peak RSS, with min-max error bars).

Exit status: 0 on success; 2 (with a one-line message) for a missing or empty
results file or a malformed line; 1 if matplotlib is missing (report.md is
written anyway, without plots).
"""

import os
import sys

# The modules beside this script, wherever it is run from.
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from formatting import cut, escape  # noqa: E402
from opening import CONSOLE_WIDTH, console_headline, machine_line, opening_sections  # noqa: E402
from plots import import_pyplot, make_plots, matplotlib_missing  # noqa: E402
from programs import program_sections  # noqa: E402
from results import InputError, load_runs, primary_rows, report_rows  # noqa: E402
from tables import (extra_table, latency_tables, main_table, rss_table,  # noqa: E402
                    runs_section, skipped_section, warnings_section)


def plot_images(files):
    return [f"![{os.path.basename(f)}](plots/{os.path.basename(f)})" for f in files] + [""]


SUMMARY_CAPTION = ("Summary: one row per case (real programs first), one column per allocator; "
                   "each cell the allocator's median primary metric as a ratio to the best of "
                   "its row, in the metric's sense (1.00: the best, 0.50: half as good); grey: "
                   "no run.")


def build_report(runs, directory, tables, plots):
    """report.md's lines. plots: {workload or "summary": [png paths]}."""
    measured = [r for r in runs if "skipped" not in r]
    lines = ["# mempool-bench report", "", machine_line(runs), ""]
    if plots.get("summary"):
        lines += plot_images(plots["summary"]) + [SUMMARY_CAPTION, ""]
    # before the verdict: a preload that did not take makes it say nothing
    lines += warnings_section(runs)
    lines += opening_sections(report_rows(tables, runs), measured)
    lines += runs_section(runs, directory)
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


def stdout_summary(runs, tables, report, plots):
    """What a terminal shows: where report.md and the summary picture are,
    and the headline tables; no line wider than CONSOLE_WIDTH."""
    lines = [report] + plots.get("summary", []) + [""]
    lines += console_headline(report_rows(tables, runs), [r for r in runs if "skipped" not in r])
    # a path is whatever DIR was given: cut, like every other line
    return [cut(line, CONSOLE_WIDTH) for line in lines]


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

    print("\n".join(stdout_summary(runs, tables, report, plots)).rstrip())
    if plt is None:
        return matplotlib_missing("report.py", "report.md has no plots")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
