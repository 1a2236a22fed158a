#!/usr/bin/python3
"""Tests of the mempool-bench tool, run as a program.

    mempool_bench_test.py MEMPOOL_BENCH args        argument validation, --list, output formats
    mempool_bench_test.py MEMPOOL_BENCH command     run -- CMD: timing any program, and its
                                                    failures (missing, failing, hanging)
    mempool_bench_test.py MEMPOOL_BENCH profile HEAP_SITES
                                                    run --profile -- HEAP_SITES: its heap at
                                                    exit by call site, under tcmalloc's and
                                                    mempool's heap profilers
    mempool_bench_test.py MEMPOOL_BENCH WORKLOAD    a --quick run of WORKLOAD for every allocator
                                                    present: the JSON and CSV schemas, the
                                                    workload's own invariants, report.md,
                                                    the console's table
    mempool_bench_test.py MEMPOOL_BENCH table       the console's table: every allocator within
                                                    120 characters, each cell a median

Each case asserts behaviour that a broken tool would get wrong.
"""

import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import unittest

TOOL = None
WORKLOAD = None

CSV_HEADER = ("workload,case,allocator,label,repetition,threads,primary_metric,primary_value,"
              "ns_per_op,ops_per_s,wall_s,peak_rss_kib,p50_ns,p99_ns,p999_ns,max_ns,skipped,"
              "minor_faults,anon_huge_kib")
# The huge-page configurations: run where a workload asks (bigheap, redis-bigheap).
HUGE_PAGE_ALLOCATORS = ["jemalloc-thp", "mempool-thp-never"]
# Programs that exit by themselves: their AnonHugePages cannot be read (null).
EXITS_BY_ITSELF = ["python", "sqlite", "gxx"]
MACHINE_KEYS = {"cpu", "cores", "kernel", "compiler", "build_type", "glibc", "libraries"}


def run(*args, timeout=600):
    return subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


class Arguments(unittest.TestCase):
    def test_bad_arguments_exit_2_naming_the_problem(self):
        cases = [
            (["nosuch"], "nosuch"),
            (["compare", "--threads=0"], "--threads"),
            (["compare", "--threads=two"], "--threads"),
            (["compare", "--threads=1,0"], "--threads"),
            (["compare", "--allocators=glibc,nosuch"], "nosuch"),
            (["compare", "--repeat=0"], "--repeat"),
            (["compare", "--repeat=-3"], "--repeat"),
            (["compare", "--size=abc"], "--size"),
            (["compare", "--seconds=0"], "--seconds"),
            (["compare", "--sample-rate=0"], "--sample-rate"),
            (["compare", "--size-dist=gaussian"], "--size-dist"),
            (["compare", "--mode=later"], "--mode"),
            (["bigbuffers", "--replace=sideways"], "--replace"),
            (["compare", "--format=xml"], "--format"),
            (["compare", "--bogus"], "--bogus"),
            (["report"], "dir"),
            ([], "command"),
            (["run"], "command after --"),
            (["run", "--"], "command after --"),
            (["run", "--", "no-such-program-here"], "no such command: no-such-program-here"),
            (["run", "--timeout=0", "--", "true"], "--timeout"),
            (["compare", "--", "ls"], "only run takes a command"),
            (["apps", "--apps=nosuch"], "--apps"),
            (["compare", "--profile"], "only run takes --profile"),
            (["run", "--profile-rate=4096", "--", "true"], "--profile-rate needs --profile"),
            (["run", "--profile", "--profile-rate=0", "--", "true"], "--profile-rate"),
            (["run", "--profile", "--allocators=glibc", "--", "true"], "mempool or tcmalloc"),
            (["run", "--profile", "--allocators=mempool,tcmalloc", "--", "true"],
             "one allocator with a heap profiler"),
            (["run", "--profile", "--allocators=tcmalloc", "--profile-rate=4096", "--", "true"],
             "records every allocation"),
            (["run", "--profile", "--check-output", "--", "true"], "--check-output"),
            (["run", "--profile"], "command after --"),
            (["compare", "--preload=mine"], "expected NAME=PATH"),
            (["compare", "--preload", "=/lib/x.so"], "expected NAME=PATH"),
            (["compare", "--preload=Mine!=/bin/true"], "NAME may hold"),
            (["compare", "--preload=mempool=/bin/true"], "mempool is an allocator already"),
            (["compare", "--preload=mine=/no/such/lib.so"], "no such library: /no/such/lib.so"),
        ]
        with tempfile.NamedTemporaryFile(suffix=".txt") as plain:
            os.chmod(plain.name, 0o644)
            cases.append((["run", "--", plain.name], "not executable"))  # there, but no x bit
            self.check_usage_errors(cases)

    def check_usage_errors(self, cases):
        for args, word in cases:
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(word, r.stderr)
                self.assertIn("usage", r.stderr)
                self.assertEqual(r.stdout, "")

    def test_help_and_list_succeed(self):
        self.assertEqual(run("--help").returncode, 0)
        r = run("--list")
        self.assertEqual(r.returncode, 0)
        for name in ["rounds", "queue", "compare", "throughput", "micro", "prodcons",
                     "fragmentation", "churn", "scaling", "bigbuffers", "server", "handoff",
                     "xmalloc", "larson", "tree", "cache-thrash", "cache-scratch", "apps", "run", "glibc", "mimalloc", "jemalloc",
                     "tcmalloc", "mempool", "mempool-heap", "object-pool", "bitmap-pool",
                     "size-class-pool", "std-pmr", "bigheap", *HUGE_PAGE_ALLOCATORS]:
            self.assertIn(name, r.stdout)

    def test_suite_is_the_headline_subset_and_full_is_every_workload(self):
        def plan(*args):
            r = run("suite", "--dry-run", *args)
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = r.stdout.splitlines()
            self.assertTrue(all(len(x) <= 120 for x in lines), r.stdout)
            runs, repetitions = re.fullmatch(r"(\d+) runs in (\d+) repetitions",
                                             lines[-1]).groups()
            cases = [x.split(":")[0] for x in lines[:-1] if not x.startswith(" ")]
            return cases, int(runs), int(repetitions)

        head, head_runs, head_reps = plan()
        full, full_runs, full_reps = plan("--full")
        self.assertEqual((head_reps, full_reps), (3, 5))  # programs: 5 in --full
        workloads = lambda cases: {c.split()[0].rstrip(",") for c in cases}
        self.assertEqual(workloads(head), {"apps", "compare", "micro", "rounds", "throughput",
                                           "server", "churn", "fragmentation"})
        self.assertIn("compare 64 B, 1 thread", head)
        self.assertNotIn("apps redis, 1 thread", head)  # waits on the loopback: --full only
        self.assertIn("apps gxx, 1 thread", head)
        self.assertTrue({"queue", "prodcons", "scaling", "bigbuffers", "handoff", "xmalloc",
                         "larson", "tree", "cache-thrash", "cache-scratch"} <= workloads(full))
        self.assertIn("apps redis-bigheap, 1 thread", full)
        self.assertGreater(full_runs, 2 * head_runs)
        # --apps narrows the headline's programs too; --full belongs to suite alone.
        apps, _, _ = plan("--apps=sqlite")
        self.assertEqual([c for c in apps if c.startswith("apps")], ["apps sqlite, 1 thread"])
        r = run("compare", "--full")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--full", r.stderr)

    def test_csv_and_json_formats_on_stdout(self):
        with tempfile.TemporaryDirectory() as d:
            common = ["compare", "--quick", "--allocators=glibc,mempool-heap", "--size=64",
                      "--threads=1", "--repeat=2", "--out", d]
            r = run(*common, "--format=json")
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = [json.loads(x) for x in r.stdout.splitlines()]
            self.assertEqual(len(lines), 4)  # 2 allocators x 2 repetitions
            self.assertEqual(sorted({x["repetition"] for x in lines}), [0, 1])
            # Interleaved: both allocators before the second repetition.
            self.assertEqual([x["allocator"] for x in lines],
                             ["glibc", "mempool-heap", "glibc", "mempool-heap"])
            r = run(*common, "--format=csv", "--label=nightly")
            self.assertEqual(r.returncode, 0, r.stderr)
            rows = list(csv.reader(r.stdout.splitlines()))
            self.assertEqual(",".join(rows[0]), CSV_HEADER)
            self.assertEqual(len(rows), 5)
            self.assertTrue(all(row[3] == "nightly" for row in rows[1:]))
            self.assertTrue(all(float(row[7]) > 0 for row in rows[1:]))


def read_records(out_dir):
    """The records of results.jsonl in a run's --out folder."""
    with open(os.path.join(out_dir, "results.jsonl")) as f:
        return [json.loads(line) for line in f]


def check_record(test, rec):
    test.assertEqual(rec["schema"], 1)
    for key in ["workload", "case", "allocator", "label", "repetition", "threads", "machine",
                "malloc_from"]:
        test.assertIn(key, rec)
    test.assertTrue(MACHINE_KEYS <= set(rec["machine"]), rec["machine"])
    # The CPU's family and model say which generation a vague name ("AMD EPYC") is; the
    # commit and the date say what was measured when.
    machine = rec["machine"]
    with open("/proc/cpuinfo") as f:
        cpuinfo = dict(line.split(":", 1) for line in f if ":" in line)
    test.assertEqual(machine["cpu_family"], int(cpuinfo["cpu family\t"]))
    test.assertEqual(machine["cpu_model"], int(cpuinfo["model\t\t"]))
    test.assertRegex(machine["commit"], r"^([0-9a-f]{10,}(-dirty)?|unknown)$")
    test.assertRegex(machine["date"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
    # Every allocator of the run has a version, and glibc's is the C library's.
    versions = rec["machine"]["libraries"]
    test.assertTrue(versions.get(rec["allocator"]), versions)
    test.assertEqual(versions["glibc"], rec["machine"]["glibc"])
    if "skipped" in rec:
        test.assertTrue(rec["skipped"])
        test.assertNotIn("metrics", rec)
        return
    primary = rec["primary"]
    test.assertIn(primary["better"], ("lower", "higher"))
    value = rec["metrics"][primary["metric"]]
    test.assertIsInstance(value, (int, float))
    test.assertGreater(value, 0, rec)
    test.assertGreater(rec["metrics"]["peak_rss_kib"], 0)
    check_faults_and_huge_pages(test, rec)
    test.assertEqual(rec["metrics"].get("failed_allocations", 0), 0, rec)
    for name, lat in rec["metrics"].items():
        if name.endswith("latency_ns"):
            test.assertLessEqual(lat["p50"], lat["p99"])
            test.assertLessEqual(lat["p99"], lat["p999"])
            test.assertLessEqual(lat["p999"], lat["max"])


def check_faults_and_huge_pages(test, rec):
    """minor_faults: a positive count in every run (a process that ran faulted
    its pages in); anon_huge_kib: KiB, or null for a program that exits by itself."""
    m = rec["metrics"]
    test.assertIsInstance(m["minor_faults"], int, rec)
    test.assertNotIsInstance(m["minor_faults"], bool)
    test.assertGreater(m["minor_faults"], 0, rec)
    huge = m["anon_huge_kib"]
    if rec["workload"] == "run" or rec["case"] in EXITS_BY_ITSELF:
        test.assertIsNone(huge, rec)
    else:
        test.assertIsInstance(huge, int, rec)
        test.assertGreaterEqual(huge, 0, rec)
        test.assertLessEqual(huge, m["peak_rss_kib"], rec)


def check_workload(test, rec):
    m = rec.get("metrics")
    if m is None:
        return
    w = rec["workload"]
    if w == "queue":
        p = rec["params"]
        test.assertEqual(m["sent"] + m["dropped"], p["producers"] * p["ticks"], rec)
        test.assertLessEqual(m["received"], m["sent"])
        test.assertEqual(m["received"], m["sent"])  # drained at the end
        test.assertEqual(m["corrupt_messages"], 0)
        test.assertTrue(m["invariants_ok"])
        test.assertGreater(m["enqueue_latency_ns"]["samples"], 0)
    elif w == "prodcons":
        test.assertTrue(m["checksum_ok"], rec)
    elif w == "fragmentation":
        test.assertEqual(m.get("corrupt_blocks", 0), 0, rec)
    elif w == "server":
        test.assertEqual(m["corrupt_blocks"], 0, rec)
    elif w == "xmalloc":
        # Every block allocated was checked and freed by a consumer, none by its producer.
        p = rec["params"]
        test.assertEqual(m["corrupt_blocks"], 0, rec)
        test.assertEqual(p["producers"] + p["consumers"], rec["threads"], rec)
        test.assertGreater(m["blocks_allocated"], 0, rec)
        test.assertEqual(m["blocks_freed_elsewhere"], m["blocks_allocated"], rec)
        test.assertLessEqual(m["ops"], m["blocks_allocated"], rec)
    elif w == "larson":
        # Each measured generation freed its predecessor's blocks: all but the few
        # slots its 50,000 random replacements missed (e^-10 of them).
        p = rec["params"]
        test.assertEqual(m["corrupt_blocks"], 0, rec)
        test.assertGreaterEqual(m["generations"], rec["threads"], rec)
        test.assertEqual(m["ops"], m["generations"] * p["rounds_per_generation"], rec)
        most = m["generations"] * p["slots_per_thread"]
        test.assertLessEqual(m["inherited_frees"], most, rec)
        test.assertGreaterEqual(m["inherited_frees"], most * 0.999, rec)
    elif w == "tree":
        # Every node built was walked and freed; no body lost (the root's mass).
        p = rec["params"]
        test.assertEqual(rec["threads"], 1)
        test.assertTrue(m["mass_ok"], rec)
        test.assertEqual(m["nodes_walked"], m["nodes_allocated"], rec)
        test.assertEqual(m["nodes_freed"], m["nodes_allocated"], rec)
        test.assertGreater(m["nodes_per_step"], p["bodies"], rec)  # leaves and cells
        test.assertLess(m["nodes_per_step"], 2 * p["bodies"], rec)
        # nodes_per_step: the mean, rounded down (the bodies drift, the tree with them).
        test.assertLess(abs(m["ops"] - m["steps"] * m["nodes_per_step"]), m["steps"], rec)
        test.assertAlmostEqual(m["step_s"] * m["steps"], m["wall_s"], delta=1e-6 * m["steps"])
        test.assertLessEqual(m["step_build_s"] + m["step_walk_s"] + m["step_free_s"],
                             m["step_s"], rec)
    elif w in ("cache-thrash", "cache-scratch"):
        test.assertEqual(m["corrupt_blocks"], 0, rec)
        # A line is shared by two threads or more, never by one.
        sharing = m["threads_sharing_a_line"]
        test.assertTrue(0 <= sharing <= rec["threads"] and sharing != 1, rec)
        if w == "cache-scratch":  # each thread freed the main thread's block, intact
            test.assertEqual(m["handed_over"], rec["threads"], rec)
        else:
            test.assertNotIn("handed_over", m)
    elif w == "bigbuffers":
        test.assertTrue(m["checksum_ok"], rec)
        test.assertEqual(m["failed_allocations"], 0, rec)
        # The order it ran in, named in its case too.
        order = rec["params"]["order"]
        test.assertIn(order, ["free-first", "new-first"])
        test.assertIn("x new, then free" if order == "new-first" else "x free, then new",
                      rec["case"])
    elif w == "bigheap":
        p = rec["params"]
        # Every lookup found its key and its value: the lookups were made.
        test.assertTrue(m["checksum_ok"], rec)
        test.assertEqual(m["found"], p["lookups"], rec)
        test.assertEqual(m["failed_allocations"], 0, rec)
        test.assertEqual(p["node_bytes"], 48)
        test.assertGreaterEqual(p["heap_bytes"], 64 << 20)  # --quick: 64 MiB at least
        for name in ["lookup_s", "build_s", "ns_per_lookup", "free_s"]:
            test.assertGreater(m[name], 0, rec)
        # The table was resident: the peak RSS holds it, and faulting it in took
        # at least one fault per 2 MiB page (a 4 KiB one each without huge pages).
        test.assertGreater(m["peak_rss_kib"] * 1024, p["heap_bytes"], rec)
        test.assertGreater(m["minor_faults"], p["heap_bytes"] // (2 << 20), rec)
        if m["anon_huge_kib"] == 0:  # then a fault per 4 KiB page of the table
            test.assertGreater(m["minor_faults"], p["heap_bytes"] // 4096, rec)
    elif w == "apps":
        # The program and its command line, a checked output, and its own numbers.
        test.assertIn(rec["case"], ["redis", "redis-pipelined", "redis-bigheap", "python",
                                    "sqlite", "gxx"])
        test.assertTrue(rec["params"]["command"])
        test.assertRegex(rec["output_digest"], "^[0-9a-f]{16}$")
        if rec["case"] == "redis-bigheap":
            # Every key stored, every GET a hit, and the server held the keys.
            test.assertGreater(m["get_rps"], 0, rec)
            test.assertGreater(m["fill_s"], 0, rec)
            test.assertGreaterEqual(m["keyspace_hits"], rec["params"]["gets"], rec)
            test.assertGreater(m["peak_rss_kib"] * 1024,
                               rec["params"]["keys"] * rec["params"]["value_bytes"], rec)
        elif rec["case"].startswith("redis"):
            for command in ["get", "set", "lpush", "lpop", "sadd", "hset", "zadd"]:
                test.assertGreater(m["rps_" + command], 0, rec)
            test.assertGreater(m["geomean_rps"], 0)
        else:
            test.assertGreater(m["wall_s"], 0)


# The console's widest line: a terminal wraps anything wider into noise.
CONSOLE_WIDTH = 120
IN_PROCESS = {"mempool-heap", "object-pool", "bitmap-pool", "size-class-pool", "std-pmr"}
# The table's units, in the metric's own: time in s (ns for *_ns), memory in KiB.
UNITS = {
    "time": {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1},
    "rate": {"/s": 1, "k/s": 1e3, "M/s": 1e6, "G/s": 1e9},
    "memory": {"B": 1 / 1024, "KiB": 1, "MiB": 1024, "GiB": 1024 ** 2, "TiB": 1024 ** 3},
    "count": {"": 1, "k": 1e3, "M": 1e6, "G": 1e9},
}
CELL = re.compile(r"(?P<lo>[0-9.]+-)?(?P<num>[0-9.]+)(?P<unit>[a-zA-Z/]*)"
                  r"(?: (?P<ratio>[0-9.]+)x)?(?P<best>\*)?")


def metric_units(metric):
    """The units of a metric's cells, as multiples of the metric's own unit."""
    if metric.endswith("rps") or metric == "ops_per_s":
        return UNITS["rate"]
    if metric.endswith("_ns") or metric == "ns_per_op":
        return {k: v * 1e9 for k, v in UNITS["time"].items()}
    if metric.endswith("_s"):
        return UNITS["time"]
    if metric.endswith("_kib"):
        return UNITS["memory"]
    return UNITS["count"]


def parse_console_tables(stdout):
    """The tables of the console: [{workload, title, reference, columns, rows}], rows
    {(row title, column): cell}, a block's rows under the case row before them."""
    tables = []
    block = None
    for line in stdout.splitlines():
        if line and not line.startswith(" ") and ": median " in line:
            tables.append({"workload": line.split(",")[0], "title": line, "reference": None,
                           "columns": [], "rows": {}, "titles": []})
            block = None
        elif line.startswith("  cells: "):
            tables[-1]["reference"] = "glibc" if "ratio to glibc" in line else "best"
        elif line.startswith("  case "):
            block = line.split()[1:]
            tables[-1]["columns"] += block
            row_case = None
        elif not line.strip() or " skipped: " in line:
            block = None
        elif block is not None:
            fields = re.split(r"\s{2,}", line.strip())
            if len(fields) != 1 + len(block):
                raise AssertionError(f"a row of {len(block)} columns: {line!r}")
            title = fields[0]
            if title in ("min-max", "peak RSS"):
                key = (row_case, title)
            else:
                row_case = key = title
                if title not in tables[-1]["titles"]:
                    tables[-1]["titles"].append(title)
            for column, cell in zip(block, fields[1:]):
                tables[-1]["rows"][(key, column)] = cell
    return tables


def full_case(title, cases):
    """The case a row's title names: itself, or the one case its ends match."""
    if title in cases or "..." not in title:
        return title
    # Cut in its middle: its start, "...", its end (which may hold a "..." of its own).
    cut = title.index("...")
    head, tail = title[:cut], title[cut + 3:]
    found = [c for c in cases
             if c.startswith(head) and c.endswith(tail) and len(c) > len(head) + len(tail) + 3]
    if len(found) != 1:
        raise AssertionError(f"{title!r} names {found} of {cases}")
    return found[0]


def rounded_to(text):
    """Half the place value of the last digit of a number's text: how far from it
    the number it was rounded from can be."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10 ** -decimals * (1 + 1e-9)


def check_number(test, text, units, expected, what):
    """text (a number with a unit of units) is expected, rounded."""
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z/]*)", text)
    test.assertIsNotNone(m, what)
    unit = units[m.group(2)]
    test.assertAlmostEqual(float(m.group(1)) * unit, expected,
                           delta=rounded_to(m.group(1)) * unit, msg=what)


def check_console_table(test, stdout, records):
    """stdout's tables: no line wider than CONSOLE_WIDTH; per workload, the malloc
    replacements in one table, the in-process APIs with glibc in another; every
    cell the median of its runs (and a program's min-max and peak RSS), its ratio
    to the reference and '*' on the best of the row."""
    for line in stdout.splitlines():
        test.assertLessEqual(len(line), CONSOLE_WIDTH, line)
    tables = parse_console_tables(stdout)
    measured = [x for x in records if "metrics" in x]
    for workload in {x["workload"] for x in records}:
        ran = {x["allocator"] for x in measured if x["workload"] == workload}
        # One skipped throughout: in the lines of the skipped, not in a column.
        for x in records:
            if x["workload"] == workload and x["allocator"] not in ran:
                test.assertIn(f"  {x['allocator']} skipped: ", stdout)
        mine = [t for t in tables if t["workload"] == workload]
        test.assertEqual(bool(mine), bool(ran), workload)
        shown = set()
        for t in mine:
            cols = set(t["columns"])
            test.assertEqual(len(cols), len(t["columns"]), t["columns"])  # once each
            shown |= cols
            if "in-process" in t["title"]:
                test.assertTrue(cols <= IN_PROCESS | {"glibc"}, cols)
            else:
                test.assertFalse(cols & IN_PROCESS, cols)
        test.assertEqual(shown, ran, workload)
        # A row per case measured at least once.
        cases = list(dict.fromkeys(x["case"] for x in measured if x["workload"] == workload))
        for t in mine:
            test.assertEqual(len(t["titles"]), len(cases), t["titles"])
            for title in t["titles"]:
                case = full_case(title, cases)
                runs = [x for x in measured if x["workload"] == workload and x["case"] == case]
                kinds = [(title, None)]
                if workload in ("apps", "run"):
                    kinds += [((title, "min-max"), "spread"), ((title, "peak RSS"), "rss")]
                for key, kind in kinds:
                    check_console_row(test, t, key, kind, runs)


def check_console_row(test, table, key, kind, runs):
    values = {}  # column -> the runs' values
    metric, lower = "peak_rss_kib", True
    for x in runs:
        if kind != "rss":
            metric, lower = x["primary"]["metric"], x["primary"]["better"] == "lower"
    for x in runs:
        if x["allocator"] in table["columns"]:
            values.setdefault(x["allocator"], []).append(x["metrics"][metric])
    medians = {a: statistics.median(v) for a, v in values.items()}
    best = (min if lower else max)(medians.values()) if medians else None
    ref = medians.get("glibc") if table["reference"] == "glibc" else best
    units = metric_units(metric)
    for column in table["columns"]:
        cell = table["rows"][(key, column)]
        what = f"{table['title']}: {key} under {column}: {cell!r}"
        if column not in medians:
            test.assertEqual(cell, "-", what)
            continue
        m = CELL.fullmatch(cell)
        test.assertIsNotNone(m, what)
        if kind == "spread":
            test.assertIsNotNone(m.group("lo"), what)
            check_number(test, m.group("num") + m.group("unit"), units, max(values[column]),
                         what)
            check_number(test, m.group("lo")[:-1] + m.group("unit"), units,
                         min(values[column]), what)
            continue
        value = medians[column]
        check_number(test, m.group("num") + m.group("unit"), units, value, what)
        test.assertEqual(m.group("best") == "*", len(medians) > 1 and value == best, what)
        is_ref = column == "glibc" if table["reference"] == "glibc" else value == best
        if is_ref or ref is None:
            test.assertIsNone(m.group("ratio"), what)
        else:
            ratio = ref / value if lower else value / ref
            test.assertAlmostEqual(float(m.group("ratio")), ratio,
                                   delta=rounded_to(m.group("ratio")), msg=what)


class Workload(unittest.TestCase):
    def test_quick_run_of_every_allocator(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(WORKLOAD, "--quick", "--out", d)
            self.assertEqual(r.returncode, 0, r.stderr)
            records = read_records(d)
            self.assertTrue(records)
            self.assertTrue(any("metrics" in x for x in records))
            present = {x["allocator"] for x in records}
            # Always there, needing no package; programs run only through malloc.
            malloc_only = WORKLOAD in ("apps", "bigheap")
            expected = ["glibc", "mempool"] if malloc_only else [
                "glibc", "mempool", "mempool-heap", "size-class-pool", "std-pmr"]
            # The huge-page configurations run where the workload asks, and only there.
            if WORKLOAD in ("apps", "bigheap"):
                expected.append("mempool-thp-never")  # needs no package
            else:
                self.assertFalse(present & set(HUGE_PAGE_ALLOCATORS), present)
            for name in expected:
                self.assertIn(name, present)
            if malloc_only:
                self.assertNotIn("mempool-heap", present)
                self.assertNotIn("mempool-hardened", present)
            if WORKLOAD == "apps":
                # Every program ran (none skipped) under every allocator present but
                # the huge-page configurations, which run redis-bigheap only.
                cases = {(x["case"], x["allocator"]) for x in records if "metrics" in x}
                for case in ["redis", "redis-pipelined", "redis-bigheap", "python", "sqlite",
                             "gxx"]:
                    for name in present:
                        if case == "redis-bigheap" or name not in HUGE_PAGE_ALLOCATORS:
                            self.assertIn((case, name), cases)
                        else:
                            self.assertNotIn((case, name), cases)
            for rec in records:
                # The configuration's environment, recorded with its runs.
                if rec["allocator"] == "jemalloc-thp":
                    self.assertEqual(rec["allocator_env"],
                                     ["MALLOC_CONF=thp:always,metadata_thp:always"])
                elif rec["allocator"] == "mempool-thp-never":
                    self.assertEqual(rec["allocator_env"], ["MEMPOOL_THP=never"])
                    self.assertIn("libmempool-malloc.so", rec["malloc_from"])
                else:
                    self.assertNotIn("allocator_env", rec)
            if WORKLOAD == "bigbuffers":  # both cases, unless --replace picks one
                self.assertEqual({x["params"]["order"] for x in records if "metrics" in x},
                                 {"free-first", "new-first"})
            for rec in records:
                with self.subTest(allocator=rec["allocator"], case=rec["case"]):
                    self.assertEqual(rec["workload"], WORKLOAD)
                    check_record(self, rec)
                    check_workload(self, rec)
            with open(os.path.join(d, "results.csv"), newline="") as f:
                rows = list(csv.reader(f))
            self.assertEqual(",".join(rows[0]), CSV_HEADER)
            self.assertEqual(len(rows) - 1, len(records))
            self.assertTrue(all(len(row) == len(rows[0]) for row in rows))
            # The table names every allocator that ran, each cell its runs' median.
            for name in present:
                self.assertIn(name, r.stdout)
            check_console_table(self, r.stdout, records)
            rep = run("report", d)
            self.assertEqual(rep.returncode, 0, rep.stderr)
            with open(os.path.join(d, "report.md")) as f:
                md = f.read()
            self.assertIn(f"## {WORKLOAD}", md)
            # Beside peak RSS: the faults and the huge pages of every run.
            for title in ["### Peak resident memory", "### Minor page faults", "### Huge pages"]:
                self.assertIn(title, md)


class ConsoleTable(unittest.TestCase):
    """The table printed at the end of a run: every allocator at once still fits
    the console, and its numbers are the runs' medians."""

    ALL = ["glibc", "mimalloc", "jemalloc", "tcmalloc", "mempool", "mempool-hardened",
           "mempool-profile", "jemalloc-thp", "mempool-thp-never",
           "mempool-linked", "jemalloc-linked", "tcmalloc-linked",
           "object-pool", "size-class-pool", "bitmap-pool", "std-pmr", "mempool-heap"]

    def test_every_allocator_within_the_console_width(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("rounds", "--quick", "--threads=1,2", "--repeat=3",
                    "--allocators=" + ",".join(self.ALL), "--out", d)
            self.assertEqual(r.returncode, 0, r.stderr)
            records = read_records(d)
            check_console_table(self, r.stdout, records)
            tables = parse_console_tables(r.stdout)
            # malloc replacements, then the in-process APIs, both against glibc.
            self.assertEqual(len(tables), 2, r.stdout)
            self.assertIn("malloc replacements", tables[0]["title"])
            self.assertIn("in-process APIs", tables[1]["title"])
            for t in tables:
                self.assertEqual(t["columns"][0], "glibc")
                self.assertEqual(t["reference"], "glibc")
            # The ten mempool and malloc configurations do not fit in one block: the
            # case column is repeated before each block of columns.
            present = {x["allocator"] for x in records}
            if len(present - IN_PROCESS) > 6:
                headers = [x for x in r.stdout.splitlines() if x.startswith("  case ")]
                self.assertGreater(len(headers), len(tables), r.stdout)
            # Each case once per table: its name cut, if at all, in the middle.
            for t in tables:
                self.assertEqual(len(t["titles"]), 4, t["titles"])  # 2 sizes x 2 threads

    def test_without_glibc_the_ratio_is_to_the_best_of_the_row(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("compare", "--quick", "--size=64", "--threads=1", "--repeat=1",
                    "--allocators=mempool,mempool-heap,std-pmr", "--out", d)
            self.assertEqual(r.returncode, 0, r.stderr)
            check_console_table(self, r.stdout, read_records(d))
            tables = parse_console_tables(r.stdout)
            self.assertEqual([t["reference"] for t in tables], ["best", "best"], r.stdout)
            self.assertEqual([t["columns"] for t in tables],
                             [["mempool"], ["std-pmr", "mempool-heap"]])
            self.assertIn("*", tables[1]["rows"][("64 B, 1 thread", "std-pmr")] +
                          tables[1]["rows"][("64 B, 1 thread", "mempool-heap")])


class HugePageAllocators(unittest.TestCase):
    """jemalloc-thp and mempool-thp-never: accepted by --allocators, given their
    environment (which reaches the child and the programs it runs)."""

    def test_accepted_by_allocators_and_given_their_environment(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("run", "--allocators=glibc,mempool-thp-never,jemalloc-thp,mempool", "--out", d,
                    "--", "/usr/bin/python3", "-c", "print(len(str(list(range(99999)))))")
            if "jemalloc-thp skipped" in r.stderr:  # libjemalloc not installed
                self.skipTest(r.stderr)
            self.assertEqual(r.returncode, 0, r.stderr)
            records = {x["allocator"]: x for x in read_records(d)}
            self.assertEqual(set(records),
                             {"glibc", "mempool-thp-never", "jemalloc-thp", "mempool"})
            self.assertIn("jemalloc", records["jemalloc-thp"]["malloc_from"])
            for rec in records.values():
                check_record(self, rec)
        # What the program saw: its environment, one allocator at a time.
        for allocator, seen in [("mempool-thp-never", "never None"),
                                ("jemalloc-thp", "None thp:always,metadata_thp:always"),
                                ("mempool", "None None")]:
            with self.subTest(allocator=allocator), tempfile.TemporaryDirectory() as d:
                # exit status 1 (a failed run) when the program saw something else
                r = run("run", f"--allocators={allocator}", "--out", d, "--", "/bin/sh", "-c",
                        f'test "${{MEMPOOL_THP:-None}} ${{MALLOC_CONF:-None}}" = "{seen}"')
                self.assertEqual(r.returncode, 0, r.stderr)

    def test_default_runs_leave_them_out(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("run", "--repeat=1", "--out", d, "--", "true")
            self.assertEqual(r.returncode, 0, r.stderr)
            names = {x["allocator"] for x in read_records(d)}
            self.assertFalse(names & set(HUGE_PAGE_ALLOCATORS), names)


class LinkedAllocators(unittest.TestCase):
    """mempool-linked, jemalloc-linked, tcmalloc-linked: the workload runs in a copy of
    mempool-bench with that malloc linked in (no LD_PRELOAD), only when asked for; a
    copy whose malloc is not its own is caught; programs (run, apps) are skipped."""

    LINKED = {"mempool-linked": "mempool-bench-linked",
              "jemalloc-linked": "mempool-bench-jemalloc-linked",
              "tcmalloc-linked": "mempool-bench-tcmalloc-linked"}

    def built(self):
        here = os.path.dirname(TOOL)
        return {a: p for a, p in self.LINKED.items() if os.access(os.path.join(here, p), os.X_OK)}

    def test_a_workload_runs_in_the_linked_program(self):
        built = self.built()
        self.assertIn("mempool-linked", built)  # built wherever mempool-bench is
        with tempfile.TemporaryDirectory() as d:
            r = run("compare", "--quick", "--repeat=1", "--size=64",
                    "--allocators=glibc,mempool," + ",".join(built), "--out", d)
            self.assertEqual(r.returncode, 0, r.stderr)
            records = read_records(d)
            self.assertEqual({x["allocator"] for x in records}, {"glibc", "mempool", *built})
            for rec in records:
                check_record(self, rec)
                self.assertIn("ns_per_op", rec["metrics"])
                if rec["allocator"] in built:
                    self.assertEqual(os.path.basename(rec["malloc_from"]),
                                     built[rec["allocator"]], rec)
                    self.assertNotIn("LD_PRELOAD", rec.get("allocator_env", []))
            rep = run("report", d)
            self.assertEqual(rep.returncode, 0, rep.stderr)
            with open(os.path.join(d, "report.md")) as f:
                md = f.read()
            self.assertNotIn("## Warnings", md)
            for name in built:
                self.assertIn(name, md)

    def test_left_out_unless_asked_for(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("compare", "--quick", "--repeat=1", "--size=64", "--out", d)
            self.assertEqual(r.returncode, 0, r.stderr)
            names = {x["allocator"] for x in read_records(d)}
            self.assertFalse(names & set(self.LINKED), names)

    def test_a_copy_without_its_malloc_is_caught(self):
        # mempool-bench itself under the linked program's name: glibc's malloc.
        with tempfile.TemporaryDirectory() as d:
            shutil.copy(TOOL, os.path.join(d, "mempool-bench"))
            shutil.copy(TOOL, os.path.join(d, "mempool-bench-linked"))
            r = subprocess.run([os.path.join(d, "mempool-bench"), "compare", "--quick",
                                "--repeat=1", "--allocators=mempool-linked", "--out",
                                os.path.join(d, "out")],
                               capture_output=True, text=True, timeout=300, check=False)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("mempool-linked: malloc came from", r.stderr)
            self.assertIn("(not linked in)", r.stderr)

    def test_programs_keep_their_own_malloc(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("run", "--allocators=glibc,mempool-linked", "--repeat=1", "--out", d, "--",
                    "true")
            self.assertEqual(r.returncode, 0, r.stderr)
            records = {x["allocator"]: x for x in read_records(d)}
            self.assertIn("skipped", records["mempool-linked"])
            self.assertIn("linked into mempool-bench", records["mempool-linked"]["skipped"])
            self.assertNotIn("skipped", records["glibc"])


class Command(unittest.TestCase):
    """mempool-bench run -- CMD: any program, under each allocator."""

    def test_times_a_program_under_each_allocator(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("run", "--allocators=glibc,mempool", "--repeat=2", "--out", d, "--",
                    "/usr/bin/python3", "-c", "print(len({i: str(i) for i in range(100000)}))")
            self.assertEqual(r.returncode, 0, r.stderr)
            records = read_records(d)
            self.assertEqual([x["allocator"] for x in records],
                             ["glibc", "mempool", "glibc", "mempool"])
            for rec in records:
                check_record(self, rec)
                self.assertEqual(rec["params"]["command"],
                                 "/usr/bin/python3 -c 'print(len({i: str(i) for i in "
                                 "range(100000)}))'")
                # A Python process holds more than 5 MiB: this is the program's RSS.
                self.assertGreater(rec["metrics"]["peak_rss_kib"], 5 * 1024)
                self.assertGreater(rec["metrics"]["wall_s"], 0)
            for row in ["min-max", "peak RSS", "glibc", "mempool"]:
                self.assertIn(row, r.stdout)
            check_console_table(self, r.stdout, records)
            rep = run("report", d)
            self.assertEqual(rep.returncode, 0, rep.stderr)
            with open(os.path.join(d, "report.md")) as f:
                self.assertIn("## run", f.read())

    def test_default_allocators_are_the_ones_that_replace_malloc(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("run", "--repeat=1", "--out", d, "--", "true")
            self.assertEqual(r.returncode, 0, r.stderr)
            names = {x["allocator"] for x in read_records(d)}
            self.assertIn("glibc", names)
            self.assertIn("mempool", names)
            self.assertFalse(names & {"mempool-heap", "object-pool", "std-pmr"}, names)
            # mempool's other drop-ins run only when asked for (they are not peers).
            self.assertFalse(names & {"mempool-hardened", "mempool-profile"}, names)

    def test_the_other_drop_ins_when_asked_for(self):
        for allocator, library in [("mempool-hardened", "libmempool-malloc-hardened.so")]:
            with self.subTest(allocator=allocator), tempfile.TemporaryDirectory() as d:
                r = run("run", f"--allocators={allocator}", "--repeat=1", "--out", d, "--",
                        "/usr/bin/python3", "-c", "print(len([str(i) for i in range(10000)]))")
                self.assertEqual(r.returncode, 0, r.stderr)
                records = read_records(d)
                self.assertEqual([x["allocator"] for x in records], [allocator])
                self.assertIn(library, records[0]["malloc_from"])

    def test_a_library_of_ones_own(self):
        # --preload NAME=PATH: a malloc library run as allocator NAME with the default set,
        # or where --allocators names it; its children (run's, and compare's below) are
        # told of it too, and the record says which file served malloc.
        library = os.path.realpath(os.path.join(os.path.dirname(TOOL), "..",
                                                "libmempool-malloc-hardened.so"))
        with tempfile.TemporaryDirectory() as d:
            r = run("run", f"--preload=mine={library}", "--repeat=1", "--out", d, "--",
                    "/usr/bin/python3", "-c", "print(len([str(i) for i in range(10000)]))")
            self.assertEqual(r.returncode, 0, r.stderr)
            records = {x["allocator"]: x for x in read_records(d)}
            self.assertIn("glibc", records)
            self.assertIn("mempool", records)
            self.assertIn("mine", records)
            self.assertEqual(records["mine"]["malloc_from"], library)
            self.assertNotIn("hardened", records["mempool"]["malloc_from"])
            self.assertIn("mine", r.stdout)
        with tempfile.TemporaryDirectory() as d:
            r = run("compare", "--quick", "--size=64", "--threads=1", "--allocators=glibc,mine",
                    "--preload", f"mine={library}", "--out", d)
            self.assertEqual(r.returncode, 0, r.stderr)
            records = read_records(d)
            self.assertEqual(sorted({x["allocator"] for x in records}), ["glibc", "mine"])
            for rec in records:
                check_record(self, rec)
                # Its version is its path: no package says what it is.
                self.assertEqual(rec["machine"]["libraries"]["mine"], library)
                if rec["allocator"] == "mine":
                    self.assertEqual(rec["malloc_from"], library)
        # A library that does not define malloc would measure glibc under the name: the run
        # stops, naming it.
        not_malloc = os.path.realpath(os.path.join(os.path.dirname(TOOL), "..", "libmempool.so"))
        with tempfile.TemporaryDirectory() as d:
            r = run("run", f"--preload=plain={not_malloc}", "--allocators=plain", "--repeat=1",
                    "--out", d, "--", "true")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("plain: malloc came from", r.stderr)
            self.assertIn(f"not {not_malloc} (LD_PRELOAD failed)", r.stderr)

    def test_a_failing_command_is_a_failure_not_a_number(self):
        with tempfile.TemporaryDirectory() as d:
            for cmd, words in [(["sh", "-c", "echo broken >&2; exit 3"],
                                ["`sh -c 'echo broken >&2; exit 3'`", "exit status 3", "broken"]),
                               (["sh", "-c", "kill -SEGV $$"], ["signal 11"])]:
                with self.subTest(cmd=cmd):
                    r = run("run", "--allocators=glibc", "--out", d, "--", *cmd, timeout=60)
                    self.assertEqual(r.returncode, 1, r.stderr)
                    for word in words:
                        self.assertIn(word, r.stderr)
                    self.assertIn("under glibc", r.stderr)
                    self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_a_hanging_command_is_stopped_with_everything_it_started(self):
        marker = "31.%d" % os.getpid()
        with tempfile.TemporaryDirectory() as d:
            r = run("run", "--allocators=glibc", "--timeout=0.5", "--out", d, "--",
                    "sh", "-c", f"sleep {marker} & sleep {marker}", timeout=30)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("took longer than", r.stderr)
            left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True,
                                  text=True, check=False)
            self.assertEqual(left.stdout, "", "a process of the timed-out command is still there")

    def test_check_output_catches_output_that_differs(self):
        with tempfile.TemporaryDirectory() as d:
            script = "import os; print(os.urandom(8).hex())"
            r = run("run", "--allocators=glibc,mempool", "--check-output", "--out", d, "--",
                    "/usr/bin/python3", "-c", script)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("differs", r.stderr)
            r = run("run", "--allocators=glibc,mempool", "--check-output", "--out", d, "--",
                    "/usr/bin/python3", "-c", "print(sorted(range(9, 0, -1)))")
            self.assertEqual(r.returncode, 0, r.stderr)


HEAP_SITES = None  # tests/bench/heap_sites.cpp: what it holds at exit, by site
MIB = 1 << 20


def profile_table(out_dir, which=0):
    """Table `which` (0: the first) of OUT/profile/profile.md: {site: (bytes text,
    objects)}. The first process's tables come first: at exit, then at its peak."""
    with open(os.path.join(out_dir, "profile", "profile.md"), encoding="utf-8") as f:
        rows = [[c.strip() for c in line.strip().strip("|").split("|")]
                for line in f if line.startswith("| ")]
    tables = []
    for row in rows:
        if row[0] == "#":
            tables.append({})  # a table's header
        elif not re.fullmatch(r"-+:?", row[0]):
            tables[-1][row[1].strip("`")] = (row[3], int(row[5].replace(",", "")))
    return tables[which]


def in_mib(text):
    number, unit = text.split()
    return float(number) * {"GiB": 1024, "MiB": 1, "KiB": 1 / 1024, "B": 1 / MIB}[unit]


class Profile(unittest.TestCase):
    """run --profile -- CMD: the heap at exit by call site, under a heap profiler."""

    def check_png(self, path):
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_tcmalloc_records_every_allocation(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "profile"))
            stale = os.path.join(d, "profile", "heap.1.heap")  # an earlier run's
            with open(stale, "w") as f:
                f.write("heap profile:    1:  1 [    1:  1] @ heapprofile\n")
            r = run("run", "--profile", "--allocators=tcmalloc", "--out", d, "--", HEAP_SITES)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertFalse(os.path.exists(stale))
            # every allocation: the sites' bytes and objects exactly (heap_sites.cpp)
            table = profile_table(d)
            self.assertEqual(list(table)[:4], ["big_site", "medium_site", "small_site",
                                               "std::__new_allocator::allocate"])
            self.assertEqual(table["big_site"], ("64.0 MiB", 64))
            self.assertEqual(table["medium_site"], ("16.0 MiB", 256))
            self.assertEqual(table["small_site"], ("3.81 MiB", 10000))
            self.assertNotIn("freed_site", table)
            lines = r.stdout.splitlines()
            self.assertIn("tcmalloc's heap profiler, which records every allocation", r.stdout)
            row = next(line for line in lines if line.strip().startswith("1 "))
            self.assertEqual(row.split(), ["1", "64.0", "MiB", "75.5%", "64", "big_site", "layer"])
            self.assertTrue(all(len(line) <= 120 for line in lines), r.stdout)
            profiles = [x for x in os.listdir(os.path.join(d, "profile")) if x.endswith(".heap")]
            self.assertEqual(len(profiles), 1, profiles)
            self.check_png(os.path.join(d, "profile", profiles[0][:-len(".heap")] + ".png"))

    def test_mempool_sampled(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("run", "--profile", "--profile-rate=4096", "--out", d, "--", HEAP_SITES)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("a sample every 4.00 KiB", r.stdout)
            # A sample every 4 KiB on average: every block of 64 KiB and more is
            # in the sample; 400-byte blocks are estimated within a few percent.
            table = profile_table(d)
            self.assertEqual(list(table)[:3], ["big_site", "medium_site", "small_site"])
            self.assertAlmostEqual(in_mib(table["big_site"][0]), 64, delta=64 * 0.02)
            self.assertAlmostEqual(table["big_site"][1], 64, delta=2)
            self.assertAlmostEqual(in_mib(table["medium_site"][0]), 16, delta=16 * 0.02)
            self.assertAlmostEqual(in_mib(table["small_site"][0]), 3.81, delta=3.81 * 0.2)
            self.assertNotIn("freed_site", table)
            pngs = [x for x in os.listdir(os.path.join(d, "profile")) if x.endswith(".png")]
            self.assertTrue(pngs)
            self.check_png(os.path.join(d, "profile", pngs[0]))
            # The heap at its peak (at the end here, but for a freed block or so), its own
            # table and flame graph: the same sites.
            peak = profile_table(d, 1)
            self.assertEqual(list(peak)[:2], ["big_site", "medium_site"])
            self.assertAlmostEqual(in_mib(peak["big_site"][0]), 64, delta=64 * 0.02)
            self.assertIn("at its peak (to within a sixteenth)", r.stdout)
            self.assertTrue(any(x.endswith(".peak.png") for x in pngs), pngs)

    def test_a_failing_command(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("run", "--profile", "--allocators=tcmalloc", "--out", d, "--", "sh", "-c",
                    "exit 3")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("`sh -c 'exit 3'` under tcmalloc: exit status 3", r.stderr)


if __name__ == "__main__":
    TOOL = os.path.abspath(sys.argv[1])
    WORKLOAD = sys.argv[2]
    if len(sys.argv) > 3:
        HEAP_SITES = os.path.abspath(sys.argv[3])
    selected = {"args": Arguments, "command": Command, "profile": Profile,
                "huge_pages": HugePageAllocators, "table": ConsoleTable,
                "linked": LinkedAllocators}.get(WORKLOAD, Workload)
    suite = unittest.TestLoader().loadTestsFromTestCase(selected)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
