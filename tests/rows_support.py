"""Comparing table rows computed two ways (incremental and whole, chunked and in one batch)."""

from __future__ import annotations

import math


def same(a, b) -> bool:
    """Equal values; floats to 12 digits (DuckDB's parallel sums add in no fixed order, from one run to the next)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b
