"""The report's Markdown sections: runs and allocators, main tables, peak resident memory,
latency, counters, skipped runs and warnings."""

import datetime
import os

from formatting import escape, fmt3, fmt_count, md_table, unit_for
from results import (BASELINE, FAULTS, HUGE, PEERS, PERCENTILES, RSS, SUBJECT, group_by,
                     latency_medians, median_of, metric, ordered_allocators)

# Workload-specific numbers worth a table of their own.
EXTRA_METRICS = {
    "queue": ["sent", "dropped", "received"],
    "fragmentation": ["peak_live_kib"],
    "churn": ["rss_after_kib"],
}
# A substring of the library that served malloc, for the allocators that are
# swapped in with LD_PRELOAD: a mismatch means the preload did not take.
EXPECTED_MALLOC_FROM = {
    "glibc": "libc.so", "mimalloc": "mimalloc", "jemalloc": "jemalloc",
    "tcmalloc": "tcmalloc", "mempool": "mempool", "mempool-hardened": "mempool-malloc-hardened",
    "jemalloc-thp": "jemalloc", "mempool-thp-never": "mempool-malloc.so",
    # malloc linked in: the program itself, mempool-bench built again with it
    "mempool-linked": "mempool-bench-linked", "jemalloc-linked": "mempool-bench-jemalloc-linked",
    "tcmalloc-linked": "mempool-bench-tcmalloc-linked",
}

VS_BEST_PEER = f"{SUBJECT} vs best peer"
VS_BEST_PEER_NOTE = (f"{VS_BEST_PEER}: {SUBJECT}'s median against the best median of "
                     f"{', '.join(PEERS[:-1])} and {PEERS[-1]} in this run, in the metric's "
                     f"sense (> 1: {SUBJECT} better), naming that peer.")


def runs_section(runs, directory):
    """When the results were written, their label, the allocators (version,
    environment, where malloc came from), the repetitions."""
    path = os.path.join(directory, "results.jsonl")
    when = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
    machine = runs[0].get("machine") if isinstance(runs[0].get("machine"), dict) else {}
    libraries = machine.get("libraries") if isinstance(machine.get("libraries"), dict) else {}
    measured = [r for r in runs if "skipped" not in r]

    lines = ["## Runs and allocators", "",
             f"Results of {when:%Y-%m-%d %H:%M} UTC (results.jsonl's modification time).", ""]
    labels = sorted({r["label"] for r in runs if isinstance(r.get("label"), str) and r["label"]})
    if labels:
        lines += ["Label: " + ", ".join(labels), ""]

    lines.append("Allocators:")
    for allocator in ordered_allocators(r["allocator"] for r in runs):
        version = libraries.get(allocator)
        if not isinstance(version, str) or "/" in version or version == "system":
            version = None  # a preload path or "system": malloc_from below says it better
        froms = sorted({r["malloc_from"] for r in measured
                        if r["allocator"] == allocator and isinstance(r.get("malloc_from"), str)})
        text = f"- {allocator}"
        if version:
            text += f" {version}"
        envs = sorted({e for r in runs if r["allocator"] == allocator
                       and isinstance(r.get("allocator_env"), list)
                       for e in r["allocator_env"] if isinstance(e, str)})
        if envs:
            text += " with " + " ".join(f"`{e}`" for e in envs)
        if froms:
            text += " (malloc from " + ", ".join(f"`{f}`" for f in froms) + ")"
        lines.append(text)
    lines.append("")

    reps = [len(rs) for rs in group_by(
        measured, lambda r: (r["workload"], r["case"], r["allocator"])).values()]
    if reps:
        count = str(min(reps)) if min(reps) == max(reps) else f"{min(reps)} to {max(reps)}"
        lines.append(f"Repetitions: {count} per case and allocator. "
                     f"Runs: {len(measured)} measured, {len(runs) - len(measured)} skipped.")
    else:
        lines.append(f"Runs: none measured, {len(runs)} skipped.")
    lines.append("")
    return lines


def main_table(rows):
    """Markdown lines: the sense of the metric, then the table of rows (all of
    one workload and metric)."""
    first = rows[0]
    allocators = ordered_allocators(a for row in rows for a in row.stats)
    values = [s.median for row in rows for s in row.stats.values()]
    values += [s.high for row in rows for s in row.stats.values()]
    scale, unit = unit_for(first.metric, values)
    has_baseline = any(BASELINE in row.stats for row in rows)
    note = (f"**{first.metric}**{f' in {unit}' if unit else ''}, "
            f"**{first.better} is better**. Cell: median over the repetitions (min–max)")
    if has_baseline:
        note += ", then the ratio to glibc (> 1: better than glibc)"
    lines = [note + ". Best per row in bold. " + VS_BEST_PEER_NOTE, ""]

    table = []
    for row in rows:
        best = row.best()
        cells = [escape(row.case)]
        for allocator in allocators:
            s = row.stats.get(allocator)
            if s is None:
                cells.append("–")
                continue
            value = fmt3(s.median * scale)
            cell = f"**{value}**" if s.median == best else value
            if s.count > 1:
                cell += f" ({fmt3(s.low * scale)}–{fmt3(s.high * scale)})"
            r = row.ratio(allocator)
            if has_baseline and allocator != BASELINE and r is not None:
                cell += f" {fmt3(r)}×"
            cells.append(cell)
        cells.append(vs_best_peer_cell(row))
        table.append(cells)
    return lines + md_table(["case"] + allocators + [VS_BEST_PEER], table) + [""]


def vs_best_peer_cell(row):
    """"1.07× (tcmalloc)": mempool's ratio to the best peer of the row, or
    "–" when mempool or no peer ran."""
    found = row.vs_best_peer()
    return "–" if found is None else f"{fmt3(found[0])}× ({found[1]})"


def median_table(wruns, name, show):
    """Per case and allocator, show(median of metric `name`) ("–" where no run
    has a number); None when no run has one."""
    if not any(metric(r, name) is not None for r in wruns):
        return None
    allocators = ordered_allocators(r["allocator"] for r in wruns)
    table = []
    for case, cruns in group_by(wruns, lambda r: r["case"]).items():
        by_alloc = group_by(cruns, lambda r: r["allocator"])
        table.append([escape(case)] + [
            show(m) if (m := median_of(by_alloc.get(a, []), name)) is not None
            else "–" for a in allocators])
    return md_table(["case"] + allocators, table) + [""]


def rss_table(wruns):
    """Peak resident memory (median peak_rss_kib in MiB per case and allocator)
    and beside it the minor page faults and AnonHugePages; [] if none."""
    lines = []
    rss = median_table(wruns, RSS, lambda m: fmt3(m / 1024))
    if rss:
        lines += ["### Peak resident memory", "",
                  f"Median of {RSS} over the repetitions, in MiB (lower is better).", ""] + rss
    faults = median_table(wruns, FAULTS, fmt3)
    if faults:
        lines += ["### Minor page faults", "",
                  f"Median of {FAULTS} over the repetitions: the process's (a program's: its "
                  "process tree's) minor page faults, fewer with huge pages.", ""] + faults
    huge = median_table(wruns, HUGE, lambda m: fmt3(m / 1024))
    if huge:
        lines += ["### Huge pages", "",
                  f"Median of {HUGE} over the repetitions, in MiB: the process's AnonHugePages "
                  "(/proc/PID/smaps_rollup) at the end of the run; – where it could not be read "
                  "(a program that exits by itself).", ""] + huge
    return lines


def latency_tables(wruns):
    lines = []
    for case, cruns in group_by(wruns, lambda r: r["case"]).items():
        medians = latency_medians(cruns)
        if not medians:
            continue
        with_series = any(name for _, name in medians)
        header = ["allocator"] + (["operation"] if with_series else []) + [t for _, t in PERCENTILES]
        table = [[a] + ([name or "–"] if with_series else [])
                 + [fmt3(m.get(k)) for k, _ in PERCENTILES]
                 for (a, name), m in medians.items()]
        lines += [f"Case {escape(case)}:", ""] + md_table(header, table, 1 + with_series) + [""]
    if not lines:
        return []
    return (["### Latency", "",
             "Median over the repetitions of each percentile, in ns (lower is better).", ""]
            + lines)


def extra_table(workload, wruns):
    """The workload's own counters (EXTRA_METRICS), per case and allocator."""
    names = [n for n in EXTRA_METRICS.get(workload, [])
             if any(metric(r, n) is not None for r in wruns)]
    if not names:
        return []
    header = ["case", "allocator"]
    for n in names:
        unit = unit_for(n)[1]
        header.append(f"{n} ({unit})" if unit else n)
    table = []
    for case, cruns in group_by(wruns, lambda r: r["case"]).items():
        by_alloc = group_by(cruns, lambda r: r["allocator"])
        for allocator in ordered_allocators(by_alloc):
            cells = [escape(case), allocator]
            for n in names:
                m = median_of(by_alloc[allocator], n)
                scale, unit = unit_for(n)
                cells.append(fmt_count(m) if not unit else fmt3(m * scale if m is not None else None))
            table.append(cells)
    return (["### Counters", "", "Median over the repetitions.", ""]
            + md_table(header, table, 2) + [""])


def skipped_section(runs):
    seen = dict.fromkeys((r["workload"], r["case"], r["allocator"], r["skipped"])
                         for r in runs if "skipped" in r)
    if not seen:
        return []
    return (["## Skipped", "", "Runs that did not run, once each.", ""]
            + md_table(["workload", "case", "allocator", "reason"],
                       [[escape(x) for x in key] for key in seen], 4) + [""])


def warnings_section(runs):
    """Runs whose malloc did not come from the library their allocator names."""
    seen = dict.fromkeys(
        (r["allocator"], r["malloc_from"]) for r in runs
        if "skipped" not in r and r.get("malloc_from") not in (None, "", "?")  # "?": not known
        and isinstance(r["malloc_from"], str)
        and r["allocator"] in EXPECTED_MALLOC_FROM
        and EXPECTED_MALLOC_FROM[r["allocator"]] not in os.path.basename(r["malloc_from"]))
    if not seen:
        return []
    return (["## Warnings", ""]
            + [f"- {a} runs took malloc from `{f}`, not from {a}: its results measure something else."
               for a, f in seen] + [""])

