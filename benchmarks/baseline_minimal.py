"""The minimal parse a user writes when only the step metrics matter: Python `re` on each step line ->
pandas -> CSV. No line is kept or classified (that is `baseline_handwritten.py`).

Usage: python baseline_minimal.py OUT_DIR LOG_FILE [LOG_FILE ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

STEP = re.compile(r"(?:^|\s)step:(\d+) - (.*)$")
PAIR = re.compile(r"^(.+):(?:np\.\w+\()?([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))\)?$")


def parse(path: Path) -> pd.DataFrame:
    """The step metrics (step, key, value) of one log file."""
    steps, keys, values = [], [], []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if "step:" not in line:
                continue
            m = STEP.search(line.rstrip("\n"))
            if not m:
                continue
            step = int(m.group(1))
            for item in m.group(2).split(" - "):
                pair = PAIR.match(item.strip())
                if pair:
                    steps.append(step)
                    keys.append(pair.group(1))
                    values.append(float(pair.group(2)))
    return pd.DataFrame({"step": steps, "key": keys, "value": values})


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name in argv[1:]:
        parse(Path(name)).to_csv(out / f"{Path(name).stem}_metrics.csv", index=False)


if __name__ == "__main__":
    main(sys.argv[1:])
