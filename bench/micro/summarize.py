#!/usr/bin/python3
"""Turns pools_benchmark's JSON into the speedup table, or size_class_benchmark's
into the ratio table of issue 3 (told apart by the file's "benchmark" field).

    summarize.py results/pools.json
    summarize.py results/size_class.json

One table per workload and thread count: the time per iteration of every
allocator, new/delete's time divided by the pool's (the speedup), the target and
PASS or FAIL. Targets: ObjectPool >= 10x single-threaded; ConcurrentFixedPool and
BitmapPool >= 2x single-threaded and >= 1x (never slower) at 2 and 8 threads.
With --benchmark_repetitions the median aggregate is used, else the mean of the
runs. Single-threaded runs are compared on CPU time, threaded ones (UseRealTime)
on wall-clock time. Always exits 0: this is a report; the last line counts the
targets met.

size_class_benchmark: per kind (small: 4, 20, 40 and 80 bytes an iteration;
large: 1024 bytes) and thread count, the median wall time of every allocator over
the repetitions, then new/delete's time divided by SizeClassPool's and
synchronized_pool_resource's divided by SizeClassPool's, each with its target and
PASS or FAIL. Targets: small >= 3x new/delete with 1 thread and > 1x at every
other thread count; large >= 1x new/delete; > 1x synchronized_pool_resource
everywhere. Below it, the spread (min and max of the repetitions) and the median
CPU time over wall time of the child process (a figure well below
min(threads, CPUs) means the machine was busy with something else).
"""

import json
import statistics
import sys

BASELINE = "NewDelete"
FLOOR = "NoAllocatorFloor"  # the loop without an allocator: the best ratio any could reach
ALLOCATORS = [BASELINE, "ObjectPool", "ConcurrentFixedPool", "BitmapPool", FLOOR]
# alloc+free pairs per iteration
WORKLOADS = {"Single": 1, "Bulk": 10_000, "Churn": 100, "ChurnScattered": 100}
# Shown for information, with no target: the targets are for the three above.
INFORMATIONAL = {"ChurnScattered"}
TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def print_targets(passed, total, failed):
    """The last line of a table: how many targets were met, and which were not."""
    print()
    summary = f"targets met: {passed}/{total}"
    if failed:
        summary += "; failed: " + ", ".join(failed)
    print(summary)


def target(workload, allocator, threads):
    """The speedup an allocator must reach, or None if it has no target."""
    if allocator in (BASELINE, FLOOR) or workload in INFORMATIONAL:
        return None
    if threads == 1:
        return 10.0 if allocator == "ObjectPool" else 2.0
    if allocator in ("ConcurrentFixedPool", "BitmapPool"):
        return 1.0
    return None


def parse_name(run_name):
    """'Bulk/ObjectPool/real_time/threads:8' -> ('Bulk', 'ObjectPool', 8 or None)."""
    parts = run_name.split("/")
    threads = None
    for p in parts[2:]:
        if p.startswith("threads:"):
            try:
                threads = int(p.split(":", 1)[1])
            except ValueError:
                pass
    if len(parts) < 2:
        return None, None, threads
    return parts[0], parts[1], threads


def load(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    medians = {}  # (workload, allocator, threads) -> ns per iteration
    runs = {}  # the same key -> [ns per iteration] of plain runs
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        run_name = b.get("run_name") or b.get("name", "")
        workload, allocator, threads = parse_name(run_name)
        if workload is None:
            continue
        threads = int(b.get("threads", threads or 1))
        wall = "/real_time" in run_name or threads > 1
        field = "real_time" if wall else "cpu_time"
        if field not in b:
            continue
        ns = float(b[field]) * TO_NS.get(b.get("time_unit", "ns"), 1.0)
        key = (workload, allocator, threads)
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[key] = ns
        else:
            runs.setdefault(key, []).append(ns)
    times = {k: statistics.mean(v) for k, v in runs.items()}
    times.update(medians)  # the median aggregate wins where there is one
    reps = max((len(v) for v in runs.values()), default=0)
    how = "median of repetitions" if medians else f"mean of {reps} run(s)"
    return data.get("context", {}), times, how


def fmt_time(ns):
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} us"
    return f"{ns:.2f} ns"


SC_BASELINE = "NewDelete"
SC_POOL = "SizeClassPool"
SC_SYNC = "SynchronizedPool"
SC_FLOOR = "NoAllocatorFloor"
SC_ALLOCATORS = [SC_BASELINE, SC_POOL, SC_SYNC, SC_FLOOR]
SC_KINDS = {"small": "4, 20, 40 and 80 bytes", "large": "1024 bytes"}


def size_class_targets(kind, threads):
    """[(column, numerator allocator, target, strict)]: strict means the ratio must exceed it."""
    if kind == "small":
        vs_new = (3.0, False) if threads == 1 else (1.0, True)
    else:
        vs_new = (1.0, False)
    return [("new/delete", SC_BASELINE) + vs_new, ("sync_pool", SC_SYNC, 1.0, True)]


def fmt_ms(ns):
    return f"{ns / 1e6:.1f}" if ns >= 1e7 else f"{ns / 1e6:.2f}"


def summarize_size_class(data):
    context = data.get("context", {})
    runs = data.get("runs", [])
    walls = {}  # (kind, threads, allocator) -> [wall ns]
    cpus = {}  # the same key -> [child CPU ns / wall ns]
    for r in runs:
        key = (r["kind"], int(r["threads"]), r["allocator"])
        walls.setdefault(key, []).append(float(r["wall_ns"]))
        if r.get("cpu_ns") is not None and r["wall_ns"] > 0:
            cpus.setdefault(key, []).append(float(r["cpu_ns"]) / float(r["wall_ns"]))
    median = {k: statistics.median(v) for k, v in walls.items()}

    def load_text(name):
        v = context.get(name)
        return " ".join(f"{x:.2f}" for x in v) if v else "?"

    rounds = context.get("rounds", "?")
    iterations = context.get("iterations", "?")
    reps = context.get("repetitions", "?")
    print(f"{context.get('date', '')}  {context.get('num_cpus', '?')} CPUs  load average: "
          f"{load_text('load_avg_start')} at start, {load_text('load_avg_end')} at end  "
          f"({context.get('seconds', '?')} s)")
    print(f"{rounds} rounds x {iterations} iterations per thread; wall time from the start "
          f"barrier to all threads joined; median of {reps} repetitions, each measurement in "
          f"its own process; glibc {context.get('glibc', '?')}")
    print("ratio = the other allocator's median wall time / SizeClassPool's "
          "(above 1: SizeClassPool is faster)")

    kinds = [k for k in SC_KINDS if any(key[0] == k for key in median)]
    kinds += sorted({key[0] for key in median} - set(kinds))
    names = ["new/delete", "SizeClassPool", "sync_pool", "floor"]
    rows = [(kind, threads) for kind in kinds
            for threads in sorted({key[1] for key in median if key[0] == kind})]
    passed = 0
    total = 0
    failed = []
    print()
    print(f"  {'':<14}  {'median wall time, ms':<47} | {'new/delete / SizeClassPool':<26} "
          f"| sync_pool / SizeClassPool")
    print(f"  {'kind':<5} {'threads':>8}  {names[0]:>10} {names[1]:>13} {names[2]:>10} "
          f"{names[3]:>10} | {'ratio':>8} {'target':>7} {'result':<9} | {'ratio':>8} "
          f"{'target':>7} result")
    for kind, threads in rows:
        cells = []
        for a in SC_ALLOCATORS:
            t = median.get((kind, threads, a))
            cells.append(fmt_ms(t) if t is not None else "-")
        line = (f"  {kind:<5} {threads:>8}  {cells[0]:>10} {cells[1]:>13} {cells[2]:>10} "
                f"{cells[3]:>10} |")
        pool = median.get((kind, threads, SC_POOL))
        for i, (column, other, want, strict) in enumerate(size_class_targets(kind, threads)):
            t = median.get((kind, threads, other))
            want_text = f"{'>' if strict else '>='}{want:g}x"
            ratio_text, result = "-", ""
            if t is not None and pool:
                ratio = t / pool
                ok = ratio > want if strict else ratio >= want
                total += 1
                passed += ok
                ratio_text, result = f"{ratio:.2f}x", "PASS" if ok else "FAIL"
                if not ok:
                    failed.append(f"{kind}/{threads}t vs {column} {ratio:.2f}x (target {want_text})")
            line += f" {ratio_text:>8} {want_text:>7} {result:<9}" + (" |" if i == 0 else "")
        print(line.rstrip())

    if any(kind == "large" for kind, _ in rows):
        print()
        print("  large: SizeClassPool hands requests above 512 bytes to the general heap, so its")
        print("  large runs measure mempool's heap against glibc's new/delete")
    print()
    print("  spread: min..max wall time (ms) over the repetitions, and in brackets the median of the")
    print("  process's CPU time / wall time (near min(threads, CPUs) on an idle machine)")
    print(f"  {'kind':<5} {'threads':>8}  " + " ".join(f"{n:<22}" for n in names).rstrip())
    for kind, threads in rows:
        cells = []
        for a in SC_ALLOCATORS:
            v = walls.get((kind, threads, a))
            c = cpus.get((kind, threads, a))
            text = f"{fmt_ms(min(v))}..{fmt_ms(max(v))}" if v else "-"
            if c:
                text += f" ({statistics.median(c):.2f})"
            cells.append(f"{text:<22}")
        print(f"  {kind:<5} {threads:>8}  " + " ".join(cells).rstrip())

    print_targets(passed, total, failed)
    return 0


def main(argv):
    if len(argv) != 2:
        print("usage: summarize.py POOLS.json | SIZE_CLASS.json", file=sys.stderr)
        return 0
    try:
        with open(argv[1], encoding="utf-8") as f:
            data = json.load(f)
        if isinstance(data, dict) and data.get("benchmark") == "size_class_benchmark":
            return summarize_size_class(data)
        context, times, how = load(argv[1])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"summarize.py: cannot read {argv[1]}: {e}")
        return 0

    cpus = context.get("num_cpus", "?")
    mhz = context.get("mhz_per_cpu", "?")
    load_avg = context.get("load_avg")
    load_text = " ".join(f"{x:.2f}" for x in load_avg) if load_avg else "?"
    print(f"{context.get('date', '')}  {cpus} CPUs @ {mhz} MHz  load average at start: {load_text}")
    if context.get("library_build_type") == "debug":
        print("note: the Google Benchmark library itself reports a debug build "
              "(Debian's package says so; it does not affect the measured code)")
    print(f"times: {how}; single-threaded on CPU time, threaded on wall-clock time "
          "(per iteration of all threads together)")

    workloads = list(WORKLOADS) + sorted({k[0] for k in times} - set(WORKLOADS))
    passed = 0
    total = 0
    failed = []
    for workload in workloads:
        for threads in sorted({k[2] for k in times if k[0] == workload}):
            rows = [a for a in ALLOCATORS if (workload, a, threads) in times]
            rows += sorted({k[1] for k in times if k[0] == workload and k[2] == threads} - set(rows))
            pairs = WORKLOADS.get(workload)
            unit = f"{pairs} alloc+free pair{'s' if pairs != 1 else ''}" if pairs else "?"
            print()
            print(f"{workload} ({unit} per iteration), {threads} thread{'s' if threads > 1 else ''}")
            print(f"  {'allocator':<20} {'time/iter':>11} {'ns/pair':>9} {'speedup':>9} "
                  f"{'target':>7}  result")
            base = times.get((workload, BASELINE, threads))
            for a in rows:
                t = times[(workload, a, threads)]
                per_pair = f"{t / pairs:.2f}" if pairs else "-"
                want = target(workload, a, threads)
                if a == BASELINE or base is None:
                    speedup, want_text, result = "1.00x" if a == BASELINE else "-", "-", ""
                else:
                    ratio = base / t
                    speedup = f"{ratio:.2f}x"
                    want_text = f">={want:g}x" if want is not None else "-"
                    result = ""
                    if want is not None:
                        total += 1
                        if ratio >= want:
                            passed += 1
                            result = "PASS"
                        else:
                            result = "FAIL"
                            failed.append(f"{workload}/{a}/{threads}t {ratio:.2f}x < {want:g}x")
                print(f"  {a:<20} {fmt_time(t):>11} {per_pair:>9} {speedup:>9} {want_text:>7}  "
                      f"{result}")
    print_targets(passed, total, failed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
