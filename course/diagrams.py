"""Concept diagrams of the course, drawn at build time in the course's figure style.

A diagram is a matplotlib figure made of boxes, grids of cells and arrows on an axes without ticks, in data
coordinates that run in "cells" (one cell of a drawn matrix is 1 x 1). The pages call one function per diagram
(`multi_head_attention` in chapter 4, `kv_cache_step` in chapter 9) in a hidden cell and show the figure with a
numbered caption; the figure style (course/figures.py) then fits it to the content column like any plot, so the
text sizes here are the style's own (never below its minimum). Drawing from code, not pasting an image, keeps the
diagrams in the repository's diffs and lets their shapes be the numbers the chapter uses.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Rectangle

# The palette of chapter 8's architecture diagram: one colour per kind of thing.
COLOURS = {
    "input": "#dddddd",   # inputs, embeddings
    "q": "#f6c28b",       # queries and attention
    "k": "#a8d5e2",       # keys
    "v": "#c7e9c0",       # values
    "weights": "#f9f3a6",  # attention weights
    "out": "#d9c2e9",     # outputs, W_O
    "new": "#e6550d",     # what a decoding step adds (edge colour)
}


def new_diagram(width: float, height: float, xlim: tuple[float, float], ylim: tuple[float, float]) -> tuple[Figure, Axes]:
    """A figure of the given size in inches whose one axes spans it, without ticks, in the given coordinates."""
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def box(ax: Axes, x: float, y: float, w: float, h: float, text: str, colour: str, **text_kw) -> None:
    """A rounded box centred at (x, y) with its text in the middle (one step of a computation)."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05",
                                fc=colour, ec="black", lw=1))
    ax.text(x, y, text, ha="center", va="center", **text_kw)


def grid(ax: Axes, x: float, y: float, rows: int, cols: int, colour: str, edge: str = "black",
         cell: float = 1.0) -> None:
    """A matrix drawn as rows x cols cells, its top-left corner at (x, y): the shape is what it shows."""
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(Rectangle((x + c * cell, y - (r + 1) * cell), cell, cell, fc=colour, ec=edge, lw=0.8))


def arrow(ax: Axes, x0: float, y0: float, x1: float, y1: float, **kw) -> None:
    """An arrow from (x0, y0) to (x1, y1): data flowing from one step to the next."""
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops={"arrowstyle": "->", "lw": 1.2, **kw})


def multi_head_attention(n: int = 4, h: int = 3) -> Figure:
    """Multi-head attention as a flow from top to bottom: X is projected to Q, K, V; each is split into h heads
    of width d_k; every head runs scaled dot-product attention; the heads are concatenated and mixed by W^O.

    n and h set how many rows and heads are drawn (small, so the picture stays readable); the labels give the
    shapes in general, (n, d_model) and (h, n, d_k) with d_k = d_model / h."""
    width_cells = 3 * h + 1  # how wide a d_model-wide matrix is drawn: h heads of 3 cells and a margin
    d_k_cells = 3
    fig, ax = new_diagram(7.6, 9.2, (-1.0, 37.0), (-45.0, 0.6))
    col_x = {"Q": 0.5, "K": 12.5, "V": 24.5}
    colour = {"Q": COLOURS["q"], "K": COLOURS["k"], "V": COLOURS["v"]}

    # 1. the input X, (n, d_model)
    x0 = 12.5
    grid(ax, x0, 0, n, width_cells - 1, COLOURS["input"])
    ax.text(x0 + width_cells, -n / 2, r"$X$: $(n, d_\mathrm{model})$", va="center")
    # 2. three projections, each (n, d_model)
    top = -n - 3.5
    for name, x in col_x.items():
        arrow(ax, x0 + (width_cells - 1) / 2, -n - 0.2, x + (width_cells - 1) / 2, top + 0.3)
        grid(ax, x, top, n, width_cells - 1, colour[name])
        ax.text(x + (width_cells - 1) / 2, top - n - 0.7, f"${name} = XW^{name}$: " + r"$(n, d_\mathrm{model})$",
                ha="center", va="top")
    # 3. split into h heads of width d_k: (h, n, d_k), drawn as h separate blocks
    top_split = top - n - 5.2
    for name, x in col_x.items():
        arrow(ax, x + (width_cells - 1) / 2, top - n - 2.2, x + (width_cells - 1) / 2, top_split + 1.5)
        for i in range(h):
            grid(ax, x + i * (d_k_cells + 0.5) - 0.5, top_split, n, d_k_cells, colour[name])
    ax.text(18, top_split - n - 0.5, r"split into $h$ heads: $(n, d_\mathrm{model}) \to (h, n, d_k)$, "
            r"$d_k = d_\mathrm{model}/h$", ha="center", va="top")
    # 4. one scaled dot-product attention per head
    top_att = top_split - n - 4.6
    att_w, att_h = 10.4, 3.6
    for i in range(h):
        cx = 6 + i * 12
        box(ax, cx, top_att - att_h / 2, att_w, att_h,
            f"head {i + 1 if i < h - 1 else 'h'}:\n" + r"softmax$\left(\frac{Q_i K_i^\top}{\sqrt{d_k}}\right) V_i$",
            COLOURS["weights"])
    # head i takes the i-th block of Q, K and V: each block is named, and one arrow goes down to each head (an
    # arrow from every block to its head would cross the others)
    for name, x in col_x.items():
        for i in range(h):
            sx = x + i * (d_k_cells + 0.5) - 0.5 + d_k_cells / 2
            ax.text(sx, top_split + 0.2, f"${name}_{i + 1 if i < h - 1 else 'h'}$", ha="center", va="bottom")
    for i in range(h):
        arrow(ax, 6 + i * 12, top_split - n - 2.0, 6 + i * 12, top_att + 0.1)
    ax.text(18, top_att - att_h - 0.5, r"each head: weights $(n, n)$, output $(n, d_k)$; all heads at once: $(h, n, d_k)$",
            ha="center", va="top")
    # 5. concatenate the heads back to (n, h d_k) = (n, d_model)
    top_cat = top_att - att_h - 3.8
    for i in range(h):
        arrow(ax, 6 + i * 12, top_att - att_h - 2.0, x0 + i * d_k_cells + d_k_cells / 2, top_cat + 0.3)
        grid(ax, x0 + i * d_k_cells, top_cat, n, d_k_cells, COLOURS["out"])
        ax.add_patch(Rectangle((x0 + i * d_k_cells, top_cat - n), d_k_cells, n, fill=False, ec="black", lw=2))
    ax.text(x0 + h * d_k_cells + 0.6, top_cat - n / 2, r"concatenate: $(n, h\,d_k) = (n, d_\mathrm{model})$",
            va="center")
    # 6. the output projection W^O mixes the heads: (n, d_model)
    top_out = top_cat - n - 2.8
    arrow(ax, x0 + h * d_k_cells / 2, top_cat - n - 0.2, x0 + h * d_k_cells / 2, top_out + 0.3)
    # W^O labels the arrow it stands for, just beside it
    ax.text(x0 + h * d_k_cells / 2 + 0.6, top_cat - n - 1.4, r"$\times\, W^O$ $(d_\mathrm{model}, d_\mathrm{model})$",
            ha="left", va="center")
    grid(ax, x0, top_out, n, h * d_k_cells, COLOURS["input"])
    ax.text(x0 + h * d_k_cells + 0.6, top_out - n / 2, r"output: $(n, d_\mathrm{model})$, as wide as $X$",
            va="center")
    return fig


def kv_cache_step(t: int = 5, d_k: int = 4) -> Figure:
    """One decoding step with a KV cache, for one head of one layer: the new token's query row q_t attends
    against the cached keys and values, t rows each (t - 1 from earlier steps, the new k_t and v_t appended by
    this step, outlined); the dashed row is where step t + 1 appends.

    t and d_k set how many rows and columns are drawn."""
    fig, ax = new_diagram(7.6, 5.4, (-1.5, 33.5), (-13.5, 4.2))
    new = dict(edge=COLOURS["new"])
    # the new token: q_t, k_t, v_t, one row each
    # (no bold: the CJK fallback font has a single weight, and matplotlib would warn on stderr)
    ax.text(0, 3.3, f"step t = {t}: the new token", va="center")
    for i, (name, colour) in enumerate([("k", "k"), ("v", "v"), ("q", "q")]):
        y = 1.6 - i * 1.6
        grid(ax, 0, y + 0.5, 1, d_k, COLOURS[colour])
        ax.text(d_k + 0.4, y, f"${name}_t$ $(1, d_k)$", va="center")
    # the cache: K and V, t rows each, the last one just appended
    kx, vx, top = 11.5, 23.0, 1.5
    for x, name, colour in [(kx, "K", "k"), (vx, "V", "v")]:
        grid(ax, x, top, t - 1, d_k, COLOURS[colour])
        grid(ax, x, top - (t - 1), 1, d_k, COLOURS[colour], **new)
        # the row step t + 1 will append
        ax.add_patch(Rectangle((x, top - t - 1), d_k, 1, fill=False, ls="--", ec="0.5", lw=0.8))
        ax.text(x + d_k / 2, top + 0.6, f"cached ${name}$: $(t, d_k)$", ha="center", va="bottom")
        ax.text(x + d_k + 0.3, top - t + 0.5, f"${name.lower()}_t$ appended", va="center", color=COLOURS["new"])
        ax.text(x + d_k / 2, top - t - 0.5, "step t + 1", ha="center", va="center", color="0.4")
    # k_t and v_t enter the upper half of their appended rows, from the left
    arrow(ax, d_k + 3.4, 1.6, kx - 0.2, top - t + 0.75, color=COLOURS["new"])
    arrow(ax, d_k + 3.4, 0.0, vx - 0.2, top - t + 0.75, color=COLOURS["new"], connectionstyle="arc3,rad=0.42")
    # scores: one row of t weights, then the output row
    sy = -9.0
    grid(ax, 0, sy + 0.5, 1, t, COLOURS["weights"])
    ax.text(t / 2, sy - 1.0, "weights $(1, t)$:\n" + r"softmax$(q_t K^\top / \sqrt{d_k})$", ha="center", va="top")
    arrow(ax, 1.5, -1.6 - 0.6, 1.5, sy + 0.6, color="0.4")  # q_t goes down to the scores
    # the weights read all t cached rows of K: the arrow leaves the block at its last row (k_t), from its lower
    # left corner, never from the dashed row below it (step t + 1's, not used by step t)
    arrow(ax, kx - 0.2, top - t + 0.2, t + 0.6, sy + 0.2, color="0.4")
    ox = 17.0
    grid(ax, ox, sy + 0.5, 1, d_k, COLOURS["out"])
    ax.text(ox + d_k / 2, sy - 1.0, "output $(1, d_k)$:\nweights $\\times$ $V$", ha="center", va="top")
    arrow(ax, t + 0.3, sy, ox - 0.3, sy)
    arrow(ax, vx - 0.2, top - t + 0.2, ox + d_k - 0.5, sy + 0.7, color="0.4")
    return fig
