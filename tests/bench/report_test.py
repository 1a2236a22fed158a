#!/usr/bin/python3
"""Tests mempool-bench's report (bench/mempool-bench/report/report.py) on
synthetic results.jsonl files with known numbers.

    /usr/bin/python3 tests/bench/report_test.py [path/to/report/report.py] [unittest args]

Runs report.py as a subprocess (through its #!/usr/bin/python3 line when it is
executable, so that it gets Debian's matplotlib) and checks report.md's
numbers, the bold best per row in both senses, the ratio to glibc and to the
best peer, the Skipped section, the PNGs, exit status 2 on bad input, and the
workloads that run programs (apps, run): a primary metric per case, mempool
against the best peer, redis' requests per command, their plots; report.md's
opening (the machine, the summary heat map, the verdict in words, mempool
against the best peer, where it loses), the heat map's shape and rows, and
the console's lines (paths and the headline table, none over 120 characters).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "..", "..", "bench", "mempool-bench", "report", "report.py")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

MACHINE = {"cpu": "Test CPU", "cores": 2, "kernel": "6.1.0", "compiler": "GCC 12.2.0",
           "build_type": "Release", "glibc": "2.36", "libraries": {"jemalloc": "5.3.0"}}
MALLOC_FROM = {"glibc": "/lib/x86_64-linux-gnu/libc.so.6",
               "jemalloc": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
               "mimalloc": "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2",
               "tcmalloc": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
               "mempool": "/build/libmempool-malloc.so"}


def run_line(workload, case, allocator, rep, threads, metric, better, value, **extra):
    """One measured run; extra goes into metrics."""
    metrics = {metric: value, "ops": 1000, "wall_s": 0.25, "cpu_s": 0.5}
    metrics.update(extra)
    return {"schema": 1, "workload": workload, "case": case, "allocator": allocator,
            "label": "test", "repetition": rep, "threads": threads,
            "params": {"size": 64, "threads": threads},
            "primary": {"metric": metric, "better": better}, "metrics": metrics,
            "malloc_from": MALLOC_FROM.get(allocator, MALLOC_FROM["glibc"]),
            "machine": MACHINE}


def latency(p50):
    return {"avg": p50 * 1.2, "p50": p50, "p95": p50 * 2, "p99": p50 * 4,
            "p999": p50 * 20, "max": p50 * 500}


# compare: ns_per_op, lower is better. {case: {allocator: [reps]}}
COMPARE = {
    ("64 B, 1 thread", 1): {"glibc": [10, 50, 30],     # median 30, min 10, max 50
                            "jemalloc": [20, 22, 21],  # 21 -> 30/21 = 1.43x
                            "mempool": [16, 12, 15],   # 15: best -> 2.00x
                            "object-pool": [40, 40, 40]},  # 0.750x
    ("64 B, 2 threads", 2): {"glibc": [61, 60, 62],    # 61
                             "jemalloc": [20, 20, 20],  # best: 3.05x
                             "mempool": [25, 24, 26]},  # 2.44x
}
# throughput: ops_per_s, higher is better (Mops/s in the report).
THROUGHPUT = {1: {"glibc": [1e8, 3e8, 2e8],            # 200 Mops/s
                  "mimalloc": [4e8, 4e8, 4e8],         # best: 2.00x
                  "mempool": [3e8, 3e8, 3e8]},         # 1.50x
              2: {"glibc": [4e8, 4e8, 4e8],
                  "mimalloc": [7e8, 7e8, 7e8],
                  "mempool": [9e8, 8e8, 10e8]},        # best: 900 -> 2.25x
              4: {"glibc": [6e8] * 3, "mimalloc": [12e8] * 3, "mempool": [15e8] * 3}}


def synthetic_runs():
    runs = []
    for (case, threads), allocators in COMPARE.items():
        for allocator, reps in allocators.items():
            for rep, ns in enumerate(reps):
                runs.append(run_line("compare", case, allocator, rep, threads, "ns_per_op",
                                     "lower", ns, ops_per_s=1e9 / ns * threads,
                                     peak_rss_kib=1024 * (rep + 1) * (2 if allocator == "glibc" else 1),
                                     latency_ns=latency(ns + rep)))
    for rep in range(3):  # skipped twice, listed once
        runs.append({"schema": 1, "workload": "compare", "case": "64 B, 2 threads",
                     "allocator": "object-pool", "label": "test", "repetition": rep,
                     "threads": 2, "params": {"size": 64, "threads": 2},
                     "machine": MACHINE, "skipped": "object-pool is single-threaded"})
    for threads, allocators in THROUGHPUT.items():
        for allocator, reps in allocators.items():
            for rep, ops in enumerate(reps):
                runs.append(run_line("throughput", f"mixed sizes, {threads} threads", allocator,
                                     rep, threads, "ops_per_s", "higher", ops,
                                     peak_rss_kib=4096 * threads))
    for allocator, p50 in (("glibc", 100), ("jemalloc", 50), ("mempool", 30)):
        for rep, received in enumerate((900, 1000, 950)):
            runs.append(run_line("queue", "window 64", allocator, rep, 2, "ops_per_s", "higher",
                                 1e6 * p50, sent=1000, dropped=1000 - received, received=received,
                                 enqueue_latency_ns=latency(p50), dequeue_latency_ns=latency(p50 * 3),
                                 unknown_future_metric={"x": 1}))
    return runs

# apps: a primary metric per case. redis: geomean_rps, higher is better; the
# others: wall_s, lower is better. {case: {allocator: ([reps], peak RSS KiB)}}
APPS = {
    "python": {"glibc": ([2.0, 2.2, 1.9], 20480),           # 2.0 s
               "mimalloc": ([1.6, 1.7, 1.65], 30720),       # 1.65: the best peer
               "jemalloc": ([1.8, 1.8, 1.8], 25600),
               "tcmalloc": ([1.7, 1.75, 1.72], 40960),
               "mempool": ([1.5, 1.62, 1.45], 40960)},      # 1.10x mimalloc, overlap
    "redis": {"glibc": ([100e3, 110e3, 90e3], 10240),       # 100,000 requests/s
              "mimalloc": ([120e3, 118e3, 125e3], 12288),   # 120,000
              "jemalloc": ([125e3, 130e3, 128e3], 8192),    # 128,000: the best peer
              "tcmalloc": ([126e3, 127e3, 124e3], 6144),    # 126,000; the lowest RSS
              "mempool": ([140e3, 136e3, 150e3], 7168)},    # 1.09x jemalloc, apart
    "sqlite": {"glibc": ([3.0, 3.1, 2.9], 4096),
               "tcmalloc": ([2.5, 2.6, 2.4], 8192),         # the best peer
               "mempool": ([2.8, 2.9, 2.7], 2048)},         # 0.893x tcmalloc, apart
    "gxx": {"glibc": ([4.0, 4.0, 4.0], 102400),
            "jemalloc": ([3.0, 3.0, 3.0], 102400)},         # no mempool: no ratio
}
# redis' requests/s per command, medians (the repetitions: x 1, 0.9, 1.1).
REDIS_COMMANDS = {
    "get": {"glibc": 100e3, "mimalloc": 110e3, "jemalloc": 120e3, "tcmalloc": 115e3,
            "mempool": 150e3},                              # mempool best, 1.50x glibc
    "set": {"glibc": 90e3, "mimalloc": 95e3, "jemalloc": 130e3, "tcmalloc": 100e3,
            "mempool": 117e3},                              # jemalloc best, 1.30x
    "lpush": {"glibc": 80e3, "mimalloc": 80e3, "jemalloc": 80e3, "tcmalloc": 80e3,
              "mempool": 100e3},                            # 1.25x
}
for _command in ("lpop", "sadd", "hset", "zadd"):
    REDIS_COMMANDS[_command] = dict(REDIS_COMMANDS["lpush"])
RUN_CASE = "sh -c 'ls | wc -l'"
RUN = {"glibc": [0.010, 0.012, 0.011],                     # 11.0 ms
       "jemalloc": [0.009, 0.010, 0.0095],                  # 9.50: the best peer
       "mempool": [0.0095, 0.0098, 0.0090]}                 # 9.50: 1.00x, overlap


def program_line(workload, case, allocator, rep, metric, better, value, rss_kib, **extra):
    """One measured run of a program, as apps and run write it."""
    metrics = {metric: value, "cpu_s": 1.0, "peak_rss_kib": rss_kib}
    metrics.update(extra)
    return {"schema": 1, "workload": workload, "case": case, "allocator": allocator,
            "label": "test", "repetition": rep, "threads": 1,
            "params": {"command": f"/usr/bin/{case} --bench"},
            "primary": {"metric": metric, "better": better}, "metrics": metrics,
            "output_digest": "0123456789abcdef",
            "malloc_from": MALLOC_FROM.get(allocator, MALLOC_FROM["glibc"]), "machine": MACHINE}


def program_runs():
    runs = []
    for case, allocators in APPS.items():
        for allocator, (reps, rss) in allocators.items():
            for rep, value in enumerate(reps):
                if case == "redis":
                    commands = {f"rps_{c}": by[allocator] * (1.0, 0.9, 1.1)[rep]
                                for c, by in REDIS_COMMANDS.items()}
                    runs.append(program_line("apps", case, allocator, rep, "geomean_rps",
                                             "higher", value, rss, server_cpu_s=1.5, **commands))
                else:
                    runs.append(program_line("apps", case, allocator, rep, "wall_s", "lower",
                                             value, rss, wall_s=value))
    for allocator, reps in RUN.items():
        for rep, value in enumerate(reps):
            runs.append(program_line("run", RUN_CASE, allocator, rep, "wall_s", "lower", value,
                                     1024))
    runs.append({"schema": 1, "workload": "apps", "case": "redis", "allocator": "object-pool",
                 "label": "test", "repetition": 0, "machine": MACHINE,
                 "skipped": "object-pool is an in-process API; programs run through malloc"})
    # after apps in the file, before it in the report; mempool-heap is no peer
    for allocator, ns in (("glibc", 400), ("mempool", 200), ("mempool-heap", 100)):
        for rep in range(3):
            runs.append(run_line("bigbuffers", "1 MiB", allocator, rep, 1, "ns_per_op", "lower",
                                 ns, peak_rss_kib=1024))
    return runs


def write_jsonl(directory, lines):
    with open(os.path.join(directory, "results.jsonl"), "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def run_report(directory):
    command = [REPORT] if os.access(REPORT, os.X_OK) else [sys.executable, REPORT]
    return subprocess.run(command + [directory], capture_output=True, text=True, timeout=300)


def section(markdown, title):
    """The text of the "## title" section, up to the next "## " heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    assert match, f"no section {title!r} in report.md"
    return match.group(1)


def tables(text):
    """Every Markdown table in text, as a list of {column: cell} rows."""
    found, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if current is None:
                current = {"header": cells, "rows": []}
            elif not all(re.fullmatch(r"-+:?", c) for c in cells):
                current["rows"].append(dict(zip(current["header"], cells)))
        elif current is not None:
            found.append(current["rows"])
            current = None
    if current is not None:
        found.append(current["rows"])
    return found


def row(table, first_column_value):
    matches = [r for r in table if next(iter(r.values())) == first_column_value]
    assert len(matches) == 1, f"{first_column_value!r}: {len(matches)} rows"
    return matches[0]


def median_in(cell):
    """The first number of a cell ("**15.0** (12.0–16.0) 2.00×" -> 15.0)."""
    return float(re.match(r"\**([\d,.]+)", cell).group(1).replace(",", ""))


def ratio_in(cell):
    match = re.search(r"([\d.]+)×", cell)
    return float(match.group(1)) if match else None


def report_on(cls, runs):
    """Writes `runs` to a fresh folder, runs report.py on it and keeps its
    report.md in cls.md (the folder in cls.tmp, for tearDownClass)."""
    cls.tmp = tempfile.TemporaryDirectory()
    cls.dir = cls.tmp.name
    write_jsonl(cls.dir, runs)
    cls.result = run_report(cls.dir)
    if cls.result.returncode != 0:
        raise AssertionError(f"report.py failed ({cls.result.returncode}):\n"
                             f"{cls.result.stdout}\n{cls.result.stderr}")
    with open(os.path.join(cls.dir, "report.md"), encoding="utf-8") as f:
        cls.md = f.read()


class ReportOnSyntheticData(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        report_on(cls, synthetic_runs())

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def main_table(self, workload):
        return tables(section(self.md, workload))[0]

    def test_header(self):
        self.assertIn("Test CPU", self.md)
        self.assertIn("Repetitions: 3 per case and allocator", self.md)
        for allocator in ("glibc", "jemalloc", "mimalloc", "mempool", "object-pool"):
            self.assertIn(f"- {allocator}", self.md)
        self.assertIn("jemalloc 5.3.0", self.md)

    def test_medians_min_max(self):
        one = row(self.main_table("compare"), "64 B, 1 thread")
        self.assertEqual(median_in(one["glibc"]), 30.0)    # reps 10, 50, 30
        self.assertIn("(10.0–50.0)", one["glibc"])
        self.assertEqual(median_in(one["mempool"]), 15.0)  # reps 16, 12, 15
        self.assertIn("(12.0–16.0)", one["mempool"])
        self.assertEqual(median_in(one["jemalloc"]), 21.0)
        through = row(self.main_table("throughput"), "mixed sizes, 1 threads")
        self.assertEqual(median_in(through["glibc"]), 200.0)  # 1e8, 3e8, 2e8 ops/s in Mops/s

    def test_column_order(self):
        header = list(self.main_table("compare")[0])
        self.assertEqual(header, ["case", "glibc", "jemalloc", "mempool", "object-pool",
                                  "mempool vs best peer"])

    def test_best_peer_column(self):
        # lower is better: jemalloc 21 is the best peer (object-pool's 40 is no peer)
        compare = self.main_table("compare")
        self.assertEqual(row(compare, "64 B, 1 thread")["mempool vs best peer"],
                         "1.40× (jemalloc)")                  # 21 / 15
        self.assertEqual(row(compare, "64 B, 2 threads")["mempool vs best peer"],
                         "0.800× (jemalloc)")                 # 20 / 25
        # higher is better: mimalloc's 400 and 700 Mops/s
        through = self.main_table("throughput")
        self.assertEqual(row(through, "mixed sizes, 1 threads")["mempool vs best peer"],
                         "0.750× (mimalloc)")                 # 300 / 400
        self.assertEqual(row(through, "mixed sizes, 2 threads")["mempool vs best peer"],
                         "1.29× (mimalloc)")                  # 900 / 700
        # glibc is a peer too, and here the best one (1e8 ops/s against jemalloc's 5e7)
        self.assertEqual(row(self.main_table("queue"), "window 64")["mempool vs best peer"],
                         "0.300× (glibc)")
        self.assertIn("mempool vs best peer: mempool's median against the best median of glibc, "
                      "mimalloc, jemalloc and tcmalloc", section(self.md, "compare"))

    def assert_bold_only(self, cells, allocator):
        bold = [a for a, c in cells.items() if a != "case" and c.startswith("**")]
        self.assertEqual(bold, [allocator], cells)

    def test_best_bold_lower_is_better(self):
        table = self.main_table("compare")
        self.assert_bold_only(row(table, "64 B, 1 thread"), "mempool")
        self.assert_bold_only(row(table, "64 B, 2 threads"), "jemalloc")
        self.assertIn("lower is better", section(self.md, "compare"))

    def test_best_bold_higher_is_better(self):
        table = self.main_table("throughput")
        self.assert_bold_only(row(table, "mixed sizes, 1 threads"), "mimalloc")
        self.assert_bold_only(row(table, "mixed sizes, 2 threads"), "mempool")
        text = section(self.md, "throughput")
        self.assertIn("higher is better", text)
        self.assertIn("Mops/s", text)

    def test_ratio_to_glibc_in_the_better_sense(self):
        one = row(self.main_table("compare"), "64 B, 1 thread")
        self.assertAlmostEqual(ratio_in(one["mempool"]), 2.0)       # 30 / 15
        self.assertAlmostEqual(ratio_in(one["object-pool"]), 0.75)  # 30 / 40
        self.assertAlmostEqual(ratio_in(one["jemalloc"]), 1.43)     # 30 / 21
        self.assertIsNone(ratio_in(one["glibc"]))
        through = row(self.main_table("throughput"), "mixed sizes, 1 threads")
        self.assertAlmostEqual(ratio_in(through["mimalloc"]), 2.0)  # 400 / 200
        self.assertAlmostEqual(ratio_in(through["mempool"]), 1.5)   # 300 / 200

    def test_missing_cell(self):
        two = row(self.main_table("compare"), "64 B, 2 threads")
        self.assertEqual(two["object-pool"], "–")  # skipped there

    def test_skipped_listed_once(self):
        skipped = tables(section(self.md, "Skipped"))[0]
        self.assertEqual(skipped, [{"workload": "compare", "case": "64 B, 2 threads",
                                    "allocator": "object-pool",
                                    "reason": "object-pool is single-threaded"}])

    def test_peak_rss(self):
        text = section(self.md, "compare")
        rss = tables(text[text.index("Peak resident memory"):])[0]
        # glibc reps: 2048, 4096, 6144 KiB -> 4.00 MiB; others 1, 2, 3 MiB -> 2.00
        self.assertEqual(row(rss, "64 B, 1 thread")["glibc"], "4.00")
        self.assertEqual(row(rss, "64 B, 1 thread")["mempool"], "2.00")

    def test_latency_table(self):
        text = section(self.md, "compare")
        lat = tables(text[text.index("### Latency"):])[0]
        # mempool case 1: p50 = 16, 13, 17 (ns + rep) -> 16; p99 = 4x -> 64
        self.assertEqual(row(lat, "mempool")["p50"], "16.0")
        self.assertEqual(row(lat, "mempool")["p99"], "64.0")
        queue = section(self.md, "queue")
        lat = tables(queue[queue.index("### Latency"):])[0]
        dequeue = [r for r in lat if r["allocator"] == "jemalloc" and r["operation"] == "dequeue"]
        self.assertEqual(dequeue[0]["p50"], "150")

    def test_queue_counters(self):
        queue = section(self.md, "queue")
        counters = tables(queue[queue.index("### Counters"):])[0]
        glibc = [r for r in counters if r["allocator"] == "glibc"][0]
        self.assertEqual((glibc["sent"], glibc["dropped"], glibc["received"]),
                         ("1,000", "50", "950"))

    def test_pngs(self):
        for name in ("summary", "compare_threads", "throughput_threads", "compare_latency",
                     "queue_latency", "compare_rss", "throughput_rss"):
            path = os.path.join(self.dir, "plots", name + ".png")
            self.assertTrue(os.path.isfile(path), path)
            with open(path, "rb") as f:
                data = f.read()
            self.assertEqual(data[:8], PNG_SIGNATURE, path)
            self.assertGreater(len(data), 1024, path)
            self.assertIn(f"(plots/{name}.png)", self.md)
        # the queue ran at one thread count only: no threads plot
        self.assertFalse(os.path.exists(os.path.join(self.dir, "plots", "queue_threads.png")))

    def test_stdout(self):
        lines = self.result.stdout.splitlines()
        self.assertEqual(lines[0], os.path.join(self.dir, "report.md"))
        self.assertEqual(lines[1], os.path.join(self.dir, "plots", "summary.png"))
        # no real programs: the headline table has every case, workload and all
        self.assertIn("every case", self.result.stdout)
        self.assertRegex(self.result.stdout, r"compare: 64 B, 1 thread +ns_per_op")
        self.assertRegex(self.result.stdout, r"throughput: mixed sizes, 4 threads +ops_per_s")
        self.assertNotIn("|", self.result.stdout)  # the Markdown tables stay in report.md
        self.assertLessEqual(max(map(len, lines)), 120)

    def test_machine_without_family_and_model(self):
        # older records have neither: the model name alone
        self.assertIn("\nMachine: CPU Test CPU; cores 2; kernel 6.1.0; compiler GCC 12.2.0; "
                      "build Release; glibc 2.36.\n", self.md)


def report_module(name):
    """One of report.py's modules, imported from beside it."""
    directory = os.path.dirname(os.path.realpath(REPORT))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return __import__(name)


class ProgramWorkloads(unittest.TestCase):
    """apps and run: a primary metric per case, mempool against the best peer."""

    @classmethod
    def setUpClass(cls):
        report_on(cls, program_runs())

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def table_after(self, workload, title, index=0):
        text = section(self.md, workload)
        return tables(text[text.index(title):])[index]

    def peer_row(self, workload, case):
        return row(self.table_after(workload, "### mempool against the best peer"), case)

    def test_workload_order(self):
        headings = re.findall(r"^## (.+)", self.md, re.M)
        start = headings.index("Runs and allocators") + 1
        self.assertEqual(headings[start:], ["bigbuffers", "apps", "run", "Skipped"])

    def test_apps_main_tables_per_metric(self):
        text = section(self.md, "apps")
        time_table, redis_table = tables(text)[:2]  # in the order of the runs' first cases
        self.assertEqual([r["case"] for r in redis_table], ["redis"])
        self.assertEqual([r["case"] for r in time_table], ["python", "sqlite", "gxx"])
        self.assertIn("**geomean_rps** in requests/s, **higher is better**", text)
        self.assertIn("**wall_s** in s, **lower is better**", text)
        redis = row(redis_table, "redis")
        self.assertEqual(median_in(redis["mempool"]), 140000.0)
        self.assertAlmostEqual(ratio_in(redis["mempool"]), 1.4)         # 140k / 100k
        self.assertEqual(redis["mempool vs best peer"], "1.09× (jemalloc)")  # 140 / 128
        python = row(time_table, "python")
        self.assertAlmostEqual(ratio_in(python["mempool"]), 1.33)       # 2.0 / 1.5
        self.assertEqual(python["mempool vs best peer"], "1.10× (mimalloc)")  # 1.65 / 1.5
        self.assertEqual(row(time_table, "gxx")["mempool vs best peer"], "–")

    def test_apps_best_peer_table(self):
        table = self.table_after("apps", "### mempool against the best peer")
        # one table, the cases in the order they ran, whatever their metric
        self.assertEqual([r["case"] for r in table], ["python", "redis", "sqlite", "gxx"])
        redis = self.peer_row("apps", "redis")
        self.assertEqual(redis["primary metric"], "geomean_rps (requests/s, higher is better)")
        self.assertEqual(redis["mempool"], "140,000 (136,000–150,000)")
        self.assertEqual(redis["best peer"], "jemalloc 128,000 (125,000–130,000)")
        self.assertEqual(redis["mempool vs best peer"], "1.09×")
        python = self.peer_row("apps", "python")
        self.assertEqual(python["primary metric"], "wall_s (s, lower is better)")
        self.assertEqual(python["mempool"], "1.50 (1.45–1.62)")
        self.assertEqual(python["best peer"], "mimalloc 1.65 (1.60–1.70)")
        self.assertEqual(python["mempool vs best peer"], "1.10×")      # 1.65 / 1.5
        sqlite = self.peer_row("apps", "sqlite")
        self.assertEqual(sqlite["best peer"], "tcmalloc 2.50 (2.40–2.60)")
        self.assertEqual(sqlite["mempool vs best peer"], "0.893×")     # 2.5 / 2.8
        gxx = self.peer_row("apps", "gxx")
        self.assertEqual((gxx["mempool"], gxx["best peer"], gxx["mempool vs best peer"]),
                         ("–", "jemalloc 3.00 (3.00–3.00)", "–"))

    def test_spreads_overlap_or_apart(self):
        self.assertEqual(self.peer_row("apps", "redis")["spreads"], "apart")     # 136k > 130k
        self.assertEqual(self.peer_row("apps", "python")["spreads"], "overlap")  # 1.62 >= 1.60
        self.assertEqual(self.peer_row("apps", "sqlite")["spreads"], "apart")    # 2.7 > 2.6
        self.assertEqual(self.peer_row("apps", "gxx")["spreads"], "–")
        self.assertEqual(self.peer_row("run", "sh -c 'ls \\| wc -l'")["spreads"], "overlap")

    def test_peak_rss_against_the_lowest_peer(self):
        # redis: tcmalloc has the lowest peak RSS of the peers, not jemalloc, the fastest
        redis = self.peer_row("apps", "redis")
        self.assertEqual(redis["peak RSS, MiB: mempool vs lowest peer"], "7.00 vs 6.00 (tcmalloc)")
        self.assertEqual(redis["peak RSS ratio"], "0.857×")     # 6 / 7: mempool larger
        sqlite = self.peer_row("apps", "sqlite")
        self.assertEqual(sqlite["peak RSS, MiB: mempool vs lowest peer"], "2.00 vs 4.00 (glibc)")
        self.assertEqual(sqlite["peak RSS ratio"], "2.00×")

    def test_redis_commands_table(self):
        text = section(self.md, "apps")
        self.assertNotIn("Case python:", text[text.index("### Requests per command"):])
        commands = self.table_after("apps", "### Requests per command")
        self.assertEqual([r["command"] for r in commands],
                         ["GET", "SET", "LPUSH", "LPOP", "SADD", "HSET", "ZADD"])
        self.assertEqual(list(commands[0]), ["command", "glibc", "mimalloc", "jemalloc",
                                             "tcmalloc", "mempool", "mempool vs glibc"])
        get, set_ = row(commands, "GET"), row(commands, "SET")
        self.assertEqual(get["glibc"], "100,000")                # 100k x 1, 0.9, 1.1
        self.assertEqual(get["mempool"], "**150,000**")
        self.assertEqual(get["mempool vs glibc"], "1.50×")
        self.assertEqual(set_["jemalloc"], "**130,000**")
        self.assertEqual(set_["mempool"], "117,000")
        self.assertEqual(set_["mempool vs glibc"], "1.30×")
        self.assertEqual(row(commands, "ZADD")["mempool vs glibc"], "1.25×")

    def test_in_process_allocator_is_no_peer(self):
        big = row(tables(section(self.md, "bigbuffers"))[0], "1 MiB")
        self.assertTrue(big["mempool-heap"].startswith("**"))   # the best, but no peer
        self.assertEqual(big["mempool vs best peer"], "2.00× (glibc)")

    def test_run_workload(self):
        text = section(self.md, "run")
        case = "sh -c 'ls \\| wc -l'"
        self.assertIn("**wall_s** in ms, **lower is better**", text)
        self.assertEqual(row(tables(text)[0], case)["mempool vs best peer"], "1.00× (jemalloc)")
        peer = self.peer_row("run", case)
        self.assertEqual(peer["primary metric"], "wall_s (ms, lower is better)")
        self.assertEqual(peer["mempool"], "9.50 (9.00–9.80)")
        self.assertEqual(peer["best peer"], "jemalloc 9.50 (9.00–10.0)")

    def test_program_plots(self):
        for workload, names in (("apps", ("apps_vs_glibc", "apps_rss_vs_glibc")),
                                ("run", ("run_vs_glibc", "run_rss_vs_glibc"))):
            for name in names:
                path = os.path.join(self.dir, "plots", name + ".png")
                self.assertTrue(os.path.isfile(path), path)
                with open(path, "rb") as f:
                    data = f.read()
                self.assertEqual(data[:8], PNG_SIGNATURE, path)
                self.assertGreater(len(data), 1024, path)
                self.assertIn(f"(plots/{name}.png)", section(self.md, workload))
        # bigbuffers is no program workload
        self.assertFalse(os.path.exists(os.path.join(self.dir, "plots", "bigbuffers_vs_glibc.png")))

    def test_plot_values_normalised_to_glibc(self):
        plots, results = report_module("plots"), report_module("results")
        cases = [("python", "lower", {a: results.Stats(reps) for a, (reps, _) in APPS["python"].items()}),
                 ("redis", "higher", {a: results.Stats(reps) for a, (reps, _) in APPS["redis"].items()}),
                 ("no glibc", "lower", {"mempool": results.Stats([1.0])})]
        values, errors = plots.normalised_to_glibc(cases)
        # time inverted: glibc's 2.0 s / mempool's 1.5 s; the error bar from the
        # slowest repetition (1.62 s) to the fastest (1.45 s)
        self.assertAlmostEqual(values[("python", "mempool")], 2.0 / 1.5)
        self.assertEqual(errors[("python", "mempool")], (2.0 / 1.62, 2.0 / 1.45))
        self.assertAlmostEqual(values[("redis", "mempool")], 1.4)
        self.assertEqual(errors[("redis", "mempool")], (1.36, 1.5))
        self.assertEqual(values[("python", "glibc")], 1.0)
        self.assertNotIn(("no glibc", "mempool"), values)


def png_size(path):
    """(width, height) in pixels, from the PNG's IHDR chunk."""
    with open(path, "rb") as f:
        head = f.read(24)
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


# The opening of report.md, on runs whose verdict is known. lower is better
# for ns_per_op and wall_s, higher for geomean_rps. {(workload, case):
# (metric, better, {allocator: [reps]})}
LONG_COMMAND = "/usr/bin/python3 -c '" + "x = [str(i) for i in range(99999)]; " * 8 + "'"
OPENING = {
    ("compare", "loses"): ("ns_per_op", "lower",
                           {"glibc": [20, 21, 22], "jemalloc": [10, 10.2, 10.4],
                            "mempool": [12, 12.5, 13]}),          # 10.2 / 12.5: 0.816x, apart
    ("compare", "noisy"): ("ns_per_op", "lower",
                           {"glibc": [20, 20, 20], "tcmalloc": [9, 10, 12],
                            "mempool": [10, 11, 14]}),            # 10 / 11: 0.909x, overlap
    ("compare", "wins"): ("ns_per_op", "lower",
                          {"glibc": [10, 10, 10], "mempool": [5, 5, 5]}),  # 2.00x
    # no mempool: its best pool against the best of glibc and std-pmr
    ("micro", "pools only"): ("ns_per_op", "lower",
                              {"glibc": [10, 10, 10], "std-pmr": [30, 30, 30],
                               "object-pool": [20, 21, 22], "size-class-pool": [25, 25, 25]}),
    ("apps", "redis"): ("geomean_rps", "higher",
                        {"glibc": [100e3, 100e3, 100e3], "jemalloc": [110e3, 112e3, 114e3],
                         "mempool": [134e3, 135e3, 136e3]}),      # 1.20x jemalloc, apart
    ("run", LONG_COMMAND): ("wall_s", "lower",
                            {"glibc": [1.0, 1.0, 1.0], "mempool": [1.01, 1.0, 0.99]}),
}
# {allocator: peak RSS in KiB} of every run
OPENING_RSS = {"glibc": 4096, "jemalloc": 8192, "tcmalloc": 6144, "mempool": 5120,
               "std-pmr": 4096, "object-pool": 3072, "size-class-pool": 3072}
NEW_MACHINE = dict(MACHINE, cpu="AMD EPYC", cpu_family=25, cpu_model=1, commit="abc1234",
                   date="2026-11-27T04:10:00Z")


def opening_runs():
    runs = []
    for (workload, case), (name, better, allocators) in OPENING.items():
        for allocator, reps in allocators.items():
            for rep, value in enumerate(reps):
                if workload in ("apps", "run"):
                    line = program_line(workload, case, allocator, rep, name, better, value,
                                        OPENING_RSS[allocator])
                else:
                    line = run_line(workload, case, allocator, rep, 1, name, better, value,
                                    peak_rss_kib=OPENING_RSS[allocator])
                line["machine"] = dict(NEW_MACHINE, date=f"2026-11-27T04:1{rep}:00Z")
                runs.append(line)
    return runs


class Opening(unittest.TestCase):
    """report.md opens with the machine, the summary picture, the verdict in
    words, mempool against the best peer, and where it loses; the console
    gets the paths and the headline table."""

    @classmethod
    def setUpClass(cls):
        report_on(cls, opening_runs())

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def verdict(self):
        """The paragraph between the summary picture's caption and the first
        heading after it."""
        opening = self.md.split("\n## ", 1)[0]
        paragraphs = [p for p in opening.split("\n\n") if p.strip()]
        return paragraphs[-1]

    def test_begins_with_the_machine_and_the_summary_picture(self):
        lines = [line for line in self.md.splitlines() if line.strip()]
        self.assertEqual(lines[0], "# mempool-bench report")
        self.assertEqual(lines[1], "Machine: CPU AMD EPYC (family 25, model 1); cores 2; "
                                   "kernel 6.1.0; compiler GCC 12.2.0; build Release; "
                                   "glibc 2.36; commit abc1234; "
                                   "date 2026-11-27T04:10:00Z to 2026-11-27T04:12:00Z.")
        self.assertEqual(lines[2], "![summary.png](plots/summary.png)")

    def test_verdict_counts_and_names_the_losses(self):
        text = self.verdict()
        # level or ahead: wins, redis, the long command (1.00x); of 6
        self.assertIn("ahead of the best peer or within 5% of it in 3 of 6 cases", text)
        self.assertIn("in the real programs, in 2 of 2", text)
        self.assertIn("behind by more than 5% in: compare: loses (0.816× of jemalloc), "
                      "micro: pools only (object-pool 0.476× of glibc).", text)
        self.assertNotIn("wins", text)

    def test_verdict_says_within_the_spread_where_spreads_overlap(self):
        text = self.verdict()
        self.assertRegex(text, r"within the spread[^.]*: compare: noisy \(0\.909× of tcmalloc\)")
        self.assertNotIn("loses (0.816× of jemalloc)", text.split("within the spread")[1])

    def test_verdict_without_spreads_says_so(self):
        one = [r for r in opening_runs() if r["repetition"] == 0]
        with tempfile.TemporaryDirectory() as directory:
            write_jsonl(directory, one)
            self.assertEqual(run_report(directory).returncode, 0)
            with open(os.path.join(directory, "report.md"), encoding="utf-8") as f:
                md = f.read()
        self.assertIn("Each case ran once", md)
        # one run each: single values say nothing of a spread, here or below
        self.assertNotIn("within the spread (its", md)
        self.assertEqual(row(tables(section(md, "Real programs: mempool against the best peer"))[0],
                             "redis")["spreads"], "–")
        text = section(md, "apps")
        peers = tables(text[text.index("### mempool against the best peer"):])[0]
        self.assertEqual(row(peers, "redis")["spreads"], "–")

    def test_headline_table_of_the_real_programs(self):
        table = tables(section(self.md, "Real programs: mempool against the best peer"))[0]
        self.assertEqual([r["case"] for r in table], ["redis", LONG_COMMAND.replace("|", "\\|")])
        redis = row(table, "redis")
        self.assertEqual(redis["metric (unit, better)"], "geomean_rps (requests/s, higher)")
        self.assertEqual(redis["mempool"], "135,000")
        self.assertEqual(redis["best peer"], "jemalloc 112,000")
        self.assertEqual(redis["ratio"], "1.21×")           # 135 / 112
        self.assertEqual(redis["spreads"], "apart")
        self.assertEqual(redis["peak RSS, MiB"], "5.00 vs 8.00")

    def test_other_cases_with_the_pools(self):
        table = tables(section(self.md, "Other cases: mempool against the best peer"))[0]
        self.assertEqual([(r["workload"], r["case"]) for r in table],
                         [("compare", "loses"), ("compare", "noisy"), ("compare", "wins"),
                          ("micro", "pools only")])
        pools = table[3]
        self.assertEqual((pools["mempool"], pools["best peer"], pools["ratio"]),
                         ("object-pool 21.0", "glibc 10.0", "0.476×"))
        noisy = table[1]
        self.assertEqual((noisy["ratio"], noisy["spreads"]), ("0.909×", "overlap"))

    def test_where_mempool_loses(self):
        text = section(self.md, "Where mempool loses")
        items = [line for line in text.splitlines() if line.startswith("- ")]
        # the furthest behind first; "wins" and the level ones are no loss
        self.assertEqual([i.split(":")[0] + ":" + i.split(":")[1] for i in items],
                         ["- micro: pools only", "- compare: loses", "- compare: noisy"])
        self.assertIn("0.816× of jemalloc (ns_per_op 12.5 against 10.2 ns/op", items[1])
        self.assertTrue(items[1].endswith("the spreads lie apart"), items[1])
        self.assertTrue(items[2].endswith("within the spread (the min–max overlap)"), items[2])

    def test_sections_follow_unchanged(self):
        headings = re.findall(r"^## (.+)", self.md, re.M)
        self.assertEqual(headings, ["Real programs: mempool against the best peer",
                                    "Other cases: mempool against the best peer",
                                    "Where mempool loses", "Runs and allocators",
                                    "compare", "micro", "apps", "run"])
        self.assertEqual(row(tables(section(self.md, "compare"))[0], "loses")
                         ["mempool vs best peer"], "0.816× (jemalloc)")

    def test_stdout_fits_a_terminal(self):
        lines = self.result.stdout.splitlines()
        self.assertEqual(lines[:2], [os.path.join(self.dir, "report.md"),
                                     os.path.join(self.dir, "plots", "summary.png")])
        self.assertLessEqual(max(map(len, lines)), 120, self.result.stdout)
        self.assertIn("Real programs: mempool against the best peer", self.result.stdout)
        self.assertRegex(self.result.stdout,
                         r"\nredis +geomean_rps \(requests/s, higher\) +135,000 +"
                         r"jemalloc 112,000 +1\.21× +apart +5\.00 vs 8\.00\n")
        # the long command line, cut to fit
        self.assertRegex(self.result.stdout,
                         r"\n/usr/bin/python3 -c 'x = .*… +wall_s \(s, lower\)")
        # then every other case, after the programs, with its workload
        self.assertIn("Every other case, mempool against the best peer", self.result.stdout)
        self.assertRegex(self.result.stdout,
                         r"\ncompare: loses +ns_per_op \(ns/op, lower\) +12\.5 +jemalloc 10\.2 +"
                         r"0\.816× +apart")
        self.assertLess(self.result.stdout.index("redis "),
                        self.result.stdout.index("compare: noisy"))
        self.assertNotIn("|", self.result.stdout)


class SummaryHeatMap(unittest.TestCase):
    """plots/summary.png: every case against every allocator on one screen."""

    CASES = 60  # at one bar group per case the old summary was 5x taller than wide

    @classmethod
    def setUpClass(cls):
        runs = program_runs()
        for i in range(cls.CASES - 6):  # program_runs has 6 cases
            for allocator, ns in (("glibc", 10 + i), ("jemalloc", 12), ("mempool", 11),
                                  ("object-pool", 9), ("std-pmr", 30)):
                runs.append(run_line("compare", f"{8 * (i + 1)} B, 1 thread", allocator, 0, 1,
                                     "ns_per_op", "lower", ns))
        cls.runs = runs
        report_on(cls, runs)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_at_most_twice_as_tall_as_wide(self):
        width, height = png_size(os.path.join(self.dir, "plots", "summary.png"))
        self.assertLessEqual(height, 2 * width, (width, height))
        self.assertGreater(height, 600)  # a row per case, still readable

    def test_one_row_per_case_programs_first(self):
        results, plots = report_module("results"), report_module("plots")
        measured = [r for r in self.runs if "skipped" not in r]
        rows = results.report_rows(results.primary_rows(measured), measured)
        self.assertEqual(len(rows), self.CASES)
        # then the others in the report's workload order, bigbuffers after compare
        self.assertEqual([r.workload for r in rows[:6]], ["apps"] * 4 + ["run", "compare"])
        self.assertEqual((rows[-1].workload, rows[-1].case), ("bigbuffers", "1 MiB"))
        allocators, grid = plots.summary_grid(rows)
        self.assertEqual(len(grid), self.CASES)
        # the report's fixed column order
        self.assertEqual(allocators, ["glibc", "mimalloc", "jemalloc", "tcmalloc", "mempool",
                                      "mempool-heap", "object-pool", "std-pmr"])

    def test_cells_are_ratios_to_the_best_of_the_row(self):
        results, plots = report_module("results"), report_module("plots")
        measured = [r for r in self.runs if "skipped" not in r]
        rows = results.report_rows(results.primary_rows(measured), measured)
        allocators, grid = plots.summary_grid(rows)
        cells = dict(zip(allocators, grid[0]))  # apps: python, wall_s, lower is better
        self.assertAlmostEqual(cells["mempool"], 1.0)               # 1.5 s, the best
        self.assertAlmostEqual(cells["glibc"], 1.5 / 2.0)
        self.assertIsNone(cells["object-pool"])                     # no run: blank
        redis = dict(zip(allocators, grid[1]))                      # higher is better
        self.assertAlmostEqual(redis["jemalloc"], 128e3 / 140e3)

    def test_report_shows_it_first(self):
        self.assertIn("(plots/summary.png)", self.md.split("\n## ", 1)[0])


# bigheap: lookup_s (lower is better), with the faults and huge pages of each run.
# {allocator: ([lookup_s reps], [minor_faults reps], [anon_huge_kib reps])}
BIGHEAP = {"glibc": ([3.0, 3.2, 3.1], [70000, 71000, 72000], [0, 0, 0]),
           "jemalloc": ([2.9, 2.8, 3.0], [69000, 69000, 69000], [0, 0, 0]),
           "jemalloc-thp": ([2.0, 2.1, 2.2], [900, 800, 1000], [268288, 270336, 272384]),
           "mempool": ([1.9, 1.8, 2.0], [500, 600, 700], [278528, 280576, 282624]),
           "mempool-thp-never": ([2.7, 2.6, 2.8], [68000, 68500, 69000], [0, 0, 0])}
ENV = {"jemalloc-thp": ["MALLOC_CONF=thp:always,metadata_thp:always"],
       "mempool-thp-never": ["MEMPOOL_THP=never"]}


def huge_page_runs():
    runs = []
    for allocator, (times, faults, huge) in BIGHEAP.items():
        for rep, value in enumerate(times):
            line = run_line("bigheap", "3000 k keys, 10 M gets", allocator, rep, 1, "lookup_s",
                            "lower", value, peak_rss_kib=300 * 1024, minor_faults=faults[rep],
                            anon_huge_kib=huge[rep])
            if allocator in ENV:
                line["allocator_env"] = ENV[allocator]
                line["malloc_from"] = MALLOC_FROM[allocator.split("-thp")[0]]
            runs.append(line)
    # a program that exits by itself: its huge pages could not be read (null)
    for allocator in ("glibc", "mempool"):
        runs.append(program_line("apps", "python", allocator, 0, "wall_s", "lower", 1.0, 20480,
                                 minor_faults=5000, anon_huge_kib=None))
    return runs


class FaultsAndHugePages(unittest.TestCase):
    """minor_faults and anon_huge_kib beside peak RSS; the huge-page configurations."""

    @classmethod
    def setUpClass(cls):
        report_on(cls, huge_page_runs())

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def table_after(self, workload, title):
        text = section(self.md, workload)
        self.assertIn(title, text)
        return tables(text[text.index(title):])[0]

    def test_minor_faults_table(self):
        faults = self.table_after("bigheap", "### Minor page faults")
        cells = row(faults, "3000 k keys, 10 M gets")
        self.assertEqual(cells["glibc"], "71,000")
        self.assertEqual(cells["jemalloc-thp"], "900")
        self.assertEqual(cells["mempool"], "600")
        self.assertEqual(cells["mempool-thp-never"], "68,500")

    def test_huge_pages_table_in_mib(self):
        huge = self.table_after("bigheap", "### Huge pages")
        cells = row(huge, "3000 k keys, 10 M gets")
        self.assertEqual(cells["glibc"], "0")
        self.assertEqual(cells["jemalloc-thp"], "264")   # 270,336 KiB
        self.assertEqual(cells["mempool"], "274")        # 280,576 KiB

    def test_tables_beside_peak_rss(self):
        text = section(self.md, "bigheap")
        order = [text.index(t) for t in ("### Peak resident memory", "### Minor page faults",
                                         "### Huge pages")]
        self.assertEqual(order, sorted(order))

    def test_not_read_is_a_dash(self):
        # python exits by itself: faults from wait4, no huge pages (null)
        self.assertEqual(row(self.table_after("apps", "### Minor page faults"),
                             "python")["mempool"], "5,000")
        huge = section(self.md, "apps")
        self.assertNotIn("### Huge pages", huge)  # no run of apps has a number

    def test_column_order_and_environment(self):
        main = tables(section(self.md, "bigheap"))[0]
        self.assertEqual(list(main[0])[1:6],
                         ["glibc", "jemalloc", "mempool", "jemalloc-thp", "mempool-thp-never"])
        self.assertIn("- jemalloc-thp", self.md)
        self.assertIn("`MALLOC_CONF=thp:always,metadata_thp:always`", self.md)
        self.assertIn("`MEMPOOL_THP=never`", self.md)
        # their malloc came from jemalloc and mempool: no warning
        self.assertNotIn("## Warnings", self.md)

    def test_a_configuration_on_the_wrong_library_is_a_warning(self):
        with tempfile.TemporaryDirectory() as directory:
            line = run_line("bigheap", "1 k keys", "mempool-thp-never", 0, 1, "lookup_s",
                            "lower", 1.0, peak_rss_kib=4096)
            line["malloc_from"] = "/build/libmempool-malloc-hardened.so"
            write_jsonl(directory, [line])
            self.assertEqual(run_report(directory).returncode, 0)
            with open(os.path.join(directory, "report.md"), encoding="utf-8") as f:
                self.assertIn("- mempool-thp-never runs took malloc from", f.read())

    def test_huge_pages_without_faults_are_shown_alone(self):
        with tempfile.TemporaryDirectory() as directory:
            runs = [run_line("bigheap", "1 k keys", "glibc", 0, 1, "lookup_s", "lower", 1.0,
                             peak_rss_kib=4096)]
            write_jsonl(directory, runs)
            result = run_report(directory)
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(os.path.join(directory, "report.md"), encoding="utf-8") as f:
                md = f.read()
            # older results have neither: no empty tables
            self.assertIn("### Peak resident memory", md)
            self.assertNotIn("### Minor page faults", md)
            self.assertNotIn("### Huge pages", md)


class BadInput(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def assert_rejected(self, *fragments):
        result = run_report(self.dir)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        for fragment in fragments:
            self.assertIn(fragment, result.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "report.md")))

    def test_malformed_json_names_the_line(self):
        good = synthetic_runs()[:2]
        write_jsonl(self.dir, good + ['{"schema": 1, "workload": '])
        self.assert_rejected("line 3", "not valid JSON")

    def test_missing_primary_value_names_the_line(self):
        runs = synthetic_runs()[:3]
        del runs[1]["metrics"]["ns_per_op"]
        write_jsonl(self.dir, runs)
        self.assert_rejected("line 2", "ns_per_op")

    def test_bad_better(self):
        runs = synthetic_runs()[:1]
        runs[0]["primary"]["better"] = "faster"
        write_jsonl(self.dir, runs)
        self.assert_rejected("line 1", "better")

    def test_not_an_object(self):
        write_jsonl(self.dir, ["[1, 2]"])
        self.assert_rejected("line 1", "object")

    def test_empty_file(self):
        write_jsonl(self.dir, [])
        self.assert_rejected("empty")

    def test_blank_lines_only(self):
        write_jsonl(self.dir, ["", "   "])
        self.assert_rejected("empty")

    def test_missing_file(self):
        self.assert_rejected("results.jsonl")

    def test_missing_directory(self):
        self.dir = os.path.join(self.tmp.name, "nowhere")
        self.assert_rejected("nowhere")


class OnlySkipped(unittest.TestCase):
    def test_only_skipped_runs(self):
        with tempfile.TemporaryDirectory() as directory:
            # the second has no "case": a run skipped before its case was built
            write_jsonl(directory, [{"schema": 1, "workload": "micro", "case": "8 B",
                                     "allocator": "std-pmr", "skipped": "not built"},
                                    {"schema": 1, "workload": "micro", "allocator": "object-pool",
                                     "skipped": "single-threaded"}])
            result = run_report(directory)
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(os.path.join(directory, "report.md"), encoding="utf-8") as f:
                skipped = tables(section(f.read(), "Skipped"))[0]
            self.assertEqual([r["reason"] for r in skipped], ["not built", "single-threaded"])


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        REPORT = os.path.abspath(sys.argv.pop(1))
    unittest.main()
