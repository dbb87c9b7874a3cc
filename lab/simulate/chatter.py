"""Lines that surround the step lines: progress bars, memory lines, samples, checkpoints, warnings."""

from __future__ import annotations

import pprint
import time

from .console import Console, vllm_ts
from .number_format import dict_repr

SAMPLES = {
    "gsm8k": ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
              "How many clips did Natalia sell altogether in April and May? Let's think step by step and output "
              "the final answer after \"####\".", "Natalia sold 48/2 = 24 clips in May. 48 + 24 = 72. #### 72", "72"),
    "math": ("What is the smallest positive integer $n$ such that $17n \\equiv 1234 \\pmod{7}?$ Let's think step by "
             "step and output the final answer within \\boxed{}.", "Reducing 1234 mod 7 gives 2, so ... \\boxed{3}", "3"),
    "countdown": ("Using the numbers [44, 19, 35], create an equation that equals 98. You can use basic arithmetic "
                  "operations (+, -, *, /) and each number can only be used once.",
                  "<think>44 + 19 + 35 = 98</think> <answer>44 + 19 + 35</answer>", "{'target': 98}"),
    "nq": ("Answer the given question. who got the first nobel prize in physics?",
           "<search> first nobel prize in physics </search> ... <answer> Wilhelm Conrad Röntgen </answer>",
           "{'target': ['Wilhelm Conrad Röntgen']}"),
}
_BLOCKS = " ▏▎▍▌▋▊▉"


def _interval(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def tqdm_bar(n: int, total: int, elapsed: float, done_here: int) -> str:
    """A `Training Progress` bar as tqdm prints it without a terminal width (10-cell bar)."""
    frac = n / total if total else 1.0
    cells = frac * 10
    full = int(cells)
    bar = "█" * full + (_BLOCKS[int((cells - full) * 8)] if full < 10 else "")
    bar = bar.ljust(10)
    if done_here <= 0:
        return f"Training Progress: {int(frac * 100):3d}%|{bar}| {n}/{total} [{_interval(elapsed)}<?, ?it/s]"
    rate = elapsed / done_here
    rate_text = f"{rate:.2f}s/it" if rate >= 1 else f"{1 / rate:.2f}it/s"
    return (f"Training Progress: {int(frac * 100):3d}%|{bar}| {n}/{total} "
            f"[{_interval(elapsed)}<{_interval(rate * (total - n))}, {rate_text}]")


def write_progress(con: Console, text: str) -> None:
    """A progress bar line: bare from the driver, or inside the TaskRunner prefix after a carriage return
    (a wandb capture records it as a plain line)."""
    if con.spec.tqdm_prefixed or con.wandb:
        con.runner_err("\r" + text)
    else:
        con.bare(text)


def start_bar(con: Console, n: int) -> None:
    """tqdm opens the `Training Progress` bar at step n (a resumed launch opens it at its checkpoint)."""
    con.bar = (n, con.clock, 0, con.clock)
    write_progress(con, tqdm_bar(n, con.spec.total_steps, 0.0, 0))


def advance_bar(con: Console, n: int) -> None:
    """The bar after step n has finished."""
    _, started, done, _ = con.bar
    con.bar = (n, started, done + 1, con.clock)
    write_progress(con, tqdm_bar(n, con.spec.total_steps, con.clock - started, done + 1))


def reprint_bar(con: Console) -> str:
    """tqdm redraws the bar without an update: same count, the elapsed time grown to the current clock.

    Returns the bar's text.
    """
    n, started, done, _ = con.bar
    text = tqdm_bar(n, con.spec.total_steps, con.clock - started, done)
    write_progress(con, text)
    return text


def memory_line(con: Console, head: str, alloc: float, offset: float, rank: int = 0) -> None:
    """A GPUMemoryLogger DEBUG line (VERL_LOGGING_LEVEL=DEBUG)."""
    total = con.spec.gpu_total_gb
    resv = min(total - 0.1, alloc * 1.08 + 0.5)
    con.worker(f"DEBUG:{con.ts(offset)}:{head}, memory allocated (GB): {alloc:.2f}, memory reserved (GB): "
               f"{resv:.2f}, device memory used/total (GB): {min(total, resv + 1.3):.2f}/{total:.2f}", rank=rank)


def write_samples(con: Console, score: float) -> None:
    """The reward manager's `[prompt]/[response]/[ground_truth]/[score]` printout."""
    prompt, response, truth = SAMPLES[con.spec.dataset]
    con.runner("[prompt] system", "You are a helpful assistant.", "user", prompt, "assistant", "",
               f"[response] {response}", f"[ground_truth] {truth}", f"[score] {score}")


def write_partial_sample(con: Console) -> None:
    """The start of a `[prompt]` printout: where a log cut mid-print ends."""
    con.runner("[prompt] system", "You are a helpful assistant.", "user", SAMPLES[con.spec.dataset][0])


def write_validation_start(con: Console, step: int) -> None:
    """`_validate`: the meta-info line, generation end, one sample."""
    con.runner(f"test_gen_batch meta info: {{'eos_token_id': 151645, 'pad_token_id': 151643, "
               f"'recompute_log_prob': False, 'do_sample': {con.spec.val_n > 1}, 'validate': True, "
               f"'global_steps': {step}}}")


def write_validation_end(con: Console) -> None:
    """After validation generation: the end marker and a sample."""
    con.runner("validation generation end")
    write_samples(con, 1.0 if con.rng.random() < 0.5 else 0.0)


def write_val_pprint(con: Console, label: str, values: dict[str, float]) -> None:
    """`pprint(f"{label}: {val_metrics}")`: a wrapped string repr over several lines."""
    text = pprint.pformat(f"{label}: {dict_repr(values, con.spec.fmt)}", width=80)
    con.runner(*text.split("\n"))


def write_checkpoint_save(con: Console, step: int) -> None:
    """`_save_checkpoint`: folder line, then the rank-0 INFO lines of the checkpoint manager."""
    spec = con.spec
    rel = f"checkpoints/{spec.project}/{spec.experiment}/global_step_{step}"
    con.runner(f"local_global_step_folder: {rel}")
    path = f"/workspace/{spec.project}/{rel}/actor"
    w = spec.world_size
    con.worker(f"INFO:{con.ts(1.0)}:[Rank 0] Saved model to {path}/model_world_size_{w}_rank_0.pt")
    con.worker(f"INFO:{con.ts(2.0)}:[Rank 0] Saved optim to {path}/optim_world_size_{w}_rank_0.pt")
    con.worker(f"INFO:{con.ts(2.1)}:[Rank 0] Saved extra_state to {path}/extra_state_world_size_{w}_rank_0.pt")


def write_worker_warning(con: Console) -> None:
    """A benign, deduplicated worker warning of the kind every real run prints."""
    k = int(con.rng.integers(3))
    w = con.spec.world_size
    if k == 0:
        con.worker("/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:1399: FutureWarning: "
                   "`torch.cpu.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cpu', args...)` "
                   "instead.", repeated=w - 1)
        con.worker("  with device_autocast_ctx, torch.cpu.amp.autocast(**cpu_autocast_kwargs), recompute_context:  "
                   "# type: ignore[attr-defined]", repeated=w - 1)
    elif k == 1:
        con.worker("/usr/local/lib/python3.10/dist-packages/torch/distributed/fsdp/_state_dict_utils.py:773: "
                   "UserWarning: When using ``NO_SHARD`` for ``ShardingStrategy``, full_state_dict willbe returned.",
                   repeated=w - 1)
    else:
        con.worker(f"WARNING:{con.ts()}:Token indices sequence length is longer than the specified maximum sequence "
                   "length for this model", rank=int(con.rng.integers(w)))


def chatter_pool(con: Console, size: int = 16) -> list[str]:
    """Rendered worker-warning lines to pad very large logs with, drawn once per run."""
    mark = len(con.lines)
    for _ in range(size):
        write_worker_warning(con)
    pool = con.lines[mark:]
    del con.lines[mark:]
    return pool


def write_disk_warning(con: Console, free_gb: float) -> None:
    """The raylet's periodic complaint that /tmp/ray is almost full (benign until spilling is needed)."""
    spec = con.spec
    session = time.strftime("session_%Y-%m-%d_%H-%M-%S", time.gmtime(spec.start_ts)) + f"_{spec.seed % 999983:06d}"
    con.raylet(f"[{con.ts()} E {con.runner_pid - 900} {con.runner_pid - 866}] (raylet) file_system_monitor.cc:116: "
               f"/tmp/ray/{session} is over 95% full, available space: {free_gb:.4f} GB; capacity: 438.051 GB. "
               "Object creation will fail if spilling is required.")


def write_preemption(con: Console, offset: float, count: int) -> None:
    """vLLM KV-cache preemption warnings: the evidence of a slow generation."""
    for i in range(count):
        group = int(con.rng.integers(100, 5000))
        con.worker(f"WARNING {vllm_ts(con.clock + offset + i)} [scheduler.py:1484] Sequence group {group} is preempted "
                   "by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
                   "end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV "
                   f"cache memory. total_num_cumulative_preemption={group // 7}",
                   rank=int(con.rng.integers(con.spec.world_size)), repeated=int(con.rng.integers(0, 6)))


def write_nonfinite_grad(con: Console) -> None:
    """dp_actor's warning when the grad norm is not finite (the update is skipped)."""
    con.worker("WARN: rank 0 grad_norm is not finite: nan")
    con.worker("WARN: rank 1 grad_norm is not finite: nan", rank=1, repeated=con.spec.world_size - 1)
