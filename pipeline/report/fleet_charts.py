"""The fleet report's charts: runs by outcome, runs per week, phase shares per config group.

The page shows them as inline SVG (drawn in milliseconds, sharp, following the page's colour scheme); its
mail as PNG drawn by matplotlib at twice the pixels they are shown at, because the common mail clients
(Gmail, Outlook) show no SVG. matplotlib is imported only when a PNG is asked for. Both drawings of a chart
share its data, its name and its alt text.
"""

from __future__ import annotations

import functools
import io
import math
import textwrap
from collections.abc import Mapping
from html import escape

import numpy as np

from pipeline.report.charts import PHASE_COLORS, SCALE, Chart, fmt, nice_ticks, svg_chart, svg_path, svg_text

DPI = 100 * SCALE
FAIL_COLOR = "#c0392b"
OK_COLOR = "#2e7d32"
# a run stopped on purpose or a log cut short is no failure: neutral grey
OUTCOME_TONES = {"completed": OK_COLOR, "hang": "#e69f00", "interrupted": "#94a3b8", "no_outcome": "#94a3b8"}
GROUP_LABEL_WIDTH = 44  # characters per line of a config group's name in the share chart
MAX_WEEK_LABELS = 14  # week labels side by side under the weekly chart (9.6 in wide at 8 pt)
# SVG geometry in viewBox units (CSS pixels at full size): the width the PNG of each chart is shown at
NARROW, WIDE = 560, 960
CHAR_W = 6.4  # a character of the 11 px chart text, to reserve room for labels
TEXT_PX = 11  # the chart text's size at full width (charts.STYLE)
MIN_TEXT_PX = 9  # the smallest the page shows it at, however narrow the screen
ROW_H = 22
LABEL_GAP = 12  # room between two week labels under the page's weekly chart
LINE_H = 13
LINE_COLOR = "var(--cap)"


def failure_bars(counts: dict[str, int], labels: Mapping[str, str] | None = None, png: bool = False) -> Chart | None:
    """Runs per failure class, each class named by `labels` (its plain-language name) where it has one."""
    if not counts:
        return None
    items = sorted(counts.items(), key=lambda kv: kv[1])
    colors = [OUTCOME_TONES.get(k, FAIL_COLOR) for k, _ in items]
    items = [((labels or {}).get(k, k), v) for k, v in items]
    alt = "Runs by outcome: " + ", ".join(f"{k} {v}" for k, v in reversed(items))
    return (_failure_bars_png if png else _failure_bars_svg)(items, colors, alt)


def share_bars(groups: list[tuple[str, dict[str, float]]], png: bool = False) -> Chart | None:
    """Median phase shares of step time per config group, as 100 % stacked bars."""
    groups = [(g, s) for g, s in groups if s]
    if not groups:
        return None
    phases = [p for p in PHASE_COLORS if any(s.get(p) for _, s in groups)]
    alt = "Phase shares per config group: " + "; ".join(
        f"{g}: " + ", ".join(f"{p} {s[p]:.0%}" for p in phases if s.get(p)) for g, s in groups)
    return (_share_bars_png if png else _share_bars_svg)(groups, phases, alt)


def weekly_chart(weeks: list[tuple[str, int, int, float | None]], png: bool = False) -> Chart | None:
    """Runs per week split into failed and fine, with the median step time on a second axis."""
    if not weeks:
        return None
    alt = "Runs per week (week: runs, failed or hung, median step): " + "; ".join(
        f"{w[0]}: {w[1]}, {w[2]}, " + ("–" if w[3] is None else f"{w[3]:.3g} s") for w in weeks)
    return (_weekly_png if png else _weekly_svg)(weeks, alt)


def _wrapped(label: str, width: int = GROUP_LABEL_WIDTH) -> str:
    """A config group's name on lines of at most `width` characters, broken after its separators: whole, not cut."""
    return "\n".join(textwrap.wrap(label.replace(" · ", " ·\u00a0"), width, break_on_hyphens=False)).replace(
        "\u00a0", " ")


def thinned(labels: list[str], most: int = MAX_WEEK_LABELS) -> list[str]:
    """Every k-th label (the newest always), the others blank, so at most `most` are printed side by side."""
    step = -(-len(labels) // most)
    last = len(labels) - 1
    return [label if (last - i) % step == 0 else "" for i, label in enumerate(labels)]


# SVG drawings

def _rect(x: float, y: float, w: float, h: float, fill: str, title: str) -> str:
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.0):.1f}" height="{h:.1f}" fill="{fill}">'
            f"<title>{escape(title)}</title></rect>")


def _svg(name: str, alt: str, width: int, height: float, body: list[str]) -> Chart:
    # on a phone the chart keeps its text at MIN_TEXT_PX and scrolls sideways rather than shrink it unreadable
    least = math.ceil(width * MIN_TEXT_PX / TEXT_PX)
    svg = (f'<div style="overflow-x:auto"><svg viewBox="0 0 {width} {height:.0f}" '
           f'style="min-width:{least}px;max-width:{width}px" role="img" '
           f'aria-label="{escape(alt)}" data-panel="{name}">{"".join(body)}</svg></div>')
    return svg_chart(name, alt, [svg])


def _x_grid(ticks: list[float], x0: float, scale: float, top: float, bottom: float, label) -> list[str]:
    """Vertical grid lines at the ticks and their labels under the plot."""
    out = []
    for t in ticks:
        px = x0 + t * scale
        out.append(f'<path class="g" d="M{px:.1f} {top:.1f}V{bottom:.1f}"/>')
        out.append(svg_text(px, bottom + 14, label(t), anchor="middle"))
    return out


def _failure_bars_svg(items: list[tuple[str, int]], colors: list[str], alt: str) -> Chart:
    top, bottom = 30, 24
    label_w = min(max(len(k) for k, _ in items) * CHAR_W + 8, NARROW / 2)
    x0, x1 = 4 + label_w, NARROW - 16
    most = max(v for _, v in items)
    scale = (x1 - x0) / (most * 1.12 or 1)
    plot_bottom = top + ROW_H * len(items)
    ticks = [t for t in nice_ticks(0, most * 1.12, 4) if float(t).is_integer() and t <= most * 1.12]
    out = [svg_text(4, 16, "Runs by outcome", "t"), *_x_grid(ticks, x0, scale, top, plot_bottom, fmt)]
    for row, ((label, v), color) in enumerate(zip(reversed(items), reversed(colors), strict=True)):
        y = top + row * ROW_H
        out.append(svg_text(x0 - 6, y + ROW_H / 2 + 4, label, anchor="end"))
        out.append(_rect(x0, y + 3, v * scale, ROW_H - 6, color, f"{label}: {v} run{'s' * (v != 1)}"))
        out.append(svg_text(x0 + v * scale + 4, y + ROW_H / 2 + 4, str(v)))
    out.append(f'<path class="a" d="M{x0:.1f} {top}V{plot_bottom}"/>')
    return _svg("failures", alt, NARROW, plot_bottom + bottom, out)


def _share_bars_svg(groups: list[tuple[str, dict[str, float]]], phases: list[str], alt: str) -> Chart:
    top = 30
    labels = [_wrapped(g).split("\n") for g, _ in groups]
    label_w = max(len(line) for lines in labels for line in lines) * CHAR_W + 8
    x0, x1 = 4 + label_w, WIDE - 16
    total = max(1.0, max(sum(s.get(p, 0.0) for p in phases) for _, s in groups))
    scale = (x1 - x0) / total
    heights = [max(ROW_H, LINE_H * len(lines) + 8) for lines in labels]
    plot_bottom = top + sum(heights)
    out = [svg_text(4, 16, "Share of step time by phase, per config group", "t"),
           *_x_grid([t for t in nice_ticks(0, total, 5) if t <= total * (1 + 1e-9)], x0, scale, top, plot_bottom,
                    lambda t: f"{t:.0%}")]
    y = top
    for (group, shares), lines, h in zip(groups, labels, heights, strict=True):
        first = y + h / 2 - LINE_H * (len(lines) - 1) / 2 + 4
        out += [svg_text(x0 - 6, first + i * LINE_H, line, anchor="end") for i, line in enumerate(lines)]
        left = 0.0
        for p in phases:
            v = shares.get(p, 0.0)
            if v:
                out.append(_rect(x0 + left * scale, y + 3, v * scale, h - 6, PHASE_COLORS[p], f"{group} · {p} {v:.0%}"))
            left += v
        y += h
    out.append(f'<path class="a" d="M{x0:.1f} {top}V{plot_bottom}"/>')
    x, y = x0, plot_bottom + 34
    for p in phases:
        width = 14 + len(p) * CHAR_W + 16
        if x + width > WIDE and x > x0:
            x, y = x0, y + 16
        out.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{PHASE_COLORS[p]}"/>')
        out.append(svg_text(x + 14, y, p))
        x += width
    return _svg("shares", alt, WIDE, y + 8, out)


def _weekly_svg(weeks: list[tuple[str, int, int, float | None]], alt: str) -> Chart:
    height, top, bottom, left, right = 290, 52, 34, 44, 56
    labels = [w[0] for w in weeks]
    ok = np.array([w[1] - w[2] for w in weeks], dtype=float)
    bad = np.array([w[2] for w in weeks], dtype=float)
    med = np.array([np.nan if w[3] is None else w[3] for w in weeks], dtype=float)
    has_med = bool(np.isfinite(med).any())
    x0, x1 = left, WIDE - (right if has_med else 16)
    y0, y1 = height - bottom, top
    band = (x1 - x0) / len(weeks)
    centers = x0 + band * (np.arange(len(weeks)) + 0.5)
    runs_top = max(1, int((ok + bad).max())) * 1.35

    def ry(v):
        return y0 - np.asarray(v, dtype=float) / runs_top * (y0 - y1)

    out = [svg_text(4, 16, "Runs per week (by end date)", "t")]
    for t in nice_ticks(0, runs_top, 4):
        if t <= runs_top and float(t).is_integer():
            py = float(ry(t))
            out.append(f'<path class="g" d="M{x0} {py:.1f}H{x1:.1f}"/>')
            out.append(svg_text(x0 - 6, py + 3.5, fmt(t), anchor="end"))
    out.append(svg_text(x0 - 6, y1 - 8, "runs", anchor="end"))
    for i, (label, c) in enumerate(zip(labels, centers.tolist(), strict=True)):
        half = 0.4 * band
        base, mid, peak = float(ry(0)), float(ry(ok[i])), float(ry(ok[i] + bad[i]))
        step = "–" if not np.isfinite(med[i]) else f"{med[i]:.3g} s"
        title = f"week to {label}: {weeks[i][1]} runs, {weeks[i][2]} failed or hung, median step {step}"
        out.append(_rect(c - half, mid, 2 * half, base - mid, OK_COLOR, title))
        out.append(_rect(c - half, peak, 2 * half, mid - peak, FAIL_COLOR, title))
    # no more labels than fit side by side with a gap: ten-character dates touched at 14 across
    fit = int((x1 - x0) // (max(map(len, labels)) * CHAR_W + LABEL_GAP))
    for label, c in zip(thinned(labels, min(MAX_WEEK_LABELS, max(fit, 1))), centers.tolist(), strict=True):
        if label:
            out.append(svg_text(c, y0 + 14, label, anchor="middle"))
    if has_med:
        med_top = float(np.nanmax(med)) * 1.35 or 1.0

        def my(v):
            return y0 - np.asarray(v, dtype=float) / med_top * (y0 - y1)

        for t in nice_ticks(0, med_top, 4):
            if t <= med_top:
                out.append(svg_text(x1 + 6, float(my(t)) + 3.5, fmt(t)))
        out.append(svg_text(WIDE - 4, y1 - 8, "median step (s)", anchor="end"))
        finite = np.isfinite(med)
        pts = [(float(c), float(my(v))) for c, v, f in zip(centers, med, finite, strict=True) if f]
        # the line lifts its pen over a week without a median
        d = svg_path(centers[finite], my(med[finite]), ~finite[np.flatnonzero(finite) - 1])
        out.append(f'<path d="{d}" fill="none" stroke-width="1.4" style="stroke:{LINE_COLOR}"/>')
        out += [f'<circle cx="{c:.1f}" cy="{v:.1f}" r="2.8" style="fill:{LINE_COLOR}"/>' for c, v in pts]
    out.append(f'<path class="a" d="M{x0} {y0}H{x1:.1f}"/>')
    key = 30  # the legend's row, between the title and the plot
    out += [f'<rect x="{x0}" y="{key - 9}" width="10" height="10" fill="{OK_COLOR}"/>', svg_text(x0 + 14, key, "fine"),
            f'<rect x="{x0 + 52}" y="{key - 9}" width="10" height="10" fill="{FAIL_COLOR}"/>',
            svg_text(x0 + 66, key, "failed or hung")]
    if has_med:
        out += [f'<path d="M{x0 + 162} {key - 4}h16" stroke-width="1.4" style="stroke:{LINE_COLOR}"/>',
                svg_text(x0 + 182, key, "median step s")]
    return _svg("weekly", alt, WIDE, height, out)


# PNG drawings (the mail's)

@functools.cache
def _pyplot():
    """matplotlib, imported and styled on first use (only the mailed fleet report draws with it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "font.family": "DejaVu Sans",
            "font.size": 9,
            "axes.titlesize": 10,
            "axes.titleweight": "bold",
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.color": "#e5e7eb",
            "grid.linewidth": 0.6,
            "axes.edgecolor": "#9ca3af",
        }
    )
    return plt


def _finish(fig, name: str, alt: str) -> Chart:
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    return Chart(name=name, alt=alt, png=buf.getvalue())


def _ticker():
    _pyplot()
    from matplotlib import ticker

    return ticker


def _failure_bars_png(items: list[tuple[str, int]], colors: list[str], alt: str) -> Chart:
    fig, ax = _pyplot().subplots(figsize=(5.6, 0.32 * len(items) + 0.9))
    ax.barh([k for k, _ in items], [v for _, v in items], color=colors)
    for i, (_, v) in enumerate(items):
        ax.text(v, i, f" {v}", va="center", fontsize=8)
    ax.xaxis.set_major_locator(_ticker().MaxNLocator(integer=True))
    ax.set_title("Runs by outcome", loc="left")
    ax.grid(axis="y", visible=False)
    ax.margins(x=0.12)
    return _finish(fig, "failures", alt)


def _share_bars_png(groups: list[tuple[str, dict[str, float]]], phases: list[str], alt: str) -> Chart:
    labels = [_wrapped(g) for g, _ in groups]
    lines = sum(label.count("\n") + 1 for label in labels)
    fig, ax = _pyplot().subplots(figsize=(9.6, 0.2 * lines + 0.16 * len(groups) + 1.3))
    left = np.zeros(len(groups))
    for p in phases:
        vals = np.array([s.get(p, 0.0) for _, s in groups])
        ax.barh(labels, vals, left=left, color=PHASE_COLORS[p], label=p)
        left += vals
    ax.set_xlim(0, max(1.0, float(left.max())))
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(_ticker().PercentFormatter(1.0))
    ax.grid(axis="y", visible=False)
    ax.set_title("Share of step time by phase, per config group", loc="left")
    ax.legend(ncol=min(len(phases), 6), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.5 / len(groups) - 0.08),
              frameon=False)
    return _finish(fig, "shares", alt)


def _weekly_png(weeks: list[tuple[str, int, int, float | None]], alt: str) -> Chart:
    labels = [w[0] for w in weeks]
    ok = np.array([w[1] - w[2] for w in weeks])
    bad = np.array([w[2] for w in weeks])
    fig, ax = _pyplot().subplots(figsize=(9.6, 2.8))
    ax.bar(labels, ok, color=OK_COLOR, label="fine")
    ax.bar(labels, bad, bottom=ok, color=FAIL_COLOR, label="failed or hung")
    ax.set_ylabel("runs")
    ax.yaxis.set_major_locator(_ticker().MaxNLocator(integer=True))
    med = [w[3] if w[3] is not None else np.nan for w in weeks]
    if np.isfinite(med).any():
        twin = ax.twinx()
        twin.grid(False)
        twin.spines["right"].set_visible(True)
        twin.plot(labels, med, color="#111827", marker="o", linewidth=1.2, label="median step s")
        twin.set_ylabel("median step (s)")
        twin.set_ylim(bottom=0)
    ax.set_title("Runs per week (by end date)", loc="left")
    ax.set_ylim(top=max(1, int((ok + bad).max())) * 1.35)
    if np.isfinite(med).any():
        twin.set_ylim(top=np.nanmax(med) * 1.35)
    ax.legend(fontsize=8, loc="upper left", frameon=False, ncol=2)
    ax.set_xticks(range(len(labels)), thinned(labels))
    ax.tick_params(axis="x", labelsize=8)
    return _finish(fig, "weekly", alt)
