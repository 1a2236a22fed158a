#!/usr/bin/python3
"""mempool's general heap against glibc malloc, mimalloc, jemalloc and tcmalloc.

    heap_compare.py [--build DIR] [--quick] [--repetitions R] [--scale F]
                    [--workloads a,b] [--allocators a,b] [--out FILE]
                    [--no-callgrind] [--callgrind-pairs K]

Runs BUILD/heap_benchmark (malloc/free: glibc as it is, each peer through
LD_PRELOAD) and BUILD/heap_benchmark_mempool (mempool::allocate/deallocate; the
allocator "mempool-c" runs it with --api c: mp_malloc/mp_free; "mempool-malloc-hardened",
only when named, preloads the hardened drop-in; "mempool-linked", "jemalloc-linked" and
"tcmalloc-linked", only when named, run BUILD/heap_benchmark_linked and
heap_benchmark_<peer>_linked: malloc linked into the program, no preload, compared
with each other), one process per measurement. Repetitions are
interleaved: every workload x every allocator once, then again, R times (default
5; --quick: 3, with a tenth of the operations), so a burst of load elsewhere hits
one repetition of everything rather than every repetition of one allocator. A
peer whose library is not installed is skipped with a note (Debian:
libmimalloc-dev, libjemalloc-dev, libgoogle-perftools-dev), and so is mempool when
heap_benchmark_mempool has not been built. Every run
reports the library `malloc` resolved to; a run of a peer whose LD_PRELOAD did
not take effect stops the script.

Names the CPU (/proc/cpuinfo's model name, family and model), then prints one
Markdown table per workload: median ns per op (one allocate + one
free; with 2 threads, the wall time per op of one thread while both run), the
spread, the ratio to glibc (glibc's time / this time: > 1 is faster), the ratio
to the best peer (the fastest of mimalloc, jemalloc and tcmalloc, same sense),
the median peak resident set (VmHWM) and its ratio to the smallest
peer's (< 1 is smaller), and the process's CPU time over wall time (well below
the thread count means the machine was busy). prodcons adds the resident set at
10%, 50% and the end of the run. Then the issue's targets for mempool, PASS or
FAIL, and the instruction table: instructions per allocate+free pair on the warm
(thread-cache hit) path, counted by valgrind --tool=callgrind (Ir over K pairs,
minus the same loop without an allocator), at 16 and 64 bytes.

Targets (the heap issue's performance section), checked on the medians:
  pair16, pair64     >= 2x glibc, faster than the best peer
  pair4096           >= 5x glibc, faster than the best peer
  mixed-* (1 and 2 threads)  >= 1.5x glibc, no slower than the best peer
  prodcons           throughput >= the best peer's; resident set flat (end at most
                     10% + 256 KiB above the 10% sample)
  every workload     peak resident set <= 1.2x the best (smallest) peer's
  instructions       "well under tcmalloc's", read here as at most 0.75x at 16
                     and at 64 bytes
Writes every raw result to --out (default results/heap.json). Exits non-zero
only when a run fails; missed targets are a report, not an error.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

from instructions import total_ir  # bench/micro/instructions.py: reads a callgrind.out total

LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64", "/usr/lib", "/usr/local/lib"]
# Peer -> (library file names to look for, in order of preference; Debian package).
PEERS = {
    "mimalloc": (["libmimalloc.so.2", "libmimalloc.so"], "libmimalloc-dev"),
    "jemalloc": (["libjemalloc.so.2", "libjemalloc.so"], "libjemalloc-dev"),
    "tcmalloc": (["libtcmalloc_minimal.so.4", "libtcmalloc.so.4"], "libgoogle-perftools-dev"),
}
BASELINE = "glibc"
ALL_ALLOCATORS = [BASELINE, "mimalloc", "jemalloc", "tcmalloc", "mempool", "mempool-c",
                  "mempool-malloc", "mempool-malloc-hardened",
                  "mempool-linked", "jemalloc-linked", "tcmalloc-linked"]
DEFAULT_ALLOCATORS = [BASELINE, "mimalloc", "jemalloc", "tcmalloc", "mempool", "mempool-malloc"]
# mempool-malloc: the drop-in libmempool-malloc.so preloaded into the same binary
# as the peers (from the folder above --build).
MEMPOOL = ("mempool", "mempool-c", "mempool-malloc")
# The drop-ins, from the folder above --build: (file, CMake target). Not by default: the
# hardened one, for its costs; no targets for it.
DROP_INS = {
    "mempool-malloc": ("libmempool-malloc.so", "mempool_malloc"),
    "mempool-malloc-hardened": ("libmempool-malloc-hardened.so", "mempool_malloc_hardened"),
}

# malloc linked into the program instead of preloaded (bench/micro/CMakeLists.txt): a call
# binds to it without a PLT stub, and its thread-locals are at a constant offset from
# the thread pointer. Allocator -> (binary in --build, what builds it). Rows of these are
# compared with the best linked peer: a preloaded peer pays for the stub.
LINKED = {
    "mempool-linked": ("heap_benchmark_linked", "the heap_benchmark_linked target"),
    "jemalloc-linked": ("heap_benchmark_jemalloc_linked",
                        "libjemalloc.a, Debian: apt-get install libjemalloc-dev"),
    "tcmalloc-linked": ("heap_benchmark_tcmalloc_linked",
                        "libtcmalloc_minimal.a, Debian: apt-get install libgoogle-perftools-dev"),
}
LINKED_PEERS = ("jemalloc-linked", "tcmalloc-linked")
# The allocators whose targets are checked.
TARGETED = MEMPOOL + ("mempool-linked",)

# (key, workload argument, threads, ops in a full run)
WORKLOADS = [
    ("pair16", "pair16", 1, 20_000_000),
    ("pair64", "pair64", 1, 20_000_000),
    ("pair4096", "pair4096", 1, 10_000_000),
    ("mixed-immediate/1", "mixed-immediate", 1, 10_000_000),
    ("mixed-immediate/2", "mixed-immediate", 2, 10_000_000),
    ("mixed-window/1", "mixed-window", 1, 10_000_000),
    ("mixed-window/2", "mixed-window", 2, 10_000_000),
    ("prodcons", "prodcons", 2, 5_000_000),
]
DESCRIPTION = {
    "pair16": "allocate 16 bytes, free at once; 1 thread",
    "pair64": "allocate 64 bytes, free at once; 1 thread",
    "pair4096": "allocate 4096 bytes, free at once; 1 thread",
    "mixed-immediate/1": "sizes 8-256 at random, free at once; 1 thread",
    "mixed-immediate/2": "sizes 8-256 at random, free at once; 2 threads, each its own loop",
    "mixed-window/1": "1,024 live blocks, a random one replaced by a random size 8-256; 1 thread",
    "mixed-window/2": "1,024 live blocks per thread, random replacement; 2 threads",
    "prodcons": "64-byte blocks allocated by one thread, freed by another (SPSC ring)",
}
# (min ratio vs glibc, min ratio vs best peer, strictly faster than the best peer)
SPEED_TARGETS = {
    "pair16": (2.0, 1.0, True),
    "pair64": (2.0, 1.0, True),
    "pair4096": (5.0, 1.0, True),
    "mixed-immediate/1": (1.5, 1.0, False),
    "mixed-immediate/2": (1.5, 1.0, False),
    "mixed-window/1": (1.5, 1.0, False),
    "mixed-window/2": (1.5, 1.0, False),
    "prodcons": (None, 1.0, False),
}
RSS_TARGET = 1.2  # peak RSS at most this times the best peer's
FLAT_FACTOR, FLAT_SLACK_KIB = 1.10, 256
INSTRUCTION_TARGET = 0.75  # mempool's Ir/pair at most this times tcmalloc's
CALLGRIND_SIZES = [16, 64]
RUN_TIMEOUT_S = 300


def find_library(names):
    for name in names:
        for d in LIB_DIRS:
            path = os.path.join(d, name)
            if os.path.exists(path):
                return path
    return None


class Allocator:
    def __init__(self, name, binary, preload=None, extra_args=()):
        self.name = name
        self.binary = binary
        self.preload = preload
        self.extra_args = list(extra_args)

    def env(self):
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        if self.preload:
            env["LD_PRELOAD"] = self.preload
        return env

    def check(self, result):
        """Stops the script if the run did not use the allocator it was meant to."""
        lib = os.path.basename(result.get("malloc_from", "?"))
        api = result.get("api")
        if self.preload:
            stem = os.path.basename(self.preload).split(".so")[0]
            ok = lib.startswith(stem + ".so")
        elif self.name in LINKED:
            ok = lib == os.path.basename(self.binary)
        elif self.name in MEMPOOL:
            want = "mp_malloc" if self.name == "mempool-c" else "mempool::allocate"
            ok = api in (want, "none")
        else:
            ok = lib.startswith("libc.so")
        if not ok:
            why = ("the program does not define it" if self.name in LINKED
                   else "the LD_PRELOAD did not take effect")
            raise RuntimeError(f"{self.name}: malloc resolved to {result.get('malloc_from')} "
                               f"(api {api}): {why}")


def discover(build, wanted):
    """The allocators to run, and notes on those skipped."""
    notes = []
    allocators = []
    plain = os.path.join(build, "heap_benchmark")
    mempool_bin = os.path.join(build, "heap_benchmark_mempool")
    if not os.access(plain, os.X_OK):
        raise SystemExit(f"heap_compare.py: {plain} not found; build the heap_benchmark target")
    for name in wanted:
        if name == BASELINE:
            allocators.append(Allocator(name, plain))
        elif name in PEERS:
            names, package = PEERS[name]
            lib = find_library(names)
            if lib is None:
                notes.append(f"{name}: skipped, none of {', '.join(names)} found "
                             f"(Debian: apt-get install {package})")
                continue
            allocators.append(Allocator(name, plain, preload=lib))
        elif name in DROP_INS:
            file, target = DROP_INS[name]
            lib = os.path.normpath(os.path.join(build, "..", file))
            if not os.path.exists(lib):
                notes.append(f"{name}: skipped, {lib} not built (target {target})")
                continue
            allocators.append(Allocator(name, plain, preload=lib))
        elif name in LINKED:
            file, what = LINKED[name]
            binary = os.path.join(build, file)
            if not os.access(binary, os.X_OK):
                notes.append(f"{name}: skipped, {binary} not built (needs {what})")
                continue
            allocators.append(Allocator(name, binary))
        elif name in MEMPOOL:
            if not os.access(mempool_bin, os.X_OK):
                notes.append(f"{name}: skipped, {mempool_bin} not built (the heap does not "
                             "link yet?)")
                continue
            extra = ["--api", "c"] if name == "mempool-c" else []
            allocators.append(Allocator(name, mempool_bin, extra_args=extra))
        else:
            raise SystemExit(f"heap_compare.py: unknown allocator {name!r} "
                             f"(known: {', '.join(ALL_ALLOCATORS)})")
    return allocators, notes


def run_one(alloc, args, timeout=RUN_TIMEOUT_S, wrapper=()):
    cmd = list(wrapper) + [alloc.binary] + args + alloc.extra_args + ["--label", alloc.name]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=alloc.env(), timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{' '.join(cmd)} did not finish in {timeout} s (hung?)") from e
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd)} printed no JSON line")
    result = json.loads(lines[-1])
    alloc.check(result)
    return result


def cpu_name():
    """The CPU as /proc/cpuinfo names it, with its family and model numbers: every
    ratio here belongs to one kind of core (docs/performance.md)."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if not line.strip():
                    break  # the first processor's block
                fields.setdefault(key, value.strip())
    except OSError:
        return "unknown CPU"
    name = fields.get("model name", "unknown CPU")
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def load_average():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def fmt_ratio(x):
    return "-" if x is None else f"{x:.2f}x"


def fmt_ns(ns):
    return f"{ns:.1f}" if ns >= 100 else f"{ns:.2f}"


def fmt_kib(kib):
    return f"{kib / 1024:.2f} MiB"


def median_of(runs, field):
    values = [r[field] for r in runs if field in r]
    return statistics.median(values) if values else None


def summarize_workload(key, by_alloc, names):
    """Medians and ratios of one workload: {allocator: {...}}."""
    med = {}
    for name in names:
        runs = by_alloc.get(name, [])
        if not runs:
            continue
        med[name] = {
            "ns_per_op": median_of(runs, "ns_per_op"),
            "min_ns": min(r["ns_per_op"] for r in runs),
            "max_ns": max(r["ns_per_op"] for r in runs),
            "ops_per_s": median_of(runs, "ops_per_s"),
            "peak_rss_kib": median_of(runs, "peak_rss_kib"),
            "cpu_over_wall": statistics.median(r["cpu_ns"] / r["wall_ns"] for r in runs
                                               if r["wall_ns"] > 0),
            "runs": len(runs),
        }
        if key == "prodcons":
            for f in ("rss_start_kib", "rss_middle_kib", "rss_end_kib"):
                med[name][f] = median_of(runs, f)
            med[name]["flat"] = all(
                r["rss_end_kib"] <= r["rss_start_kib"] * FLAT_FACTOR + FLAT_SLACK_KIB
                for r in runs)
    def best_of(group):
        present = [p for p in group if p in med]
        if not present:
            return None, None
        return (min(present, key=lambda p: med[p]["ns_per_op"]),
                min(present, key=lambda p: med[p]["peak_rss_kib"]))

    best_peer, smallest_peer = best_of(PEERS)
    best_linked, smallest_linked = best_of(LINKED_PEERS)
    base = med.get(BASELINE)
    for name, m in med.items():
        fast, small = (best_linked, smallest_linked) if name in LINKED else (best_peer,
                                                                             smallest_peer)
        m["vs_glibc"] = base["ns_per_op"] / m["ns_per_op"] if base else None
        m["vs_best_peer"] = med[fast]["ns_per_op"] / m["ns_per_op"] if fast else None
        m["rss_vs_best_peer"] = (m["peak_rss_kib"] / med[small]["peak_rss_kib"]
                                 if small else None)
    return med, best_peer, smallest_peer


def print_workload(key, ops, med, best_peer, smallest_peer):
    threads = next(t for k, _, t, _ in WORKLOADS if k == key)
    print()
    count = f"{ops:,} blocks passed" if key == "prodcons" else f"{ops:,} ops per thread"
    print(f"### {key}: {DESCRIPTION[key]} ({count})")
    print()
    prodcons = key == "prodcons"
    head = ["allocator", "ns/op (median)", "min-max", "vs glibc", "vs best peer",
            "peak RSS", "RSS vs best peer"]
    if prodcons:
        head += ["Mops/s", "RSS 10% / 50% / end (KiB)", "flat"]
    head.append("cpu/wall")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    linked = [p for p in LINKED_PEERS if p in med]
    best_linked = min(linked, key=lambda p: med[p]["ns_per_op"]) if linked else None
    for name, m in med.items():
        label = name
        if name == best_peer:
            label += " (best peer)"
        elif name == best_linked:
            label += " (best linked peer)"
        row = [label, fmt_ns(m["ns_per_op"]), f"{fmt_ns(m['min_ns'])}-{fmt_ns(m['max_ns'])}",
               fmt_ratio(m["vs_glibc"]), fmt_ratio(m["vs_best_peer"]),
               fmt_kib(m["peak_rss_kib"]), fmt_ratio(m["rss_vs_best_peer"])]
        if prodcons:
            row += [f"{m['ops_per_s'] / 1e6:.1f}",
                    f"{m['rss_start_kib']:.0f} / {m['rss_middle_kib']:.0f} / "
                    f"{m['rss_end_kib']:.0f}",
                    "yes" if m["flat"] else "NO"]
        row.append(f"{m['cpu_over_wall']:.2f}" + (f" of {threads}" if threads > 1 else ""))
        print("| " + " | ".join(row) + " |")
    if smallest_peer:
        print(f"\nbest peer by time: {best_peer}; by peak RSS: {smallest_peer}")
    if any(n in LINKED for n in med):
        print("rows *-linked: malloc linked into the program; their ratios are to the best "
              "linked peer")


def check_targets(key, med, targets):
    """Appends (description, passed) for every mempool allocator in med."""
    for name in TARGETED:
        m = med.get(name)
        if m is None:
            continue
        vs_glibc, vs_peer, strict = SPEED_TARGETS[key]
        if vs_glibc is not None and m["vs_glibc"] is not None:
            targets.append((f"{name} {key}: {m['vs_glibc']:.2f}x glibc, want >= {vs_glibc:g}x",
                            m["vs_glibc"] >= vs_glibc))
        if m["vs_best_peer"] is not None:
            ok = m["vs_best_peer"] > vs_peer if strict else m["vs_best_peer"] >= vs_peer
            want = "faster than" if strict else "no slower than"
            targets.append((f"{name} {key}: {m['vs_best_peer']:.2f}x the best peer, want {want}",
                            ok))
        if m["rss_vs_best_peer"] is not None:
            targets.append((f"{name} {key}: peak RSS {m['rss_vs_best_peer']:.2f}x the best "
                            f"peer's, want <= {RSS_TARGET:g}x",
                            m["rss_vs_best_peer"] <= RSS_TARGET))
        if key == "prodcons":
            targets.append((f"{name} prodcons: resident set flat (10% "
                            f"{m['rss_start_kib']:.0f} KiB, end {m['rss_end_kib']:.0f} KiB)",
                            m["flat"]))


def callgrind_table(allocators, out_dir, pairs, targets):
    """Instructions per pair under callgrind; returns the raw records."""
    os.makedirs(out_dir, exist_ok=True)
    records = []
    per_pair = {}  # (allocator, size or 'loop') -> Ir per pair, loop included
    libs = {}
    for alloc in allocators:
        cases = [("callgrind-loop", 64)] + [("callgrind-pair", s) for s in CALLGRIND_SIZES]
        for workload, size in cases:
            tag = "loop" if workload == "callgrind-loop" else size
            out = os.path.join(out_dir, f"callgrind.{alloc.name}.{tag}.out")
            wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                       f"--callgrind-out-file={out}"]
            result = run_one(alloc, ["--workload", workload, "--size", str(size), "--ops",
                                     str(pairs)], wrapper=wrapper)
            ir = total_ir(out)
            result["ir"] = ir
            result["ir_per_pair"] = ir / pairs
            records.append(result)
            per_pair[(alloc.name, tag)] = ir / pairs
            if workload == "callgrind-pair":
                libs[alloc.name] = (result["malloc_from"]
                                    if alloc.preload or alloc.name not in MEMPOOL
                                    else f"{os.path.basename(alloc.binary)} ({result['api']})")

    net = {k: v - per_pair[(k[0], "loop")] for k, v in per_pair.items() if k[1] != "loop"}
    print()
    print(f"### Instructions per allocate+free pair (callgrind Ir / {pairs:,} pairs after "
          "1,000 warm-up pairs, minus the same loop without an allocator)")
    print()
    head = ["allocator", "malloc from"] + [f"{s} B" for s in CALLGRIND_SIZES] + \
        [f"vs tcmalloc ({s} B)" for s in CALLGRIND_SIZES] + ["loop alone"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|")
    tc = "tcmalloc" if any(a.name == "tcmalloc" for a in allocators) else None
    for alloc in allocators:
        row = [alloc.name, libs.get(alloc.name, "?")]
        row += [f"{net[(alloc.name, s)]:.1f}" for s in CALLGRIND_SIZES]
        for s in CALLGRIND_SIZES:
            row.append(f"{net[(alloc.name, s)] / net[(tc, s)]:.2f}x" if tc else "-")
        row.append(f"{per_pair[(alloc.name, 'loop')]:.1f}")
        print("| " + " | ".join(row) + " |")
    for r in records:
        if r["workload"] == "callgrind-pair":
            r["ir_per_pair_net"] = net[(r["label"], r["size"])]

    # Sanity: glibc's pair is about a hundred instructions; a count near zero means
    # the loop measured nothing.
    notes = []
    if (BASELINE, 64) in net and not 60 <= net[(BASELINE, 64)] <= 300:
        notes.append(f"glibc at 64 B: {net[(BASELINE, 64)]:.1f} instructions, outside the "
                     "expected 60-300: check the measurement")
    for (name, size), v in net.items():
        if v <= 1:
            notes.append(f"{name} at {size} B: {v:.1f} instructions: nothing was measured?")
    for n in notes:
        print(f"\nwarning: {n}")
    if tc:
        for name in MEMPOOL:
            for s in CALLGRIND_SIZES:
                if (name, s) in net:
                    ratio = net[(name, s)] / net[(tc, s)]
                    targets.append((f"{name} instructions at {s} B: {net[(name, s)]:.1f} = "
                                    f"{ratio:.2f}x tcmalloc's, want <= {INSTRUCTION_TARGET:g}x",
                                    ratio <= INSTRUCTION_TARGET))
    return records


def callgrind_calls_table(allocators, out_dir, ops):
    """Instructions per malloc_usable_size and per realloc call (redis makes both
    on every string it grows): the malloc replacements only, a 100-byte block
    (realloc: to 116 bytes and back), minus the same loop without an allocator."""
    records = []
    print()
    print(f"### Instructions per call (callgrind Ir / {ops:,} calls, 100-byte block, minus the "
          "loop alone)")
    print()
    print("| allocator | malloc_usable_size | realloc (+16 B and back, per call) |")
    print("|---|---:|---:|")
    for alloc in allocators:
        if alloc.name in ("mempool", "mempool-c"):
            continue  # in process: the calls of the malloc replacement are what redis makes
        row = [alloc.name]
        for shape, calls in (("usable", 1), ("realloc", 2)):
            ir = {}
            for suffix in ("", "-loop"):
                workload = f"callgrind-{shape}{suffix}"
                out = os.path.join(out_dir, f"callgrind.{alloc.name}.{shape}{suffix}.out")
                wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                           f"--callgrind-out-file={out}"]
                result = run_one(alloc, ["--workload", workload, "--size", "100", "--ops",
                                         str(ops)], wrapper=wrapper)
                ir[suffix] = total_ir(out)
                result["ir"] = ir[suffix]
                records.append(result)
            per_call = (ir[""] - ir["-loop"]) / (ops * calls)
            records[-2]["ir_per_call_net"] = per_call
            row.append(f"{per_call:.1f}")
        print("| " + " | ".join(row) + " |")
    return records


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--build", default="build/release/bench",
                        help="folder with heap_benchmark and heap_benchmark_mempool")
    parser.add_argument("--quick", action="store_true",
                        help="3 repetitions, a tenth of the operations, fewer callgrind pairs")
    parser.add_argument("--repetitions", type=int, help="default 5 (--quick: 3)")
    parser.add_argument("--scale", type=float, help="multiplies every workload's op count "
                        "(default 1; --quick: 0.1)")
    parser.add_argument("--workloads", help="comma-separated, of: " +
                        ", ".join(k for k, *_ in WORKLOADS))
    parser.add_argument("--allocators", help="comma-separated, of: " + ", ".join(ALL_ALLOCATORS)
                        + f" (default: {', '.join(DEFAULT_ALLOCATORS)})")
    parser.add_argument("--out", default="results/heap.json")
    parser.add_argument("--no-callgrind", action="store_true")
    parser.add_argument("--callgrind-pairs", type=int,
                        help="pairs counted (default 1,000,000; --quick: 100,000)")
    a = parser.parse_args(argv[1:])

    reps = a.repetitions or (3 if a.quick else 5)
    scale = a.scale or (0.1 if a.quick else 1.0)
    pairs = a.callgrind_pairs or (100_000 if a.quick else 1_000_000)
    wanted = a.allocators.split(",") if a.allocators else DEFAULT_ALLOCATORS
    workloads = WORKLOADS
    if a.workloads:
        keys = a.workloads.split(",")
        unknown = set(keys) - {k for k, *_ in WORKLOADS}
        if unknown:
            parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
        workloads = [w for w in WORKLOADS if w[0] in keys]

    allocators, notes = discover(a.build, wanted)
    names = [x.name for x in allocators]
    started = time.monotonic()
    context = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu_name(),
        "num_cpus": os.cpu_count(),
        "load_avg_start": load_average(),
        "quick": a.quick,
        "repetitions": reps,
        "scale": scale,
        "allocators": {x.name: (x.preload or os.path.basename(x.binary)) for x in allocators},
        "notes": notes,
    }
    print(f"heap_compare on {context['cpu']}, {context['num_cpus']} CPUs: {', '.join(names)}; "
          f"{reps} repetitions interleaved, one process per run{' (quick)' if a.quick else ''}; "
          f"load average at start {context['load_avg_start']}")
    for n in notes:
        print(f"note: {n}")

    runs = []
    try:
        for rep in range(reps):
            for key, workload, threads, ops in workloads:
                n = max(1, int(ops * scale))
                for alloc in allocators:
                    args = ["--workload", workload, "--ops", str(n)]
                    if workload.startswith("mixed"):
                        args += ["--threads", str(threads)]
                    result = run_one(alloc, args)
                    result["key"] = key
                    result["repetition"] = rep
                    runs.append(result)
            print(f"  repetition {rep + 1}/{reps} done ({time.monotonic() - started:.0f} s)",
                  flush=True)
    except RuntimeError as e:
        print(f"heap_compare.py: {e}", file=sys.stderr)
        return 1

    context["load_avg_end"] = load_average()
    print(f"load average at end {context['load_avg_end']}"
          + ("; quick mode: short runs, indicative only" if a.quick else ""))
    targets = []
    summary = {}
    for key, _, _, ops in workloads:
        by_alloc = {}
        for r in runs:
            if r["key"] == key:
                by_alloc.setdefault(r["label"], []).append(r)
        med, best_peer, smallest_peer = summarize_workload(key, by_alloc, names)
        summary[key] = {"best_peer": best_peer, "smallest_peer": smallest_peer,
                        "medians": med}
        print_workload(key, max(1, int(ops * scale)), med, best_peer, smallest_peer)
        check_targets(key, med, targets)

    callgrind = []
    if not a.no_callgrind:
        if subprocess.run(["sh", "-c", "command -v valgrind"], stdout=subprocess.DEVNULL,
                          check=False).returncode != 0:
            print("\nnote: valgrind not found (Debian: valgrind): no instruction table")
        else:
            try:
                out_dir = os.path.join(os.path.dirname(a.out) or ".", "heap_callgrind")
                callgrind = callgrind_table(allocators, out_dir, pairs, targets)
                callgrind += callgrind_calls_table(allocators, out_dir, pairs // 10)
            except RuntimeError as e:
                print(f"heap_compare.py: {e}", file=sys.stderr)
                return 1

    context["seconds"] = round(time.monotonic() - started, 1)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"benchmark": "heap_compare", "context": context, "runs": runs,
                   "callgrind": callgrind, "summary": summary,
                   "targets": [{"target": t, "passed": ok} for t, ok in targets]}, f, indent=1)

    print()
    if targets:
        print("### mempool against the issue's targets")
        print()
        for t, ok in targets:
            print(f"- {'PASS' if ok else 'FAIL'}: {t}")
        print()
        print(f"targets met: {sum(ok for _, ok in targets)}/{len(targets)}")
    else:
        print("no mempool run: no targets checked")
    print(f"raw results: {a.out} ({context['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
