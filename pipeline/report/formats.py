"""How the reports write numbers, durations, shares, ratios and times (every time with its zone)."""

from __future__ import annotations

import math
from datetime import date, datetime
from typing import Any

import numpy as np
from jinja2 import Undefined

# verl's logs print their timestamps without a zone: a run's times are the log's own clock
LOG_CLOCK = "log clock"


def fmt_duration(seconds: Any) -> str:
    """'2 h 14 m', '3 m 5 s', '42 s', '0.87 s', '0.00087 s'; '–' when unknown."""
    if not isinstance(seconds, int | float) or not math.isfinite(seconds):
        return "–"
    if 0 < abs(seconds) < 9.5:
        # a phase of a few ms a step is not "0 s", nor 4.6 s "5 s"
        return f"{_fmt_float(float(seconds), 2)} s"
    s = int(round(seconds))
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    if d:
        return f"{d} d {h} h"
    if h:
        return f"{h} h {m} m"
    if m:
        return f"{m} m {sec} s"
    return f"{sec} s"


def fmt_time(value: Any, file_time: bool = False) -> str:
    """A time with its zone: the zone it carries; for a file's time (read in this machine's zone) that zone;
    else the log's own clock (verl prints no zone)."""
    if not isinstance(value, datetime):
        return "–" if value is None or isinstance(value, Undefined) else str(value)
    if value.tzinfo is not None:
        zone = value.tzname()
    else:
        zone = f"{datetime.now().astimezone().tzname()} (file time)" if file_time else LOG_CLOCK
    return f"{value:%Y-%m-%d %H:%M} {zone}"


def now_with_zone() -> str:
    """The time now in this machine's zone, with the zone's name."""
    return fmt_time(datetime.now().astimezone())


def fmt_num(value: Any, digits: int = 3) -> str:
    """Numbers for tables: ints with thin separators, floats with `digits` significant digits."""
    if value is None or isinstance(value, Undefined):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | np.floating):
        return _fmt_float(float(value), digits)
    if isinstance(value, datetime):
        return fmt_time(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return ", ".join(fmt_num(v, digits) for v in value)
    return str(value)


def _fmt_float(v: float, digits: int) -> str:
    if not math.isfinite(v):
        return str(v)
    if v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    if 1e3 <= abs(v) < 1e15:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def fmt_pct(value: Any, digits: int = 0) -> str:
    """A fraction as a percentage."""
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "–"
    return f"{100 * value:.{digits}f} %"


def fmt_ratio(value: Any) -> str:
    """'×1.23' for a ratio to a baseline."""
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "–"
    return f"×{value:.2f}"
