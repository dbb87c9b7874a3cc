"""The role of each file in a run folder, told by its name: which process wrote it.

A run folder can hold, beside the driver's console (a tee'd log, W&B's output.log, or SLURM's
slurm-<job>.out when it is the only console), what Ray keeps per session (worker-<worker id>-<job id>-<pid>.out
and .err, raylet.out/.err, gcs_server, dashboard, monitor), an inference server's own log (vllm_server.log,
sglang*.log) and the side files of the loggers. The driver itself is the run's main file, which
run_summary chooses; here every console-like file is `console`.
"""

from __future__ import annotations

import re

# In order: the first pattern that matches the file's base name gives its role.
ROLES = (
    ("ray_worker", r"^(?:worker-[0-9a-f]+-[0-9a-f]+-\d+|python-core-worker-[0-9a-f]+_\d+)\.(?:out|err|log)$"),
    ("raylet", r"^raylet(?:\.\d+)?\.(?:out|err)$"),
    ("ray_system", r"^(?:gcs_server|dashboard(?:_agent)?|monitor|log_monitor|runtime_env_agent|"
                   r"python-core-driver-[0-9a-f]+_\d+)(?:\.\d+)?\.(?:out|err|log)$"),
    ("inference_server", r"^(?:vllm|sglang)[\w.-]*\.(?:log|out|err|txt)$"),
    ("slurm", r"^slurm-\d+(?:_\d+)?\.(?:out|err)$"),
    ("logger_files", r"^(?:config\.yaml|wandb-[a-z]+\.json|requirements\.txt|conda-environment\.yaml"
                     r"|debug(?:-internal)?\.log|run-\w+\.wandb)$"),
    ("tensorboard", r"^events\.out\.tfevents\."),
    ("metrics_jsonl", r"\.jsonl$"),
)
_COMPILED = tuple((role, re.compile(pattern)) for role, pattern in ROLES)
CONSOLE = "console"
# files no process printed: metrics and the loggers' own records
NOT_LOGS = ("logger_files", "tensorboard", "metrics_jsonl")


def role_of(file: str) -> str:
    """The role of a file of a run entry (its path inside the entry), `console` when no name says more."""
    base = file.rsplit("/", 1)[-1]
    if base.endswith(".gz"):
        base = base[: -len(".gz")]
    for role, pattern in _COMPILED:
        if pattern.search(base):
            return role
    return CONSOLE
