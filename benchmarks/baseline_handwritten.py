"""The baseline a user writes by hand (the seed article's approach): Python `re` per line into a pandas
DataFrame, then CSV. It keeps every line (like our `log_lines`) and the step metrics.

Usage: python baseline_handwritten.py OUT_DIR LOG_FILE [LOG_FILE ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PREFIX = re.compile(r"^\((?:(\S+) )?pid=(\d+)(?:, ip=[^)]*)?\) ")
STEP = re.compile(r"(?:^|\s)step:(\d+) - (.*)$")
PAIR = re.compile(r"^(.+):(?:np\.\w+\()?([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))\)?$")
ERROR = re.compile(r"Traceback|Error|Exception")
WARNING = re.compile(r"WARN")
PROGRESS = re.compile(r"\d+%\|")


def parse(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every line with its kind, and the step metrics, of one log file."""
    lines, metrics = [], []
    with open(path, encoding="utf-8", errors="replace", newline="\n") as fh:
        for no, line in enumerate(fh, 1):
            line = ANSI.sub("", line.rstrip("\n"))
            m = PREFIX.match(line)
            component, pid = (m.group(1) or "pid", int(m.group(2))) if m else (None, None)
            step = STEP.search(line)
            if step:
                kind = "step_metrics"
                for item in step.group(2).split(" - "):
                    pair = PAIR.match(item.strip())
                    if pair:
                        metrics.append(
                            {"step": int(step.group(1)), "key": pair.group(1), "value": float(pair.group(2))}
                        )
            elif ERROR.search(line):
                kind = "error"
            elif WARNING.search(line):
                kind = "warning"
            elif PROGRESS.search(line):
                kind = "progress"
            else:
                kind = "other"
            lines.append({"line_no": no, "text": line, "kind": kind, "component": component, "pid": pid})
    return pd.DataFrame(lines), pd.DataFrame(metrics)


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name in argv[1:]:
        lines, metrics = parse(Path(name))
        lines.to_csv(out / f"{Path(name).stem}_lines.csv", index=False)
        metrics.to_csv(out / f"{Path(name).stem}_metrics.csv", index=False)


if __name__ == "__main__":
    main(sys.argv[1:])
