"""The flame graph of a heap profile (matplotlib, Agg backend): every stack of
what was in use, the root at the bottom, each frame a rectangle as wide as the
bytes allocated under it and still in use, labelled where its name fits."""

import zlib

from formatting import bytes_text, cut, percent_text
from plots import DPI, save

WIDTH_IN = 16                         # 1,600 pixels at DPI
ROW_IN = 0.22                         # a frame's height
TOP_IN, BOTTOM_IN = 0.8, 0.35         # the titles above, the note below
FONT_PT = 8
CHAR_PX = 0.62 * FONT_PT * DPI / 72   # a character's mean width in DejaVu Sans
PAD_PX = 3
MIN_PX = 0.5                          # narrower frames are not drawn
MAX_DEPTH = 400                       # deeper stacks keep their leaf-most frames
ROOT = "all"


class Frame:
    """A node of the stacks' tree: a function under its callers."""

    def __init__(self, name):
        self.name = name
        self.bytes = 0
        self.children = {}


def frame_tree(stacks):
    """The tree of {(frame, ...) root first: bytes}, under a root "all"."""
    root = Frame(ROOT)
    for frames, value in stacks.items():
        root.bytes += value
        node = root
        for name in frames[-MAX_DEPTH:]:
            node = node.children.setdefault(name, Frame(name))
            node.bytes += value
    return root


def layout(root, min_bytes):
    """(depth, x, width, frame) of every frame at least min_bytes wide, the
    widest of a frame's callees first."""
    boxes, todo = [], [(root, 0, 0.0)]
    while todo:
        node, depth, x = todo.pop()
        if node.bytes < min_bytes:
            continue
        boxes.append((depth, x, node.bytes, node))
        for child in sorted(node.children.values(), key=lambda c: (-c.bytes, c.name)):
            todo.append((child, depth + 1, x))
            x += child.bytes
    return boxes


def colour(name):
    """A frame's colour, the same for a function everywhere: the greens and
    blues of flamegraph.pl's memory palette; grey for the root."""
    if name == ROOT:
        return (0.8, 0.8, 0.8)
    h = zlib.crc32(name.encode())
    v1, v2 = (h & 0xFFFF) / 0xFFFF, (h >> 16) / 0xFFFF
    return (0.0, (190 + 50 * v2) / 255, 210 * v1 / 255)


def label(node, total, width_px):
    """The name, with its bytes and share where they fit too; cut to the
    frame's width, or None where not even a few characters fit."""
    room = int((width_px - 2 * PAD_PX) / CHAR_PX)
    full = f"{node.name} ({bytes_text(node.bytes)}, {percent_text(node.bytes / total)})"
    if len(full) <= room:
        return full
    return cut(node.name, room) if room >= 4 else None


def draw_flame_graph(plt, stacks, title, subtitle, path):
    """Draws {(frame, ...): bytes} into path (PNG); None when nothing is in use."""
    root = frame_tree({s: b for s, b in stacks.items() if b > 0})
    if root.bytes <= 0:
        return None
    axes_px = WIDTH_IN * DPI
    boxes = layout(root, root.bytes * MIN_PX / axes_px)
    rows = max(depth for depth, _, _, _ in boxes) + 1
    height = TOP_IN + rows * ROW_IN + BOTTOM_IN
    fig = plt.figure(figsize=(WIDTH_IN, height))
    ax = fig.add_axes([0.0, BOTTOM_IN / height, 1.0, rows * ROW_IN / height])
    for depth in range(rows):
        level = [(x, w, node) for d, x, w, node in boxes if d == depth]
        ax.broken_barh([(x, w) for x, w, _ in level], (depth, 0.92),
                       facecolors=[colour(node.name) for _, _, node in level],
                       edgecolor="white", linewidth=0.3)
        for x, w, node in level:
            text = label(node, root.bytes, w / root.bytes * axes_px)
            if text:
                ax.text(x + root.bytes * PAD_PX / axes_px, depth + 0.46, text, va="center",
                        ha="left", fontsize=FONT_PT, clip_on=True)
    ax.set_xlim(0, root.bytes)
    ax.set_ylim(0, rows)
    ax.axis("off")
    fig.text(0.5, 1 - 0.12 / height, cut(title, 150), ha="center", va="top", fontsize=12)
    fig.text(0.5, 1 - 0.45 / height, cut(subtitle, 200), ha="center", va="top", fontsize=9)
    fig.text(0.0, 0.08 / height,
             f"A stack from its root (bottom) to the function that called the allocator (top); "
             f"a frame's width: the bytes allocated under it and still in use, of "
             f"{bytes_text(root.bytes)} in all.", fontsize=FONT_PT, color="dimgray")
    return save(plt, fig, path)
