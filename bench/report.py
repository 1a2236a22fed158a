#!/usr/bin/python3
"""Turns mempool-bench's results into a Markdown report with plots.

    report.py DIR

Reads DIR/results.jsonl (one JSON object per benchmark run, schema 1), writes
DIR/report.md and PNG plots into DIR/plots/, and prints the path of report.md
followed by the main tables.

Per workload the report has one table (rows: cases; columns: allocators in a
fixed order) whose cells are the median of the run's primary metric over the
repetitions, its min-max, and the ratio to glibc in the metric's own sense
(> 1 means better than glibc); the best allocator of each row is in bold.
Below it, when the runs have them: peak resident memory, latency percentiles,
and the workload's own counters (queue: sent/dropped/received). Runs that
carry "skipped" are listed in a Skipped section and are not plotted.

Plots: throughput against threads, latency percentiles, peak resident memory,
and a summary of every allocator's ratio to glibc.

Exit status: 0 on success; 2 (with a one-line message) for a missing or empty
results file or a malformed line; 1 if matplotlib is missing (report.md is
written anyway, without plots).
"""

import datetime
import json
import math
import os
import re
import statistics
import sys

SCHEMA = 1
BASELINE = "glibc"
# Column order: the malloc replacements first, then the in-process allocators.
ALLOCATOR_ORDER = [
    "glibc", "mimalloc", "jemalloc", "tcmalloc", "mempool",
    "mempool-heap", "object-pool", "bitmap-pool", "size-class-pool", "std-pmr",
]
WORKLOAD_ORDER = [
    "rounds", "queue", "compare", "throughput", "micro", "prodcons",
    "fragmentation", "churn", "scaling",
]
# (key in a latency object, column title)
PERCENTILES = [("p50", "p50"), ("p95", "p95"), ("p99", "p99"),
               ("p999", "p99.9"), ("max", "max")]
# Workload-specific numbers worth a table of their own.
EXTRA_METRICS = {
    "queue": ["sent", "dropped", "received"],
    "fragmentation": ["peak_live_kib"],
    "churn": ["rss_after_kib"],
}
# A substring of the library that served malloc, for the allocators that are
# swapped in with LD_PRELOAD: a mismatch means the preload did not take.
EXPECTED_MALLOC_FROM = {
    "glibc": "libc.so", "mimalloc": "mimalloc", "jemalloc": "jemalloc",
    "tcmalloc": "tcmalloc", "mempool": "mempool",
}
MAX_PANELS = 4  # cases per latency / threads figure; more would be unreadable
DPI = 100


class InputError(Exception):
    """Bad input: reported in one line, exit status 2."""


# ---------------------------------------------------------------- reading

def load_runs(directory):
    """The runs of DIR/results.jsonl, each a dict with "_line" added."""
    if not os.path.isdir(directory):
        raise InputError(f"{directory}: not a directory" if os.path.exists(directory)
                         else f"{directory}: no such directory")
    path = os.path.join(directory, "results.jsonl")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason})") from None
    runs = []
    for number, line in enumerate(lines, start=1):
        if line.strip():  # a blank line (e.g. a trailing one) is not a run
            runs.append(check_run(line, number))
    if not runs:
        raise InputError(f"{path}: empty, no runs to report")
    return runs


def is_number(value):
    # bool is an int in Python, but true is not a measurement
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def check_run(line, number):
    """Parses and validates one line; raises InputError naming the line."""
    def bad(why):
        return InputError(f"results.jsonl line {number}: {why}")

    try:
        run = json.loads(line)
    except json.JSONDecodeError as e:
        raise bad(f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(run, dict):
        raise bad(f"expected a JSON object, got {type(run).__name__}")
    if run.get("schema") != SCHEMA:
        raise bad(f"schema is {run.get('schema')!r}, this report reads schema {SCHEMA}")
    if "skipped" in run and "case" not in run:
        # a run skipped before its workload built its case text has none
        run["case"] = "(not given)"
    for key in ("workload", "case", "allocator"):
        if not isinstance(run.get(key), str) or not run[key]:
            raise bad(f'"{key}" is missing or not a non-empty string')
    for key in ("threads", "repetition"):
        if key in run and (not isinstance(run[key], int) or isinstance(run[key], bool)):
            raise bad(f'"{key}" is not an integer')
    if "skipped" in run:
        if not isinstance(run["skipped"], str):
            raise bad('"skipped" is not a string')
        run["_line"] = number
        return run
    primary = run.get("primary")
    if not isinstance(primary, dict) or not isinstance(primary.get("metric"), str):
        raise bad('"primary" is missing or has no "metric" string')
    if primary.get("better") not in ("lower", "higher"):
        raise bad(f'"primary.better" is {primary.get("better")!r}, not "lower" or "higher"')
    metrics = run.get("metrics")
    if not isinstance(metrics, dict):
        raise bad('"metrics" is missing or not an object')
    if not is_number(metrics.get(primary["metric"])):
        raise bad(f'metrics.{primary["metric"]} (the primary metric) is missing '
                  f'or not a finite number')
    run["_line"] = number
    return run


# ---------------------------------------------------------------- grouping

def group_by(items, key):
    """{key(item): [items]} in order of first appearance."""
    groups = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def ordered_allocators(names):
    names = set(names)
    known = [a for a in ALLOCATOR_ORDER if a in names]
    return known + sorted(names - set(ALLOCATOR_ORDER))


def ordered_workloads(runs):
    seen = list(dict.fromkeys(r["workload"] for r in runs))
    return [w for w in WORKLOAD_ORDER if w in seen] + [w for w in seen if w not in WORKLOAD_ORDER]


def metric(run, name):
    """A run's metric as a float, or None when absent or not a number."""
    value = run.get("metrics", {}).get(name)
    return float(value) if is_number(value) else None


def median_of(runs, name):
    values = [v for v in (metric(r, name) for r in runs) if v is not None]
    return statistics.median(values) if values else None


class Stats:
    """Median, min and max of one allocator's repetitions of one case."""

    def __init__(self, values):
        self.median = statistics.median(values)
        self.low, self.high, self.count = min(values), max(values), len(values)


def ratio_to_baseline(better, value, baseline):
    """> 1 when value is better than the baseline, in the metric's own sense."""
    if better == "lower":
        return baseline / value if value else None
    return value / baseline if baseline else None


class Row:
    """One (workload, case) of the main table: per allocator, the Stats of the
    primary metric."""

    def __init__(self, workload, case, metric_name, better, runs):
        self.workload, self.case = workload, case
        self.metric, self.better = metric_name, better
        self.stats = {a: Stats([metric(r, metric_name) for r in rs])
                      for a, rs in group_by(runs, lambda r: r["allocator"]).items()}

    def best(self):
        pick = min if self.better == "lower" else max
        return pick(s.median for s in self.stats.values())

    def ratio(self, allocator):
        if BASELINE not in self.stats or allocator not in self.stats:
            return None
        return ratio_to_baseline(self.better, self.stats[allocator].median,
                                 self.stats[BASELINE].median)


def primary_rows(runs):
    """The main-table rows of measured runs, grouped by workload, then by
    (metric, better) so that a workload whose cases use different metrics gets
    one table per metric."""
    tables = {}
    for workload in ordered_workloads(runs):
        wruns = [r for r in runs if r["workload"] == workload]
        by_metric = group_by(wruns, lambda r: (r["primary"]["metric"], r["primary"]["better"]))
        tables[workload] = [
            [Row(workload, case, m, better, cruns)
             for case, cruns in group_by(mruns, lambda r: r["case"]).items()]
            for (m, better), mruns in by_metric.items()]
    return tables


# ---------------------------------------------------------------- formatting

def fmt3(x):
    """x to 3 significant digits, without an exponent for everyday magnitudes."""
    if x is None or not math.isfinite(x):
        return "–"
    if x == 0:
        return "0"
    x = float(f"{x:.3g}")  # round first, so 9.996 becomes 10.0 rather than 10.00
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude >= 3:
        return f"{x:,.0f}"
    if magnitude < -3:
        return f"{x:.2e}"
    return f"{x:.{2 - magnitude}f}"


def fmt_count(x):
    """Counters (sent, dropped...) exactly when whole, else 3 digits."""
    if x is not None and x == int(x):
        return f"{int(x):,}"
    return fmt3(x)


def unit_for(name, values=()):
    """(scale, unit label) to show metric `name` in: *_ns -> ns, ns_per_X ->
    ns/X, *_per_s -> M.../s, *_kib -> MiB, *_s -> s, or ms when all values
    are below a second."""
    m = name.lower()
    if m.endswith("_per_s"):
        what = m[:-len("_per_s")]
        return 1e-6, "Mops/s" if what == "ops" else f"M {what}/s"
    if m.startswith("ns_per_"):
        return 1.0, "ns/" + m[len("ns_per_"):]
    if m == "ns" or m.endswith("_ns"):
        return 1.0, "ns"
    if m.endswith("_kib"):
        return 1 / 1024, "MiB"
    if m.endswith("_bytes"):
        return 1 / 2**20, "MiB"
    if m.endswith("_s"):
        # one unit per table so the columns compare at a glance
        if values and max(abs(v) for v in values) < 1:
            return 1e3, "ms"
        return 1.0, "s"
    return 1.0, ""


def escape(text):
    return str(text).replace("|", "\\|")


def md_table(header, rows, text_columns=1):
    """A Markdown table: the first text_columns left-aligned, the numbers
    after them right-aligned."""
    lines = ["| " + " | ".join(escape(h) for h in header) + " |",
             "|" + "---|" * text_columns + "---:|" * (len(header) - text_columns)]
    lines += ["| " + " | ".join(cell for cell in row) + " |" for row in rows]
    return lines


# ---------------------------------------------------------------- report sections

def header_section(runs, directory):
    path = os.path.join(directory, "results.jsonl")
    when = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
    machine = runs[0].get("machine") if isinstance(runs[0].get("machine"), dict) else {}
    libraries = machine.get("libraries") if isinstance(machine.get("libraries"), dict) else {}
    measured = [r for r in runs if "skipped" not in r]

    lines = ["# mempool-bench report", "",
             f"Results of {when:%Y-%m-%d %H:%M} UTC (results.jsonl's modification time).", ""]
    labels = sorted({r["label"] for r in runs if isinstance(r.get("label"), str) and r["label"]})
    if labels:
        lines += ["Label: " + ", ".join(labels), ""]
    facts = [("CPU", machine.get("cpu")), ("cores", machine.get("cores")),
             ("kernel", machine.get("kernel")), ("compiler", machine.get("compiler")),
             ("build", machine.get("build_type")), ("glibc", machine.get("glibc"))]
    known = [f"{k} {v}" for k, v in facts if v not in (None, "")]
    lines += ["Machine: " + ("; ".join(known) if known else "not recorded") + ".", ""]

    lines.append("Allocators:")
    for allocator in ordered_allocators(r["allocator"] for r in runs):
        version = libraries.get(allocator)
        if not isinstance(version, str) or "/" in version or version == "system":
            version = None  # a preload path or "system": malloc_from below says it better
        froms = sorted({r["malloc_from"] for r in measured
                        if r["allocator"] == allocator and isinstance(r.get("malloc_from"), str)})
        text = f"- {allocator}"
        if version:
            text += f" {version}"
        if froms:
            text += " (malloc from " + ", ".join(f"`{f}`" for f in froms) + ")"
        lines.append(text)
    lines.append("")

    reps = [len(rs) for rs in group_by(
        measured, lambda r: (r["workload"], r["case"], r["allocator"])).values()]
    if reps:
        count = str(min(reps)) if min(reps) == max(reps) else f"{min(reps)} to {max(reps)}"
        lines.append(f"Repetitions: {count} per case and allocator. "
                     f"Runs: {len(measured)} measured, {len(runs) - len(measured)} skipped.")
    else:
        lines.append(f"Runs: none measured, {len(runs)} skipped.")
    lines.append("")
    return lines


def main_table(rows):
    """Markdown lines: the sense of the metric, then the table of rows (all of
    one workload and metric)."""
    first = rows[0]
    allocators = ordered_allocators(a for row in rows for a in row.stats)
    values = [s.median for row in rows for s in row.stats.values()]
    values += [s.high for row in rows for s in row.stats.values()]
    scale, unit = unit_for(first.metric, values)
    has_baseline = any(BASELINE in row.stats for row in rows)
    note = (f"**{first.metric}**{f' in {unit}' if unit else ''}, "
            f"**{first.better} is better**. Cell: median over the repetitions (min–max)")
    if has_baseline:
        note += ", then the ratio to glibc (> 1: better than glibc)"
    lines = [note + ". Best per row in bold.", ""]

    table = []
    for row in rows:
        best = row.best()
        cells = [escape(row.case)]
        for allocator in allocators:
            s = row.stats.get(allocator)
            if s is None:
                cells.append("–")
                continue
            value = fmt3(s.median * scale)
            cell = f"**{value}**" if s.median == best else value
            if s.count > 1:
                cell += f" ({fmt3(s.low * scale)}–{fmt3(s.high * scale)})"
            r = row.ratio(allocator)
            if has_baseline and allocator != BASELINE and r is not None:
                cell += f" {fmt3(r)}×"
            cells.append(cell)
        table.append(cells)
    return lines + md_table(["case"] + allocators, table) + [""]


def rss_table(wruns):
    """Median peak_rss_kib in MiB per case and allocator, or [] if none."""
    if not any(metric(r, "peak_rss_kib") is not None for r in wruns):
        return []
    allocators = ordered_allocators(r["allocator"] for r in wruns)
    table = []
    for case, cruns in group_by(wruns, lambda r: r["case"]).items():
        by_alloc = group_by(cruns, lambda r: r["allocator"])
        table.append([escape(case)] + [
            fmt3(m / 1024) if (m := median_of(by_alloc.get(a, []), "peak_rss_kib")) is not None
            else "–" for a in allocators])
    return (["### Peak resident memory", "",
             "Median of peak_rss_kib over the repetitions, in MiB (lower is better).", ""]
            + md_table(["case"] + allocators, table) + [""])


def latency_series(run):
    """{series name: latency object} of a run: "latency_ns" is "", queue's
    "enqueue_latency_ns" is "enqueue", ..."""
    series = {}
    for key, value in run.get("metrics", {}).items():
        if isinstance(value, dict) and (key == "latency_ns" or key.endswith("_latency_ns")):
            series[key[:-len("latency_ns")].rstrip("_")] = value
    return series


def latency_medians(cruns):
    """{(allocator, series): {percentile: median ns}} for one case."""
    out = {}
    for allocator, aruns in group_by(cruns, lambda r: r["allocator"]).items():
        names = dict.fromkeys(name for r in aruns for name in latency_series(r))
        for name in names:
            objects = [latency_series(r).get(name, {}) for r in aruns]
            medians = {}
            for key, _ in PERCENTILES:
                values = [o[key] for o in objects if is_number(o.get(key))]
                if values:
                    medians[key] = statistics.median(values)
            if medians:
                out[(allocator, name)] = medians
    # allocators in column order, series in order of appearance
    order = {a: i for i, a in enumerate(ordered_allocators(a for a, _ in out))}
    return dict(sorted(out.items(), key=lambda kv: order[kv[0][0]]))


def latency_tables(wruns):
    lines = []
    for case, cruns in group_by(wruns, lambda r: r["case"]).items():
        medians = latency_medians(cruns)
        if not medians:
            continue
        with_series = any(name for _, name in medians)
        header = ["allocator"] + (["operation"] if with_series else []) + [t for _, t in PERCENTILES]
        table = [[a] + ([name or "–"] if with_series else [])
                 + [fmt3(m.get(k)) for k, _ in PERCENTILES]
                 for (a, name), m in medians.items()]
        lines += [f"Case {escape(case)}:", ""] + md_table(header, table, 1 + with_series) + [""]
    if not lines:
        return []
    return (["### Latency", "",
             "Median over the repetitions of each percentile, in ns (lower is better).", ""]
            + lines)


def extra_table(workload, wruns):
    """The workload's own counters (EXTRA_METRICS), per case and allocator."""
    names = [n for n in EXTRA_METRICS.get(workload, [])
             if any(metric(r, n) is not None for r in wruns)]
    if not names:
        return []
    header = ["case", "allocator"]
    for n in names:
        unit = unit_for(n)[1]
        header.append(f"{n} ({unit})" if unit else n)
    table = []
    for case, cruns in group_by(wruns, lambda r: r["case"]).items():
        by_alloc = group_by(cruns, lambda r: r["allocator"])
        for allocator in ordered_allocators(by_alloc):
            cells = [escape(case), allocator]
            for n in names:
                m = median_of(by_alloc[allocator], n)
                scale, unit = unit_for(n)
                cells.append(fmt_count(m) if not unit else fmt3(m * scale if m is not None else None))
            table.append(cells)
    return (["### Counters", "", "Median over the repetitions.", ""]
            + md_table(header, table, 2) + [""])


def skipped_section(runs):
    seen = dict.fromkeys((r["workload"], r["case"], r["allocator"], r["skipped"])
                         for r in runs if "skipped" in r)
    if not seen:
        return []
    return (["## Skipped", "", "Runs that did not run, once each.", ""]
            + md_table(["workload", "case", "allocator", "reason"],
                       [[escape(x) for x in key] for key in seen], 4) + [""])


def warnings_section(runs):
    """Runs whose malloc did not come from the library their allocator names."""
    seen = dict.fromkeys(
        (r["allocator"], r["malloc_from"]) for r in runs
        if "skipped" not in r and r.get("malloc_from") not in (None, "", "?")  # "?": not known
        and isinstance(r["malloc_from"], str)
        and r["allocator"] in EXPECTED_MALLOC_FROM
        and EXPECTED_MALLOC_FROM[r["allocator"]] not in os.path.basename(r["malloc_from"]))
    if not seen:
        return []
    return (["## Warnings", ""]
            + [f"- {a} runs took malloc from `{f}`, not from {a}: its results measure something else."
               for a, f in seen] + [""])


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
        lines += rss_table(wruns)
        lines += latency_tables(wruns)
        lines += extra_table(workload, wruns)
        if plots.get(workload):
            lines += ["### Plots", ""] + plot_images(plots[workload])
    lines += skipped_section(runs)
    return lines


# ---------------------------------------------------------------- plots

def import_pyplot():
    """matplotlib's pyplot on the Agg backend (no display), or None."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


MARKERS = "os^vDP<>Xph*"


def style(plt, allocator):
    """The same colour and marker for an allocator in every plot."""
    palette = list(plt.get_cmap("tab10").colors) + list(plt.get_cmap("Dark2").colors)
    if allocator in ALLOCATOR_ORDER:
        i = ALLOCATOR_ORDER.index(allocator)
    else:  # an allocator this script does not know: one of the Dark2 colours
        i = len(ALLOCATOR_ORDER) + sum(map(ord, allocator)) % 8
    return {"color": palette[i % len(palette)], "marker": MARKERS[i % len(MARKERS)]}


def spans_decades(values):
    positive = [v for v in values if v and v > 0]
    return len(positive) > 1 and max(positive) / min(positive) > 20


def save(plt, fig, path):
    # "tight" grows the image to take in a legend placed outside the axes
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def without_threads(case):
    """The case with its thread count taken out: "64 B, 2 threads" -> "64 B"."""
    parts = [p.strip() for p in case.split(",")]
    kept = [p for p in parts if not re.fullmatch(r"\d+\s*(threads?|thr|t)", p, re.IGNORECASE)]
    return ", ".join(kept)


def thread_groups(wruns):
    """{label: {allocator: {threads: median Mops/s}}} for the runs that differ
    only in their thread count, where there are 2+ thread counts."""
    def key(r):
        params = r.get("params") if isinstance(r.get("params"), dict) else {}
        rest = {k: v for k, v in params.items() if k != "threads"}
        return without_threads(r["case"]), json.dumps(rest, sort_keys=True, default=str)

    usable = [r for r in wruns if isinstance(r.get("threads"), int)
              and metric(r, "ops_per_s") is not None]
    groups = {}
    for (label, _), gruns in group_by(usable, key).items():
        if len({r["threads"] for r in gruns}) < 2:
            continue
        lines = {}
        for allocator, aruns in group_by(gruns, lambda r: r["allocator"]).items():
            lines[allocator] = {t: median_of(truns, "ops_per_s") / 1e6
                                for t, truns in sorted(group_by(aruns, lambda r: r["threads"]).items())}
        groups[label or "all"] = lines
    return groups


def panels(plt, count, width=6.4, height=4.2):
    """A figure with `count` panels (1, 2 side by side, or a 2x2 grid)."""
    cols = 1 if count == 1 else 2
    rows = (count + 1) // 2 if count > 1 else 1
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    axes = axes.flatten()
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def figure_legend(fig, axes):
    """One legend for all panels, right of them: inside a panel it hides lines."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    legend = fig.legend(list(entries.values()), list(entries), loc="upper left",
                        bbox_to_anchor=(1.0, 0.95), fontsize="small")
    fig.tight_layout()
    return legend


def plot_threads(plt, workload, wruns, out):
    groups = list(thread_groups(wruns).items())[:MAX_PANELS]
    if not groups:
        return None
    fig, axes = panels(plt, len(groups))
    for ax, (label, lines) in zip(axes, groups):
        threads = sorted({t for pts in lines.values() for t in pts})
        for allocator in ordered_allocators(lines):
            pts = lines[allocator]
            ax.plot(list(pts), list(pts.values()), label=allocator, **style(plt, allocator))
        if threads[-1] / threads[0] >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(threads)
        ax.set_xticklabels([str(t) for t in threads])
        if spans_decades([v for pts in lines.values() for v in pts.values()]):
            ax.set_yscale("log")
        ax.set_title(label)
        ax.set_xlabel("threads")
        ax.set_ylabel("throughput (Mops/s, median)")
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{workload}: throughput against threads (higher is better)")
    figure_legend(fig, axes)
    return save(plt, fig, os.path.join(out, f"{workload}_threads.png"))


def plot_latency(plt, workload, wruns, out):
    cases = [(case, m) for case, cruns in group_by(wruns, lambda r: r["case"]).items()
             if (m := latency_medians(cruns))]
    if not cases:
        return None
    shown = cases[:MAX_PANELS]
    fig, axes = panels(plt, len(shown))
    dashes = ["-", "--", ":", "-."]
    series_names = list(dict.fromkeys(name for _, m in shown for _, name in m))
    x = list(range(len(PERCENTILES)))
    for ax, (case, medians) in zip(axes, shown):
        for (allocator, name), m in medians.items():
            ys = [m.get(k, float("nan")) for k, _ in PERCENTILES]
            label = f"{allocator} {name}".strip()
            ax.plot(x, ys, label=label, linestyle=dashes[series_names.index(name) % len(dashes)],
                    **style(plt, allocator))
        ax.set_xticks(x)
        ax.set_xticklabels([t for _, t in PERCENTILES])
        ax.set_yscale("log")
        ax.set_title(case)
        ax.set_xlabel("percentile")
        ax.set_ylabel("latency (ns, median over repetitions)")
        ax.grid(True, which="both", alpha=0.3)
    title = f"{workload}: latency percentiles (lower is better)"
    if len(cases) > len(shown):
        title += f", first {len(shown)} of {len(cases)} cases"
    fig.suptitle(title)
    figure_legend(fig, axes)
    return save(plt, fig, os.path.join(out, f"{workload}_latency.png"))


def grouped_bars(ax, plt, groups, values, horizontal=False, base=0.0):
    """Bars of values[(group, allocator)] clustered per group; returns the
    group positions. base: where bars start (1.0 for ratios)."""
    allocators = ordered_allocators(a for _, a in values)
    width = 0.8 / len(allocators)
    positions = list(range(len(groups)))
    for i, allocator in enumerate(allocators):
        offs = [p - 0.4 + width * (i + 0.5) for p in positions]
        sizes = [values.get((g, allocator), float("nan")) - base for g in groups]
        colour = style(plt, allocator)["color"]
        if horizontal:
            ax.barh(offs, sizes, height=width, left=base, label=allocator, color=colour)
        else:
            ax.bar(offs, sizes, width=width, bottom=base, label=allocator, color=colour)
    return positions


def plot_rss(plt, workload, wruns, out):
    values = {}
    for (case, allocator), runs in group_by(wruns, lambda r: (r["case"], r["allocator"])).items():
        m = median_of(runs, "peak_rss_kib")
        if m is not None:
            values[(case, allocator)] = m / 1024
    if not values:
        return None
    cases = list(dict.fromkeys(c for c, _ in values))
    allocators = {a for _, a in values}
    fig, ax = plt.subplots(figsize=(min(30, max(6.4, 1.5 + len(cases) * (0.3 * len(allocators) + 0.5))), 4.8))
    positions = grouped_bars(ax, plt, cases, values)
    ax.set_xticks(positions)
    ax.set_xticklabels(cases, rotation=30 if len(cases) > 4 else 0, ha="right" if len(cases) > 4 else "center")
    if spans_decades(values.values()):
        ax.set_yscale("log")
    ax.set_ylabel("peak resident memory (MiB, median)")
    ax.set_xlabel("case")
    ax.set_title(f"{workload}: peak resident memory (lower is better)")
    ax.grid(True, axis="y", alpha=0.3)
    # outside the axes: inside, it hides the tallest bars
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return save(plt, fig, os.path.join(out, f"{workload}_rss.png"))


def plot_summary(plt, tables, out):
    """Horizontal bars from 1.0: every allocator's ratio to glibc per case."""
    from matplotlib import ticker
    rows = [row for metric_tables in tables.values() for rows in metric_tables for row in rows
            if BASELINE in row.stats and len(row.stats) > 1]
    values = {}
    for row in rows:
        for allocator in row.stats:
            r = row.ratio(allocator)
            if allocator != BASELINE and r is not None and r > 0:
                values[(f"{row.workload}: {row.case}", allocator)] = r
    if not values:
        return None
    labels = list(dict.fromkeys(g for g, _ in values))
    allocators = {a for _, a in values}
    height = min(60, max(3.5, 1.2 + len(labels) * (0.22 * len(allocators) + 0.2)))
    fig, ax = plt.subplots(figsize=(10, height))
    positions = grouped_bars(ax, plt, labels, values, horizontal=True, base=1.0)
    ax.set_xscale("log")  # 2x better and 2x worse are the same distance from 1
    limit = max(max(values.values()), 1 / min(values.values())) * 1.3
    ax.set_xlim(1 / limit, limit)
    # ticks at powers of two (0.5, 1, 2, 4): a decade apart would leave only "1"
    ax.xaxis.set_major_locator(ticker.LogLocator(base=2))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(positions)
    ax.set_yticklabels(labels)
    ax.invert_yaxis()  # first case at the top, as in the tables
    ax.set_xlabel("ratio to glibc, median primary metric (> 1: better than glibc; log scale)")
    ax.set_title("All workloads: each allocator against glibc")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return save(plt, fig, os.path.join(out, "summary.png"))


def make_plots(plt, runs, tables, out):
    """{workload or "summary": [png paths written]}."""
    os.makedirs(out, exist_ok=True)
    measured = [r for r in runs if "skipped" not in r]
    plots = {}
    summary = plot_summary(plt, tables, out)
    if summary:
        plots["summary"] = [summary]
    for workload in ordered_workloads(measured):
        wruns = [r for r in measured if r["workload"] == workload]
        files = [plot(plt, workload, wruns, out) for plot in (plot_threads, plot_latency, plot_rss)]
        plots[workload] = [f for f in files if f]
    return plots


# ---------------------------------------------------------------- main

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
        print("report.py: matplotlib is missing (Debian: python3-matplotlib), "
              "report.md has no plots", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
