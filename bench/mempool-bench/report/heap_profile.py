#!/usr/bin/python3
"""A heap profile by call site: the table of the top sites and a flame graph.

    heap_profile.py DIR [--command TEXT] [--allocator NAME] [--rate BYTES] [--top N]

Reads every heap profile DIR/*.heap: the gperftools heap-profile text format,
which mempool's profiler and tcmalloc's write at exit, one file per process of
the command (`mempool-bench run --profile -- CMD` writes them); mempool's
writes the heap at its peak beside each, NAME.peak.heap. Symbolizes each
with google-pprof (--collapsed: a line per stack, its frames from the root to
the function that called the allocator, then its in-use bytes; once more with
--inuse_objects for its objects) and writes:

  DIR/profile.md       per process, the top call sites by in-use bytes: the
                       function that called malloc or new, its bytes, their
                       share of the process's, its objects and its caller
  DIR/<profile>.png    per process with bytes in use, a flame graph of them by
                       stack (the root at the bottom, a frame as wide as the
                       bytes allocated under it and still in use)
  DIR/<profile>.peak.png  the same for the heap at its peak, where there is a
                       peak profile (and profile.md its table too)

and prints the table of the process with the most bytes in use, a line for
each other process, and where the files are.

Exit status: 0 on success; 1 when google-pprof is missing (Debian:
google-perftools; the raw profiles are kept) or google-pprof failed, or when
matplotlib is (profile.md is written, without flame graphs); 2 for bad input
(no profile in DIR, or a file that is not a heap profile).
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

# The modules beside this script, wherever it is run from.
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from formatting import bytes_text, cut, escape, md_table, percent_text  # noqa: E402
from plots import import_pyplot, matplotlib_missing  # noqa: E402
from profile_plot import draw_flame_graph  # noqa: E402

PPROF = "google-pprof"
PEAK_SUFFIX = ".peak.heap"
PPROF_PACKAGE = "google-perftools"
TOP = 15
CONSOLE_WIDTH = 120
MAX_OTHER_PROCESSES = 10
HEADER = re.compile(r"^heap profile:\s*(\d+):\s*(\d+)\s*\[\s*(\d+):\s*(\d+)\s*\]\s*@\s*(\S*)")
# The allocator's own frames at the leaf end of a stack, left there when
# google-pprof does not know them (it drops malloc, operator new and the frames
# under them): mempool's C API and heap, tcmalloc's.
ALLOCATOR_FRAME = re.compile(r"^(mp_\w+|mempool::.*|tc_\w+|tcmalloc::.*|malloc|calloc|realloc|"
                             r"free|memalign|posix_memalign|aligned_alloc|valloc|pvalloc|"
                             r"reallocarray|operator new(\[\])?|operator delete(\[\])?)$")
# Library frames that "called from" looks past, to the code that used the library.
LIBRARY_FRAME = re.compile(r"^(std::|__gnu_cxx::|__cxxabiv1::)")
OPERATOR = re.compile(r"operator(\s+(new|delete)(\[\])?|<=>|<<=|>>=|<<|>>|<=|>=|->\*|->|\(\)|\[\]"
                      r"|[-+*/%^&|~!=<>,]=?|\s+[\w:]+[*&]*)?")


class InputError(Exception):
    """Bad input: reported in one line, exit status 2."""


class PprofError(Exception):
    """google-pprof missing or failing: reported, exit status 1."""


# ---------------------------------------------------------------- names

def short_name(name):
    """A frame as pprof --collapsed gives it, made short as pprof --text shows
    it: without its address ("main<00000000000012ed>"), "[inline]", template
    arguments, parameters and return type.
    "void std::vector<int>::_M_realloc_insert<int>(...)[inline]" ->
    "std::vector::_M_realloc_insert"."""
    name = re.sub(r"<[0-9a-f]{8,}>$", "", name.replace("[inline]", "")).strip()
    name = name.replace("(anonymous namespace)", "{anonymous}")
    out, depth, i = [], 0, 0
    while i < len(name):
        at_word = i == 0 or not (name[i - 1].isalnum() or name[i - 1] == "_")
        if depth == 0 and at_word and name.startswith("operator", i):
            m = OPERATOR.match(name, i)
            out.append(m.group(0))
            i = m.end()
            continue
        c = name[i]
        if c in "<(":
            depth += 1
        elif c in ">)" and depth > 0:
            depth -= 1
        elif depth == 0:
            out.append(c)
        i += 1
    text = re.sub(r"(\s+(const|volatile|&&|&))+$", "", "".join(out).strip())
    # the return type: what stands before the last word (before "operator"
    # for an operator, whose name has spaces of its own)
    at = re.search(r"\boperator\b", text)
    if at:
        return text[:at.start()].split(" ")[-1] + text[at.start():]
    return text.split(" ")[-1] or name


def without_allocator(frames):
    """The frames (root first) without the allocator's at the leaf end."""
    end = len(frames)
    while end > 1 and ALLOCATOR_FRAME.match(frames[end - 1]):
        end -= 1
    return frames[:end]


def parse_collapsed(text):
    """{(frame, ...) root first, shortened: value} from pprof --collapsed's
    lines "f1;f2;f3 VALUE" (a frame may hold spaces), stacks that shorten to
    the same summed."""
    stacks = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        stack, _, value = line.rpartition(" ")
        if not stack or not re.fullmatch(r"-?\d+", value):
            raise PprofError(f"google-pprof --collapsed printed a line it should not: {line!r}")
        frames = without_allocator(tuple(short_name(f) for f in stack.split(";")))
        stacks[frames] = stacks.get(frames, 0) + int(value)
    return stacks


# ---------------------------------------------------------------- profiles

class Profile:
    """One process's heap profile: its file, program, and stacks
    {(frame, ...): [bytes, objects]} of what was in use."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.splitext(os.path.basename(path))[0]
        self.program = None
        self.stacks = {}
        self.peak = None  # the peak profile beside it (NAME.peak.heap), if any
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                header = f.readline()
                maps = False
                for line in f:
                    if line.startswith("MAPPED_LIBRARIES:"):
                        maps = True
                    elif maps and self.program is None:
                        self.program = mapped_file(line)
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror}") from None
        if not HEADER.match(header):
            raise InputError(f"{path}: not a heap profile (its first line is {header.strip()!r})")

    @property
    def bytes(self):
        return sum(b for b, _ in self.stacks.values())

    @property
    def objects(self):
        return sum(n for _, n in self.stacks.values())

    def in_use(self):
        """{(frame, ...): bytes}"""
        return {s: b for s, (b, _) in self.stacks.items()}

    def set_stacks(self, in_bytes, in_objects):
        """The stacks with bytes in use, from pprof's two collapsed outputs."""
        self.stacks = {s: [b, in_objects.get(s, 0)] for s, b in in_bytes.items() if b > 0}


def mapped_file(line):
    """The file of a /proc/PID/maps line, None for an anonymous mapping."""
    fields = line.split(None, 5)
    if len(fields) == 6 and fields[5].startswith("/"):
        return fields[5].strip()
    return None


def find_profiles(directory):
    """The profiles at exit, each with its peak profile (NAME.peak.heap) as .peak
    where there is one."""
    if not os.path.isdir(directory):
        raise InputError(f"{directory}: no such directory")
    paths = sorted(glob.glob(os.path.join(directory, "*.heap")))
    peaks = {p[:-len(PEAK_SUFFIX)]: p for p in paths if p.endswith(PEAK_SUFFIX)}
    profiles = [Profile(p) for p in paths
                if not p.endswith(PEAK_SUFFIX) or p[:-len(PEAK_SUFFIX)] + ".heap" not in paths]
    if not profiles:
        raise InputError(f"{directory}: no heap profile (*.heap) in it")
    for p in profiles:
        stem = p.path[:-len(".heap")]
        if p.path.endswith(".heap") and stem in peaks:
            p.peak = Profile(peaks[stem])
    return profiles


def with_peaks(profiles):
    """The profiles and their peak profiles, in one list."""
    return [q for p in profiles for q in (p, p.peak) if q is not None]


def pprof_path():
    found = shutil.which(PPROF)
    if found is None:
        raise PprofError(f"{PPROF} is missing: the profiles cannot be symbolized "
                         f"(Debian: apt-get install {PPROF_PACKAGE})")
    return found


def symbolize(pprof, profiles):
    """Each profile's stacks, from two runs of pprof --collapsed at a time
    (in-use bytes and objects); they read the program and its libraries."""
    for p in profiles:
        program = p.program if p.program and os.path.exists(p.program) else "/dev/null"
        runs = {what: subprocess.Popen([pprof, "--collapsed", f"--inuse_{what}", program, p.path],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for what in ("space", "objects")}
        outputs = {what: run.communicate() for what, run in runs.items()}
        for what, run in runs.items():
            if run.returncode != 0:
                said = [x for x in outputs[what][1].splitlines()
                        if not x.startswith("Using local file")]
                raise PprofError(f"{PPROF} failed on {p.path} (exit status {run.returncode})"
                                 + (f": {said[-1]}" if said else ""))
        p.set_stacks(parse_collapsed(outputs["space"][0]), parse_collapsed(outputs["objects"][0]))


# ---------------------------------------------------------------- sites

def caller_of(frames):
    """Where the site (the last frame) was called from: the nearest frame
    above it that is neither the site again nor the standard library's, so a
    vector's growth names the code that grew it ("" at the root)."""
    site = frames[-1]
    for frame in reversed(frames[:-1]):
        if frame != site and not LIBRARY_FRAME.match(frame):
            return frame
    return frames[-2] if len(frames) > 1 else ""


def top_sites(profile, count):
    """The `count` call sites with the most bytes in use: dicts of site,
    bytes, objects, share (of the process's bytes) and caller (the one under
    which it holds the most, "+N" for the others)."""
    sites = {}
    for frames, (b, n) in profile.stacks.items():
        s = sites.setdefault(frames[-1], {"site": frames[-1], "bytes": 0, "objects": 0,
                                          "callers": {}})
        s["bytes"] += b
        s["objects"] += n
        caller = caller_of(frames)
        s["callers"][caller] = s["callers"].get(caller, 0) + b
    total = profile.bytes
    ranked = sorted(sites.values(), key=lambda s: (-s["bytes"], s["site"]))[:count]
    for s in ranked:
        s["share"] = s["bytes"] / total if total else 0.0
        callers = sorted(s.pop("callers").items(), key=lambda c: (-c[1], c[0]))
        s["caller"] = callers[0][0] + (f" (+{len(callers) - 1})" if len(callers) > 1 else "")
    return ranked


def console_table(sites):
    """The top sites, each line at most CONSOLE_WIDTH characters."""
    numbers = "{:>3}  {:>10}  {:>6}  {:>11}  "
    room = CONSOLE_WIDTH - len(numbers.format("", "", "", ""))
    site_width = min(max([len("site")] + [len(s["site"]) for s in sites]), room * 3 // 5)
    lines = [(numbers.format("#", "in use", "%", "objects") +
              f"{'site':<{site_width}}  called from").rstrip()]
    for rank, s in enumerate(sites, 1):
        line = numbers.format(rank, bytes_text(s["bytes"]), percent_text(s["share"]),
                              f"{s['objects']:,}")
        line += f"{cut(s['site'], site_width):<{site_width}}  {s['caller']}"
        lines.append(cut(line.rstrip(), CONSOLE_WIDTH))
    return lines


def markdown_table(sites):
    rows = [[str(rank), f"`{escape(s['site'])}`", f"`{escape(s['caller'])}`" if s["caller"] else "",
             bytes_text(s["bytes"]), percent_text(s["share"]), f"{s['objects']:,}"]
            for rank, s in enumerate(sites, 1)]
    return md_table(["#", "site", "called from", "in use", "%", "objects"], rows, text_columns=3)


# ---------------------------------------------------------------- output

def how_sampled(allocator, rate):
    """Whose profiler, and how it sampled (rate 0: it records every allocation)."""
    what = f"{allocator}'s heap profiler" if allocator else "the heap profiler"
    if not rate:
        return f"{what}, which records every allocation"
    return f"{what}, a sample every {bytes_text(rate)} allocated on average (estimates)"


def process_title(p):
    return (f"{p.name}: {p.program or 'an unknown program'}, {bytes_text(p.bytes)} in use "
            f"in {p.objects:,} objects")


def peak_title(p):
    return (f"at its peak (to within a sixteenth): {bytes_text(p.peak.bytes)} in use "
            f"in {p.peak.objects:,} objects")


def write_markdown(path, profiles, command, allocator, rate, top, images):
    lines = [f"# Heap profile of `{escape(command)}`" if command else "# Heap profile", "",
             "What each process held at exit, by call site: the function that called malloc "
             "or new (the site), where it was called from (past the standard library), its "
             f"bytes still in use and their objects; from {how_sampled(allocator, rate)}. "
             "The flame graphs show every stack: the root at the bottom, each frame as wide "
             "as the bytes allocated under it and still in use. Where the profiler wrote one, "
             "the heap at its peak follows, the same way.", ""]
    for p in profiles:
        lines += [f"## {escape(process_title(p))}", ""]
        sites = top_sites(p, top)
        lines += markdown_table(sites) + [""] if sites else ["Nothing in use.", ""]
        if p.name in images:
            png = os.path.basename(images[p.name])
            lines += [f"![{png}]({png})", ""]
        if p.peak is not None:
            lines += [f"### {escape(peak_title(p)).capitalize()}", ""]
            sites = top_sites(p.peak, top)
            lines += markdown_table(sites) + [""] if sites else ["Nothing in use.", ""]
            if p.peak.name in images:
                png = os.path.basename(images[p.peak.name])
                lines += [f"![{png}]({png})", ""]
        raw = [p.path] + ([p.peak.path] if p.peak is not None else [])
        lines += ["Raw profile: " + ", ".join(f"`{os.path.basename(r)}`" for r in raw) + ".", ""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip() + "\n")


def print_summary(profiles, command, allocator, rate, top, markdown, images):
    first, others = profiles[0], profiles[1:]
    print(cut(f"heap in use at exit{f' of `{command}`' if command else ''}", CONSOLE_WIDTH))
    print(cut(f"from {how_sampled(allocator, rate)}", CONSOLE_WIDTH))
    print(cut(process_title(first), CONSOLE_WIDTH))
    print()
    sites = top_sites(first, top)
    print("\n".join(console_table(sites)) if sites else "nothing in use")
    if first.peak is not None:
        print()
        print(cut(peak_title(first), CONSOLE_WIDTH))
        print()
        sites = top_sites(first.peak, top)
        print("\n".join(console_table(sites)) if sites else "nothing in use")
    if others:
        print()
        for p in others[:MAX_OTHER_PROCESSES]:
            print(cut("also " + process_title(p), CONSOLE_WIDTH))
        if len(others) > MAX_OTHER_PROCESSES:
            print(f"and {len(others) - MAX_OTHER_PROCESSES} more processes")
    print()
    if first.name in images:
        print(f"flame graph: {shown_path(images[first.name])}")
    if first.peak is not None and first.peak.name in images:
        print(f"flame graph at the peak: {shown_path(images[first.peak.name])}")
    print(f"table: {shown_path(markdown)}" + (" (every process)" if others else ""))
    raw = first.path if not others else os.path.join(os.path.dirname(first.path), "*.heap")
    print(f"raw profile{'s' if others else ''}: {shown_path(raw)}")


def shown_path(path):
    """path relative to the current folder where it is below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def parse_args(argv):
    parser = argparse.ArgumentParser(prog=os.path.basename(argv[0]),
                                     description=__doc__.strip().splitlines()[0])
    parser.add_argument("dir", help="the folder of the heap profiles (*.heap)")
    parser.add_argument("--command", default="", help="the command profiled, for the titles")
    parser.add_argument("--allocator", default="mempool", help="whose profiler wrote them")
    parser.add_argument("--rate", type=int, default=0,
                        help="its mean sampling interval in bytes (0: every allocation)")
    parser.add_argument("--top", type=int, default=TOP, help=f"sites per table ({TOP})")
    return parser.parse_args(argv[1:])


def main(argv):
    args = parse_args(argv)
    try:
        profiles = find_profiles(args.dir)
    except InputError as e:
        print(f"heap_profile.py: {e}", file=sys.stderr)
        return 2
    try:
        symbolize(pprof_path(), with_peaks(profiles))
    except PprofError as e:
        kept = ", ".join(p.path for p in with_peaks(profiles))
        print(f"heap_profile.py: {e}; the raw profiles are kept: {kept}", file=sys.stderr)
        return 1
    profiles.sort(key=lambda p: (-p.bytes, p.name))
    plt = import_pyplot()
    images = {}
    if plt is not None:
        for p in profiles:
            what = args.command or p.program or p.name
            path = os.path.join(args.dir, p.name + ".png")
            if draw_flame_graph(plt, p.in_use(), f"In use at exit by stack: {what}",
                                process_title(p), path):
                images[p.name] = path
            if p.peak is not None:
                path = os.path.join(args.dir, p.peak.name + ".png")
                if draw_flame_graph(plt, p.peak.in_use(), f"In use at its peak by stack: {what}",
                                    peak_title(p), path):
                    images[p.peak.name] = path
    markdown = os.path.join(args.dir, "profile.md")
    write_markdown(markdown, profiles, args.command, args.allocator, args.rate, args.top, images)
    print_summary(profiles, args.command, args.allocator, args.rate, args.top, markdown, images)
    if plt is None:
        return matplotlib_missing("heap_profile.py", "profile.md has no flame graphs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
