"""Charts for the reports.

Charts are inline SVG written here directly: vector (sharp at any pixel density), a value tooltip per
step column (an SVG <title>, no script), colours that follow the page's light or dark scheme, and no
matplotlib (a report renders in milliseconds). The fleet report's charts (fleet_charts) are drawn the
same way for the page and as PNG for its mail only: the common mail clients (Gmail, Outlook) show no
SVG, inline or as an image.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

import numpy as np
from markupsafe import Markup

MAX_POINTS = 1200
# PNG charts are drawn at twice the pixels they are shown at, so they stay sharp on high-density screens
SCALE = 2
PHASE_COLORS = {
    "gen": "#4e79a7",
    "reward": "#f28e2b",
    "old_log_prob": "#e15759",
    "ref": "#76b7b2",
    "values": "#59a14f",
    "adv": "#edc948",
    "update_critic": "#b07aa1",
    "update_actor": "#ff9da7",
    "update_weights": "#9c755f",
    "other": "#bab0ac",
    "testing": "#8cd17d",
    "save_checkpoint": "#d4a6c8",
}
EPISODE_COLOR = "#d62728"

# SVG panel geometry, in viewBox units (the panel scales to its box's width)
W, H = 560, 236
TOP, BOTTOM, LEFT, RIGHT = 46, 40, 58, 16
RIGHT_AXIS = 52
HOVER_COLUMNS = 140
# lines within one panel whose typical sizes differ by more than this get a panel (and a scale) each
SPLIT_RATIO = 20.0
# distinct quantities in one panel share an axis only while each spans at least 1/SPLIT_SPREAD of its range
SPLIT_SPREAD = 5.0
SERIES = 4
# Colours as CSS variables, so dark mode re-colours the inline SVG; the style travels with each chart.
STYLE = (
    ".vhc{--c0:#2563eb;--c1:#ea580c;--c2:#059669;--c3:#9333ea;--ax:#6b7280;--gr:#e5e7eb;--ep:#dc2626;"
    "--tx:#374151;--cap:#111827;display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,430px),1fr));"
    "gap:6px 16px}"
    "@media (prefers-color-scheme:dark){.vhc{--c0:#60a5fa;--c1:#fb923c;--c2:#34d399;--c3:#c084fc;--ax:#9ca3af;"
    "--gr:#2b3646;--ep:#f87171;--tx:#d1d5db;--cap:#f9fafb}figure.vector{background:var(--panel,#111827)}}"
    ".vhc svg{width:100%;height:auto;display:block;overflow:visible}"
    ".vhc text{fill:var(--tx);font:11px system-ui,-apple-system,'Segoe UI','DejaVu Sans',sans-serif}"
    ".vhc .t{font-weight:600;font-size:12.5px}.vhc .g{stroke:var(--gr)}.vhc .a{stroke:var(--ax)}"
    ".vhc .l{fill:none;stroke-width:1.4;stroke-linejoin:round}.vhc .key{fill:none}"
    + "".join(f".vhc .s{i}{{stroke:var(--c{i})}}.vhc .f{i}{{fill:var(--c{i})}}" for i in range(SERIES))
    + ".vhc .ep{fill:var(--ep);opacity:.10}.vhc .es{fill:var(--ep)}.vhc .tk{stroke:var(--ep)}"
    ".vhc .cap{stroke:var(--cap);stroke-dasharray:5 3}.vhc text.capt{fill:var(--cap)}"
    ".vhc .nan{stroke:var(--ep);stroke-dasharray:2 2}.vhc text.nant{fill:var(--ep);font-weight:600}"
    ".vhc .h{fill:var(--ax);opacity:0}.vhc .h:hover{opacity:.16}"
)


@dataclass
class Chart:
    """A drawn chart: a name unique in its report, alt text, and either inline SVG or PNG bytes."""

    name: str
    alt: str
    png: bytes = b""
    svg: Markup | None = None

    @property
    def width(self) -> int:
        """The width to show a PNG at, in CSS pixels (half its drawn pixels: see SCALE)."""
        return int.from_bytes(self.png[16:20], "big") // SCALE if self.png else 0

    @property
    def data_uri(self) -> str:
        """The PNG as a data URI for an <img src>."""
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


@dataclass
class Panel:
    """One health curve panel: a title and its (label, values) lines; `right` lines use a second axis.

    A line labelled `*total_gb` is a capacity (the device's memory), drawn as a dashed level. `distinct`
    lines are different quantities (score and reward): one shares an axis with another only while neither
    would be drawn flat under the other's range.
    """

    title: str
    lines: list[tuple[str, np.ndarray]]
    right: list[tuple[str, np.ndarray]] | None = None
    log: bool = False
    capacity: list[tuple[str, np.ndarray]] = field(default_factory=list)
    distinct: bool = False


def minmax_downsample(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Keep each bucket's min and max so spikes survive when a long series is thinned for drawing."""
    idx = _minmax_index(y, max_points)
    return x[idx], y[idx]


def _minmax_index(y: np.ndarray, max_points: int) -> np.ndarray:
    """Indices of the finite values of `y`, thinned to each bucket's min and max past `max_points`."""
    finite = np.flatnonzero(np.isfinite(y))
    if len(finite) <= max_points:
        return finite
    buckets = max_points // 2
    edges = np.linspace(0, len(finite), buckets + 1, dtype=int)
    starts = edges[:-1][np.diff(edges) > 0]
    vals = y[finite]
    lo = np.minimum.reduceat(vals, starts)
    hi = np.maximum.reduceat(vals, starts)
    keep = np.empty(2 * len(starts), dtype=int)
    # the position of each bucket's min and max: the first index where the value equals it
    bucket = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(finite))))
    is_lo = vals == lo[bucket]
    is_hi = vals == hi[bucket]
    keep[0::2] = _first_per_bucket(is_lo, bucket, len(starts))
    keep[1::2] = _first_per_bucket(is_hi, bucket, len(starts))
    return finite[np.unique(keep)]


def _first_per_bucket(mask: np.ndarray, bucket: np.ndarray, n: int) -> np.ndarray:
    pos = np.flatnonzero(mask)
    first = np.full(n, -1)
    first[bucket[pos][::-1]] = pos[::-1]
    return first


def bucket_mean(x: np.ndarray, ys: Sequence[np.ndarray], max_points: int = 400):
    """Mean of each series over equal step buckets (for stacked areas, where min/max would not add up)."""
    if len(x) <= max_points:
        return x, [np.nan_to_num(y) for y in ys]
    edges = np.linspace(0, len(x), max_points + 1, dtype=int)
    starts = edges[:-1]
    counts = np.diff(edges)
    xs = np.add.reduceat(x, starts) / counts
    out = [np.add.reduceat(np.nan_to_num(y), starts) / counts for y in ys]
    return xs, out


def fmt(v: float) -> str:
    """A short number for an axis or a tooltip: 3 significant digits, k/M for large values."""
    if not math.isfinite(v):
        return "–"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def nice_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    """Round tick values covering [lo, hi] at a 1, 2, 2.5 or 5 x 10^k spacing, about `n` of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        lo, hi = lo - (abs(lo) or 1) * 0.1, hi + (abs(hi) or 1) * 0.1
    # a range a few bits wider than a round one (a sum added up in another order) keeps the round one's ticks
    raw = (hi - lo) / max(n, 1) * (1 - 1e-9)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step + 1e-9) * step
    last = math.ceil(hi / step - 1e-9) * step
    count = int(round((last - first) / step)) + 1
    return [round(first + i * step, 12) for i in range(count)]


class _Scale:
    """A linear (or log10) map from data values onto a pixel range."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool = False):
        self.log = log
        self.lo, self.hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)
        if self.hi <= self.lo:
            self.lo, self.hi = self.lo - 0.5, self.hi + 0.5
        self.p0, self.p1 = p0, p1

    def __call__(self, v):
        v = np.log10(np.where(np.asarray(v, dtype=float) > 0, v, np.nan)) if self.log else np.asarray(v, dtype=float)
        return self.p0 + (v - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def svg_path(px: np.ndarray, py: np.ndarray, breaks: np.ndarray | None = None) -> str:
    """An SVG path through the points, lifting the pen before each point where `breaks` is set."""
    cmds = ["L"] * len(px)
    for i in np.flatnonzero(breaks).tolist() if breaks is not None else []:
        cmds[i] = "M"
    if cmds:
        cmds[0] = "M"
    return "".join(f"{c}{x:.1f} {y:.1f}" for c, x, y in zip(cmds, px.tolist(), py.tolist(), strict=True))


def _typical(y: np.ndarray) -> float:
    v = np.abs(y[np.isfinite(y)])
    v = v[v > 0]
    return float(np.median(v)) if len(v) else 0.0


def _spread(y: np.ndarray) -> tuple[float, float]:
    """The 5th and 95th percentiles of a line's finite values (its drawn range, a lone spike aside)."""
    v = y[np.isfinite(y)]
    return (float(np.percentile(v, 5)), float(np.percentile(v, 95))) if len(v) else (0.0, 0.0)


def _fits(group: list[tuple[str, np.ndarray]], line: tuple[str, np.ndarray], distinct: bool) -> bool:
    """True when `line` can share the axis of `group`: typical sizes within SPLIT_RATIO and, for distinct
    quantities, every varying line spanning at least 1/SPLIT_SPREAD of the shared range."""
    size, other = _typical(line[1]), _typical(group[0][1])
    if size and other and size / other > SPLIT_RATIO:
        return False
    if not distinct:
        return True
    ranges = [_spread(v) for _, v in [*group, line]]
    extent = max(hi for _, hi in ranges) - min(lo for lo, _ in ranges)
    return all(hi == lo or (hi - lo) * SPLIT_SPREAD >= extent for lo, hi in ranges)


def _split_scales(panel: Panel) -> list[Panel]:
    """Give a signal its own panel when it would be flattened under another's scale.

    Host memory never shares a scale with GPU memory; other lines share one while their typical
    sizes stay within SPLIT_RATIO of each other. A capacity stays with the device memory lines.
    """
    capacity = [(n, v) for n, v in panel.lines if n.endswith("total_gb")]
    lines = [(n, v) for n, v in panel.lines if not n.endswith("total_gb")]
    host = [(n, v) for n, v in lines if n.startswith("cpu_")]
    device = [(n, v) for n, v in lines if not n.startswith("cpu_")]
    groups: list[list[tuple[str, np.ndarray]]] = []
    for line in sorted(device, key=lambda nv: _typical(nv[1])):
        if groups and _fits(groups[-1], line, panel.distinct):
            groups[-1].append(line)
        else:
            groups.append([line])
    groups = [sorted(g, key=lambda nv: [n for n, _ in device].index(nv[0])) for g in groups]
    if not groups and not host:
        return [panel]
    out = []
    for i, g in enumerate(groups):
        title = panel.title if len(groups) == 1 else f"{panel.title}: {g[0][0]}"
        if host and title.startswith("Memory"):
            title = "GPU " + title[0].lower() + title[1:]
        out.append(Panel(title, g, right=panel.right if i == 0 else None, log=panel.log,
                         capacity=capacity if i == len(groups) - 1 else []))
    if host:
        out.append(Panel("Host memory (GB)" if panel.title.startswith("Memory") else f"{panel.title}: host", host,
                         log=panel.log))
    if not groups and capacity:
        out[0].capacity = capacity
    return out


def _is_sparse(y: np.ndarray) -> bool:
    """True for a signal logged on few steps (validation): drawn as points, not a joined line."""
    finite = np.isfinite(y)
    n = int(finite.sum())
    if n == 0:
        return False
    span = np.flatnonzero(finite)
    return n <= 0.5 * (span[-1] - span[0] + 1) or n == 1


def _wide_range(values: list[np.ndarray]) -> bool:
    """True when positive values span more than two decades, so a log axis reads better."""
    v = np.concatenate(values)
    v = v[np.isfinite(v) & (v > 0)]
    return len(v) > 0 and bool(v.max() / max(np.median(v), 1e-12) > 100)


def _y_scale(values: list[np.ndarray], log: bool) -> tuple[_Scale, list[float]]:
    """The y scale of an axis over these values (plot area rows) and its tick values."""
    v = np.concatenate([np.asarray(a, dtype=float) for a in values]) if values else np.array([])
    v = v[np.isfinite(v)]
    if log:
        v = v[v > 0]
    if len(v) == 0:
        v = np.array([0.0, 1.0])
    lo, hi = float(v.min()), float(v.max())
    if log:
        lo_e, hi_e = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        hi_e = max(hi_e, lo_e + 1)
        ticks = [10.0 ** e for e in range(lo_e, hi_e + 1)]
        return _Scale(ticks[0], ticks[-1], H - BOTTOM, TOP, log=True), ticks
    ticks = nice_ticks(lo, hi)
    return _Scale(ticks[0], ticks[-1], H - BOTTOM, TOP), ticks


def svg_text(x: float, y: float, s: str, cls: str = "", anchor: str = "start") -> str:
    """An SVG <text> at (x, y), escaped, with an optional class and anchor."""
    c = f' class="{cls}"' if cls else ""
    a = "" if anchor == "start" else f' text-anchor="{anchor}"'
    return f'<text x="{x:.1f}" y="{y:.1f}"{c}{a}>{escape(s)}</text>'


def _x_axis(xs: _Scale, x0: float, x1: float, right: float) -> list[str]:
    """Vertical grid lines and step labels under the plot (on every panel)."""
    out = []
    for t in nice_ticks(x0, x1, 5):
        # steps are whole numbers: a short run gets no 1.5
        if t < x0 - 1e-9 or t > x1 + 1e-9 or not float(t).is_integer():
            continue
        px = float(xs(t))
        out.append(f'<path class="g" d="M{px:.1f} {TOP}V{H - BOTTOM}"/>')
        out.append(svg_text(px, H - BOTTOM + 15, fmt(t), anchor="middle"))
    out.append(svg_text(W - right, H - 8, "step", anchor="end"))
    return out


def _legend(items: list[tuple[int, str, bool]]) -> list[str]:
    """Legend entries (series number, label, drawn as points) on the bottom row, left of the axis name."""
    out = []
    x = 4.0
    for k, label, points in items:
        if points:
            out.append(f'<circle class="f{k}" cx="{x + 7:.1f}" cy="{H - 12}" r="3"/>')
        else:
            out.append(f'<path class="key s{k}" d="M{x:.1f} {H - 12}h14" stroke-width="2.5"/>')
        out.append(svg_text(x + 18, H - 8, label))
        x += 18 + 6.4 * len(label) + 14
    return out


def _episode_marks(xs: _Scale, episodes, anomaly_steps: np.ndarray, right: float) -> tuple[list[str], list[str]]:
    """Light shading behind the curves, and a strip above the plot with each episode's bar and class."""
    back, strip = [], []
    for first, last, cls in episodes:
        a, b = float(xs(first - 0.5)), float(xs(last + 0.5))
        if b - a < 2:
            a, b = (a + b) / 2 - 1, (a + b) / 2 + 1
        a, b = max(a, LEFT), min(b, W - right)
        back.append(f'<rect class="ep" x="{a:.1f}" y="{TOP}" width="{b - a:.1f}" height="{H - TOP - BOTTOM}"/>')
        span = f"step {first}" if first == last else f"steps {first}–{last}"
        strip.append(f'<rect class="es" x="{a:.1f}" y="{TOP - 12}" width="{b - a:.1f}" height="6">'
                     f'<title>anomaly episode: {escape(str(cls))}, {span}</title></rect>')
    if len(anomaly_steps):
        px = np.unique(np.round(xs(np.asarray(anomaly_steps, dtype=float)), 1))
        px = px[(px >= LEFT) & (px <= W - right)]
        if len(px):
            d = "".join(f"M{p:.1f} {TOP - 5}v5" for p in px.tolist())
            strip.append(f'<path class="tk" d="{d}"><title>{len(anomaly_steps)} anomalous step(s)</title></path>')
    return back, strip


def _nan_marks(xs: _Scale, nan_steps: np.ndarray, right: float) -> list[str]:
    """A dashed line at each step that logged a NaN/inf value (a curve only breaks there), labelled once."""
    steps = np.unique(np.asarray(nan_steps, dtype=float))
    px = xs(steps)
    keep = (px >= LEFT) & (px <= W - right)
    if not keep.any():
        return []
    out = [f'<path class="nan" d="M{p:.1f} {TOP}V{H - BOTTOM}"><title>NaN/inf logged at step {int(s)}</title></path>'
           for p, s in zip(px[keep].tolist(), steps[keep].tolist(), strict=True)]
    out.append(svg_text(float(px[keep][0]) + 3, TOP + 10, "NaN", "nant"))
    return out


def _columns(steps: np.ndarray, n: int) -> list[tuple[int, int]]:
    """Index ranges [a, b) of `steps` for up to `n` hover columns of equal step width."""
    if len(steps) == 0:
        return []
    lo, hi = float(steps[0]), float(steps[-1])
    if len(steps) <= n or hi <= lo:
        return [(i, i + 1) for i in range(len(steps))]
    edges = np.searchsorted(steps, np.linspace(lo, hi, n + 1)[1:-1], side="left")
    bounds = np.concatenate([[0], edges, [len(steps)]])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def _hover(steps: np.ndarray, xs: _Scale, series: list[tuple[str, np.ndarray]], right: float,
           episodes=()) -> list[str]:
    """Transparent step columns over the plot, each titled with the values of its steps."""
    cols = _columns(steps, HOVER_COLUMNS)
    if not cols:
        return []
    starts = np.array([a for a, _ in cols])
    ends = np.array([b for _, b in cols])
    half = 0.5 * (float(steps[-1] - steps[0]) / max(len(cols), 1)) if len(steps) > len(cols) else 0.5
    single = ends - starts == 1
    s0, s1 = steps[starts], steps[ends - 1]
    after = np.where(ends < len(steps), steps[np.minimum(ends, len(steps) - 1)], s1)
    x0 = np.maximum(np.where(single, xs(s0 - half), xs(s0)), LEFT)
    x1 = np.minimum(np.where(single, xs(s1 + half), xs(after)), W - right)
    first, last = s0.tolist(), s1.tolist()
    heads = [f"step {a:.0f}" if one else f"steps {a:.0f}–{b:.0f}" for a, b, one in zip(first, last, single.tolist(),
                                                                                          strict=True)]
    # each series' part of every column's title (None where the column has no value of it)
    values = [_value_texts(escape(name), np.fmin.reduceat(np.where(np.isfinite(y), y, np.nan), starts).tolist(),
                           np.fmax.reduceat(np.where(np.isfinite(y), y, np.nan), starts).tolist())
              for name, y in series]
    titles = [" · ".join([p for p in parts if p is not None]) for parts in zip(heads, *values, strict=True)]
    for e_first, e_last, cls in episodes:
        mark = f" · anomaly: {escape(str(cls))}"
        titles = [t + mark if e_first <= b and e_last >= a else t for t, a, b in zip(titles, first, last, strict=True)]
    return [f'<rect class="h" x="{a:.1f}" y="{TOP}" width="{w:.1f}" height="{H - TOP - BOTTOM}">'
            f"<title>{t}</title></rect>"
            for a, w, t, shown in zip(x0.tolist(), (x1 - x0).tolist(), titles, (x1 > x0).tolist(), strict=True)
            if shown]


def _value_texts(name: str, lows: list[float], highs: list[float]) -> list[str | None]:
    """A series' value (or range) in each hover column: `name value`, or None where it has none."""
    return [None if not math.isfinite(lo) else f"{name} {fmt(lo)}" if lo == hi else f"{name} {fmt(lo)}–{fmt(hi)}"
            for lo, hi in zip(lows, highs, strict=True)]


def _y_axis(ys: _Scale, ticks: list[float], x: float, anchor: str, grid: bool, right: float) -> list[str]:
    out = []
    for t in ticks:
        py = float(ys(t))
        if grid:
            out.append(f'<path class="g" d="M{LEFT} {py:.1f}H{W - right}"/>')
        out.append(svg_text(x, py + 3.5, fmt(t), anchor=anchor))
    return out


def _series_marks(steps: np.ndarray, y: np.ndarray, xs: _Scale, ys: _Scale, cls: str, width: float) -> str:
    """A signal as a line broken at missing steps, or as points when it is logged on few steps."""
    if ys.log:
        y = np.where(y > 0, y, np.nan)
    if _is_sparse(y):
        idx = _minmax_index(y, int(width))
        px, py = xs(steps[idx]), ys(y[idx])
        dots = "".join(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.6"/>' for a, b in zip(px.tolist(), py.tolist(),
                                                                                     strict=True))
        return f'<g class="f{cls[1:]}">{dots}</g>'
    idx = _minmax_index(y, int(2 * width))
    missing = np.cumsum(~np.isfinite(y))
    breaks = np.zeros(len(idx), dtype=bool)
    breaks[1:] = missing[idx[1:]] != missing[idx[:-1]]
    return f'<path class="l {cls}" d="{svg_path(xs(steps[idx]), ys(y[idx]), breaks)}"/>'


def _panel_svg(steps: np.ndarray, panel: Panel, episodes, anomaly_steps: np.ndarray, xlim,
               nan_steps: Sequence[float] = ()) -> str:
    """One small-multiple panel: title and legend, episode strip, grid, curves, axes and hover columns."""
    right = RIGHT_AXIS if panel.right else RIGHT
    x0, x1 = xlim
    xs = _Scale(x0, x1, LEFT, W - right)
    log = panel.log and _wide_range([v for _, v in panel.lines])
    cap_levels = [(n, float(np.nanmedian(v))) for n, v in panel.capacity if np.isfinite(v).any()]
    ys, yticks = _y_scale([v for _, v in panel.lines] + [np.array([c]) for _, c in cap_levels], log)
    back, strip = _episode_marks(xs, episodes, anomaly_steps, right)
    out = [f'<svg viewBox="0 0 {W} {H}" role="img" aria-label="{escape(panel.title)}" data-panel="{escape(panel.title)}">',
           svg_text(4, 16, panel.title, "t"), *back, *_y_axis(ys, yticks, LEFT - 6, "end", True, right),
           *_x_axis(xs, x0, x1, right)]
    legend = [(i % SERIES, n, _is_sparse(y)) for i, (n, y) in enumerate(panel.lines)]
    width = W - LEFT - right
    for i, (_, y) in enumerate(panel.lines):
        out.append(_series_marks(steps, y, xs, ys, f"s{i % SERIES}", width))
    for _name, level in cap_levels:
        py = float(ys(level))
        out.append(f'<path class="cap" d="M{LEFT} {py:.1f}H{W - right}"/>')
        out.append(svg_text(LEFT + 4, py - 4, f"GPU capacity {fmt(level)} GB", "capt"))
    if panel.right:
        rs, rticks = _y_scale([v for _, v in panel.right], False)
        out += _y_axis(rs, rticks, W - right + 6, "start", False, right)
        for j, (name, y) in enumerate(panel.right):
            k = (len(panel.lines) + j) % SERIES
            out.append(_series_marks(steps, y, xs, rs, f"s{k}", width))
            legend.append((k, f"{name} (right)", _is_sparse(y)))
    out += _nan_marks(xs, nan_steps, right)
    if len(legend) > 1:
        out += _legend(legend)
    out.append(f'<path class="a" d="M{LEFT} {H - BOTTOM}H{W - right}"/>')
    out += strip
    out += _hover(steps, xs, panel.lines + (panel.right or []) + panel.capacity, right, episodes)
    out.append("</svg>")
    return "".join(out)


def svg_chart(name: str, alt: str, panels_svg: list[str], after: str = "") -> Chart:
    """A chart of inline SVG panels (and `after`, HTML below them) in one labelled group, with the charts' style."""
    html = (f'<div class="vhc" role="group" data-chart="{name}" aria-label="{escape(alt)}">'
            f"<style>{STYLE}</style>{''.join(panels_svg)}{after}</div>")
    return Chart(name=name, alt=alt, svg=Markup(html))


def _one_point(steps: np.ndarray) -> bool:
    """Fewer than two steps: a chart the page's width would draw one point (its tables give the values)."""
    return len(np.unique(steps[np.isfinite(steps)])) < 2


def health_chart(
    steps: np.ndarray,
    panels: list[Panel],
    episodes: Sequence[tuple[int, int, str]],
    anomaly_steps: np.ndarray,
    nan_steps: Sequence[float] = (),
) -> Chart | None:
    """Small multiples of training curves, one scale per signal that needs its own; every anomaly episode
    is marked above each panel (and lightly shaded behind its curves), every anomalous step ticked, every
    step that logged a NaN/inf value marked where its curves break."""
    steps = np.asarray(steps, dtype=float)
    panels = [p for p in panels if any(np.isfinite(v).any() for _, v in p.lines + (p.right or []))]
    if not panels or _one_point(steps):
        return None
    panels = [q for p in panels for q in _split_scales(p)]
    panels = [p for p in panels if any(np.isfinite(v).any() for _, v in p.lines + (p.right or []))]
    lo, hi = float(np.nanmin(steps)), float(np.nanmax(steps))
    xlim = (lo - 0.5, hi + 0.5) if hi - lo < 10 else (lo, hi)
    anomaly_steps = np.asarray(anomaly_steps, dtype=float)
    svgs = [_panel_svg(steps, p, episodes, anomaly_steps, xlim, nan_steps) for p in panels]
    alt = f"Training curves: {', '.join(p.title for p in panels)}; {len(episodes)} anomaly episode(s) marked red"
    return svg_chart("health", alt, svgs)


def phase_chart(steps: np.ndarray, phases: dict[str, np.ndarray]) -> Chart | None:
    """Per-step stacked phase times (seconds): bars for a short run, bucket-mean areas for a long one."""
    names = [p for p, v in phases.items() if np.isfinite(v).any() and np.nanmax(v) > 0]
    steps = np.asarray(steps, dtype=float)
    if not names or _one_point(steps):
        return None
    x, ys = bucket_mean(steps, [phases[p] for p in names])
    x = np.asarray(x, dtype=float)
    tops = np.cumsum(np.vstack(ys), axis=0)
    lo, hi = float(x.min()), float(x.max())
    bars = len(x) <= 60
    xlim = (lo - 0.5, hi + 0.5) if bars or hi - lo < 10 else (lo, hi)
    xs = _Scale(*xlim, LEFT, W - RIGHT)
    yscale, yticks = _y_scale([np.array([0.0]), tops[-1]], False)
    out = [f'<svg viewBox="0 0 {W} {H}" role="img" aria-label="Time per step by phase" data-panel="phases">',
           svg_text(4, 16, "Time per step by phase (s)" + (" · bucket means" if len(x) < len(steps) else ""), "t"),
           *_y_axis(yscale, yticks, LEFT - 6, "end", True, RIGHT), *_x_axis(xs, *xlim, RIGHT)]
    base = np.zeros(len(x))
    for name, top in zip(names, tops, strict=True):
        color = PHASE_COLORS.get(name, "#999999")
        if bars:
            half = 0.42 * (float(xs(1.0)) - float(xs(0.0)))
            px, y0, y1 = xs(x).tolist(), yscale(base).tolist(), yscale(top).tolist()
            d = "".join(f"M{a - half:.1f} {b:.1f}V{c:.1f}H{a + half:.1f}V{b:.1f}Z" for a, b, c in zip(px, y0, y1,
                                                                                                  strict=True))
        else:
            px = xs(x)
            d = svg_path(np.concatenate([px, px[::-1]]), np.concatenate([yscale(top), yscale(base)[::-1]])) + "Z"
        out.append(f'<path fill="{color}" d="{d}"><title>{escape(name)}</title></path>')
        base = top
    out.append(f'<path class="a" d="M{LEFT} {H - BOTTOM}H{W - RIGHT}"/>')
    out += _hover(x, xs, [(f"{n} s", y) for n, y in zip(names, ys, strict=True)], RIGHT)
    out.append("</svg>")
    legend = "".join(f'<span style="white-space:nowrap;margin-right:12px"><span style="display:inline-block;width:10px;'
                     f'height:10px;background:{PHASE_COLORS.get(n, "#999999")};margin-right:4px"></span>{escape(n)}'
                     "</span>" for n in names)
    alt = "Stacked time per step by phase: " + ", ".join(names)
    return svg_chart("phases", alt, ["".join(out)], f'<p style="font-size:12px;margin:2px 0 0">{legend}</p>')


def clock_chart(steps: np.ndarray, end_s: np.ndarray, log_end_s: float | None) -> Chart | None:
    """Each step against the wall-clock time its line was written (minutes from the first), and a dashed
    level from the last step to the log's last clock: a stall after it shows as a long flat line."""
    keep = np.isfinite(steps) & np.isfinite(end_s)
    steps, end_s = np.asarray(steps, dtype=float)[keep], np.asarray(end_s, dtype=float)[keep]
    if _one_point(steps):
        return None
    t0 = float(end_s.min())
    minutes = (end_s - t0) / 60
    last = float(minutes[np.argmax(steps)])
    tail = (log_end_s - t0) / 60 if log_end_s is not None and math.isfinite(log_end_s) else last
    tail = max(tail, last)
    xs = _Scale(0.0, max(tail, float(minutes.max()), 1e-3), LEFT, W - RIGHT)
    ys, yticks = _y_scale([steps], False)
    out = [f'<svg viewBox="0 0 {W} {H}" role="img" aria-label="Steps against wall-clock time" data-panel="clock">',
           svg_text(4, 16, "Step reached against wall-clock time", "t"),
           *_y_axis(ys, yticks, LEFT - 6, "end", True, RIGHT)]
    for t in nice_ticks(0.0, float(xs.hi), 5):
        if t <= xs.hi + 1e-9:
            px = float(xs(t))
            out.append(f'<path class="g" d="M{px:.1f} {TOP}V{H - BOTTOM}"/>')
            out.append(svg_text(px, H - BOTTOM + 15, fmt(t), anchor="middle"))
    out.append(svg_text(W - RIGHT, H - 8, "minutes since the first step", anchor="end"))
    order = np.argsort(minutes, kind="stable")
    out.append(f'<path class="l s0" d="{svg_path(xs(minutes[order]), ys(steps[order]))}"/>')
    if tail - last > 0:
        y = float(ys(steps.max()))
        gap = f"no step for {fmt(tail - last)} min, to the log's last line"
        out.append(f'<path class="nan" data-stall="{tail - last:.1f}" d="M{float(xs(last)):.1f} {y:.1f}'
                   f'H{float(xs(tail)):.1f}"><title>{escape(gap)}</title></path>')
        # named when longer than a typical step: a few seconds of shutdown after the last step are no stall
        if tail - last > float(np.median(np.diff(np.sort(minutes)))):
            out.append(svg_text(float(xs(tail)), y - 6, gap, "nant", anchor="end"))
    out.append(f'<path class="a" d="M{LEFT} {H - BOTTOM}H{W - RIGHT}"/>')
    out.append("</svg>")
    return svg_chart("clock", "Steps against wall-clock time; a flat line at the end is time with no step", out)
