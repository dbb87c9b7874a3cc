"""Python tracebacks as a verl driver prints them: Hydra wrapper, RayTaskError chain, worker frames."""

from __future__ import annotations

from .config_dump import overrides
from .console import Console, hex_id
from .vocab import PHASE_CALL, PHASE_FRAMES, PHASE_METHOD

SITE = "/usr/local/lib/python3.10/dist-packages"
VERL = "/opt/tiger/verl/verl"


def frame(path: str, line: int, func: str, source: str) -> list[str]:
    """One traceback frame: the `File ...` line and its source line."""
    return [f'  File "{path}", line {line}, in {func}', f"    {source}"]


def _task(con: Console, name: str, pid: int, cls_repr: str) -> str:
    head = f"ray::{name}()"
    if con.spec.ansi:
        head = f"\x1b[36m{head}\x1b[39m"
    return (f"{head} (pid={pid}, ip={con.spec.ip}, actor_id={hex_id(con.rng, 24)}01000000, "
            f"repr=<{cls_repr} object at 0x7f{hex_id(con.rng, 10)}>)")


def driver_head(con: Console, get_line: int, objects_line: int, objects_code: str) -> list[str]:
    """The driver's traceback from `main` into Ray's `get_objects`, where it waits for the TaskRunner."""
    old = con.spec.runner_name == "main_task"
    lines = ["Traceback (most recent call last):"]
    lines += frame(f"{VERL}/trainer/main_ppo.py", 42 if not old else 25, "main", "run_ppo(config)")
    lines += frame(f"{VERL}/trainer/main_ppo.py", 96 if not old else 33, "run_ppo",
                   "ray.get(runner.run.remote(config))" if not old else "ray.get(main_task.remote(config))")
    lines += frame(f"{SITE}/ray/_private/auto_init_hook.py", 21, "auto_init_wrapper", "return fn(*args, **kwargs)")
    lines += frame(f"{SITE}/ray/_private/client_mode_hook.py", 103, "wrapper", "return func(*args, **kwargs)")
    lines += frame(f"{SITE}/ray/_private/worker.py", get_line, "get",
                   "values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)")
    lines += frame(f"{SITE}/ray/_private/worker.py", objects_line, "get_objects", objects_code)
    return lines


def driver_frames(con: Console, exc: str, phase: str) -> list[str]:
    """Frames from `main` down to the trainer call that dispatched `phase`, with the TaskRunner wrapper."""
    old = con.spec.runner_name == "main_task"
    lines = driver_head(con, 2822, 930, "raise value.as_instanceof_cause()")
    if old:
        lines.append(f"ray.exceptions.RayTaskError({exc}): " + _task(con, "main_task", con.runner_pid, "main_ppo.main_task"))
        lines += frame(f"{VERL}/trainer/main_ppo.py", 198, "main_task", "trainer.fit()")
    else:
        lines.append(f"ray.exceptions.RayTaskError({exc}): "
                     + _task(con, "TaskRunner.run", con.runner_pid, "main_ppo.TaskRunner"))
        if phase == "startup":
            lines += frame(f"{VERL}/trainer/main_ppo.py", 310, "run", "trainer.init_workers()")
        else:
            lines += frame(f"{VERL}/trainer/main_ppo.py", 317, "run", "trainer.fit()")
    trainer = f"{VERL}/trainer/ppo/ray_trainer.py"
    if phase == "startup":
        lines += frame(trainer, 806, "init_workers", "self.actor_rollout_wg.init_model()")
    elif phase == "testing":
        lines += frame(trainer, 1003, "fit", "val_metrics: dict = self._validate()")
        lines += frame(trainer, PHASE_CALL["testing"][1], "_validate", PHASE_CALL["testing"][0])
    elif phase == "save_checkpoint":
        lines += frame(trainer, 1238, "fit", "self._save_checkpoint()")
        lines += frame(trainer, PHASE_CALL[phase][1], "_save_checkpoint", PHASE_CALL[phase][0])
    elif phase == "reward":
        lines += frame(trainer, 1084, "fit", "reward_tensor, reward_extra_infos_dict = compute_reward(batch, self.reward_fn)")
    else:
        lines += frame(trainer, PHASE_CALL[phase][1], "fit", PHASE_CALL[phase][0])
    if phase != "reward":
        lines += frame(f"{VERL}/single_controller/ray/base.py", 50, "__call__", "output = ray.get(output)")
    return lines


def worker_frames(con: Console, exc: str, phase: str, rank: int = 0) -> list[str]:
    """The remote WorkerDict part: `RayTaskError(...): ray::WorkerDict.<method>()` and the worker's frames."""
    pid = con.worker_pids[rank % len(con.worker_pids)]
    lines = [f"ray.exceptions.RayTaskError({exc}): "
             + _task(con, f"WorkerDict.{PHASE_METHOD[phase]}", pid, "verl.single_controller.ray.base.WorkerDict")]
    lines += frame(f"{VERL}/single_controller/ray/base.py", 705, "func",
                   "return getattr(self.worker_dict[key], name)(*args, **kwargs)")
    lines += frame(f"{VERL}/single_controller/base/decorator.py", 514, "inner", "return func(*args, **kwargs)")
    for path, line, func, src in PHASE_FRAMES[phase]:
        lines += frame(f"{VERL}/{path}", line, func, src)
    return lines


def hydra_open(con: Console) -> None:
    """Hydra's first line when the job raises."""
    con.bare(f"Error executing job with overrides: {overrides(con.spec)!r}")


def hydra_close(con: Console) -> None:
    """Hydra's closing hint after the traceback."""
    con.bare("", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.")


FORWARD_TAIL = (
    frame(f"{SITE}/torch/nn/modules/module.py", 1751, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)")
    + frame(f"{SITE}/torch/nn/modules/module.py", 1762, "_call_impl", "return forward_call(*args, **kwargs)")
    + frame(f"{SITE}/transformers/models/qwen2/modeling_qwen2.py", 463, "forward",
            "logits = self.lm_head(hidden_states[:, slice_indices, :])")
    + frame(f"{SITE}/torch/nn/modules/linear.py", 125, "forward", "return F.linear(input, self.weight, self.bias)")
)
BACKWARD_TAIL = (
    frame(f"{SITE}/torch/_tensor.py", 626, "backward", "torch.autograd.backward(")
    + frame(f"{SITE}/torch/autograd/__init__.py", 347, "backward", "_engine_run_backward(")
    + frame(f"{SITE}/torch/autograd/graph.py", 823, "_engine_run_backward",
            "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass")
)
SAMPLER_TAIL = (
    frame(f"{SITE}/vllm/entrypoints/llm.py", 465, "generate", "outputs = self._run_engine(use_tqdm=use_tqdm)")
    + frame(f"{SITE}/vllm/v1/sample/sampler.py", 56, "forward", "sampled = self.sample(logits, sampling_metadata)")
    + frame(f"{SITE}/vllm/v1/sample/ops/topk_topp_sampler.py", 288, "random_sample",
            "return probs.div_(q).argmax(dim=-1).view(-1)")
    + frame(f"{SITE}/torch/_tensor.py", 1512, "multinomial", "return torch._C._VariableFunctions.multinomial(")
)
