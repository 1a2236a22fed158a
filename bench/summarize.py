#!/usr/bin/python3
"""Turns pools_benchmark's JSON into the speedup table.

    summarize.py results/pools.json

One table per workload and thread count: the time per iteration of every
allocator, new/delete's time divided by the pool's (the speedup), the target and
PASS or FAIL. Targets: ObjectPool >= 10x single-threaded; ConcurrentFixedPool and
BitmapPool >= 2x single-threaded and >= 1x (never slower) at 2 and 8 threads.
With --benchmark_repetitions the median aggregate is used, else the mean of the
runs. Single-threaded runs are compared on CPU time, threaded ones (UseRealTime)
on wall-clock time. Always exits 0: this is a report; the last line counts the
targets met.
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


def main(argv):
    if len(argv) != 2:
        print("usage: summarize.py POOLS.json", file=sys.stderr)
        return 0
    try:
        context, times, how = load(argv[1])
    except (OSError, ValueError) as e:
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
    print()
    summary = f"targets met: {passed}/{total}"
    if failed:
        summary += "; failed: " + ", ".join(failed)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
