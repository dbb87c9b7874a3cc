"""How verl prints a metric value: numpy-2 repr, bare repr (numpy 1.x), or the old `%.3f` (<= v0.4.1)."""

from __future__ import annotations

from .metric_keys import INT_KEYS, NP_INT32_KEYS, is_numpy_typed


def value_formatter(key: str, fmt: str):
    """A function float -> text printing `key` the way a run of format `fmt` prints it."""
    if fmt == "v04":
        return _fixed3
    if key in INT_KEYS:
        return _int
    if fmt == "np2" and key in NP_INT32_KEYS:
        return lambda v: f"np.int32({int(v)})"
    if key in NP_INT32_KEYS:
        return _int
    if fmt == "np2" and is_numpy_typed(key):
        return lambda v: f"np.float64({v!r})"
    return repr


def _fixed3(v: float) -> str:
    return f"{v:.3f}"


def _int(v: float) -> str:
    return str(int(v))


def format_column(key: str, fmt: str, values) -> list[str]:
    """Format a whole column of one key (one call per key keeps bulk rendering fast)."""
    fn = value_formatter(key, fmt)
    return [fn(x) for x in values]


def dict_repr(values: dict[str, float], fmt: str) -> str:
    """`str(dict)` of validation metrics as the trainer's pprint shows it (numpy-typed values)."""
    if fmt == "np2":
        inner = ", ".join(f"'{k}': np.float64({v!r})" for k, v in values.items())
    else:
        inner = ", ".join(f"'{k}': {v!r}" for k, v in values.items())
    return "{" + inner + "}"
