#!/usr/bin/python3
"""heap_compare.py's linked allocators (bench/micro/heap_compare.py).

    heap_compare_test.py HEAP_COMPARE BUILD_BENCH_DIR

1. A quick run of pair16 with mempool preloaded and linked (and the peers' linked
   builds where their archives were found): it succeeds, every row is in the table,
   each linked run's malloc resolved to its own executable, and the linked rows are
   compared with a linked peer, not a preloaded one; the output names the CPU.
2. A build folder whose heap_benchmark_linked is the plain program (glibc's malloc):
   the run must stop, naming the allocator, instead of reporting glibc's times as
   mempool's.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile


def run(script, build, allocators, out):
    return subprocess.run(
        ["/usr/bin/python3", script, "--build", build, "--quick", "--scale", "0.05",
         "--repetitions", "1", "--workloads", "pair16", "--allocators", ",".join(allocators),
         "--no-callgrind", "--out", out],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300, check=False)


def fail(message, proc=None):
    if proc is not None:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
    sys.exit(f"heap_compare_test: {message}")


def main():
    script, build = sys.argv[1], sys.argv[2]
    linked = {"mempool-linked": "heap_benchmark_linked"}
    for peer in ("jemalloc", "tcmalloc"):
        binary = f"heap_benchmark_{peer}_linked"
        if os.access(os.path.join(build, binary), os.X_OK):
            linked[f"{peer}-linked"] = binary
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "heap.json")
        proc = run(script, build, ["glibc", "mempool-malloc"] + list(linked), out)
        if proc.returncode != 0:
            fail(f"exited with {proc.returncode}", proc)
        rows = {line.split("|")[1].strip().split(" (")[0]
                for line in proc.stdout.splitlines() if line.startswith("| ")}
        for name in ["glibc", "mempool-malloc"] + list(linked):
            if name not in rows:
                fail(f"no row for {name} in the pair16 table", proc)
        with open(out, encoding="utf-8") as f:
            results = json.load(f)
        for r in results["runs"]:
            if r["label"] in linked and os.path.basename(r["malloc_from"]) != linked[r["label"]]:
                fail(f"{r['label']}: malloc from {r['malloc_from']}, not its own executable")
        cpu = results["context"].get("cpu", "")
        if not cpu or cpu == "unknown CPU" or f"heap_compare on {cpu}" not in proc.stdout:
            fail(f"the run does not name its CPU (context: {cpu!r})", proc)
        summary = results["summary"]["pair16"]
        med = summary.get("medians", summary)
        mine = med.get("mempool-linked")
        if mine is None:
            fail(f"no mempool-linked in the summary: {sorted(med)}")
        peers = [n for n in linked if n != "mempool-linked"]
        if peers:
            best = min(med[n]["ns_per_op"] for n in peers)
            want = best / mine["ns_per_op"]
            if abs(mine["vs_best_peer"] - want) > 1e-9:
                fail(f"mempool-linked's ratio {mine['vs_best_peer']} is not to the best linked "
                     f"peer ({want})")

        # glibc's malloc under the linked name: caught, not reported as mempool's.
        fake = os.path.join(tmp, "bench")
        os.mkdir(fake)
        shutil.copy(os.path.join(build, "heap_benchmark"), os.path.join(fake, "heap_benchmark"))
        shutil.copy(os.path.join(build, "heap_benchmark"),
                    os.path.join(fake, "heap_benchmark_linked"))
        proc = run(script, fake, ["mempool-linked"], os.path.join(tmp, "fake.json"))
        if proc.returncode == 0:
            fail("a heap_benchmark_linked without mempool's malloc was not caught", proc)
        if "mempool-linked: malloc resolved to" not in proc.stderr:
            fail("the error does not name the allocator and where malloc came from", proc)
    print("heap_compare_test: passed")


if __name__ == "__main__":
    main()
