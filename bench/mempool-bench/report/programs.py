"""Tables of the workloads that run whole programs (apps, run): per case,
mempool against the best peer with the spreads and peak resident memory, and
redis' requests/s per command."""

from formatting import escape, fmt3, md_table, unit_for
from results import (BASELINE, PEERS, PROGRAM_WORKLOADS, RSS, SUBJECT, group_by, metric,
                     metric_stats, ordered_allocators, ratio_to_baseline, rows_by_case,
                     spreads_word)

# redis-benchmark's tests, in the order it runs them: metrics "rps_<command>".
REDIS_COMMANDS = ["get", "set", "lpush", "lpop", "sadd", "hset", "zadd"]


def program_sections(workload, metric_tables, wruns):
    """Markdown lines for an apps or run workload, [] for any other."""
    if workload not in PROGRAM_WORKLOADS:
        return []
    return peer_table(rows_by_case(metric_tables, wruns), wruns) + command_tables(wruns)


def spread_text(stats, scale):
    """"1.20 (1.10–1.30)", the min–max left out for a single repetition."""
    text = fmt3(stats.median * scale)
    if stats.count > 1:
        text += f" ({fmt3(stats.low * scale)}–{fmt3(stats.high * scale)})"
    return text


def lowest_rss_peer(rss):
    """The peer with the lowest median peak RSS in {allocator: Stats}, or None."""
    peers = [p for p in PEERS if p in rss]
    return min(peers, key=lambda p: rss[p].median) if peers else None


def peer_table(rows, wruns):
    """Per case: mempool and the best peer, their ratio, whether their spreads
    overlap, and their peak RSS."""
    if not rows:
        return []
    by_case = group_by(wruns, lambda r: r["case"])
    table = []
    for row in rows:
        mine = row.stats.get(SUBJECT)
        peer = row.best_peer()
        theirs = row.stats.get(peer)
        values = [v for s in (mine, theirs) if s for v in (s.median, s.high)]
        scale, unit = unit_for(row.metric, values)
        cells = [escape(row.case),
                 f"{escape(row.metric)} ({unit + ', ' if unit else ''}{row.better} is better)",
                 spread_text(mine, scale) if mine else "–",
                 f"{peer} {spread_text(theirs, scale)}" if theirs else "–"]
        found = row.vs_best_peer()
        cells.append(f"{fmt3(found[0])}×" if found else "–")
        cells.append((spreads_word(mine, theirs) or "–") if mine and theirs else "–")

        rss = metric_stats(by_case.get(row.case, []), RSS)
        low_peer = lowest_rss_peer(rss)
        if SUBJECT in rss and low_peer:
            mib, peer_mib = rss[SUBJECT].median / 1024, rss[low_peer].median / 1024
            cells.append(f"{fmt3(mib)} vs {fmt3(peer_mib)} ({low_peer})")
            r = ratio_to_baseline("lower", mib, peer_mib)
            cells.append(f"{fmt3(r)}×" if r is not None else "–")
        else:
            cells += ["–", "–"]
        table.append(cells)
    header = ["case", "primary metric", SUBJECT, "best peer", f"{SUBJECT} vs best peer",
              "spreads", f"peak RSS, MiB: {SUBJECT} vs lowest peer", "peak RSS ratio"]
    peers = ", ".join(PEERS[:-1]) + " and " + PEERS[-1]
    return (["### mempool against the best peer", "",
             f"Per case, in its own primary metric: {SUBJECT}'s median over the repetitions "
             f"(min–max), and that of the best of {peers} (the best median); {SUBJECT}'s ratio "
             f"to it in the metric's sense (> 1: {SUBJECT} better); whether the two min–max "
             "spreads overlap or lie apart (– where both ran once). Peak RSS: the medians of "
             f"{SUBJECT} and of the peer with the lowest, and their ratio (> 1: {SUBJECT} "
             "smaller).", ""]
            + md_table(header, table, 2) + [""])


def command_names(cruns):
    """The rps_* metrics of a case's runs: redis' commands first, in order."""
    found = {k for r in cruns for k in r.get("metrics", {})
             if k.startswith("rps_") and metric(r, k) is not None}
    known = [f"rps_{c}" for c in REDIS_COMMANDS if f"rps_{c}" in found]
    return known + sorted(found - set(known))


def command_tables(wruns):
    """Per case with rps_* metrics (redis): median requests/s per command and
    allocator, the best in bold, and mempool's ratio to glibc."""
    lines = []
    for case, cruns in group_by(wruns, lambda r: r["case"]).items():
        names = command_names(cruns)
        if not names:
            continue
        allocators = ordered_allocators(r["allocator"] for r in cruns)
        table = []
        for name in names:
            stats = metric_stats(cruns, name)
            best = max(s.median for s in stats.values())
            cells = [name[len("rps_"):].upper()]
            for allocator in allocators:
                s = stats.get(allocator)
                value = fmt3(s.median) if s else "–"
                cells.append(f"**{value}**" if s and s.median == best else value)
            r = (ratio_to_baseline("higher", stats[SUBJECT].median, stats[BASELINE].median)
                 if SUBJECT in stats and BASELINE in stats else None)
            cells.append(f"{fmt3(r)}×" if r is not None else "–")
            table.append(cells)
        lines += [f"Case {escape(case)}:", ""]
        lines += md_table(["command"] + allocators + [f"{SUBJECT} vs {BASELINE}"], table) + [""]
    if not lines:
        return []
    return (["### Requests per command", "",
             "Median requests/s over the repetitions (higher is better), best per row in bold; "
             f"{SUBJECT} vs {BASELINE}: the ratio of their medians (> 1: {SUBJECT} faster).", ""]
            + lines)
