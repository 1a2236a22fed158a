#!/usr/bin/python3
"""Tests mempool-bench's heap profile report (bench/mempool-bench/report/heap_profile.py)
on a sample profile with known call sites.

    /usr/bin/python3 tests/bench/heap_profile_test.py [path/to/heap_profile.py] [unittest args]

The sample, tests/bench/profile/heap_sites.heap, is what tcmalloc's heap
profiler wrote at the exit of tests/bench/heap_sites.cpp (its header says what
it holds), and heap_sites.heap.inuse_space and .inuse_objects what google-pprof
--collapsed made of it with the program at hand:

    LD_PRELOAD=libtcmalloc.so.4 HEAPPROFILE=out/heap ./heap_sites
    google-pprof --collapsed --inuse_space ./heap_sites out/heap.0001.heap

The program is not at hand here, so a stand-in for google-pprof on PATH prints
those files (and records how it was called). heap_profile.py runs as a
subprocess: its table on stdout and in profile.md, its flame graphs, its exit
status on bad input and without google-pprof. The name shortening is tested in
process.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "mempool-bench", "report", "heap_profile.py")
SAMPLE = os.path.join(HERE, "profile", "heap_sites.heap")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MIB = 1 << 20

# A google-pprof that prints PROFILE.inuse_space or .inuse_objects, and adds
# its arguments to calls.log beside itself.
FAKE_PPROF = """#!/usr/bin/python3
import os, sys
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.log"), "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
what = "inuse_objects" if "--inuse_objects" in sys.argv else "inuse_space"
with open(sys.argv[-1] + "." + what) as f:
    sys.stdout.write(f.read())
"""


def add_profile(directory, name, space=None, objects=None):
    """The sample profile as DIR/NAME with its stacks beside it (or the
    collapsed stacks given)."""
    path = os.path.join(directory, name)
    shutil.copy(SAMPLE, path)
    for what, text in (("inuse_space", space), ("inuse_objects", objects)):
        if text is None:
            shutil.copy(f"{SAMPLE}.{what}", f"{path}.{what}")
        else:
            with open(f"{path}.{what}", "w", encoding="utf-8") as f:
                f.write(text)
    return path


def run_script(directory, path_dirs, *args, **env_vars):
    env = dict(os.environ, PATH=os.pathsep.join(path_dirs), **env_vars)
    command = [SCRIPT] if os.access(SCRIPT, os.X_OK) else [sys.executable, SCRIPT]
    return subprocess.run(command + [directory, *args], capture_output=True, text=True,
                          timeout=300, env=env, check=False)


def table_rows(lines):
    """The rows of the first Markdown table in lines, as lists of cells."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in lines if line.startswith("|")]
    return [r for r in rows[1:] if not all(re.fullmatch(r"-+:?", c) for c in r)]


def png_ok(test, path):
    test.assertTrue(os.path.isfile(path), path)
    with open(path, "rb") as f:
        test.assertEqual(f.read(8), PNG_SIGNATURE)
    test.assertGreater(os.path.getsize(path), 10000)


class WithFakePprof(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "profile")
        self.bin = os.path.join(self.tmp.name, "bin")
        os.makedirs(self.dir)
        os.makedirs(self.bin)
        pprof = os.path.join(self.bin, "google-pprof")
        with open(pprof, "w", encoding="utf-8") as f:
            f.write(FAKE_PPROF)
        os.chmod(pprof, 0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def run_on_dir(self, *args, **env_vars):
        # only the stand-in on PATH (the scripts start /usr/bin/python3 by their #! line)
        result = run_script(self.dir, [self.bin], *args, **env_vars)
        self.assertNotIn("Traceback", result.stderr)
        return result

    def calls(self):
        with open(os.path.join(self.bin, "calls.log"), encoding="utf-8") as f:
            return [line.split() for line in f]


class OneProcess(WithFakePprof):
    def setUp(self):
        super().setUp()
        self.profile = add_profile(self.dir, "heap.4242.heap")
        self.result = self.run_on_dir("--command", "./heap_sites --fast", "--allocator",
                                      "mempool", "--rate", "524288")
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        self.out = self.result.stdout.splitlines()

    def console_rows(self):
        """The console table's rows: [rank, in use, %, objects, site, called from]."""
        header = next(i for i, line in enumerate(self.out) if line.split()[:2] == ["#", "in"])
        rows = []
        for line in self.out[header + 1:]:
            if not line.strip():
                break
            m = re.match(r"\s*(\d+)\s+([\d.,]+ [KMG]?i?B)\s+([\d.]+%)\s+([\d,]+)\s+(\S+)\s+(.*)$",
                         line)
            self.assertIsNotNone(m, line)
            rows.append(list(m.groups()))
        return rows

    def test_pprof_symbolized_the_profile_for_bytes_and_objects(self):
        calls = self.calls()
        self.assertEqual(len(calls), 2)
        for call in calls:
            self.assertEqual(call[0], "--collapsed")
            self.assertEqual(call[-1], self.profile)
        self.assertEqual(sorted(c[1] for c in calls), ["--inuse_objects", "--inuse_space"])
        # the program: the first file of MAPPED_LIBRARIES, /dev/null when it is not there
        program = "/tmp/heap_sites/heap_sites"
        self.assertEqual(calls[0][2], program if os.path.exists(program) else "/dev/null")

    def test_the_top_site_and_its_bytes_on_the_console(self):
        rows = self.console_rows()
        self.assertEqual(rows[0], ["1", "64.0 MiB", "75.5%", "64", "big_site", "layer"])
        self.assertEqual([r[4] for r in rows], ["big_site", "medium_site", "small_site",
                                                "std::__new_allocator::allocate", "grow_site"])
        # 64 MiB of 84.8 MiB (88,934,680 bytes in the profile's header)
        self.assertEqual(rows[1][1:4], ["16.0 MiB", "18.9%", "256"])
        self.assertEqual(rows[2][1:4], ["3.81 MiB", "4.5%", "10,000"])
        # the vector's growth is charged to the code that grew it, past std::
        self.assertEqual(rows[3][1:], ["1.00 MiB", "1.2%", "1", "std::__new_allocator::allocate",
                                       "grow_site"])
        self.assertEqual(rows[4][1:], ["24 B", "0.0%", "1", "grow_site", "main"])
        self.assertIn("84.8 MiB in use in 10,322 objects", self.result.stdout)
        self.assertEqual(self.out[0], "heap in use at exit of `./heap_sites --fast`")
        self.assertIn("mempool's heap profiler, a sample every 512 KiB", self.out[1])

    def test_console_lines_fit_120_columns(self):
        for line in self.out:
            self.assertLessEqual(len(line), 120, line)

    def test_markdown_table(self):
        with open(os.path.join(self.dir, "profile.md"), encoding="utf-8") as f:
            md = f.read().splitlines()
        self.assertEqual(md[0], "# Heap profile of `./heap_sites --fast`")
        rows = table_rows(md)
        self.assertEqual(rows[0], ["1", "`big_site`", "`layer`", "64.0 MiB", "75.5%", "64"])
        self.assertEqual(len(rows), 5)
        self.assertIn("![heap.4242.png](heap.4242.png)", md)
        self.assertIn("Raw profile: `heap.4242.heap`.", md)

    def test_flame_graph_png_and_the_raw_profile_kept(self):
        png_ok(self, os.path.join(self.dir, "heap.4242.png"))
        self.assertIn(f"flame graph: {os.path.join(self.dir, 'heap.4242.png')}", self.out)
        self.assertTrue(os.path.isfile(self.profile))

    def test_top_limits_the_table(self):
        result = self.run_on_dir("--top", "2")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(self.dir, "profile.md"), encoding="utf-8") as f:
            self.assertEqual(len(table_rows(f.read().splitlines())), 2)
        # no rate: a profiler that records every allocation
        self.assertIn("which records every allocation", result.stdout)


class WithPeak(WithFakePprof):
    """mempool's peak profile beside the one at exit (NAME.peak.heap): its own table and
    flame graph, the same process."""

    def setUp(self):
        super().setUp()
        add_profile(self.dir, "heap.4242.heap")
        add_profile(self.dir, "heap.4242.peak.heap",
                    space="main;build_index;peak_site 50331648\nmain;other 1048576\n",
                    objects="main;build_index;peak_site 3072\nmain;other 16\n")
        self.result = self.run_on_dir("--command", "./heap_sites")
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        self.out = self.result.stdout.splitlines()

    def test_both_symbolized(self):
        self.assertEqual(len(self.calls()), 4)

    def test_the_peak_table_on_the_console(self):
        at = next(i for i, line in enumerate(self.out) if line.startswith("at its peak"))
        self.assertIn("49.0 MiB in use in 3,088 objects", self.out[at])
        rows = [line.split() for line in self.out[at + 3:at + 5]]  # past the blank and the header
        self.assertEqual(rows[0][0], "1")
        self.assertIn("peak_site", rows[0])
        self.assertIn("build_index", rows[0])
        self.assertFalse(any("also" in line for line in self.out), "the peak is not a process")

    def test_markdown_and_flame_graph(self):
        with open(os.path.join(self.dir, "profile.md"), encoding="utf-8") as f:
            text = f.read()
        peak = text[text.index("### At its peak"):]
        self.assertIn("`peak_site`", table_rows(peak.splitlines())[0][1])
        self.assertIn("`heap.4242.peak.heap`", text)
        if any("flame graph at the peak" in line for line in self.out):
            png_ok(self, os.path.join(self.dir, "heap.4242.peak.png"))


class SeveralProcesses(WithFakePprof):
    def test_the_largest_first_and_a_line_for_each_other(self):
        add_profile(self.dir, "heap.100.heap", space="_start;main;tiny 1000\n_start;main 0\n",
                    objects="_start;main;tiny 10\n")
        add_profile(self.dir, "heap.200.heap")
        add_profile(self.dir, "heap.300.heap", space="_start;main;gone 0\n", objects="")
        result = self.run_on_dir()
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        self.assertLess(out.index("heap.200: "), out.index("big_site"))
        self.assertIn("also heap.100: /tmp/heap_sites/heap_sites, 1,000 B in use in 10 objects",
                      out)
        self.assertIn("also heap.300: /tmp/heap_sites/heap_sites, 0 B in use in 0 objects", out)
        self.assertNotIn("tiny", out)  # only the largest process's table on the console
        with open(os.path.join(self.dir, "profile.md"), encoding="utf-8") as f:
            md = f.read()
        order = [md.index(f"## heap.{pid}: ") for pid in (200, 100, 300)]
        self.assertEqual(order, sorted(order))
        self.assertIn("| 1 | `tiny` | `main` | 1,000 B | 100.0% | 10 |", md)
        self.assertIn("Nothing in use.", md)
        png_ok(self, os.path.join(self.dir, "heap.200.png"))
        self.assertTrue(os.path.isfile(os.path.join(self.dir, "heap.100.png")))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "heap.300.png")))


class WithoutMatplotlib(WithFakePprof):
    def test_the_table_without_flame_graphs(self):
        add_profile(self.dir, "heap.1.heap")
        hidden = os.path.join(self.tmp.name, "python")
        os.makedirs(os.path.join(hidden, "matplotlib"))
        with open(os.path.join(hidden, "matplotlib", "__init__.py"), "w", encoding="utf-8") as f:
            f.write("raise ImportError('not installed')\n")
        result = self.run_on_dir(PYTHONPATH=hidden)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("matplotlib is missing (Debian: python3-matplotlib)", result.stderr)
        self.assertIn("big_site", result.stdout)
        with open(os.path.join(self.dir, "profile.md"), encoding="utf-8") as f:
            md = f.read()
        self.assertIn("| 1 | `big_site` | `layer` | 64.0 MiB | 75.5% | 64 |", md)
        self.assertNotIn(".png", md)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "heap.1.png")))


class BadInput(WithFakePprof):
    def assert_rejected(self, status, *fragments):
        result = self.run_on_dir()
        self.assertEqual(result.returncode, status, result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        for fragment in fragments:
            self.assertIn(fragment, result.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "profile.md")))

    def test_no_profile(self):
        self.assert_rejected(2, "no heap profile")

    def test_not_a_heap_profile(self):
        with open(os.path.join(self.dir, "heap.1.heap"), "w", encoding="utf-8") as f:
            f.write("--- symbol\nbinary=x\n")
        self.assert_rejected(2, "heap.1.heap", "not a heap profile")

    def test_pprof_output_that_is_not_stacks(self):
        add_profile(self.dir, "heap.1.heap", space="Total: 0 B\n")
        self.assert_rejected(1, "google-pprof", "Total: 0 B")

    def test_pprof_failing(self):
        shutil.copy(SAMPLE, os.path.join(self.dir, "heap.1.heap"))  # the stand-in fails on it
        self.assert_rejected(1, "google-pprof failed on", "heap.1.heap", "exit status 1",
                             "No such file")

    def test_without_google_pprof_the_raw_profile_is_kept(self):
        profile = add_profile(self.dir, "heap.1.heap")
        os.remove(os.path.join(self.bin, "google-pprof"))
        result = self.run_on_dir()
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("google-pprof is missing", result.stderr)
        self.assertIn("apt-get install google-perftools", result.stderr)
        self.assertIn(f"the raw profiles are kept: {profile}", result.stderr)
        self.assertTrue(os.path.isfile(profile))


class Names(unittest.TestCase):
    """The frames as the table and the flame graph name them."""

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.dirname(os.path.realpath(SCRIPT)))
        import heap_profile
        cls.hp = heap_profile

    def test_short_names(self):
        cases = {
            "big_site()<0000000000001250>": "big_site",
            "main<00000000000010c0>": "main",
            "__libc_start_call_main": "__libc_start_call_main",
            "void std::vector<long, std::allocator<long> >::_M_realloc_insert<long const&>"
            "(__gnu_cxx::__normal_iterator<long*, std::vector<long, std::allocator<long> > >, "
            "long const&)": "std::vector::_M_realloc_insert",
            "std::__new_allocator<long>::allocate(unsigned long, void const*)[inline]":
                "std::__new_allocator::allocate",
            "operator new(unsigned long)": "operator new",
            "operator new[](unsigned long, std::nothrow_t const&)": "operator new[]",
            "std::basic_ostream<char>& std::operator<< <std::char_traits<char> >"
            "(std::basic_ostream<char>&, char const*)": "std::operator<<",
            "bool operator<(Key const&, Key const&)": "operator<",
            "Parser::operator()(char const*) const": "Parser::operator()",
            "Handle::operator bool() const": "Handle::operator bool",
            "(anonymous namespace)::keep(void*)": "{anonymous}::keep",
            "run()::{lambda(int)#1}::operator()(int) const": "run::{lambda#1}::operator()",
            "0x00007f00deadbeef": "0x00007f00deadbeef",
        }
        for name, short in cases.items():
            with self.subTest(name=name):
                self.assertEqual(self.hp.short_name(name), short)

    def test_allocator_frames_at_the_leaf_go(self):
        stacks = self.hp.parse_collapsed(
            "main;site;mp_malloc;mempool::detail::sample(unsigned long) 100\n"
            "main;site 50\n"
            "main;other;malloc 7\n"
            "malloc 3\n")
        self.assertEqual(stacks, {("main", "site"): 150, ("main", "other"): 7, ("malloc",): 3})


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        SCRIPT = os.path.abspath(sys.argv.pop(1))
    unittest.main()
