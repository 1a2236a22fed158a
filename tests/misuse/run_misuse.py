#!/usr/bin/python3
"""Runs the misuse suite (docs/misuse.md): every case of misuse_cases, each in a process of
its own, under each build (glibc: nothing preloaded; the others: a malloc replacement in
LD_PRELOAD), and classifies what happened:

  stopped: <message>       killed by SIGABRT (or SIGILL, SIGTRAP): the allocator stopped the
                           program; <message> is the last line of stderr, pointers left out
  crashed: <signal>        killed by another signal (SIGSEGV, SIGBUS): nothing stopped it on
                           purpose
  error-return: <what>     the program saw the call refused (NULL, EINVAL, std::bad_alloc)
  undetected               the program reached its end
  hung                     still running after --timeout seconds
  exited: <status, line>   anything else (a broken case: "misuse: setup failed")

Modes:
  (default)      compare with the expectations file (expected.txt): exit 0 when every outcome
                 is the recorded one, 1 otherwise, 77 when no build could be checked (a glibc
                 other than the one recorded, a preload library that is not there)
  --update       record what was seen (the columns of the builds run) in expected.txt, and
                 the tables of docs/misuse.md and README.md from it, for a reviewer to diff
  --table        print a markdown table of what was seen, totals at the bottom
  --check-docs   exit 1 when the tables of docs/misuse.md or README.md are not those of
                 expected.txt, or when expected.txt records a crash or hang of a mempool
                 build that known_limits.txt does not list with its reason (runs nothing)

A crash or hang of a mempool build is never a golden value: the default mode and --check-docs
fail on one unless known_limits.txt lists it (case | build | reason), and on a listed one that
expected.txt no longer records.

  run_misuse.py --cases build/release/tests/misuse_cases \\
      --preload mempool=build/release/libmempool-malloc.so [--preload mempool-hardened=PATH]
      [--build NAME ...] [--update | --table | --check-docs] [--only SUBSTRING] [--repeat N]
"""

import argparse
import concurrent.futures
import os
import platform
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DEFAULT_EXPECTED = HERE / "expected.txt"
# A mempool build's crash or hang is a bug, not an outcome to pin: expected.txt may record
# one only where this file lists it with its reason (docs/misuse.md, "Known limits").
KNOWN_LIMITS = HERE / "known_limits.txt"
UNWANTED = ("crashed", "hung")
# The tables --update writes: between the two marker lines of each file.
DOCS = [(ROOT / "docs" / "misuse.md", "misuse-table"), (ROOT / "README.md", "misuse-summary")]
COLUMNS = ["glibc", "mempool", "mempool-checked", "mempool-hardened"]
CLASSES = ["stopped", "error-return", "crashed", "hung", "exited", "undetected"]
STOP_SIGNALS = {signal.SIGABRT, signal.SIGILL, signal.SIGTRAP}
NOT_RECORDED = "-"
SKIP = 77
GLIBC_LINE = re.compile(r"^# recorded with glibc (\S+)$")
HEADER = """\
# The misuse suite's expected outcomes (docs/misuse.md): a row a case of misuse_cases
# (tests/misuse/*.cpp), a column a build. CTest asserts them: misuse_glibc the glibc column
# (in the release preset, whose misuse_cases it was recorded with), misuse_mempool the mempool
# column (mempool-checked in the checked preset), and misuse_mempool_hardened the
# mempool-hardened column once a mempool_malloc_hardened target exists.
#
# Written by run_misuse.py --update, not by hand. After a change of behaviour, regenerate
# (this file and the tables of docs/misuse.md and README.md) and review the diff: each changed
# row is a change in what a build catches.
#   cmake --build build/release --target misuse_update   # glibc and mempool
#   cmake --build build/checked --target misuse_update   # mempool-checked (cmake --preset checked)
#
# A cell: stopped: <substring of the last line on stderr> | crashed: <signal> |
#   error-return: <what the program saw> | undetected | hung | exited: <status, last line> |
#   - (not recorded)
# The glibc column is checked only under the glibc it was recorded with."""


@dataclass(frozen=True)
class Outcome:
    kind: str
    detail: str = ""

    def cell(self):
        return f"{self.kind}: {self.detail}" if self.detail else self.kind

    @staticmethod
    def parse(cell):
        kind, _, detail = cell.partition(": ")
        return Outcome(kind.strip(), detail.strip())

    def satisfies(self, expected):
        """The recorded outcome is a class and a substring of what was seen."""
        return self.kind == expected.kind and expected.detail in self.detail


@dataclass
class Case:
    name: str
    group: str
    what: str
    out_of_reach: str


def list_cases(binary):
    out = subprocess.run([binary, "--list"], check=True, capture_output=True, text=True).stdout
    return [Case(*line.split("\t")) for line in out.splitlines()]


def glibc_version():
    return platform.libc_ver()[1] or "unknown"


# --- running ----------------------------------------------------------------------------------

# Settings of a build's library. The hardened library shuffles the blocks of each fresh span
# with a secret: where a write out of bounds lands (a live block, a free one, the span below)
# would change from run to run. With a seed the order is the same in every run. It guards
# 1 in 16 spans by default: here every one, so that what its checks catch is certain.
BUILD_ENVIRONMENT = {"mempool-hardened": {"MEMPOOL_HARDENED_SEED": "1",
                                          "MEMPOOL_HARDENED_SAMPLE": "1"}}


def child_environment(preload, aslr=False, build=None):
    """The environment of a case: nothing of the caller's allocator settings, glibc's fatal
    messages on stderr (not the terminal), the build's library preloaded (and its settings);
    MISUSE_ASLR keeps address randomization on (misuse_cases turns it off)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MEMPOOL_", "MALLOC_", "GLIBC_TUNABLES", "LD_PRELOAD", "MISUSE_"))}
    env["LIBC_FATAL_STDERR_"] = "1"
    if preload:
        env["LD_PRELOAD"] = preload
    env.update(BUILD_ENVIRONMENT.get(build, {}))
    if aslr:
        env["MISUSE_ASLR"] = "1"
    return env


def last_line(text):
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def without_pointers(message):
    """A message with its pointers left out, so that it is the same in every run."""
    message = re.sub(r"\s*\(pointer 0x[0-9a-fA-F]+\)", "", message)
    return re.split(r"\s*0x[0-9a-fA-F]+", message)[0].strip()


def classify(returncode, stdout, stderr):
    out = last_line(stdout)
    if returncode < 0:
        sig = signal.Signals(-returncode)
        if sig in STOP_SIGNALS:
            return Outcome("stopped", without_pointers(last_line(stderr)) or "(no message)")
        return Outcome("crashed", sig.name)
    if returncode == 0 and out == "misuse: reached end":
        return Outcome("undetected")
    if returncode == 0 and out.startswith("misuse: error-return: "):
        return Outcome("error-return", out.removeprefix("misuse: error-return: "))
    return Outcome("exited", f"status {returncode}, {out or last_line(stderr) or 'no output'}")


def run_case(binary, case, env, timeout):
    try:
        done = subprocess.run([binary, case], env=env, capture_output=True, text=True,
                              errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome("hung")
    return classify(done.returncode, done.stdout, done.stderr)


def run_build(binary, cases, build, preload, args):
    """{case name: Outcome} of one build; a case that does not do the same in each of its
    --repeat runs is 'unstable', which matches no recorded outcome."""
    env = child_environment(preload, args.aslr, build)
    names = [c.name for c in cases for _ in range(args.repeat)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        seen = list(pool.map(lambda n: run_case(binary, n, env, args.timeout), names))
    results = {}
    for i, c in enumerate(cases):
        runs = set(seen[i * args.repeat:(i + 1) * args.repeat])
        results[c.name] = runs.pop() if len(runs) == 1 else Outcome(
            "unstable", " / ".join(sorted(o.cell() for o in runs)))
    return results


def check_preload(binary, path):
    """A library that cannot be preloaded only makes ld.so print a warning and run the program
    without it, which would pass without testing anything."""
    done = subprocess.run([binary, "--list"], env=child_environment(path), capture_output=True,
                          text=True)
    if done.returncode != 0 or "preloaded" in done.stderr:
        sys.exit(f"run_misuse: {path} cannot be preloaded:\n{done.stderr}")


# --- the expectations file --------------------------------------------------------------------

def read_expected(path):
    """(recorded glibc version, {case: {column: Outcome}})."""
    version, rows, columns = None, {}, None
    if not path.exists():
        return version, rows
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            if match := GLIBC_LINE.match(line):
                version = match.group(1)
            continue
        cells = [c.strip() for c in line.split(" | ")]
        if columns is None:
            columns = cells[1:]
            if columns != COLUMNS:
                sys.exit(f"run_misuse: {path}: columns {columns}, expected {COLUMNS}")
        elif len(cells) != len(columns) + 1:
            sys.exit(f"run_misuse: {path}: {len(cells)} cells in: {line}")
        else:
            rows[cells[0]] = {col: Outcome.parse(cell) for col, cell in zip(columns, cells[1:])}
    return version, rows


def write_expected(path, version, cases, rows):
    table = [["case"] + COLUMNS]
    for c in cases:
        cells = [rows.get(c.name, {}).get(col, Outcome(NOT_RECORDED)).cell() for col in COLUMNS]
        if any(" | " in cell for cell in cells):
            sys.exit(f"run_misuse: {c.name}: a message holds ' | ', which the file cannot hold")
        table.append([c.name] + cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    lines = [HEADER, f"# recorded with glibc {version}"]
    for r in table:
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(r[:-1])] + [r[-1]]
        lines.append(" | ".join(padded).rstrip())
    path.write_text("\n".join(lines) + "\n")


# --- tables -----------------------------------------------------------------------------------

def markdown_cell(outcome):
    if outcome is None or outcome.kind == NOT_RECORDED:
        return "–"
    if outcome.kind == "stopped":
        return f"**stopped**: `{outcome.detail}`"
    return f"{outcome.kind}: `{outcome.detail}`" if outcome.detail else outcome.kind


def counts(outcomes):
    """'12 stopped, 3 crashed' (undetected left out); '–' where nothing was recorded."""
    kinds = [o.kind for o in outcomes if o is not None and o.kind != NOT_RECORDED]
    if not kinds:
        return "–"
    parts = [f"{kinds.count(k)} {k}" for k in CLASSES[:-1] + ["unstable"] if k in kinds]
    return ", ".join(parts) or "none"


def heading(builds):
    return ["| case | " + " | ".join(b.replace("-", " ") for b in builds) + " |",
            "|---" * (len(builds) + 1) + "|"]


def case_table(cases, outcomes, builds):
    """The table of every case, totals at the bottom, and the notes on what no allocator can
    see. outcomes: {build: {case: Outcome}}."""
    lines = heading(builds)
    for c in cases:
        mark = " (†)" if c.out_of_reach else ""
        cells = [markdown_cell(outcomes.get(b, {}).get(c.name)) for b in builds]
        lines.append(f"| `{c.name}`{mark} | " + " | ".join(cells) + " |")
    for kind in CLASSES + ["unstable"]:
        totals = [sum(outcomes[b].get(c.name, Outcome("")).kind == kind for c in cases)
                  if b in outcomes else None for b in builds]
        if any(totals):
            cells = ["" if n is None else str(n) for n in totals]
            lines.append(f"| **{kind}** | " + " | ".join(cells) + " |")
    notes = [f"- `{c.name}`: {c.out_of_reach}." for c in cases if c.out_of_reach]
    if notes:
        lines += ["", "(†) Out of reach by design:", ""] + notes
    return lines


def summary_table(cases, outcomes, builds):
    """A row a group of cases: how many each build stopped (or refused, or crashed on)."""
    groups = list(dict.fromkeys(c.group for c in cases))
    lines = heading(builds)
    lines[0] = lines[0].replace("| case |", "| misuse (cases) |")
    for group in groups + ["all"]:
        members = [c for c in cases if group in ("all", c.group)]
        cells = [counts(outcomes.get(b, {}).get(c.name) for c in members) for b in builds]
        name = f"**{group}**" if group == "all" else group
        lines.append(f"| {name} ({len(members)}) | " + " | ".join(cells) + " |")
    return lines


def replace_block(text, marker, lines):
    begin, end = f"<!-- {marker}: written by run_misuse.py --update -->", f"<!-- /{marker} -->"
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
    if not pattern.search(text):
        sys.exit(f"run_misuse: no '{begin}' ... '{end}' block to write the table into")
    return pattern.sub(lambda _: "\n".join([begin] + lines + [end]), text)


def documents(cases, recorded):
    """{path: text} of the documents with the tables of the recorded outcomes."""
    outcomes = {b: {name: row[b] for name, row in recorded.items()} for b in COLUMNS}
    outcomes = {b: results for b, results in outcomes.items()
                if any(o.kind != NOT_RECORDED for o in results.values())}
    tables = {"misuse-table": case_table(cases, outcomes, COLUMNS),
              "misuse-summary": summary_table(cases, outcomes, COLUMNS)}
    return {path: replace_block(path.read_text(), marker, tables[marker])
            for path, marker in DOCS}


def read_known_limits(path=KNOWN_LIMITS):
    """{(case, build): reason}: the mempool builds' crashes and hangs that are known and
    explained. A line: case | build | reason."""
    limits = {}
    if not path.exists():
        return limits
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        cells = [c.strip() for c in line.split(" | ", 2)]
        if len(cells) != 3 or cells[1] not in COLUMNS[1:] or not cells[2]:
            sys.exit(f"run_misuse: {path}: want 'case | build | reason' (build in "
                     f"{COLUMNS[1:]}): {line}")
        limits[(cells[0], cells[1])] = cells[2]
    return limits


def check_known_limits(cases, expected, limits, builds):
    """Failures: an unexplained crash or hang recorded for a mempool build, and a listed
    limit that the record no longer shows (or whose case is gone)."""
    failures = 0
    names = {c.name for c in cases}
    for c in cases:
        for build in builds:
            want = expected.get(c.name, {}).get(build)
            if build == "glibc" or want is None or want.kind not in UNWANTED:
                continue
            if (c.name, build) not in limits:
                print(f"{build}: {c.name}: {want.cell()} is recorded as expected, but a crash "
                      f"or hang of mempool is a bug: fix it, or list it with its reason in "
                      f"{KNOWN_LIMITS.name}")
                failures += 1
    for (name, build), _ in limits.items():
        if build not in builds:
            continue
        want = expected.get(name, {}).get(build)
        if name not in names or want is None or want.kind not in UNWANTED:
            print(f"{build}: {name}: listed in {KNOWN_LIMITS.name}, but expected.txt records "
                  f"{'no such case' if want is None else want.cell()}: remove the entry")
            failures += 1
    return failures


# --- modes ------------------------------------------------------------------------------------

def check(cases, observed, expected, checkable):
    failures = 0
    limits = read_known_limits()
    for build in checkable:
        bad = 0
        for c in cases:
            want = expected.get(c.name, {}).get(build)
            got = observed[build][c.name]
            if want is None or want.kind == NOT_RECORDED:
                print(f"{build}: {c.name}: nothing recorded (saw {got.cell()}); run --update")
                bad += 1
            elif not got.satisfies(want):
                print(f"{build}: {c.name}: expected {want.cell()}, saw {got.cell()}")
                bad += 1
            elif got.kind in UNWANTED and build != "glibc":
                print(f"{build}: {c.name}: {got.cell()}, a known limit: "
                      f"{limits.get((c.name, build), '(not listed)')}")
        print(f"misuse suite, {build}: {len(cases) - bad} of {len(cases)} cases as recorded")
        failures += bad
    failures += check_known_limits(cases, expected, limits, checkable)
    return failures


def update(args, cases, observed, version, expected):
    if args.only:
        sys.exit("run_misuse: --update records every case: leave out --only")
    for build, results in observed.items():
        for name, outcome in results.items():
            expected.setdefault(name, {})[build] = outcome
    expected = {c.name: expected[c.name] for c in cases if c.name in expected}
    if "glibc" in observed:
        version = glibc_version()
    write_expected(args.expected, version or "unknown", cases, expected)
    for path, text in documents(cases, read_expected(args.expected)[1]).items():
        path.write_text(text)
    print(f"run_misuse: wrote {args.expected} and the tables of " +
          ", ".join(str(path) for path, _ in DOCS))
    unstable = [n for r in observed.values() for n, o in r.items() if o.kind == "unstable"]
    if unstable:
        print(f"run_misuse: unstable (a different outcome from run to run), fix these cases: "
              f"{', '.join(unstable)}")
    return 1 if unstable else 0


def check_docs(cases, expected):
    stale = [path for path, text in documents(cases, expected).items()
             if text != path.read_text()]
    for path in stale:
        print(f"{path}: its misuse table is not that of expected.txt; run --update")
    # Every column, built here or not: no unexplained crash of mempool is recorded.
    unexplained = check_known_limits(cases, expected, read_known_limits(), COLUMNS[1:])
    return 1 if stale or unexplained else 0


def parse_arguments():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", required=True, help="the misuse_cases program")
    parser.add_argument("--preload", action="append", default=[], metavar="BUILD=LIBRARY",
                        help=f"a build's malloc replacement; BUILD one of {COLUMNS[1:]}")
    parser.add_argument("--build", action="append", metavar="BUILD",
                        help="run only these builds (default: glibc and every --preload)")
    parser.add_argument("--expected", type=Path, default=DEFAULT_EXPECTED)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--update", action="store_true", help="record what is seen")
    mode.add_argument("--table", action="store_true", help="print a markdown table")
    mode.add_argument("--check-docs", action="store_true", help="check the documents' tables")
    parser.add_argument("--only", help="only the cases whose name holds this")
    parser.add_argument("--repeat", type=int, help="runs of each case (default 1; 3 to update)")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds a case")
    parser.add_argument("--aslr", action="store_true",
                        help="keep address randomization on (outcomes may then vary)")
    args = parser.parse_args()
    args.repeat = args.repeat or (3 if args.update else 1)
    return args


def builds_to_run(args):
    """[(build, library or None)] in column order. The hardened library, which may not be
    built yet, is skipped when absent (said so); any other must be there."""
    preloads = {"glibc": None}
    for item in args.preload:
        build, _, path = item.partition("=")
        if build not in COLUMNS[1:] or not path:
            sys.exit(f"run_misuse: --preload {item}: want BUILD=LIBRARY, BUILD in {COLUMNS[1:]}")
        preloads[build] = path
    wanted = args.build or list(preloads)
    runs = []
    for build in COLUMNS:
        if build not in wanted:
            continue
        if build not in preloads:
            sys.exit(f"run_misuse: --build {build} needs --preload {build}=LIBRARY")
        path = preloads[build]
        if path is not None and not Path(path).is_file():
            if build != "mempool-hardened":
                sys.exit(f"run_misuse: {build}: no library at {path}")
            print(f"{build}: skipped: no library at {path}")
            continue
        runs.append((build, None if path is None else str(Path(path).resolve())))
    return runs


def main():
    args = parse_arguments()
    binary = str(Path(args.cases).resolve())
    cases = list_cases(binary)
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    version, expected = read_expected(args.expected)
    if args.check_docs:
        return check_docs(cases, expected)

    runs = builds_to_run(args)
    observed = {}
    for build, path in runs:
        if path is not None:
            check_preload(binary, path)
        observed[build] = run_build(binary, cases, build, path, args)

    if args.table:
        print("\n".join(case_table(cases, observed, args.build or COLUMNS)))
        return 0
    if args.update:
        return update(args, cases, observed, version, expected)

    checkable = [b for b in observed if b != "glibc" or version == glibc_version()]
    if "glibc" in observed and "glibc" not in checkable:
        print(f"glibc: not checked: recorded with glibc {version}, this is {glibc_version()}")
    if not checkable:
        return SKIP
    failures = check(cases, observed, expected, checkable)
    if not args.only:
        for name in sorted(set(expected) - {c.name for c in cases}):
            print(f"{name}: recorded, but misuse_cases has no such case; run --update")
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
