"""Charts drawn at build time with matplotlib (Agg): PNG bytes the templates embed as data URIs."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import ticker  # noqa: E402

MAX_POINTS = 1200
# drawn at twice the pixels they are shown at, so they stay sharp on high-density screens
SCALE = 2
DPI = 100 * SCALE
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
FAIL_COLOR = "#c0392b"
OK_COLOR = "#2e7d32"

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
        "svg.fonttype": "none",
    }
)


@dataclass
class Chart:
    """A drawn chart: a name unique in its report, alt text and PNG bytes."""

    name: str
    alt: str
    png: bytes

    @property
    def width(self) -> int:
        """The width to show it at, in CSS pixels (half its drawn pixels: see SCALE)."""
        return int.from_bytes(self.png[16:20], "big") // SCALE

    @property
    def data_uri(self) -> str:
        """The PNG as a data URI for an <img src>."""
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


def _finish(fig, name: str, alt: str, tight: bool = True) -> Chart:
    buf = io.BytesIO()
    # A tight bounding box measures every label again; figures laid out by hand skip it (it is most of the cost).
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight" if tight else None, facecolor="white")
    plt.close(fig)
    return Chart(name=name, alt=alt, png=buf.getvalue())


def minmax_downsample(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Keep each bucket's min and max so spikes survive when a long series is thinned for drawing."""
    finite = np.isfinite(y)
    x, y = x[finite], y[finite]
    if len(x) <= max_points:
        return x, y
    buckets = max_points // 2
    edges = np.linspace(0, len(x), buckets + 1, dtype=int)
    keep = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        if hi <= lo:
            continue
        seg = y[lo:hi]
        keep.extend(sorted({lo + int(np.argmin(seg)), lo + int(np.argmax(seg))}))
    idx = np.asarray(keep)
    return x[idx], y[idx]


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


def phase_chart(steps: np.ndarray, phases: dict[str, np.ndarray]) -> Chart | None:
    """Per-step stacked phase times (seconds)."""
    names = [p for p, v in phases.items() if np.isfinite(v).any() and np.nanmax(v) > 0]
    if not names or len(steps) == 0:
        return None
    x, ys = bucket_mean(steps, [phases[p] for p in names])
    fig, ax = plt.subplots(figsize=(9.6, 3.2))
    colors = [PHASE_COLORS.get(p, "#999999") for p in names]
    if len(x) <= 60:
        bottom = np.zeros(len(x))
        for name, y, c in zip(names, ys, colors, strict=True):
            ax.bar(x, y, bottom=bottom, label=name, color=c, width=0.85, linewidth=0)
            bottom += y
    else:
        ax.stackplot(x, *ys, labels=names, colors=colors, linewidth=0)
    ax.set_xlabel("step" + (" (bucket means)" if len(x) < len(steps) else ""))
    ax.set_ylabel("seconds")
    ax.set_title("Time per step by phase")
    ax.margins(x=0.01)
    ax.legend(ncol=min(len(names), 6), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    return _finish(fig, "phases", "Stacked time per step by phase: " + ", ".join(names))


@dataclass
class Panel:
    """One health curve panel: a title and its (label, values) lines; `right` lines use a second axis."""

    title: str
    lines: list[tuple[str, np.ndarray]]
    right: list[tuple[str, np.ndarray]] | None = None
    log: bool = False


def health_chart(
    steps: np.ndarray,
    panels: list[Panel],
    episodes: Sequence[tuple[int, int, str]],
    anomaly_steps: np.ndarray,
) -> Chart | None:
    """Small multiples of training curves; every anomaly episode is shaded and every anomalous step ticked."""
    fig = health_figure(steps, panels, episodes, anomaly_steps)
    if fig is None:
        return None
    titles = ", ".join(ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left"))
    alt = f"Training curves: {titles}; {len(episodes)} anomaly episode(s) shaded red"
    return _finish(fig, "health", alt, tight=False)


def health_figure(
    steps: np.ndarray,
    panels: list[Panel],
    episodes: Sequence[tuple[int, int, str]],
    anomaly_steps: np.ndarray,
):
    """The figure behind `health_chart` (curves thinned, episodes and anomalous steps all drawn)."""
    panels = [p for p in panels if any(np.isfinite(v).any() for _, v in p.lines + (p.right or []))]
    if not panels or len(steps) == 0:
        return None
    cols = 2
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(10, 2.5 * rows), sharex=True, squeeze=False)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"]
    # An episode of a few steps in a long run would be narrower than a pixel: give its shading a minimum width.
    pad = max(0.5, 0.002 * float(np.nanmax(steps) - np.nanmin(steps)))
    for ax, panel in zip(axes.flat, panels, strict=False):
        for (first, last, _cls) in episodes:
            ax.axvspan(first - pad, last + pad, color=EPISODE_COLOR, alpha=0.18, linewidth=0)
        for i, (label, y) in enumerate(panel.lines):
            xs, ys = minmax_downsample(steps, y)
            ax.plot(xs, ys, color=palette[i % len(palette)], linewidth=1.0, label=label)
        if panel.log and _wide_range([v for _, v in panel.lines]):
            ax.set_yscale("log")
        if panel.right:
            twin = ax.twinx()
            twin.grid(False)
            twin.spines["right"].set_visible(True)
            for label, y in panel.right:
                xs, ys = minmax_downsample(steps, y)
                twin.plot(xs, ys, color="#6b7280", linewidth=0.7, alpha=0.7, label=label)
            twin.set_ylabel(panel.right[0][0], fontsize=8)
        if len(anomaly_steps):
            ax.plot(
                anomaly_steps,
                np.ones(len(anomaly_steps)),
                "|",
                color=EPISODE_COLOR,
                markersize=7,
                transform=ax.get_xaxis_transform(),
                clip_on=False,
            )
        ax.set_title(panel.title, loc="left")
        if ax is axes.flat[0] and len(episodes) <= 12:
            for first, _last, cls in episodes:
                ax.text(first, 0.97, cls, transform=ax.get_xaxis_transform(), fontsize=7, color=EPISODE_COLOR,
                        va="top", ha="left", rotation=90)
        if len(panel.lines) > 1 or panel.right:
            handles, labels = ax.get_legend_handles_labels()
            if panel.right:
                h2, l2 = twin.get_legend_handles_labels()
                handles, labels = handles + h2, labels + l2
            ax.legend(handles, labels, fontsize=7, loc="best", frameon=True, framealpha=0.85, edgecolor="none")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    height = 2.5 * rows
    fig.subplots_adjust(left=0.07, right=0.93, top=1 - 0.3 / height, bottom=0.5 / height, hspace=0.45, wspace=0.3)
    return fig


def _wide_range(values: list[np.ndarray]) -> bool:
    """True when positive values span more than two decades, so a log axis reads better."""
    v = np.concatenate(values)
    v = v[np.isfinite(v) & (v > 0)]
    return len(v) > 0 and bool(v.max() / max(np.median(v), 1e-12) > 100)


def failure_bars(counts: dict[str, int]) -> Chart | None:
    """Runs per failure class."""
    if not counts:
        return None
    items = sorted(counts.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(5.6, 0.32 * len(items) + 0.9))
    # a run stopped on purpose or a log cut short is no failure: neutral grey
    tone = {"completed": OK_COLOR, "hang": "#e69f00", "interrupted": "#94a3b8", "no_outcome": "#94a3b8"}
    colors = [tone.get(k, FAIL_COLOR) for k, _ in items]
    ax.barh([k for k, _ in items], [v for _, v in items], color=colors)
    for i, (_, v) in enumerate(items):
        ax.text(v, i, f" {v}", va="center", fontsize=8)
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_title("Runs by outcome", loc="left")
    ax.grid(axis="y", visible=False)
    ax.margins(x=0.12)
    return _finish(fig, "failures", "Runs by outcome: " + ", ".join(f"{k} {v}" for k, v in reversed(items)))


def share_bars(groups: list[tuple[str, dict[str, float]]]) -> Chart | None:
    """Median phase shares of step time per config group, as 100 % stacked bars."""
    groups = [(g, s) for g, s in groups if s]
    if not groups:
        return None
    phases = [p for p in PHASE_COLORS if any(s.get(p) for _, s in groups)]
    fig, ax = plt.subplots(figsize=(9.6, 0.36 * len(groups) + 1.3))
    labels = [g if len(g) <= 60 else g[:57] + "…" for g, _ in groups]
    left = np.zeros(len(groups))
    for p in phases:
        vals = np.array([s.get(p, 0.0) for _, s in groups])
        ax.barh(labels, vals, left=left, color=PHASE_COLORS[p], label=p)
        left += vals
    ax.set_xlim(0, max(1.0, float(left.max())))
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(ticker.PercentFormatter(1.0))
    ax.grid(axis="y", visible=False)
    ax.set_title("Share of step time by phase, per config group", loc="left")
    ax.legend(ncol=min(len(phases), 6), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.5 / len(groups) - 0.08),
              frameon=False)
    return _finish(fig, "shares", "Phase shares per config group")


def weekly_chart(weeks: list[tuple[str, int, int, float | None]]) -> Chart | None:
    """Runs per week split into failed and fine, with the median step time on a second axis."""
    if not weeks:
        return None
    labels = [w[0] for w in weeks]
    ok = np.array([w[1] - w[2] for w in weeks])
    bad = np.array([w[2] for w in weeks])
    fig, ax = plt.subplots(figsize=(9.6, 2.8))
    ax.bar(labels, ok, color=OK_COLOR, label="fine")
    ax.bar(labels, bad, bottom=ok, color=FAIL_COLOR, label="failed or hung")
    ax.set_ylabel("runs")
    ax.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
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
    ax.tick_params(axis="x", labelsize=8)
    return _finish(fig, "weekly", "Runs per week, failed vs fine, with median step time")
