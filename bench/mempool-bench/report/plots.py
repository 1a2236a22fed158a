"""The report's PNG figures (matplotlib, Agg backend)."""

import json
import os
import re
import sys

from results import (ALLOCATOR_ORDER, BASELINE, PERCENTILES, PROGRAM_WORKLOADS, RSS, SUBJECT,
                     group_by, latency_medians, machine_facts, median_of, metric, metric_stats,
                     ordered_allocators, ordered_workloads, ratio_spread, report_rows,
                     rows_by_case)

MAX_PANELS = 4  # cases per latency / threads figure; more would be unreadable
DPI = 100


def import_pyplot():
    """matplotlib's pyplot on the Agg backend (no display), or None."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def matplotlib_missing(script, what_is_left):
    """Says on stderr that matplotlib is missing and what the script wrote
    without it; the script's exit status (1)."""
    print(f"{script}: matplotlib is missing (Debian: python3-matplotlib), {what_is_left}",
          file=sys.stderr)
    return 1


MARKERS = "os^vDP<>Xph*"


def style(plt, allocator):
    """The same colour and marker for an allocator in every plot."""
    palette = list(plt.get_cmap("tab10").colors) + list(plt.get_cmap("Dark2").colors)
    if allocator in ALLOCATOR_ORDER:
        i = ALLOCATOR_ORDER.index(allocator)
    else:  # an allocator this script does not know: one of the Dark2 colours
        i = len(ALLOCATOR_ORDER) + sum(map(ord, allocator)) % 8
    return {"color": palette[i % len(palette)], "marker": MARKERS[i % len(MARKERS)]}


def spans_decades(values):
    positive = [v for v in values if v and v > 0]
    return len(positive) > 1 and max(positive) / min(positive) > 20


def save(plt, fig, path):
    # "tight" grows the image to take in a legend placed outside the axes
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def without_threads(case):
    """The case with its thread count taken out: "64 B, 2 threads" -> "64 B"."""
    parts = [p.strip() for p in case.split(",")]
    kept = [p for p in parts if not re.fullmatch(r"\d+\s*(threads?|thr|t)", p, re.IGNORECASE)]
    return ", ".join(kept)


def thread_groups(wruns):
    """{label: {allocator: {threads: median Mops/s}}} for the runs that differ
    only in their thread count, where there are 2+ thread counts."""
    def key(r):
        params = r.get("params") if isinstance(r.get("params"), dict) else {}
        rest = {k: v for k, v in params.items() if k != "threads"}
        return without_threads(r["case"]), json.dumps(rest, sort_keys=True, default=str)

    usable = [r for r in wruns if isinstance(r.get("threads"), int)
              and metric(r, "ops_per_s") is not None]
    groups = {}
    for (label, _), gruns in group_by(usable, key).items():
        if len({r["threads"] for r in gruns}) < 2:
            continue
        lines = {}
        for allocator, aruns in group_by(gruns, lambda r: r["allocator"]).items():
            lines[allocator] = {t: median_of(truns, "ops_per_s") / 1e6
                                for t, truns in sorted(group_by(aruns, lambda r: r["threads"]).items())}
        groups[label or "all"] = lines
    return groups


def panels(plt, count, width=6.4, height=4.2):
    """A figure with `count` panels (1, 2 side by side, or a 2x2 grid)."""
    cols = 1 if count == 1 else 2
    rows = (count + 1) // 2 if count > 1 else 1
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    axes = axes.flatten()
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def figure_legend(fig, axes):
    """One legend for all panels, right of them: inside a panel it hides lines."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    legend = fig.legend(list(entries.values()), list(entries), loc="upper left",
                        bbox_to_anchor=(1.0, 0.95), fontsize="small")
    fig.tight_layout()
    return legend


def plot_threads(plt, workload, wruns, out):
    groups = list(thread_groups(wruns).items())[:MAX_PANELS]
    if not groups:
        return None
    fig, axes = panels(plt, len(groups))
    for ax, (label, lines) in zip(axes, groups):
        threads = sorted({t for pts in lines.values() for t in pts})
        for allocator in ordered_allocators(lines):
            pts = lines[allocator]
            ax.plot(list(pts), list(pts.values()), label=allocator, **style(plt, allocator))
        if threads[-1] / threads[0] >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(threads)
        ax.set_xticklabels([str(t) for t in threads])
        if spans_decades([v for pts in lines.values() for v in pts.values()]):
            ax.set_yscale("log")
        ax.set_title(label)
        ax.set_xlabel("threads")
        ax.set_ylabel("throughput (Mops/s, median)")
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{workload}: throughput against threads (higher is better)")
    figure_legend(fig, axes)
    return save(plt, fig, os.path.join(out, f"{workload}_threads.png"))


def plot_latency(plt, workload, wruns, out):
    cases = [(case, m) for case, cruns in group_by(wruns, lambda r: r["case"]).items()
             if (m := latency_medians(cruns))]
    if not cases:
        return None
    shown = cases[:MAX_PANELS]
    fig, axes = panels(plt, len(shown))
    dashes = ["-", "--", ":", "-."]
    series_names = list(dict.fromkeys(name for _, m in shown for _, name in m))
    x = list(range(len(PERCENTILES)))
    for ax, (case, medians) in zip(axes, shown):
        for (allocator, name), m in medians.items():
            ys = [m.get(k, float("nan")) for k, _ in PERCENTILES]
            label = f"{allocator} {name}".strip()
            ax.plot(x, ys, label=label, linestyle=dashes[series_names.index(name) % len(dashes)],
                    **style(plt, allocator))
        ax.set_xticks(x)
        ax.set_xticklabels([t for _, t in PERCENTILES])
        ax.set_yscale("log")
        ax.set_title(case)
        ax.set_xlabel("percentile")
        ax.set_ylabel("latency (ns, median over repetitions)")
        ax.grid(True, which="both", alpha=0.3)
    title = f"{workload}: latency percentiles (lower is better)"
    if len(cases) > len(shown):
        title += f", first {len(shown)} of {len(cases)} cases"
    fig.suptitle(title)
    figure_legend(fig, axes)
    return save(plt, fig, os.path.join(out, f"{workload}_latency.png"))


def grouped_bars(ax, plt, groups, values, horizontal=False, base=0.0, errors=None):
    """Bars of values[(group, allocator)] clustered per group; returns the
    group positions. base: where bars start (1.0 for ratios). errors: error
    bars, {(group, allocator): (low, high)}, vertical bars only."""
    allocators = ordered_allocators(a for _, a in values)
    width = 0.8 / len(allocators)
    positions = list(range(len(groups)))
    for i, allocator in enumerate(allocators):
        offs = [p - 0.4 + width * (i + 0.5) for p in positions]
        sizes = [values.get((g, allocator), float("nan")) - base for g in groups]
        colour = style(plt, allocator)["color"]
        if horizontal:
            ax.barh(offs, sizes, height=width, left=base, label=allocator, color=colour)
        elif errors is None:
            ax.bar(offs, sizes, width=width, bottom=base, label=allocator, color=colour)
        else:
            # from the bar's top (its value) down to low and up to high
            spans = [errors.get((g, allocator)) for g in groups]
            ends = [values.get((g, allocator)) for g in groups]
            yerr = [[max(0.0, v - e[0]) if e and v is not None else 0.0 for e, v in zip(spans, ends)],
                    [max(0.0, e[1] - v) if e and v is not None else 0.0 for e, v in zip(spans, ends)]]
            ax.bar(offs, sizes, width=width, bottom=base, label=allocator, color=colour,
                   yerr=yerr, error_kw={"ecolor": "black", "elinewidth": 1, "capsize": 2})
    return positions


def plot_rss(plt, workload, wruns, out):
    values = {}
    for (case, allocator), runs in group_by(wruns, lambda r: (r["case"], r["allocator"])).items():
        m = median_of(runs, "peak_rss_kib")
        if m is not None:
            values[(case, allocator)] = m / 1024
    if not values:
        return None
    cases = list(dict.fromkeys(c for c, _ in values))
    allocators = {a for _, a in values}
    fig, ax = plt.subplots(figsize=(min(30, max(6.4, 1.5 + len(cases) * (0.3 * len(allocators) + 0.5))), 4.8))
    positions = grouped_bars(ax, plt, cases, values)
    ax.set_xticks(positions)
    ax.set_xticklabels(cases, rotation=30 if len(cases) > 4 else 0, ha="right" if len(cases) > 4 else "center")
    if spans_decades(values.values()):
        ax.set_yscale("log")
    ax.set_ylabel("peak resident memory (MiB, median)")
    ax.set_xlabel("case")
    ax.set_title(f"{workload}: peak resident memory (lower is better)")
    ax.grid(True, axis="y", alpha=0.3)
    # outside the axes: inside, it hides the tallest bars
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return save(plt, fig, os.path.join(out, f"{workload}_rss.png"))


def summary_grid(rows):
    """(allocators in column order, [[ratio to the row's best or None]] per
    row) of the summary heat map."""
    allocators = ordered_allocators(a for row in rows for a in row.stats)
    return allocators, [[row.ratio_to_best(a) for a in allocators] for row in rows]


def cell_text(ratio):
    return "" if ratio is None else f"{ratio:.2f}" if ratio >= 0.005 else "<.01"


def plot_summary(plt, rows, facts, out):
    """A heat map, one row per case (rows, real programs first) and one column
    per allocator: its median primary metric against the row's best, in the
    metric's sense (1: the best), in colour and in figures. Never more than
    twice as tall as it is wide, so that it reads on one screen."""
    import numpy as np
    from matplotlib import colors, patches
    if not rows:
        return None
    allocators, grid = summary_grid(rows)
    values = np.array([[np.nan if v is None else v for v in line] for line in grid], dtype=float)
    labels = [short(f"{row.workload}: {row.case}".replace("\n", " "), 50) for row in rows]
    height = 2.6 + 0.28 * len(rows)
    width = max(0.6 + 0.065 * max(len(label) for label in labels) + 0.75 * len(allocators),
                height / 2, 6.4)
    fig, ax = plt.subplots(figsize=(width, height))
    cmap = plt.get_cmap("RdYlGn").copy()
    cmap.set_bad("#d0d0d0")  # no run: grey, and no figure in it
    # a log scale: half as good is as far from the best as twice that is from
    # half; a quarter of the best and below all the deepest red
    norm = colors.LogNorm(vmin=0.25, vmax=1.0, clip=True)
    shown = np.ma.masked_invalid(np.clip(values, 1e-3, None))
    ax.imshow(shown, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    for i, line in enumerate(grid):
        for j, ratio in enumerate(line):
            if ratio is None:
                continue
            r, g, b, _ = cmap(norm(max(ratio, 1e-3)))
            dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
            ax.text(j, i, cell_text(ratio), ha="center", va="center", fontsize=8,
                    color="white" if dark else "black")
    ax.set_xticks(range(len(allocators)))
    ax.set_xticklabels(allocators, rotation=40, ha="left")
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=9)
    for tick in ax.get_xticklabels():
        if tick.get_text() == SUBJECT:
            tick.set_fontweight("bold")
    if SUBJECT in allocators:  # the subject's column framed, to find it at once
        ax.add_patch(patches.Rectangle((allocators.index(SUBJECT) - 0.5, -0.5), 1, len(rows),
                                       fill=False, edgecolor="black", linewidth=2))
    # white lines between cells, black ones between workloads
    ax.set_xticks([x - 0.5 for x in range(1, len(allocators))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(rows))], minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    for i in range(1, len(rows)):
        if rows[i].workload != rows[i - 1].workload:
            ax.axhline(i - 0.5, color="black", linewidth=1.5)
    facts = dict(facts)
    machine = facts.get("CPU", "CPU not recorded")
    if "cores" in facts:
        machine += f", {facts['cores']} cores"
    fig.suptitle(f"Each allocator against the best of its row (1.00: the best; lower: worse)\n"
                 f"median primary metric in its own sense; grey: no run; {machine}",
                 fontsize=11)
    # the figure's size kept (no "tight" bounding box): its aspect is the
    # promise; room on the right for the last column's slanted name
    fig.tight_layout(rect=(0, 0, 1 - 0.9 / width, 1 - 0.55 / height))
    path = os.path.join(out, "summary.png")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def normalised_to_glibc(cases):
    """cases: [(case, better, {allocator: Stats})]. Returns (values, errors):
    {(case, allocator): median ratio to glibc} and {(case, allocator): (ratio
    of the worst repetition, of the best)}, > 1 meaning better than glibc
    (a time inverted), for the cases where glibc ran."""
    values, errors = {}, {}
    for case, better, stats in cases:
        if BASELINE not in stats:
            continue
        for allocator, s in stats.items():
            spread = ratio_spread(better, s, stats[BASELINE].median)
            if spread is not None and min(spread) > 0:
                values[(case, allocator)], errors[(case, allocator)] = spread[0], spread[1:]
    return values, errors


def short(text, width=28):
    """A tick label: a long command line cut to width characters."""
    return text if len(text) <= width else text[:width - 1] + "…"


def ratio_ticks(limit):
    """Ticks for a log axis of ratios from 1 / limit to limit: 1.1, 1.25, 1.5...
    and their inverses for a narrow one, powers of two for a wide one."""
    steps = [1.1, 1.25, 1.5, 2, 3, 4] if limit < 4.5 else [2.0 ** k for k in range(1, 20)]
    return sorted([1.0] + [t for s in steps for t in (s, 1 / s) if 1 / limit <= t <= limit])


def plot_normalised(plt, values, errors, title, ylabel, path):
    """Vertical bars from 1.0 on a log scale, per case and allocator, with
    min–max error bars; None when there is nothing to plot."""
    from matplotlib import ticker
    if not values:
        return None
    cases = list(dict.fromkeys(c for c, _ in values))
    allocators = {a for _, a in values}
    fig, ax = plt.subplots(figsize=(min(30, max(6.4, 1.5 + len(cases) * (0.3 * len(allocators) + 0.5))), 4.8))
    positions = grouped_bars(ax, plt, cases, values, base=1.0, errors=errors)
    ax.set_yscale("log")  # 2x better and 2x worse are the same distance from 1
    ends = list(values.values()) + [v for span in errors.values() for v in span]
    limit = max(max(ends), 1 / min(ends)) * 1.3
    ax.set_ylim(1 / limit, limit)
    ax.yaxis.set_major_locator(ticker.FixedLocator(ratio_ticks(limit)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.3g}"))
    ax.yaxis.set_minor_locator(ticker.NullLocator())
    ax.axhline(1.0, color="black", linewidth=1)
    labels = [short(c) for c in cases]
    tilt = len(cases) > 4 or max(len(label) for label in labels) > 12
    ax.set_xticks(positions)
    ax.set_xticklabels(labels, rotation=30 if tilt else 0, ha="right" if tilt else "center")
    ax.set_xlabel("case")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return save(plt, fig, path)


def plot_programs(plt, workload, metric_tables, wruns, out):
    """For apps and run: every allocator's median against glibc per case, in
    the case's own primary metric, then the same for peak RSS."""
    cases = [(row.case, row.better, row.stats) for row in rows_by_case(metric_tables, wruns)]
    values, errors = normalised_to_glibc(cases)
    speed = plot_normalised(
        plt, values, errors,
        f"{workload}: each allocator against glibc, per case (higher is better)",
        "ratio to glibc, median primary metric\n(> 1: better; time inverted; log scale)",
        os.path.join(out, f"{workload}_vs_glibc.png"))
    rss = [(case, "lower", metric_stats(cruns, RSS))
           for case, cruns in group_by(wruns, lambda r: r["case"]).items()]
    values, errors = normalised_to_glibc(rss)
    memory = plot_normalised(
        plt, values, errors,
        f"{workload}: peak resident memory against glibc, per case (higher is better)",
        "glibc's median peak RSS / the allocator's\n(> 1: smaller than glibc; log scale)",
        os.path.join(out, f"{workload}_rss_vs_glibc.png"))
    return [f for f in (speed, memory) if f]


def make_plots(plt, runs, tables, out):
    """{workload or "summary": [png paths written]}."""
    os.makedirs(out, exist_ok=True)
    measured = [r for r in runs if "skipped" not in r]
    plots = {}
    summary = plot_summary(plt, report_rows(tables, runs), machine_facts(runs), out)
    if summary:
        plots["summary"] = [summary]
    for workload in ordered_workloads(measured):
        wruns = [r for r in measured if r["workload"] == workload]
        files = [plot(plt, workload, wruns, out) for plot in (plot_threads, plot_latency, plot_rss)]
        plots[workload] = [f for f in files if f]
        if workload in PROGRAM_WORKLOADS and workload in tables:
            plots[workload] += plot_programs(plt, workload, tables[workload], wruns, out)
    return plots

