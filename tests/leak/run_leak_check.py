#!/usr/bin/env python3
"""The leak check's test: leak_cases, case by case, under a drop-in library with
MEMPOOL_LEAK_CHECK=1, must exit with the expected status and report exactly the expected
leaks (kind, bytes, objects and the function that allocated them); with --lsan, the same
program built with -fsanitize=leak must give LeakSanitizer's same verdict, so that both
follow one convention.

  run_leak_check.py --cases leak_cases --preload libmempool-malloc.so [--lsan leak_cases_lsan]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Each case: the exit status, and the leaks as (kind, bytes, objects, allocating function).
EXPECTED = {
    "none": (0, []),
    "direct": (23, [("Direct", 1024, 1, "leak_direct")]),
    "indirect": (23, [("Direct", 64, 1, "leak_parent_and_child"), ("Indirect", 32, 1, "make_child")]),
    "cycle": (23, [("Indirect", 32, 1, "leak_cycle"), ("Indirect", 32, 1, "leak_cycle")]),
    "many": (23, [("Direct", 4800, 100, "leak_many")]),
    "new": (23, [("Direct", 400, 1, "leak_new_array")]),
    "global": (0, []),
    "thread_local": (0, []),
    "thread_stack": (0, []),
    "thread_tls": (0, []),
    "ended_thread": (23, [("Direct", 512, 1, "thread_leaking")]),
}

LEAK_LINE = re.compile(r"^(Direct|Indirect) leak of (\d+) byte\(s\) in (\d+) object\(s\) allocated from:")
FRAME_LINE = re.compile(r"^\s+#\d+ 0x[0-9a-f]+ in (\S+)")
# Frames of the allocator itself in LeakSanitizer's stacks (mempool's start at the caller).
ALLOCATOR_FRAME = re.compile(r"^(__interceptor_|__interceptor_\w+|malloc|calloc|realloc|operator)")


def parse(report):
    """The leaks of a report, as sorted (kind, bytes, objects, function) tuples."""
    leaks = []
    current = None
    for line in report.splitlines():
        m = LEAK_LINE.match(line)
        if m:
            current = [m.group(1), int(m.group(2)), int(m.group(3)), None]
            leaks.append(current)
            continue
        f = FRAME_LINE.match(line)
        if f and current is not None and current[3] is None:
            name = f.group(1)
            if not ALLOCATOR_FRAME.match(name):
                current[3] = name
    return sorted(tuple(l) for l in leaks)


def run(command, env_extra, case):
    env = dict(os.environ)
    for name in ("MEMPOOL_LEAK_CHECK", "MEMPOOL_LEAK_CHECK_EXITCODE", "LSAN_OPTIONS", "LD_PRELOAD"):
        env.pop(name, None)
    env.update(env_extra)
    p = subprocess.run([command, case], env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


failures = []


def check(label, ok, detail):
    if ok:
        print(f"ok   {label}")
    else:
        print(f"FAIL {label}: {detail}")
        failures.append(label)


def check_case(label, command, env, case, symbolized, flushes=True):
    status, out, err = run(command, env, case)
    want_status, want_leaks = EXPECTED[case]
    leaks = parse(err)
    check(f"{label} {case}: status", status == want_status, f"{status}, expected {want_status}\n{err}")
    check(f"{label} {case}: leaks", leaks == sorted(want_leaks),
          f"{leaks}, expected {sorted(want_leaks)}\n{err}")
    # The program's buffered output is written before the exit with the leak status
    # (LeakSanitizer's exit drops it).
    if flushes or want_status == 0:
        check(f"{label} {case}: stdout", out == f"leak_cases {case}: done\n", repr(out))
    if symbolized and want_leaks:
        check(f"{label} {case}: file:line", "leak_cases.cpp:" in err, err)
    return err


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", required=True)
    parser.add_argument("--preload", action="append", default=[], help="NAME=LIBRARY")
    parser.add_argument("--lsan")
    args = parser.parse_args()
    symbolized = shutil.which("addr2line") is not None
    for item in args.preload:
        name, library = item.split("=", 1)
        env = {"LD_PRELOAD": library, "MEMPOOL_LEAK_CHECK": "1"}
        for case in EXPECTED:
            check_case(name, args.cases, env, case, symbolized)
        # The exit status is the variable's; 0 reports and exits as the program would.
        status, _, err = run(args.cases, dict(env, MEMPOOL_LEAK_CHECK_EXITCODE="7"), "direct")
        check(f"{name} MEMPOOL_LEAK_CHECK_EXITCODE=7", status == 7, f"status {status}")
        status, _, err = run(args.cases, dict(env, MEMPOOL_LEAK_CHECK_EXITCODE="0"), "direct")
        check(f"{name} MEMPOOL_LEAK_CHECK_EXITCODE=0", status == 0 and "Direct leak" in err,
              f"status {status}\n{err}")
        # Suppressions (LeakSanitizer's file format): a matching stack is not reported nor
        # counted for the exit status, and is listed under "Suppressions used".
        with tempfile.NamedTemporaryFile("w", suffix=".supp", delete=False) as f:
            f.write("# known leaks\nleak:leak_dir*t\nleak:^make_child\n")
        try:
            supp = dict(env, MEMPOOL_LEAK_CHECK_SUPPRESSIONS=f.name)
            status, _, err = run(args.cases, supp, "direct")
            check(f"{name} suppressed direct", status == 0 and "Direct leak" not in err
                  and re.search(r"Suppressions used:\n.*\n\s+1\s+1024 leak_dir\*t", err),
                  f"status {status}\n{err}")
            status, _, err = run(args.cases, supp, "indirect")
            check(f"{name} suppressed indirect", status == 23
                  and parse(err) == [("Direct", 64, 1, "leak_parent_and_child")]
                  and re.search(r"\s+1\s+32 \^make_child", err), f"status {status}\n{err}")
        finally:
            os.unlink(f.name)
        # Off, nothing is checked.
        status, _, err = run(args.cases, {"LD_PRELOAD": library}, "direct")
        check(f"{name} off", status == 0 and "leak" not in err, f"status {status}\n{err}")
    if args.lsan:
        for case in EXPECTED:
            check_case("LeakSanitizer", args.lsan, {}, case, False, flushes=False)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
