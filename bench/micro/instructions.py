#!/usr/bin/python3
"""Instructions per allocate+deallocate pair, counted with valgrind's callgrind.

    instructions.py BUILD/bench/fast_path_instructions OUT_DIR [PAIRS]

Runs fast_path_instructions once per allocator under
`valgrind --tool=callgrind --collect-atstart=no` (the program switches collection
on around PAIRS pairs only), reads the instruction total (Ir) from each
callgrind.out file in OUT_DIR and prints the table: instructions per pair with
the loop included, and net of the empty loop. Then the object sizes that show
NoStats adds no byte. Exits non-zero only if valgrind or the program fails.
"""

import os
import subprocess
import sys

CASES = [  # (argument, label)
    ("loop", "empty loop (subtracted)"),
    ("bare", "bare free list (hand-written)"),
    ("objectpool", "ObjectPool<Obj>"),
    ("objectpool_stats", "ObjectPool<Obj, WithStats>"),
    ("fixedpool", "FixedPool"),
    ("concurrent", "ConcurrentFixedPool"),
    ("bitmap", "BitmapPool"),
    ("newdelete", "new/delete (glibc)"),
    ("heap", "heap, inline (constant size)"),
    ("heap_var", "heap, size not constant"),
    ("heap_c", "heap, mp_malloc/mp_free"),
]


def total_ir(path):
    summary = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("totals:"):
                return int(line.split()[1])
            if line.startswith("summary:"):
                summary = int(line.split()[1])
    if summary is None:
        raise ValueError(f"no totals or summary line in {path}")
    return summary


def run_case(binary, out_dir, case, pairs):
    out = os.path.join(out_dir, f"callgrind.{case}.out")
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
           f"--callgrind-out-file={out}", binary, case, str(pairs)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}")
    return total_ir(out) / pairs


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    binary, out_dir = argv[1], argv[2]
    pairs = int(argv[3]) if len(argv) == 4 else 1_000_000
    os.makedirs(out_dir, exist_ok=True)

    per_pair = {}
    for case, _ in CASES:
        per_pair[case] = run_case(binary, out_dir, case, pairs)

    loop = per_pair["loop"]
    bare = per_pair["bare"] - loop
    print(f"instructions per allocate+deallocate pair (callgrind Ir, {pairs:,} pairs "
          "after a warm-up; 'net' = minus the empty loop)")
    print(f"  {'allocator':<32} {'with loop':>10} {'net':>8} {'vs bare list':>13}")
    for case, label in CASES:
        raw = per_pair[case]
        if case == "loop":
            print(f"  {label:<32} {raw:>10.2f} {'':>8} {'':>13}")
            continue
        net = raw - loop
        vs = f"{net - bare:+.2f}" if case != "bare" else ""
        print(f"  {label:<32} {raw:>10.2f} {net:>8.2f} {vs:>13}")

    same = abs(per_pair["objectpool"] - per_pair["bare"]) < 0.01
    print(f"ObjectPool<Obj> (NoStats) vs the bare free list: "
          f"{'the same' if same else 'DIFFERENT'} instruction count "
          f"({per_pair['objectpool'] - loop:.2f} vs {bare:.2f} net)")

    sizes = subprocess.run([binary, "sizes"], stdout=subprocess.PIPE, text=True, check=True)
    print(sizes.stdout.rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
