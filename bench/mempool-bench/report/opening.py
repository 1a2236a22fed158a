"""The opening of report.md, what matters first: the machine, the verdict in
words (where mempool wins and where it loses), mempool against the best peer
per case (the real programs first), and the list of its losses; and the
headline table as the console shows it."""

import textwrap

from formatting import cut, escape, fmt3, md_table, text_table, unit_for
from results import (PEERS, POOL_PEERS, POOLS, PROGRAM_WORKLOADS, RSS, SUBJECT, group_by,
                     machine_facts, metric_stats)

# Within 5% of the best peer counts as level: closer than that, a single run
# on a shared machine does not tell them apart.
LEVEL = 0.95
CONSOLE_WIDTH = 120


def and_list(names):
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def machine_line(runs):
    facts = machine_facts(runs)
    known = "; ".join(f"{k} {v}" for k, v in facts) if facts else "not recorded"
    return f"Machine: {known}."


def matches(rows):
    """[(row, Match)] of the rows where mempool (or one of its pools) and a
    peer both ran."""
    return [(row, m) for row in rows if (m := row.match()) is not None]


def case_name(row, width=60):
    # a run workload's case is a whole command line
    return cut(f"{row.workload}: {row.case}".replace("\n", " "), width)


def ratio_phrase(m):
    """"0.830× of tcmalloc", or "object-pool 0.830× of glibc" for a pool."""
    who = "" if m.subject == SUBJECT else f"{m.subject} "
    return f"{who}{fmt3(m.ratio)}× of {m.peer}"


def behind(m):
    return m.ratio < LEVEL


def within_spread(m):
    return m.spreads() == "overlap"


def verdict(rows):
    """The paragraph that says where mempool wins and where it loses."""
    found = matches(rows)
    if not found:
        return [f"No case has both {SUBJECT} (or one of its pools) and a peer "
                f"({and_list(PEERS)}): nothing to compare.", ""]
    level = [(r, m) for r, m in found if not behind(m)]
    ahead = [(r, m) for r, m in level if m.ratio > 1 / LEVEL]
    programs = [(r, m) for r, m in found if r.workload in PROGRAM_WORKLOADS]
    text = (f"In this run {SUBJECT} is ahead of the best peer or within 5% of it in "
            f"{len(level)} of {len(found)} cases (ahead by more than 5% in {len(ahead)})")
    if programs:
        text += (f"; in the real programs, in "
                 f"{sum(1 for r, m in programs if not behind(m))} of {len(programs)}")
    text += "."
    spread = [(r, m) for r, m in found if behind(m) and within_spread(m)]
    lost = [(r, m) for r, m in found if behind(m) and not within_spread(m)]
    if lost:
        text += (" It is behind by more than 5% in: "
                 + ", ".join(f"{case_name(r)} ({ratio_phrase(m)})" for r, m in lost) + ".")
    else:
        text += " It is behind by more than 5% nowhere, beyond the spread."
    if spread:
        text += (" Behind by more than 5% but within the spread (its min–max overlaps the best "
                 "peer's): " + ", ".join(f"{case_name(r)} ({ratio_phrase(m)})"
                                         for r, m in spread) + ".")
    if all(m.spreads() is None for _, m in found):
        text += " Each case ran once: there is no spread to tell noise from a difference."
    if any(m.subject != SUBJECT for _, m in found):
        text += (f" Where {SUBJECT}'s malloc did not run, its best pool ({and_list(POOLS)}) "
                 f"stands for it against the best of {and_list(POOL_PEERS)}.")
    text += (f" The best peer is the best of {and_list(PEERS)} in the same run, in each case's "
             "primary metric and its sense.")
    return [text, ""]


def value_text(stats, scale):
    return fmt3(stats.median * scale)


def match_cells(row, m, rss):
    """The cells of one case: metric, mempool, best peer, ratio, spreads, peak
    RSS of the two; rss: {allocator: Stats of peak RSS} of the case."""
    values = [v for s in (m.mine, m.theirs) for v in (s.median, s.high)]
    scale, unit = unit_for(row.metric, values)
    who = "" if m.subject == SUBJECT else f"{m.subject} "
    memory = "–"
    if m.subject in rss and m.peer in rss:
        memory = f"{fmt3(rss[m.subject].median / 1024)} vs {fmt3(rss[m.peer].median / 1024)}"
    return [f"{row.metric} ({unit + ', ' if unit else ''}{row.better})",
            who + value_text(m.mine, scale), f"{m.peer} {value_text(m.theirs, scale)}",
            f"{fmt3(m.ratio)}×", m.spreads() or "–", memory]


MATCH_HEADER = ["metric (unit, better)", SUBJECT, "best peer", "ratio", "spreads",
                "peak RSS, MiB"]


def match_table(found, runs, with_workload):
    """(header, rows) of the cases in found; the first column the case, or
    the workload and the case."""
    by_case = group_by(runs, lambda r: (r["workload"], r["case"]))
    table = []
    for row, m in found:
        rss = metric_stats(by_case.get((row.workload, row.case), []), RSS)
        where = [row.workload, row.case] if with_workload else [row.case]
        table.append(where + match_cells(row, m, rss))
    return (["workload", "case"] if with_workload else ["case"]) + MATCH_HEADER, table


MATCH_NOTE = (f"Medians over the repetitions, in each case's primary metric; ratio: {SUBJECT}'s "
              f"to the best peer's in the metric's sense (> 1: {SUBJECT} better); spreads: "
              "whether their min–max overlap or lie apart (– where both ran once); peak RSS: "
              f"the medians of {SUBJECT} and of that peer.")


def opening_sections(rows, runs):
    """The verdict, then mempool against the best peer in the real programs,
    in the other cases, and where mempool loses."""
    found = matches(rows)
    programs = [(r, m) for r, m in found if r.workload in PROGRAM_WORKLOADS]
    others = [(r, m) for r, m in found if r.workload not in PROGRAM_WORKLOADS]
    lines = verdict(rows)
    if programs:
        header, table = match_table(programs, runs, False)
        lines += [f"## Real programs: {SUBJECT} against the best peer", "",
                  f"Per case of {and_list(PROGRAM_WORKLOADS)}: the best peer is the best of "
                  f"{and_list(PEERS)}. " + MATCH_NOTE, ""]
        lines += md_table(header, [[escape(c) for c in cells] for cells in table], 2) + [""]
    if others:
        header, table = match_table(others, runs, True)
        note = f"Every other case, the best peer the best of {and_list(PEERS)}"
        if any(m.subject != SUBJECT for _, m in others):
            note += (f"; where {SUBJECT}'s malloc did not run, its best pool (named) against the "
                     f"best of {and_list(POOL_PEERS)}")
        lines += [f"## Other cases: {SUBJECT} against the best peer", "",
                  note + ". " + MATCH_NOTE, ""]
        lines += md_table(header, [[escape(c) for c in cells] for cells in table], 3) + [""]
    return lines + losses_section(found, runs)


def losses_section(found, runs):
    """Every case where mempool is behind the best peer by more than 5%, the
    furthest behind first."""
    if not found:
        return []
    lost = sorted([(r, m) for r, m in found if behind(m)], key=lambda rm: rm[1].ratio)
    lines = [f"## Where {SUBJECT} loses", ""]
    if not lost:
        return lines + [f"Nowhere: {SUBJECT} is ahead of the best peer or within 5% of it in "
                        "every case.", ""]
    lines += [f"Cases where {SUBJECT} is behind the best peer by more than 5%, the furthest "
              "behind first.", ""]
    for row, m in lost:
        scale, unit = unit_for(row.metric, [m.mine.median, m.theirs.median])
        spreads = m.spreads()
        judged = {"overlap": "within the spread (the min–max overlap)",
                  "apart": "the spreads lie apart", None: "one run each"}[spreads]
        lines.append(f"- {escape(case_name(row, 200))}: {ratio_phrase(m)} ({row.metric} "
                     f"{value_text(m.mine, scale)} against {value_text(m.theirs, scale)}"
                     f"{' ' + unit if unit else ''}, {row.better} is better); {judged}")
    return lines + [""]


def console_headline(rows, runs):
    """The headline tables for a terminal (no line over CONSOLE_WIDTH): the
    real programs first, then every other case, each mempool against the best peer."""
    found = matches(rows)
    if not found:
        return textwrap.wrap(verdict(rows)[0], CONSOLE_WIDTH)
    programs = [(r, m) for r, m in found if r.workload in PROGRAM_WORKLOADS]
    others = [(r, m) for r, m in found if r.workload not in PROGRAM_WORKLOADS]
    lines = []
    if programs:
        header, table = match_table(programs, runs, False)
        table = [[cells[0].replace("\n", " ")] + cells[1:] for cells in table]
        lines += [cut(f"Real programs: {SUBJECT} against the best peer ({and_list(PEERS)})",
                      CONSOLE_WIDTH)]
        lines += text_table(header, table, 2, CONSOLE_WIDTH)
    if others:
        header, table = match_table(others, runs, True)
        header = ["case"] + header[2:]
        table = [[f"{w}: {c}".replace("\n", " ")] + rest for w, c, *rest in table]
        title = ("Every other case" if programs
                 else "No real programs in these results; every case")
        lines += ([""] if lines else []) + [cut(f"{title}, {SUBJECT} against the best peer",
                                                CONSOLE_WIDTH)]
        lines += text_table(header, table, 2, CONSOLE_WIDTH)
    return lines
