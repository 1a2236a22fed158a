#!/usr/bin/python3
"""Tests bench/report.py on synthetic results.jsonl files with known numbers.

    /usr/bin/python3 tests/bench/report_test.py [path/to/bench/report.py] [unittest args]

Runs report.py as a subprocess (through its #!/usr/bin/python3 line when it is
executable, so that it gets Debian's matplotlib) and checks report.md's
numbers, the bold best per row in both senses, the ratio to glibc, the
Skipped section, the PNGs, and exit status 2 on bad input.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "..", "..", "bench", "report.py")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

MACHINE = {"cpu": "Test CPU", "cores": 2, "kernel": "6.1.0", "compiler": "GCC 12.2.0",
           "build_type": "Release", "glibc": "2.36", "libraries": {"jemalloc": "5.3.0"}}
MALLOC_FROM = {"glibc": "/lib/x86_64-linux-gnu/libc.so.6",
               "jemalloc": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
               "mimalloc": "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2",
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


class ReportOnSyntheticData(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        write_jsonl(cls.dir, synthetic_runs())
        cls.result = run_report(cls.dir)
        if cls.result.returncode != 0:
            raise AssertionError(f"report.py failed ({cls.result.returncode}):\n"
                                 f"{cls.result.stdout}\n{cls.result.stderr}")
        with open(os.path.join(cls.dir, "report.md"), encoding="utf-8") as f:
            cls.md = f.read()

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
        self.assertEqual(header, ["case", "glibc", "jemalloc", "mempool", "object-pool"])

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
        self.assertIn("| 64 B, 1 thread |", self.result.stdout)
        self.assertIn("| mixed sizes, 4 threads |", self.result.stdout)


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
