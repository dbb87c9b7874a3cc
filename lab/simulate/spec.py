"""What one simulated run is: its config, how it ends, and the anomaly episodes injected into it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .recipes import Recipe, draw_recipe
from .vocab import ARCHIVE_FORMS, HANG_EVIDENCE, PHASE_HEADS

# Phases a run of each class can end in (startup = before the first step; None = between two steps).
CRASH_PHASES = {
    "cuda_oom": ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor", "startup"),
    "nccl_timeout": ("update_actor", "update_critic", "old_log_prob", "gen"),
    "ray_actor_died": ("gen", "old_log_prob", "update_actor", "update_critic", "save_checkpoint"),
    "host_oom_killed": ("gen", "old_log_prob", "save_checkpoint"),
    "hang": ("gen", "update_actor", "old_log_prob", "update_critic"),
    "nan_divergence": ("gen",),
    "python_exception": ("reward", "testing", "startup"),
    "vllm_engine_error": ("gen", "testing", "startup"),
    "interrupted": (None, "gen", "old_log_prob", "update_actor"),
    "no_outcome": (None, "gen", "reward", "testing", "old_log_prob", "update_actor"),
    "unknown": ("gen", "update_actor", "old_log_prob"),
    "completed": (None,),
}
CRITIC_PHASES = ("values", "update_critic")
# Classes whose traceback names the phase, so a crash inside step 1 (after the initial validation) is told apart.
STEP1_CLASSES = ("cuda_oom", "nccl_timeout", "ray_actor_died", "host_oom_killed", "python_exception",
                 "vllm_engine_error")
# The stop reasons interrupted runs cycle through: Ctrl-C, the most common, every other time.
STOP_CYCLE = ("keyboard", "time_limit", "keyboard", "cancelled", "keyboard", "sigterm", "debugger")
# Classes whose log shows the phase only through the lines the phase prints (no traceback names it).
SILENT_CLASSES = ("hang", "interrupted", "no_outcome", "unknown")
SLOWDOWN_PHASE = {
    "gen_slowdown": "gen",
    "old_log_prob_slowdown": "old_log_prob",
    "update_actor_slowdown": "update_actor",
}


@dataclass(frozen=True)
class Episode:
    """An injected anomaly: inclusive step range and how strong it is (meaning depends on the class)."""

    cls: str
    first_step: int
    last_step: int
    magnitude: float

    def label(self) -> dict:
        """The episode as labels.json writes it."""
        return {"class": self.cls, "first_step": self.first_step, "last_step": self.last_step,
                "magnitude": round(float(self.magnitude), 4)}


@dataclass(frozen=True)
class Segment:
    """One start-up of the trainer: resumes from `start_step` (0 = fresh) and logs steps up to `end_step`."""

    start_step: int
    end_step: int
    interrupt: str | None = None  # how a non-final segment ended: "killed", "nccl_timeout", "ray_actor_died"


@dataclass
class RunSpec:
    """Everything that determines one simulated run; `generate_run` and the log writers read only this."""

    run_id: str
    seed: int
    fmt: str
    algo: str
    model_path: str
    model_short: str
    model_class: str
    model_size: str
    model_b: float
    dataset: str
    data_source: str
    train_size: int
    val_size: int
    project: str
    experiment: str
    rollout: str
    rollout_mode: str
    n: int
    tp: int
    gpu_memory_utilization: float
    train_batch_size: int
    ppo_mini_batch_size: int
    ppo_micro_batch_size_per_gpu: int
    max_prompt_length: int
    max_response_length: int
    lr: float
    n_gpus_per_node: int
    nnodes: int
    total_steps: int
    test_freq: int
    save_freq: int
    use_kl_loss: bool
    val_n: int
    failure_class: str
    failure_phase: str | None
    segments: list[Segment]
    episodes: list[Episode] = field(default_factory=list)
    archive_form: str = "dir"
    has_jsonl: bool = False
    worker_logs: bool = False
    debug_memory: bool = False
    ansi: bool = True
    runner_name: str = "TaskRunner"
    tqdm_prefixed: bool = False
    samples_every_step: bool = False
    start_ts: float = 1_750_000_000.0
    gpu_total_gb: float = 79.11
    hostname: str = "gpu-node-01"
    ip: str = "10.0.0.1"
    chatter: int = 0
    disk_warnings: bool = False
    stop_reason: str | None = None  # interrupted: keyboard, time_limit, cancelled, sigterm or debugger
    hang_evidence: str | None = None  # hang: timestamps, progress_bar, debugger or slurm_idle
    rendezvous: bool = False  # nccl_timeout: torch.distributed's rendezvous fails while the engine starts
    step1: bool = False  # the crash happens inside step 1, after the initial validation
    buffered_steps: int = 0  # step lines the TaskRunner's stdout buffer flushes after a Ctrl-C traceback
    step_lines: bool = True  # the console logger is on (trainer.logger=['wandb'] prints no step lines)
    capture: str = "tee"  # "tee": the driver console; "wandb": the TaskRunner's wandb files/output.log
    recipe: str = ""  # the launch recipe the run was drawn from (recipes.py)
    gen_cost: float = 1e-4  # the recipe's seconds per generated token on 8 GPUs for a 1B model
    response_fraction: float = 0.25  # the recipe's typical first responses, share of max_response_length
    length_growth: float = 0.3  # the recipe's response lengthening by the end of training (share)
    slowdown: float = 1.0  # planted: every step of the run this many times slower than its recipe's pace

    @property
    def last_step(self) -> int:
        """Last training step logged in the final segment (0 if none)."""
        return self.segments[-1].end_step

    @property
    def loggers(self) -> list[str]:
        """`trainer.logger`: the console logger prints the step lines; file writes the JSONL."""
        if not self.step_lines:
            return ["wandb"]
        return ["console", "file"] if self.has_jsonl else ["console", "wandb"]

    @property
    def world_size(self) -> int:
        """Number of GPUs of the run."""
        return self.n_gpus_per_node * self.nnodes

    @property
    def has_critic(self) -> bool:
        """True for GAE (PPO) runs, which train a critic."""
        return self.algo == "gae"

    @property
    def has_ref(self) -> bool:
        """True when the reference policy runs (KL loss on)."""
        return self.use_kl_loss


def draw_spec(rng: np.random.Generator, index: int, failure_class: str, anomalies: list[str],
              steps_scale: float, seed: int, variant: int = 0, recipe: Recipe | None = None) -> RunSpec:
    """Draw run `index` of `recipe` (a one-off recipe drawn here if None), then place its ending and
    anomaly episodes.

    `variant` counts the earlier runs of the same class in the fleet: it cycles each class through
    its kinds (stop reasons, hang evidence, start-up rendezvous, crashes inside step 1, wandb captures).
    """
    r = recipe or draw_recipe(rng, f"solo{index:04d}")
    fmt = r.settings["fmt"]
    total = max(1, int(round(r.steps * steps_scale)))
    # a relaunch of the recipe keeps its experiment name, or adds a seed or version tag to it
    experiment = r.experiment if rng.random() < 0.5 else f"{r.experiment}_{rng.choice(['seed', 'v', 'run'])}{index}"
    spec = RunSpec(
        run_id=f"{r.settings['dataset']}-{r.settings['algo']}-{r.settings['model_short']}-{index:04d}",
        seed=seed, experiment=experiment,
        rollout_mode="agent_loop" if fmt == "np2" and rng.random() < 0.5 else "sync",
        total_steps=total, test_freq=r.test_freq if total >= 10 else max(1, total),
        save_freq=r.save_freq if total >= 20 else -1,
        failure_class=failure_class, failure_phase=None, segments=[], **r.settings,
    )
    spec.runner_name = "main_task" if fmt == "v04" and rng.random() < 0.4 else "TaskRunner"
    spec.archive_form = str(rng.choice(ARCHIVE_FORMS, p=[0.55, 0.3, 0.15]))
    spec.has_jsonl = spec.archive_form != "gz" and fmt != "v04" and rng.random() < 0.45
    spec.worker_logs = spec.archive_form != "gz" and rng.random() < 0.35
    spec.debug_memory = rng.random() < 0.4
    spec.ansi = rng.random() < 0.75
    spec.tqdm_prefixed = rng.random() < 0.5
    spec.samples_every_step = rng.random() < 0.3
    spec.disk_warnings = rng.random() < 0.12
    era = {"v04": 1_746_000_000, "bare": 1_754_000_000, "np2": 1_762_000_000}[fmt]
    spec.start_ts = float(era + index * 21_611 + int(rng.integers(0, 3600)))
    spec.hostname = f"gpu-node-{int(rng.integers(1, 64)):02d}"
    spec.ip = f"10.{int(rng.integers(0, 255))}.{int(rng.integers(0, 255))}.{int(rng.integers(2, 250))}"
    _place_variant(spec, variant)
    _place_ending(rng, spec)
    _place_episodes(rng, spec, anomalies if spec.step_lines else [])
    return spec


def _place_variant(spec: RunSpec, variant: int) -> None:
    cls = spec.failure_class
    if cls == "interrupted":
        spec.stop_reason = STOP_CYCLE[variant % len(STOP_CYCLE)]
        if spec.stop_reason == "keyboard":
            spec.buffered_steps = (2, 1, 0)[(variant // 2) % 3]
    elif cls == "hang":
        spec.hang_evidence = HANG_EVIDENCE[variant % len(HANG_EVIDENCE)]
    elif cls == "nccl_timeout":
        spec.rendezvous = variant % 2 == 1
    if cls in STEP1_CLASSES and variant % 4 == 2:
        spec.step1 = True
    if (cls, variant % 3) == ("no_outcome", 1) or (cls, variant % 12) == ("completed", 5):
        spec.capture = "wandb"
    elif (cls, variant % 3) == ("no_outcome", 2) or (cls, variant % 12) == ("completed", 11):
        spec.step_lines = False
    if spec.capture == "wandb" or not spec.step_lines:
        spec.archive_form, spec.has_jsonl, spec.worker_logs = "dir", False, False


def _place_ending(rng: np.random.Generator, spec: RunSpec) -> None:
    phase = _ending_phase(rng, spec)
    end = _ending_step(rng, spec, phase)
    if phase == "save_checkpoint":
        # a checkpoint crash happens on a save step: the step before it is the last one logged
        end = max(0, (end // spec.save_freq) * spec.save_freq - 1)
        if end + 1 < spec.save_freq:
            phase = "gen"
            end = min(spec.total_steps - 1, max(end, 1))
    if phase == "testing":
        end = max(0, ((end + 1) // spec.test_freq) * spec.test_freq - 1)
    spec.failure_phase = phase
    _show_phase(spec)
    spec.segments = _segments(rng, spec, end)


def _ending_phase(rng: np.random.Generator, spec: RunSpec) -> str | None:
    cls = spec.failure_class
    if spec.rendezvous:
        return "startup"
    if spec.hang_evidence == "debugger" or spec.stop_reason == "debugger":
        return "startup" if rng.random() < 0.5 else "reward"
    if spec.stop_reason == "keyboard" and spec.buffered_steps == 1:
        return "gen"  # Ctrl-C during the first rollout, the initial validation's lines still buffered
    excluded: tuple = ("startup", "testing", "save_checkpoint") if spec.step1 else ()
    if spec.capture == "wandb":
        excluded = tuple(PHASE_HEADS)  # the TaskRunner's capture holds no worker line that would show them
    phases = [p for p in CRASH_PHASES[cls]
              if (spec.has_critic or p not in CRITIC_PHASES) and (spec.save_freq > 0 or p != "save_checkpoint")
              and p not in excluded]
    phase = phases[int(rng.integers(len(phases)))]
    if phase == "startup" and rng.random() < 0.5 and len(phases) > 1:
        phase = phases[0]
    return phase


def _ending_step(rng: np.random.Generator, spec: RunSpec, phase: str | None) -> int:
    """The last step logged before the run ends."""
    total = spec.total_steps
    if spec.failure_class == "completed":
        return total
    if phase == "startup" or spec.step1 or (spec.stop_reason == "keyboard" and spec.buffered_steps == 1):
        return 0
    if spec.hang_evidence == "slurm_idle":
        # the stall must outlast the training by far for the job's CPU efficiency to fall to ~0%
        return int(rng.integers(1, max(2, min(5, total))))
    end = int(rng.integers(max(1, int(total * 0.3)), max(2, int(total * 0.95))))
    return min(end, total - 1)


def _show_phase(spec: RunSpec) -> None:
    """Runs whose ending no traceback names print the phase's own lines (DEBUG memory, vLLM preemption)."""
    phase = spec.failure_phase
    if spec.failure_class not in SILENT_CLASSES:
        return
    if phase == "gen" and spec.failure_class == "hang":
        spec.rollout = "vllm"
    if phase in PHASE_HEADS:
        spec.debug_memory = True


def _segments(rng: np.random.Generator, spec: RunSpec, end: int) -> list[Segment]:
    single = spec.capture == "wandb" or not spec.step_lines
    if single or not (spec.save_freq > 0 and end > spec.save_freq + 2 and rng.random() < 0.35):
        return [Segment(0, end)]
    ckpts = list(range(spec.save_freq, end - 1, spec.save_freq))
    ckpt = ckpts[int(rng.integers(len(ckpts)))]
    seg_end = int(rng.integers(ckpt, min(end, ckpt + spec.save_freq)))
    options = [k for k in ("killed", "nccl_timeout", "ray_actor_died") if k != spec.failure_class]
    return [Segment(0, seg_end, options[int(rng.integers(len(options)))]), Segment(ckpt, end)]


def _free_range(taken: list[tuple[int, int]], lo: int, hi: int, length: int,
                rng: np.random.Generator) -> tuple[int, int] | None:
    for _ in range(20):
        if hi - lo + 1 < length:
            return None
        a = int(rng.integers(lo, hi - length + 2))
        b = a + length - 1
        if all(b + 2 < x or a > y + 2 for x, y in taken):
            return a, b
    return None


def _magnitude(rng: np.random.Generator, cls: str, subtle: bool) -> float:
    ranges = {
        "kl_spike": ((8.0, 15.0), (40.0, 400.0)),
        "nan_loss": ((1.0, 1.0), (3.0, 3.0)),
        "grad_explosion": ((8.0, 15.0), (50.0, 1000.0)),
        "gen_slowdown": ((1.6, 2.2), (3.0, 8.0)),
        "old_log_prob_slowdown": ((1.7, 2.4), (3.0, 8.0)),
        "update_actor_slowdown": ((1.7, 2.4), (3.0, 8.0)),
        "memory_pressure": ((0.93, 0.95), (0.97, 0.995)),
        "entropy_collapse": ((0.3, 0.4), (0.05, 0.15)),
        "response_length_collapse": ((0.35, 0.45), (0.05, 0.15)),
        "reward_collapse": ((0.3, 0.4), (0.0, 0.1)),
    }
    lo, hi = ranges[cls][0 if subtle else 1]
    return float(rng.uniform(lo, hi))


def _place_episodes(rng: np.random.Generator, spec: RunSpec, anomalies: list[str]) -> None:
    first = spec.segments[-1].start_step + 1
    last = spec.last_step
    taken: list[tuple[int, int]] = []
    episodes: list[Episode] = []
    crashed = spec.failure_class not in ("completed", *SILENT_CLASSES) and last >= 1
    if crashed and spec.failure_class == "cuda_oom" and last - first >= 4:
        length = int(rng.integers(3, min(10, last - first) + 1))
        episodes.append(Episode("memory_pressure", last - length + 1, last, _magnitude(rng, "memory_pressure", False)))
        taken.append((last - length + 1, last))
    if crashed and spec.failure_class == "nan_divergence" and last - first >= 6:
        n_nan = int(rng.integers(2, 5))
        nan_first = last - n_nan + 1
        episodes.append(Episode("nan_loss", nan_first, last, 3.0))
        pre = str(rng.choice(["kl_spike", "grad_explosion"]))
        plen = int(rng.integers(2, min(6, nan_first - first) + 1))
        episodes.append(Episode(pre, nan_first - plen, nan_first - 1, _magnitude(rng, pre, False)))
        taken.append((nan_first - plen, last))
    for cls in anomalies:
        subtle = rng.random() < 0.5
        length = int(rng.integers(2, 12)) if cls != "nan_loss" else int(rng.integers(1, 3))
        hi = last - 2 if crashed else last
        if cls in ("entropy_collapse", "response_length_collapse", "reward_collapse") and rng.random() < 0.5:
            length = max(length, (last - first) // 6)
        span = _free_range(taken, max(first, 3), hi, length, rng)
        if span is None:
            continue
        taken.append(span)
        episodes.append(Episode(cls, span[0], span[1], _magnitude(rng, cls, subtle)))
    spec.episodes = sorted(episodes, key=lambda e: e.first_step)
