"""The reports' charts: the run report's SVG (scales, capacity, validation points, episode marks, hover values)
and the fleet report's, SVG on the page and PNG in its mail."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from pipeline.report import charts, fleet_charts


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


def test_score_and_reward_of_different_ranges_get_an_axis_each():
    score = 0.3 + 0.6 * STEPS / 40  # 0.3 .. 0.9, of a size within 20x of the reward's
    reward = 0.05 + 0.02 * (STEPS % 5) / 5  # 0.05 .. 0.066: flat under the score's range
    chart = charts.health_chart(STEPS, [charts.Panel("Reward", [("score_mean", score), ("reward_mean", reward)],
                                                     distinct=True)], [], np.array([]))
    panels = _panels(chart)
    assert set(panels) == {"Reward: score_mean", "Reward: reward_mean"}
    assert max(_tick_values(panels["Reward: reward_mean"])) <= 0.1
    assert min(_tick_values(panels["Reward: score_mean"])) >= 0.2
    close = charts.health_chart(STEPS, [charts.Panel("Reward", [("score_mean", score), ("reward_mean", score - 0.01)],
                                                     distinct=True)], [], np.array([]))
    assert set(_panels(close)) == {"Reward"}


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


def test_mailed_fleet_charts_are_twice_the_pixels_with_their_values_in_words():
    """The mail's fleet charts are PNG (mail clients show no SVG); the alt text, also the hover title, carries
    the values, the same as the page's SVG chart."""
    weeks = [("11-02", 5, 1, 42.0), ("11-09", 3, 0, None)]
    chart = fleet_charts.weekly_chart(weeks, png=True)
    assert chart.png[:8] == b"\x89PNG\r\n\x1a\n" and chart.svg is None
    assert int.from_bytes(chart.png[16:20], "big") >= 2 * chart.width
    assert chart.alt == "Runs per week (week: runs, failed or hung, median step): 11-02: 5, 1, 42 s; 11-09: 3, 0, –"
    assert fleet_charts.weekly_chart(weeks).alt == chart.alt
    shares = fleet_charts.share_bars([("qwen-7b grpo", {"gen": 0.5, "update_actor": 0.25})], png=True)
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
    finish = fleet_charts._finish

    def keep(fig, name, alt):
        ax = fig.axes[0]
        seen[name] = {axis: [t.get_text() for t in getattr(ax, f"get_{axis}ticklabels")() if t.get_text()]
                      for axis in ("x", "y")}
        return finish(fig, name, alt)

    monkeypatch.setattr(fleet_charts, "_finish", keep)
    return seen


def test_the_weekly_chart_of_28_weeks_prints_every_other_week(drawn):
    """28 weekly bars: 14 labels fit side by side, so every second week is named, the newest included."""
    weeks = [(f"w{i:02d}", 3, 1, 40.0) for i in range(28)]
    fleet_charts.weekly_chart(weeks, png=True)
    assert drawn["weekly"]["x"] == [f"w{i:02d}" for i in range(1, 28, 2)]
    fleet_charts.weekly_chart(weeks[:6], png=True)
    assert drawn["weekly"]["x"] == [f"w{i:02d}" for i in range(6)]


def test_the_outcomes_chart_names_classes_in_words(drawn):
    chart = fleet_charts.failure_bars({"cuda_oom": 3, "completed": 5}, {"cuda_oom": "CUDA OOM", "completed": "Completed"},
                                      png=True)
    assert drawn["failures"]["y"] == ["CUDA OOM", "Completed"]
    assert chart.alt == "Runs by outcome: Completed 5, CUDA OOM 3"


def test_a_long_config_group_name_is_shown_whole(drawn):
    group = ("Qwen/Qwen2.5-7B-Instruct · grpo · rollout n 8 · batch 1024/256 · 4 nodes x 8 GPUs · vllm · "
             "max response 8192")
    fleet_charts.share_bars([(group, {"gen": 0.6, "update_actor": 0.4}), ("short", {"gen": 1.0})], png=True)
    label = drawn["shares"]["y"][0]
    assert label.replace("\n", " ") == group
    assert max(len(line) for line in label.splitlines()) <= 44


def _fleet_svg(chart: charts.Chart) -> ET.Element:
    (svg,) = _panels(chart).values()
    return svg


def _bars(svg: ET.Element) -> list[ET.Element]:
    """A fleet chart's bars: its rects with a hover title (legend swatches have none)."""
    return [r for r in svg.iter("rect") if r.find("title") is not None]


def _bar_titles(svg: ET.Element) -> list[str]:
    return [r.find("title").text for r in _bars(svg)]


def test_the_page_outcomes_chart_lists_classes_in_words_most_runs_first():
    chart = fleet_charts.failure_bars({"cuda_oom": 3, "completed": 5, "hang": 1},
                                      {"cuda_oom": "CUDA OOM", "completed": "Completed", "hang": "Hung"})
    assert chart.png == b"" and chart.alt == "Runs by outcome: Completed 5, CUDA OOM 3, Hung 1"
    svg = _fleet_svg(chart)
    assert _bar_titles(svg) == ["Completed: 5 runs", "CUDA OOM: 3 runs", "Hung: 1 run"]
    widths = [float(r.get("width")) for r in _bars(svg)]
    assert widths[0] == pytest.approx(5 / 3 * widths[1], abs=0.3) and widths[1] == pytest.approx(3 * widths[2], abs=0.3)
    assert [t for t in _texts(svg) if t in ("Completed", "CUDA OOM", "Hung")] == ["Completed", "CUDA OOM", "Hung"]


def test_the_page_weekly_chart_stacks_failed_on_fine_and_names_every_other_of_28_weeks():
    weeks = [(f"w{i:02d}", 3, 1, 40.0) for i in range(28)]
    svg = _fleet_svg(fleet_charts.weekly_chart(weeks))
    assert [t for t in _texts(svg) if t.startswith("w")] == [f"w{i:02d}" for i in range(1, 28, 2)]
    svg = _fleet_svg(fleet_charts.weekly_chart([("11-02", 5, 2, 42.0), ("11-09", 3, 0, None)]))
    bars = _bars(svg)
    assert [r.find("title").text for r in bars[:2]] == ["week to 11-02: 5 runs, 2 failed or hung, median step 42 s"] * 2
    fine, failed = (float(r.get("height")) for r in bars[:2])
    assert fine == pytest.approx(1.5 * failed, abs=0.2)
    assert float(bars[0].get("y")) == pytest.approx(float(bars[1].get("y")) + failed, abs=0.1)
    assert bars[3].find("title").text == "week to 11-09: 3 runs, 0 failed or hung, median step –"
    assert len([c for c in svg.iter("circle")]) == 1


def test_the_page_share_chart_shows_a_long_group_name_whole_and_each_share_in_its_title():
    group = ("Qwen/Qwen2.5-7B-Instruct · grpo · rollout n 8 · batch 1024/256 · 4 nodes x 8 GPUs · vllm · "
             "max response 8192")
    svg = _fleet_svg(fleet_charts.share_bars([(group, {"gen": 0.6, "update_actor": 0.4}), ("short", {"gen": 1.0})]))
    anchored = [t.text for t in svg.iter("text") if t.get("text-anchor") == "end"]
    lines = anchored[:anchored.index("short")]
    assert " ".join(lines) == group and max(len(line) for line in lines) <= 44
    assert _bar_titles(svg) == [f"{group} · gen 60%", f"{group} · update_actor 40%", "short · gen 100%"]
    gen, actor = (float(r.get("width")) for r in _bars(svg) if group in r.find("title").text)
    assert gen == pytest.approx(1.5 * actor, abs=0.2)


def test_the_clock_chart_shows_a_stall_after_the_last_step_as_a_flat_line_to_the_log_end():
    steps = np.arange(1, 11, dtype=float)
    ends = 1_700_000_000 + 60.0 * steps  # a step a minute
    chart = charts.clock_chart(steps, ends, log_end_s=float(ends[-1]) + 30 * 60)  # 30 min of silence after it
    panel = _panels(chart)["clock"]
    stall = [p for p in panel.iter("path") if p.get("data-stall")]
    assert len(stall) == 1 and float(stall[0].get("data-stall")) == 30.0
    assert "no step for 30 min, to the log's last line" in _texts(panel)
    assert max(_tick_values(panel)) >= 10
    done = charts.clock_chart(steps, ends, log_end_s=float(ends[-1]))
    assert not [p for p in _panels(done)["clock"].iter("path") if p.get("data-stall")]
    assert charts.clock_chart(steps[:1], ends[:1], None) is None


def test_the_page_fleet_charts_keep_their_text_readable_on_a_400_px_screen():
    drawn = [fleet_charts.failure_bars({"cuda_oom": 3, "completed": 5}),
             fleet_charts.share_bars([("Qwen2.5-0.5B · grpo · n=5", {"gen": 0.6, "update_actor": 0.4})]),
             fleet_charts.weekly_chart([(f"2025-W{w:02d}", 3, 1, 60.0) for w in range(1, 29)])]
    for chart in drawn:
        root = ET.fromstring(str(chart.svg))
        (svg,) = root.iter("svg")
        least = float(re.search(r"min-width:(\d+)px", svg.get("style"))[1])
        # the 11 px text of a viewBox this wide, shown at least `least` px wide: 8 px or more, however narrow
        assert 11 * least / float(svg.get("viewBox").split()[2]) >= 8
        holder = next(d for d in root.iter("div") if svg in list(d))
        assert "overflow-x:auto" in holder.get("style")


def test_the_page_weekly_chart_leaves_room_between_its_date_labels():
    weeks = [(f"2025-{m:02d}-{d:02d}", 2, 1, 50.0) for m in range(5, 12) for d in (1, 8, 15, 22)][:27]
    svg = _fleet_svg(fleet_charts.weekly_chart(weeks))
    named = [t for t in svg.iter("text") if re.fullmatch(r"\d{4}-\d\d-\d\d", t.text or "")]
    xs = sorted(float(t.get("x")) for t in named)
    # 10 characters of 11 px text are about 64 px wide: centres closer than 70 px make the dates run together
    assert len(xs) >= 5 and min(np.diff(xs)) >= 70


def test_fleet_chart_same_for_the_last_bit_of_a_sum():
    """Two analyses sum a group's phase shares in another order (parallel SQL aggregates): 1.0, or a bit over.
    The chart must not change its axis for that (it went from 20 % steps to 25 % steps)."""
    over = math.nextafter(1.0, 2.0)
    gens = (0.5, 0.5 + (over - 1.0))
    assert [g + 0.3 + 0.2 for g in gens] == [1.0, over]
    svgs = [str(fleet_charts.share_bars([("qwen-7b grpo", {"gen": g, "old_log_prob": 0.3, "update_actor": 0.2})]).svg)
            for g in gens]
    assert svgs[0] == svgs[1]
    assert charts.nice_ticks(0, over, 5) == charts.nice_ticks(0, 1.0, 5) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
