"""The run report's SVG charts: scales, capacity, validation points, episode marks, hover values."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from pipeline.report import charts


def _panels(chart: charts.Chart) -> dict[str, ET.Element]:
    root = ET.fromstring(str(chart.svg))
    return {svg.get("data-panel"): svg for svg in root.iter("svg")}


def _texts(svg: ET.Element) -> list[str]:
    return [t.text or "" for t in svg.iter("text")]


def _tick_values(svg: ET.Element) -> list[float]:
    """The left axis labels: the numeric texts anchored at their end."""
    return [float(t.text) for t in svg.iter("text") if t.get("text-anchor") == "end" and t.text
            and re.fullmatch(r"-?[0-9.]+", t.text)]


def _titles(svg: ET.Element, cls: str) -> list[str]:
    return [r.find("title").text for r in svg.iter("rect") if r.get("class") == cls]


STEPS = np.arange(1, 41, dtype=float)


def test_long_runs_are_thinned_but_keep_spikes():
    n = 20_000
    steps = np.arange(1, n + 1, dtype=float)
    y = np.sin(steps / 300)
    y[12_345] = 50.0
    xs, ys = charts.minmax_downsample(steps, y)
    assert len(xs) <= charts.MAX_POINTS and 50.0 in ys and xs[list(ys).index(50.0)] == 12_346
    episodes = [(s, s + 2, "kl_spike") for s in range(500, n, 900)]
    anomalous = np.array([float(s) for s in range(100, n, 97)])
    chart = charts.health_chart(steps, [charts.Panel("KL", [("ppo_kl", y)])], episodes, anomalous)
    (svg,) = _panels(chart).values()
    bars = _titles(svg, "es")
    assert len(bars) == len(episodes) and bars[0] == "anomaly episode: kl_spike, steps 500–502"
    ticks = [p for p in svg.iter("path") if p.get("class") == "tk"]
    assert ticks[0].find("title").text == f"{len(anomalous)} anomalous step(s)"
    curve = [p for p in svg.iter("path") if p.get("class") == "l s0"][0]
    assert len(re.findall(r"[ML]", curve.get("d"))) <= 2 * (charts.W - charts.LEFT - charts.RIGHT)
    # the spike at step 12,346 is in its hover column's range
    spike = [t for t in _titles(svg, "h") if re.search(r"ppo_kl -?[0-9.]+–50(?: |$)", t)]
    assert len(spike) == 1 and int(spike[0].split()[1].split("–")[0]) <= 12_346 <= int(spike[0].split()[1].split("–")[1])


def test_actor_grad_norm_gets_its_own_scale():
    actor = 0.3 + 0.6 * (STEPS % 7) / 7  # 0.3 .. 0.81
    critic = 40 + STEPS  # 41 .. 80
    chart = charts.health_chart(STEPS, [charts.Panel("Grad norm", [("grad_norm", actor),
                                                                   ("critic_grad_norm", critic)])], [], np.array([]))
    panels = _panels(chart)
    assert set(panels) == {"Grad norm: grad_norm", "Grad norm: critic_grad_norm"}
    assert max(_tick_values(panels["Grad norm: grad_norm"])) <= 1.0
    assert min(_tick_values(panels["Grad norm: critic_grad_norm"])) >= 40


def test_gpu_memory_against_capacity_and_host_memory_apart():
    alloc, reserved = 30 + STEPS / 10, 60 + STEPS / 20
    host = 400 + STEPS
    total = np.full(len(STEPS), 80.0)
    chart = charts.health_chart(STEPS, [charts.Panel("Memory (GB)", [
        ("mem_allocated_gb", alloc), ("mem_reserved_gb", reserved), ("cpu_memory_used_gb", host),
        ("mem_total_gb", total)])], [], np.array([]))
    panels = _panels(chart)
    assert set(panels) == {"GPU memory (GB)", "Host memory (GB)"}
    gpu = panels["GPU memory (GB)"]
    assert "GPU capacity 80 GB" in _texts(gpu)
    assert 80 <= max(_tick_values(gpu)) <= 100
    assert min(_tick_values(panels["Host memory (GB)"])) >= 400


def test_sparse_validation_is_drawn_as_points():
    val = np.full(len(STEPS), np.nan)
    val[::10] = [0.4, 0.5, 0.55, 0.6]
    train = 0.2 + STEPS / 100
    chart = charts.health_chart(STEPS, [charts.Panel("Reward", [("score_mean", train), ("val_core_mean", val)])],
                                [], np.array([]))
    (svg,) = _panels(chart).values()
    dots = [g for g in svg.iter("g") if g.get("class") == "f1"]
    assert len(dots) == 1 and len(list(dots[0].iter("circle"))) == 4
    assert not [p for p in svg.iter("path") if p.get("class") == "l s1"]
    assert [p for p in svg.iter("path") if p.get("class") == "l s0"]


def test_a_gap_in_a_signal_lifts_the_pen():
    y = np.array([1.0, 2, 3, np.nan, 5, 6, 7, 8])
    chart = charts.health_chart(np.arange(8.0), [charts.Panel("KL", [("ppo_kl", y)])], [], np.array([]))
    (svg,) = _panels(chart).values()
    d = [p for p in svg.iter("path") if p.get("class") == "l s0"][0].get("d")
    assert d.count("M") == 2 and d.count("L") == 5


def test_every_panel_has_step_labels_and_hover_values():
    kl = np.round(0.01 * STEPS, 4)
    entropy = 1.5 - STEPS / 100
    chart = charts.health_chart(STEPS, [charts.Panel("KL", [("ppo_kl", kl)]), charts.Panel("Entropy",
                                [("entropy", entropy)])], [(7, 9, "kl_spike")], np.array([7.0, 8.0, 9.0]))
    for svg in _panels(chart).values():
        texts = _texts(svg)
        assert "step" in texts and {"10", "20", "30", "40"} <= set(texts)
    hover = _titles(_panels(chart)["KL"], "h")
    assert len(hover) == len(STEPS)
    assert hover[6] == "step 7 · ppo_kl 0.07 · anomaly: kl_spike"
    assert hover[19] == "step 20 · ppo_kl 0.2"


def test_episode_marks_sit_above_and_behind_the_curves():
    y = np.sin(STEPS)
    chart = charts.health_chart(STEPS, [charts.Panel("KL", [("ppo_kl", y)])], [(10, 14, "kl_spike")],
                                np.array([10.0]))
    (svg,) = _panels(chart).values()
    order = [(e.tag, e.get("class")) for e in svg]
    assert order.index(("rect", "ep")) < order.index(("path", "l s0"))
    strip = [r for r in svg.iter("rect") if r.get("class") == "es"][0]
    assert float(strip.get("y")) + float(strip.get("height")) <= charts.TOP
    assert not [t for t in _texts(svg) if "kl_spike" in t]


def test_phase_chart_stacks_the_phases_with_hover_seconds():
    steps = np.arange(1, 6, dtype=float)
    gen = np.array([10.0, 11, 12, 13, 14])
    update = np.array([5.0, 5, 5, 5, 5])
    chart = charts.phase_chart(steps, {"gen": gen, "update_actor": update})
    (svg,) = _panels(chart).values()
    assert _titles(svg, "h")[2] == "step 3 · gen s 12 · update_actor s 5"
    assert max(_tick_values(svg)) >= 19 and min(_tick_values(svg)) == 0


def test_colours_follow_the_page_scheme():
    chart = charts.health_chart(STEPS, [charts.Panel("KL", [("ppo_kl", STEPS)])], [], np.array([]))
    style = ET.fromstring(str(chart.svg)).find("style").text
    dark = style[style.index("prefers-color-scheme:dark"):]
    light_c0 = re.search(r"--c0:(#[0-9a-f]+)", style).group(1)
    assert re.search(r"--c0:(#[0-9a-f]+)", dark).group(1) != light_c0


def test_fleet_charts_are_twice_the_pixels_with_their_values_in_words():
    """Fleet charts stay PNG (the report is mailed); the alt text, also the hover title, carries the values."""
    chart = charts.weekly_chart([("11-02", 5, 1, 42.0), ("11-09", 3, 0, None)])
    assert chart.png[:8] == b"\x89PNG\r\n\x1a\n" and chart.svg is None
    assert int.from_bytes(chart.png[16:20], "big") >= 2 * chart.width
    assert chart.alt == "Runs per week (week: runs, failed or hung, median step): 11-02: 5, 1, 42 s; 11-09: 3, 0, –"
    shares = charts.share_bars([("qwen-7b grpo", {"gen": 0.5, "update_actor": 0.25})])
    assert shares.alt == "Phase shares per config group: qwen-7b grpo: gen 50%, update_actor 25%"


def test_a_short_run_has_whole_step_labels():
    steps = np.array([1.0, 2.0])
    chart = charts.health_chart(steps, [charts.Panel("KL", [("ppo_kl", np.array([0.1, 0.2]))])], [], np.array([]))
    (svg,) = _panels(chart).values()
    assert [t.text for t in svg.iter("text") if t.get("text-anchor") == "middle"] == ["1", "2"]


def test_numbers_are_short():
    assert [charts.fmt(v) for v in (7.5e-4, 0.07, 12.34, 150, 15_000, 2.5e6)] == [
        "0.00075", "0.07", "12.3", "150", "15k", "2.5M"]


@pytest.fixture
def drawn(monkeypatch):
    """The fleet charts' tick labels as matplotlib lays them out: {chart name: {"x": [...], "y": [...]}}."""
    seen = {}
    finish = charts._finish

    def keep(fig, name, alt):
        ax = fig.axes[0]
        seen[name] = {axis: [t.get_text() for t in getattr(ax, f"get_{axis}ticklabels")() if t.get_text()]
                      for axis in ("x", "y")}
        return finish(fig, name, alt)

    monkeypatch.setattr(charts, "_finish", keep)
    return seen


def test_the_weekly_chart_of_28_weeks_prints_every_other_week(drawn):
    """28 weekly bars: 14 labels fit side by side, so every second week is named, the newest included."""
    weeks = [(f"w{i:02d}", 3, 1, 40.0) for i in range(28)]
    charts.weekly_chart(weeks)
    assert drawn["weekly"]["x"] == [f"w{i:02d}" for i in range(1, 28, 2)]
    charts.weekly_chart(weeks[:6])
    assert drawn["weekly"]["x"] == [f"w{i:02d}" for i in range(6)]


def test_the_outcomes_chart_names_classes_in_words(drawn):
    chart = charts.failure_bars({"cuda_oom": 3, "completed": 5}, {"cuda_oom": "CUDA OOM", "completed": "Completed"})
    assert drawn["failures"]["y"] == ["CUDA OOM", "Completed"]
    assert chart.alt == "Runs by outcome: Completed 5, CUDA OOM 3"


def test_a_long_config_group_name_is_shown_whole(drawn):
    group = ("Qwen/Qwen2.5-7B-Instruct · grpo · rollout n 8 · batch 1024/256 · 4 nodes x 8 GPUs · vllm · "
             "max response 8192")
    charts.share_bars([(group, {"gen": 0.6, "update_actor": 0.4}), ("short", {"gen": 1.0})])
    label = drawn["shares"]["y"][0]
    assert label.replace("\n", " ") == group
    assert max(len(line) for line in label.splitlines()) <= 44
