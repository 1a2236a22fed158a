#!/usr/bin/python3
"""The malloc + free hit path of a malloc library through llvm-mca, per CPU model.

    hit_path_mca.py LIBRARY [LIBRARY ...] [--cpus znver3,sapphirerapids] [--size 64]

For each library (mempool's drop-in, or a peer's: /usr/lib/x86_64-linux-gnu/
libtcmalloc.so.4, ...) takes the code of `malloc` and of `free` from its start to its
first `ret`, with every branch on the way assumed not taken (the hit path of a small
size, laid out as the fall-through by the compilers of every allocator here), and
makes one loop body: malloc(SIZE), the program's one-byte write, free. llvm-mca then
models it on each CPU (issue 27: a pair that is faster than tcmalloc's on AMD Zen 3
and slower on Intel). Printed per library and CPU: instructions, micro-ops and cycles
an iteration, once with llvm-mca's default (loads never wait for stores) and once
with -noalias=false (every load waits for the older stores: a loop bound by its chain
through memory). llvm-mca does not model store-to-load forwarding's latency nor a
segment base in an address, so the second figure is an ordering, not a time.
A function whose hit path ends in a jump to other code (not a `ret`) is reported and
skipped. Needs objdump and llvm-mca (Debian: binutils, llvm-16).
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile

INSTRUCTION = re.compile(r"^\s*[0-9a-f]+:\s+(\S.*?)\s*(#.*)?$")


def hit_path(library, symbol):
    """The fall-through instructions of `symbol` up to its first ret."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", library],
                         check=True, capture_output=True, text=True).stdout
    # A symbol may carry a version (free@@GLIBC_2.2.5) or be an alias printed under
    # another name at the same address: find the address with nm first.
    nm = subprocess.run(["nm", "-D", "--defined-only", library],
                        check=True, capture_output=True, text=True).stdout
    address = None
    for line in nm.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2].split("@")[0] == symbol:
            address = int(fields[0], 16)
    if address is None:
        raise SystemExit(f"{library}: no symbol {symbol}")
    body = []
    started = False
    for line in out.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):", line)
        if not started:
            if m and int(m.group(1), 16) == address:
                started = True
            else:
                continue
        m = INSTRUCTION.match(line)
        if not m:
            continue
        text = m.group(1)
        mnemonic = text.split()[0]
        if mnemonic == "ret":
            return body
        if mnemonic == "jmp":
            return None  # the hit path leaves the function
        if mnemonic.startswith("j"):
            text = mnemonic + " 1f"  # any branch: not taken, to the end
        text = re.sub(r"<[^>]*>", "", text)
        body.append(text)
    return None


def mca(source, cpu, noalias):
    args = ["llvm-mca-16" if shutil.which("llvm-mca-16") else "llvm-mca", f"-mcpu={cpu}",
            "-iterations=200"]
    if not noalias:
        args.append("-noalias=false")
    out = subprocess.run(args + [source], check=True, capture_output=True, text=True).stdout
    figures = {}
    for key, pattern in (("instructions", r"^Instructions:\s+(\d+)"),
                         ("uops", r"^Total uOps:\s+(\d+)"),
                         ("cycles", r"^Total Cycles:\s+(\d+)")):
        figures[key] = int(re.search(pattern, out, re.M).group(1)) / 200
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("libraries", nargs="+")
    parser.add_argument("--cpus", default="znver3,sapphirerapids")
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    print(f"{'library':40} {'cpu':16} {'instr':>6} {'uops':>6} {'cycles':>7} "
          f"{'cycles, loads after stores':>27}")
    for library in args.libraries:
        malloc = hit_path(library, "malloc")
        free = hit_path(library, "free")
        if malloc is None or free is None:
            print(f"{library}: a hit path ends in a jump, not a ret: skipped")
            continue
        lines = [f"mov ${args.size}, %rdi", *malloc, "movb $1, (%rax)", "mov %rax, %rdi",
                 *free, "1:"]
        with tempfile.NamedTemporaryFile("w", suffix=".s") as source:
            source.write("\n".join(lines) + "\n")
            source.flush()
            for cpu in args.cpus.split(","):
                fast = mca(source.name, cpu, True)
                ordered = mca(source.name, cpu, False)
                print(f"{library[-40:]:40} {cpu:16} {fast['instructions']:6.0f} "
                      f"{fast['uops']:6.0f} {fast['cycles']:7.1f} {ordered['cycles']:27.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
