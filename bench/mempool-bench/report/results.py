"""Reading and validating results.jsonl, and the numbers the report is made of:
runs grouped by workload, case and allocator, medians, and the main tables'
rows (Stats, Row)."""

import json
import math
import os
import statistics

SCHEMA = 1
BASELINE = "glibc"
# Column order: the malloc replacements first (the configurations that run only
# where asked after them), then the in-process allocators.
ALLOCATOR_ORDER = [
    "glibc", "mimalloc", "jemalloc", "tcmalloc", "mempool", "mempool-hardened",
    "jemalloc-thp", "mempool-thp-never",
    "mempool-linked", "jemalloc-linked", "tcmalloc-linked",
    "mempool-heap", "object-pool", "bitmap-pool", "size-class-pool", "std-pmr",
]
WORKLOAD_ORDER = [
    "rounds", "queue", "compare", "throughput", "micro", "prodcons",
    "fragmentation", "churn", "scaling", "bigbuffers", "bigheap", "server", "handoff", "apps",
    "run",
]
# The project's targets: mempool against the best of these peers (the malloc
# replacements) measured in the same run.
SUBJECT = "mempool"
PEERS = ["glibc", "mimalloc", "jemalloc", "tcmalloc"]
# Where mempool's malloc did not run (a pool workload), its best own pool
# stands for it, against the standard library's: new/delete and std::pmr.
POOLS = ["mempool-heap", "object-pool", "bitmap-pool", "size-class-pool"]
POOL_PEERS = ["glibc", "std-pmr"]
# Workloads that run whole programs, one case each: a table against the best
# peer per case, whose primary metric may differ from case to case.
PROGRAM_WORKLOADS = ["apps", "run"]
RSS = "peak_rss_kib"
# Beside peak RSS in every run: the minor page faults of the process (or the
# program's process tree), and its AnonHugePages in KiB (null where it could
# not be read: a program that exits by itself).
FAULTS = "minor_faults"
HUGE = "anon_huge_kib"
# (key in a latency object, column title)
PERCENTILES = [("p50", "p50"), ("p95", "p95"), ("p99", "p99"),
               ("p999", "p99.9"), ("max", "max")]


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

    def overlaps(self, other):
        """Whether the min-max spreads of the two have a value in common."""
        return self.low <= other.high and other.low <= self.high


def metric_stats(runs, name):
    """{allocator: Stats of metric `name`} of one case's runs, for the
    allocators that have it, in column order."""
    out = {}
    for allocator, aruns in group_by(runs, lambda r: r["allocator"]).items():
        values = [v for v in (metric(r, name) for r in aruns) if v is not None]
        if values:
            out[allocator] = Stats(values)
    return {a: out[a] for a in ordered_allocators(out)}


def ratio_to_baseline(better, value, baseline):
    """> 1 when value is better than the baseline, in the metric's own sense."""
    if better == "lower":
        return baseline / value if value else None
    return value / baseline if baseline else None


def ratio_spread(better, stats, baseline):
    """(median, low, high) of stats as ratios to baseline (> 1: better), low
    and high from the min and max repetitions; None where undefined."""
    ends = [ratio_to_baseline(better, v, baseline) for v in (stats.low, stats.high)]
    median = ratio_to_baseline(better, stats.median, baseline)
    if median is None or None in ends:
        return None
    return median, min(ends), max(ends)


def best_of(better, stats, candidates):
    """The candidate with the best median in stats (the first of equals), or
    None when none of them is there."""
    present = [c for c in candidates if c in stats]
    if not present:
        return None
    pick = min if better == "lower" else max
    return pick(present, key=lambda c: stats[c].median)


def spreads_word(mine, theirs):
    """"overlap" or "apart" for the min-max spreads of two Stats; None when
    both ran once, where single values being apart says nothing."""
    if mine.count == 1 and theirs.count == 1:
        return None
    return "overlap" if mine.overlaps(theirs) else "apart"


class Match:
    """mempool (or its best pool) against the best peer in one row: who they
    are, their Stats, and the ratio of their medians (> 1: mempool better)."""

    def __init__(self, subject, mine, peer, theirs, ratio):
        self.subject, self.mine, self.peer, self.theirs = subject, mine, peer, theirs
        self.ratio = ratio

    def spreads(self):
        return spreads_word(self.mine, self.theirs)


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

    def ratio_to_best(self, allocator):
        """The allocator's median against the row's best (1: the best, < 1
        worse), or None when it did not run."""
        if allocator not in self.stats:
            return None
        return ratio_to_baseline(self.better, self.stats[allocator].median, self.best())

    def best_peer(self):
        """The peer (PEERS) with the best median, or None when none ran."""
        return best_of(self.better, self.stats, PEERS)

    def against(self, subjects, peers):
        """A Match of the best of subjects against the best of peers, or None
        when either is missing."""
        mine = best_of(self.better, self.stats, subjects)
        peer = best_of(self.better, self.stats, peers)
        if mine is None or peer is None:
            return None
        r = ratio_to_baseline(self.better, self.stats[mine].median, self.stats[peer].median)
        return None if r is None else Match(mine, self.stats[mine], peer, self.stats[peer], r)

    def vs_best_peer(self):
        """(mempool's ratio to the best peer, > 1: mempool better; the peer),
        or None when mempool or no peer ran."""
        found = self.against([SUBJECT], PEERS)
        return None if found is None else (found.ratio, found.peer)

    def match(self):
        """mempool against the best peer; where mempool did not run, its best
        pool against the best of POOL_PEERS. None when neither pair ran."""
        if SUBJECT in self.stats:
            return self.against([SUBJECT], PEERS)
        return self.against(POOLS, POOL_PEERS)


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


def rows_by_case(metric_tables, wruns):
    """The rows of one workload's tables (a case's runs share one primary
    metric), by case in the order the runs came in."""
    order = {case: i for i, case in enumerate(dict.fromkeys(r["case"] for r in wruns))}
    rows = [row for rows in metric_tables for row in rows]
    return sorted(rows, key=lambda row: order.get(row.case, len(order)))


def report_rows(tables, runs):
    """Every row of the main tables, the real programs (PROGRAM_WORKLOADS)
    first, then workload by workload; within one, the cases in the order they
    ran."""
    measured = [r for r in runs if "skipped" not in r]
    order = ([w for w in PROGRAM_WORKLOADS if w in tables]
             + [w for w in tables if w not in PROGRAM_WORKLOADS])
    return [row for w in order
            for row in rows_by_case(tables[w], [r for r in measured if r["workload"] == w])]


def cpu_text(machine):
    """"AMD EPYC (family 25, model 1)": the model name may be vague, the
    family and model numbers (newer records) say which part it is."""
    name = machine.get("cpu") if isinstance(machine.get("cpu"), str) and machine["cpu"] else None
    numbers = [f"{word} {machine[key]}" for key, word in (("cpu_family", "family"),
                                                         ("cpu_model", "model"))
               if isinstance(machine.get(key), int) and not isinstance(machine[key], bool)]
    if not numbers:
        return name
    return f"{name or 'CPU'} ({', '.join(numbers)})"


# (key of the machine object, label); "cpu" through cpu_text.
MACHINE_FACTS = [("cpu", "CPU"), ("cores", "cores"), ("kernel", "kernel"),
                 ("compiler", "compiler"), ("build_type", "build"), ("glibc", "glibc"),
                 ("commit", "commit"), ("date", "date")]


def machine_facts(runs):
    """[(label, text)] of the machine the runs' records describe, for the keys
    they have; a key with several values (results appended over time) lists
    them, dates as a range."""
    machines = [r["machine"] for r in runs if isinstance(r.get("machine"), dict)]
    facts = []
    for key, label in MACHINE_FACTS:
        values = [cpu_text(m) if key == "cpu" else m.get(key) for m in machines]
        values = list(dict.fromkeys(str(v) for v in values
                                    if v not in (None, "") and not isinstance(v, (dict, list))))
        if not values:
            continue
        if key == "date" and len(values) > 1:
            text = f"{min(values)} to {max(values)}"  # ISO-8601 sorts as text
        else:
            text = ", ".join(values)
        facts.append((label, text))
    return facts


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

