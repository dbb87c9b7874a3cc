"""Hand-made warehouse tables (matching docs/architecture.md) for report tests and the benchmark."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline import derive, lake

PHASES = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor",
          "update_weights")
# the fleet tables the reports read, in the order derive writes them (run_baselines before those reading it)
REPORTED_FLEET_TABLES = ("fleet_daily", "fleet_weekly", "run_baselines", "fleet_config_groups", "run_attention")
HOSTILE_SCRIPT = "<script>alert('pwned')</script>"
HOSTILE_IMG = '"><img src=x onerror=alert(1)>'

ROOT_CAUSES = {
    "cuda_oom": ("update_actor", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 13.91 GiB. "
                 "GPU 0 has a total capacity of 79.11 GiB of which 8.85 GiB is free."),
    "nccl_timeout": ("update_weights", "[Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4486, "
                     "OpType=ALLTOALL, Timeout(ms)=600000) ran for 600013 milliseconds before timing out."),
    "ray_actor_died": ("old_log_prob", "ray.exceptions.ActorDiedError: The actor died unexpectedly before "
                       "finishing this task."),
    "host_oom_killed": ("gen", "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low "
                        "on memory."),
    "nan_divergence": ("update_actor", "ValueError: loss is nan at step, grad_norm: inf"),
    "python_exception": ("old_log_prob", "KeyError: 'old_log_probs'"),
    "vllm_engine_error": ("gen", "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has "
                          "errored already."),
    "unknown": (None, "Killed"),
}
FAILURE_CLASSES = ("completed", "hang", *ROOT_CAUSES)
HANG_REASON = "no progress for 47.0 min after step 60: the log kept printing (its own timestamps) with no new step"


@dataclass
class RunSpec:
    """What to fabricate for one run."""

    run_id: str
    failure_class: str = "completed"
    n_steps: int = 60
    expected_steps: int | None = None
    episodes: list[tuple[int, int, str]] = field(default_factory=list)
    experiment: str | None = "exp-a"
    ended_at: datetime = datetime(2026, 11, 28, 12, 0)
    step_s: float = 30.0
    hostile: bool = False
    seed: int = 0
    with_logs: bool = True
    model_path: str | None = "Qwen/Qwen2.5-7B-Instruct"
    n_gpus_per_node: int = 8
    train_batch_size: int = 256
    mfu_actor: float = 0.35


def _phase_times(rng, n: int, step_s: float) -> dict[str, np.ndarray]:
    base = {"gen": 0.45, "reward": 0.03, "old_log_prob": 0.12, "ref": 0.1, "values": 0.0, "adv": 0.01,
            "update_critic": 0.0, "update_actor": 0.22, "update_weights": 0.04}
    out = {}
    for p, share in base.items():
        out[p] = np.full(n, np.nan) if share == 0 else step_s * share * rng.uniform(0.9, 1.1, n)
    return out


def write_run(warehouse: Path, spec: RunSpec, only: tuple[str, ...] | None = None) -> None:
    """Write every per-run table of one fabricated run (or just the tables in `only`)."""

    def put(table: str, data: pa.Table) -> None:
        if only is None or table in only:
            lake.write_run_table(warehouse, table, spec.run_id, data)

    rng = np.random.default_rng(spec.seed)
    n = spec.n_steps
    cls = spec.failure_class
    expected = spec.expected_steps or (n if cls == "completed" else n * 2)
    steps = np.arange(1, n + 1, dtype=np.int64)

    phases = _phase_times(rng, n, spec.step_s)
    for first, last, acls in spec.episodes:
        if acls.endswith("_slowdown"):
            phase = acls.removesuffix("_slowdown")
            phases[phase][first - 1:last] *= 4
    inside = sum(np.nan_to_num(phases[p]) for p in PHASES)
    other = spec.step_s * 0.03 * np.ones(n)
    step_time = inside + other
    cols = {"step": steps, "segment": np.zeros(n, dtype=np.int32)}
    cols.update({p: phases[p] for p in PHASES})
    cols.update(step_time=step_time, other_time=other, testing=np.where(steps % 20 == 0, 12.0, np.nan),
                save_checkpoint=np.where(steps % 50 == 0, 40.0, np.nan))
    for p in PHASES:
        cols[f"share_{p}"] = np.nan_to_num(phases[p]) / step_time
    cols["share_other"] = other / step_time
    cols["bottleneck_phase"] = np.array(["gen"] * n, dtype=object)
    cols["total_tokens"] = np.full(n, 250_000.0)
    cols["throughput"] = cols["total_tokens"] / (step_time * spec.n_gpus_per_node)
    cols["mfu_actor"] = np.full(n, spec.mfu_actor)
    first_clock = spec.ended_at - timedelta(seconds=float(np.nansum(step_time)))
    cols["step_ts"] = np.array([first_clock + timedelta(seconds=float(c)) for c in np.cumsum(step_time)],
                               dtype="datetime64[us]")
    # a timer the run did not log is NULL in step_phases, as the SQL writes it (NaN is a logged NaN)
    put("step_phases", pa.table({k: pa.array(v, from_pandas=True) for k, v in cols.items()}))

    t = steps / max(n, 1)
    health = {
        "step": steps,
        "score_mean": 0.2 + 0.5 * t + rng.normal(0, 0.02, n),
        "reward_mean": 0.2 + 0.5 * t + rng.normal(0, 0.02, n),
        "ppo_kl": 0.01 + rng.normal(0, 0.002, n),
        "kl_loss": 0.02 + rng.normal(0, 0.003, n),
        "entropy": 1.2 - 0.6 * t + rng.normal(0, 0.02, n),
        "pg_clipfrac": 0.02 + rng.normal(0, 0.003, n),
        "grad_norm": 0.5 + rng.gamma(2, 0.1, n),
        "response_length_mean": 400 + 200 * t + rng.normal(0, 10, n),
        "response_length_max": np.full(n, 1024.0),
        "response_clip_ratio": 0.05 + rng.normal(0, 0.01, n),
        "mem_allocated_gb": 40 + rng.normal(0, 0.5, n),
        "mem_reserved_gb": 60 + rng.normal(0, 0.5, n),
        "cpu_memory_used_gb": 120 + 10 * t,
        "has_nan": np.zeros(n, dtype=bool),
    }
    for first, last, acls in spec.episodes:
        if acls == "kl_spike":
            health["ppo_kl"][first - 1:last] = 0.5
        if acls == "grad_explosion":
            health["grad_norm"][first - 1:last] = 80.0
    if cls == "nan_divergence":
        health["grad_norm"][-1] = np.inf
        health["has_nan"][-1] = True
    put("step_health", pa.table(health))

    is_anom = np.zeros(n, dtype=bool)
    ep_id = np.full(n, None, dtype=object)
    ep_first = np.full(n, None, dtype=object)
    ep_last = np.full(n, None, dtype=object)
    a_cls = np.full(n, None, dtype=object)
    expl = np.full(n, None, dtype=object)
    advice = []
    for i, (first, last, acls) in enumerate(spec.episodes):
        sl = slice(first - 1, last)
        is_anom[sl] = True
        ep_id[sl] = i + 1
        ep_first[sl] = first
        ep_last[sl] = last
        a_cls[sl] = acls
        expl[sl] = f"{acls}: {HOSTILE_IMG if spec.hostile else 'value far above the run median'}"
        advice.append({"episode_id": i + 1, "rank": 1, "kind": "check", "setting": None, "current_value": None,
                       "suggested_value": None, "why": f"Check {acls} settings",
                       "source": "https://verl.readthedocs.io/en/latest/examples/config.html"})
    put("step_anomalies", pa.table({
        "step": steps, "is_anomaly": is_anom, "score": np.where(is_anom, 0.8, 0.1),
        "anomaly_class": pa.array(a_cls, pa.string()), "explanation": pa.array(expl, pa.string()),
        "episode_id": pa.array(ep_id, pa.int64()), "episode_first_step": pa.array(ep_first, pa.int64()),
        "episode_last_step": pa.array(ep_last, pa.int64()),
    }))
    put("run_advice", pa.Table.from_pylist(advice, schema=RUN_ADVICE_SCHEMA))

    phase, cause = ROOT_CAUSES.get(cls, (None, None))
    if spec.hostile and cause:
        cause = f"{cause} {HOSTILE_SCRIPT} {HOSTILE_IMG}"
    last_step = n
    lines = [f"Total training steps: {expected}", f"experiment_name: {spec.experiment}"]
    kinds = ["config", "config"]
    if spec.with_logs:
        for s in range(1, n + 1):
            lines.append(f"step:{s} - actor/pg_loss:np.float64(0.01) - timing_s/step:np.float64({step_time[s - 1]:.3f})")
            kinds.append("step_metrics")
    root_line = None
    if cause:
        lines += ["Traceback (most recent call last):", '  File "verl/trainer/ppo/ray_trainer.py", line 1021, in fit',
                  "    actor_output = self.actor_rollout_wg.update_actor(batch)"]
        kinds += ["error", "error", "error"]
        lines.append(cause)
        kinds.append("error")
        root_line = len(lines)
        lines += ["(raylet) worker exited", HOSTILE_SCRIPT if spec.hostile else "shutting down"]
        kinds += ["other", "other"]
    if spec.hostile:
        lines.append(HOSTILE_IMG)
        kinds.append("other")
    m = len(lines)
    put("log_lines", pa.table({
        "file": ["train.log"] * m, "line_no": np.arange(1, m + 1, dtype=np.int64), "text": lines, "kind": kinds,
        "component": pa.nulls(m, pa.string()), "pid": pa.nulls(m, pa.int64()),
        "segment": np.zeros(m, dtype=np.int32), "step": np.full(m, last_step + 1, dtype=np.int64),
        "phase_hint": pa.nulls(m, pa.string()), "ts": pa.nulls(m, pa.timestamp("us")),
    }))

    events = {"file": [], "line_no": [], "event_class": [], "component": [], "message": [], "step": [],
              "phase": [], "segment": []}
    if root_line:
        for k, v in (("file", "train.log"), ("line_no", root_line), ("event_class", cls), ("component", "TaskRunner"),
                     ("message", cause), ("step", last_step + 1), ("phase", phase), ("segment", 0)):
            events[k].append(v)
    put("run_events", pa.table({
        "file": pa.array(events["file"], pa.string()), "line_no": pa.array(events["line_no"], pa.int64()),
        "event_class": pa.array(events["event_class"], pa.string()),
        "component": pa.array(events["component"], pa.string()), "message": pa.array(events["message"], pa.string()),
        "step": pa.array(events["step"], pa.int64()), "phase": pa.array(events["phase"], pa.string()),
        "segment": pa.array(events["segment"], pa.int32()),
    }))

    experiment = None if spec.experiment is None else spec.experiment + (HOSTILE_IMG if spec.hostile else "")
    config = {"project_name": "verl-demo", "experiment_name": experiment, "model_path": spec.model_path,
              "rollout_engine": "vllm", "adv_estimator": "grpo", "strategy": "fsdp",
              "n_gpus_per_node": spec.n_gpus_per_node,
              "nnodes": 1, "rollout_n": 8, "train_batch_size": spec.train_batch_size,
              "ppo_mini_batch_size": 64, "max_response_length": 2048,
              "gpu_memory_utilization": 0.6, "total_training_steps": expected}
    wall = float(np.nansum(step_time))
    started = spec.ended_at - timedelta(seconds=wall)
    put("runs", pa.table({
        "source_path": [f"archive/{spec.run_id}.tar.gz"], "archive_form": ["tar.gz"], "n_files": [1],
        "n_lines": [m], "n_bytes": [sum(len(x) + 1 for x in lines)], "n_undecodable_lines": [0],
        "n_step_lines": [n], "n_steps": [n], "n_metric_values": [n * 40], "n_parse_failures": [2],
        "n_segments": [1], "problems": pa.array([[]], pa.list_(pa.string())),
        "first_ts": [started], "last_ts": [spec.ended_at], "mtime": [spec.ended_at], "ingested_at": [spec.ended_at],
        "verl_format": ["np2"], **{k: [v] for k, v in config.items()},
    }))

    shares = {f"share_{p}": [float(np.nansum(phases[p]) / np.nansum(step_time))] for p in PHASES}
    shares["share_other"] = [float(other.sum() / np.nansum(step_time))]
    put("run_summary", pa.table({
        "failure_class": [cls], "last_step": [last_step], "expected_steps": [expected],
        "completion": [last_step / expected], "root_cause_file": pa.array(["train.log" if root_line else None]),
        "root_cause_line_no": pa.array([root_line], pa.int64()), "root_cause_text": pa.array([cause], pa.string()),
        "failure_phase": pa.array([phase], pa.string()), "bottleneck_phase": ["gen"],
        "stop_reason": pa.array([None], pa.string()),
        "hang_reason": pa.array([HANG_REASON if cls == "hang" else None], pa.string()),
        "hang_duration_s": pa.array([2820.0 if cls == "hang" else None], pa.float64()),
        "training_outcome": pa.array([None], pa.string()),
        "median_step_s": [float(np.nanmedian(step_time))], "goodput": [0.82 * last_step / expected],
        "resume_count": [0], "parse_completeness": [0.999], "wall_time_s": [wall],
        "last_line_file": ["train.log"], "last_line_no": pa.array([m], pa.int64()), "last_line_text": [lines[-1]],
        # run_summary carries the facts of `runs`, as sql/run_summary.sql writes it
        "first_ts": [started], "last_ts": [spec.ended_at], "mtime": [spec.ended_at], "ingested_at": [spec.ended_at],
        **shares, **{k: [v] for k, v in config.items()},
    }))

    findings = pa.table({
        "finding": ["low_gpu_memory_utilization"], "severity": ["warning"],
        "message": ["gpu_memory_utilization 0.6 leaves KV cache small; rollout may be slow"],
        "evidence_file": ["train.log"], "evidence_line_no": pa.array([2], pa.int64()),
        "evidence_text": [lines[1]],
    })
    put("config_findings", findings)


def every_class_specs(day: datetime = datetime(2026, 11, 28, 12, 0)) -> list[RunSpec]:
    """One run per failure class (spread over three weeks), plus an anomalous completed run and a hostile one."""
    specs = []
    for i, cls in enumerate(FAILURE_CLASSES):
        specs.append(RunSpec(run_id=f"run-{cls.replace('_', '-')}", failure_class=cls, n_steps=40 + 5 * i,
                             ended_at=day - timedelta(days=2 * i), seed=i, step_s=30 + i))
    specs.append(RunSpec(run_id="run-anomalous", failure_class="completed", n_steps=120,
                         episodes=[(30, 36, "gen_slowdown"), (80, 82, "kl_spike")], ended_at=day - timedelta(hours=3),
                         seed=99, step_s=45))
    specs.append(RunSpec(run_id="run-hostile", failure_class="python_exception", n_steps=50,
                         episodes=[(10, 12, "grad_explosion")], hostile=True, ended_at=day - timedelta(hours=5),
                         experiment="exp-b", seed=7))
    return specs


RUN_ADVICE_SCHEMA = pa.schema([
    ("episode_id", pa.int64()), ("rank", pa.int64()), ("kind", pa.string()), ("setting", pa.string()),
    ("current_value", pa.string()), ("suggested_value", pa.string()), ("why", pa.string()), ("source", pa.string()),
])


def build_warehouse(warehouse: Path, specs: list[RunSpec]) -> Path:
    """Write all runs, derive the fleet tables from them with the project's SQL, return the warehouse folder."""
    for spec in specs:
        write_run(warehouse, spec)
    for table in REPORTED_FLEET_TABLES:
        derive.derive_fleet_table(warehouse, table)
    return warehouse


class Node:
    """An element of a parsed HTML page."""

    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None = None):
        self.tag = tag
        self.attrs = attrs
        self.parent = parent
        self.children: list[Node | str] = []

    @property
    def classes(self) -> set[str]:
        """The element's class names."""
        return set((self.attrs.get("class") or "").split())

    def text(self) -> str:
        """All text below this element, as the browser would show it (entities decoded)."""
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        """This element and every element below it, in document order."""
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        """Elements matching a tag, a class and exact attribute values (`id_` for id)."""
        wanted = {k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()}
        return [
            n for n in self.iter()
            if (tag is None or n.tag == tag) and (cls is None or cls in n.classes)
            and all(n.attrs.get(k) == v for k, v in wanted.items())
        ]

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        """The first matching element; AssertionError if none."""
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}> in page"
        return found[0]


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def parse_html(html: str) -> Node:
    """Parse a page into a Node tree with the standard library's HTML parser."""
    from html.parser import HTMLParser

    root = Node("#document", {})

    class Builder(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.cur = root

        def handle_starttag(self, tag, attrs):
            node = Node(tag, dict(attrs), self.cur)
            self.cur.children.append(node)
            if tag not in VOID:
                self.cur = node

        def handle_startendtag(self, tag, attrs):
            self.cur.children.append(Node(tag, dict(attrs), self.cur))

        def handle_endtag(self, tag):
            n = self.cur
            while n is not None and n.tag != tag:
                n = n.parent
            if n is not None and n.parent is not None:
                self.cur = n.parent

        def handle_data(self, data):
            self.cur.children.append(data)

    b = Builder()
    b.feed(html)
    b.close()
    return root
