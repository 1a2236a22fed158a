"""Numbers, units and Markdown tables as the report shows them."""

import math


def fmt3(x):
    """x to 3 significant digits, without an exponent for everyday magnitudes."""
    if x is None or not math.isfinite(x):
        return "–"
    if x == 0:
        return "0"
    x = float(f"{x:.3g}")  # round first, so 9.996 becomes 10.0 rather than 10.00
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude >= 3:
        return f"{x:,.0f}"
    if magnitude < -3:
        return f"{x:.2e}"
    return f"{x:.{2 - magnitude}f}"


def fmt_count(x):
    """Counters (sent, dropped...) exactly when whole, else 3 digits."""
    if x is not None and x == int(x):
        return f"{int(x):,}"
    return fmt3(x)


def unit_for(name, values=()):
    """(scale, unit label) to show metric `name` in: *_ns -> ns, ns_per_X ->
    ns/X, *_per_s -> M.../s, *_rps and rps_* -> requests/s, *_kib -> MiB,
    *_s -> s, or ms when all values are below a second."""
    m = name.lower()
    if m == "rps" or m.endswith("_rps") or m.startswith("rps_"):
        return 1.0, "requests/s"
    if m.endswith("_per_s"):
        what = m[:-len("_per_s")]
        return 1e-6, "Mops/s" if what == "ops" else f"M {what}/s"
    if m.startswith("ns_per_"):
        return 1.0, "ns/" + m[len("ns_per_"):]
    if m == "ns" or m.endswith("_ns"):
        return 1.0, "ns"
    if m.endswith("_kib"):
        return 1 / 1024, "MiB"
    if m.endswith("_bytes"):
        return 1 / 2**20, "MiB"
    if m.endswith("_s"):
        # one unit per table so the columns compare at a glance
        if values and max(abs(v) for v in values) < 1:
            return 1e3, "ms"
        return 1.0, "s"
    return 1.0, ""


def escape(text):
    # a command line (the run workload's case) may hold a newline
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(header, rows, text_columns=1):
    """A Markdown table: the first text_columns left-aligned, the numbers
    after them right-aligned."""
    lines = ["| " + " | ".join(escape(h) for h in header) + " |",
             "|" + "---|" * text_columns + "---:|" * (len(header) - text_columns)]
    lines += ["| " + " | ".join(cell for cell in row) + " |" for row in rows]
    return lines


def text_table(header, rows, text_columns=1, width=None):
    """A table for a terminal: columns padded with two spaces between, the
    first text_columns left-aligned, the rest right-aligned. With width, the
    first column is cut (with an ellipsis) so that no line is wider."""
    table = [list(header)] + [list(row) for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    if width is not None:
        rest = sum(widths[1:]) + 2 * (len(widths) - 1)
        widths[0] = max(1, min(widths[0], width - rest))
    lines = []
    for row in table:
        row[0] = cut(row[0], widths[0])
        cells = [cell.ljust(w) if i < text_columns else cell.rjust(w)
                 for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def bytes_text(n):
    """3 significant digits and a binary unit: "64.0 MiB", "3.81 KiB", "400 B"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{fmt3(n / scale)} {unit}"
    return f"{n:,.0f} B"


def percent_text(share):
    """A share as a percentage to one decimal: 0.764 -> "76.4%"."""
    return f"{share * 100:.1f}%"


def cut(text, width):
    """text, or its first width - 1 characters and an ellipsis."""
    return text if len(text) <= width else text[:max(0, width - 1)] + "…"
