"""Whether Parquet files share one schema, told from their footers' bytes without decoding them.

DuckDB reads a list of files with `union_by_name=true` by opening every file to bind its columns: about a
quarter of what deriving the per-run tables of a 100-run batch costs, where every partition was written by the
same code with the same columns. Without it DuckDB takes the first file's columns for all (a column the first
lacks is dropped, another type is cast), so it may only be left out where the schemas are known to be equal.
A file's schema is the `schema` field of its footer (Thrift's compact protocol, parquet.thrift's
FileMetaData field 2): equal bytes are equal schemas, and files written apart with the same columns have the
same bytes. Each file's key is kept by its identity (inode, size, change time), a bounded number of them, until
`forget`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

KEPT_KEYS = 8_192  # ~250 bytes each: a derive chunk of 100 runs reads ~2,000 files
_KEYS: OrderedDict[tuple, bytes | None] = OrderedDict()
_LOCK = threading.Lock()

_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _skip(buf: bytes, i: int, kind: int) -> int:
    """The offset after one value of Thrift compact type `kind` starting at `i`."""
    if kind in (_TRUE, _FALSE):
        return i
    if kind == _BYTE:
        return i + 1
    if kind in (_I16, _I32, _I64):
        return _varint(buf, i)[1]
    if kind == _DOUBLE:
        return i + 8
    if kind == _BINARY:
        n, i = _varint(buf, i)
        return i + n
    if kind in (_LIST, _SET):
        head = buf[i]
        i += 1
        n, element = head >> 4, head & 0x0F
        if n == 15:
            n, i = _varint(buf, i)
        for _ in range(n):
            i = i + 1 if element in (_TRUE, _FALSE) else _skip(buf, i, element)
        return i
    if kind == _MAP:
        n, i = _varint(buf, i)
        if n:
            types = buf[i]
            i += 1
            for _ in range(n):
                i = _skip(buf, _skip(buf, i, types >> 4), types & 0x0F)
        return i
    if kind == _STRUCT:
        while (head := buf[i]) != _STOP:
            i += 1
            if head >> 4 == 0:  # a field id too far from the last is written out
                i = _varint(buf, i)[1]
            i = _skip(buf, i, head & 0x0F)
        return i + 1
    raise ValueError(f"not a Thrift compact type: {kind}")


def footer_schema(footer: bytes) -> bytes | None:
    """The bytes of the `schema` field of a Parquet footer (its FileMetaData), or None if it has none."""
    i = field = 0
    while (head := footer[i]) != _STOP:
        i += 1
        if head >> 4:
            field += head >> 4
        else:
            zigzag, i = _varint(footer, i)
            field = (zigzag >> 1) ^ -(zigzag & 1)
        start, i = i, _skip(footer, i, head & 0x0F)
        if field == 2:
            return footer[start:i]
    return None


def _read_key(fh, size: int) -> bytes | None:
    if size < 12:
        return None
    fh.seek(size - 8)
    tail = fh.read(8)
    n = int.from_bytes(tail[:4], "little")
    if tail[4:] != b"PAR1" or n > size - 12:
        return None
    fh.seek(size - 8 - n)
    schema = footer_schema(fh.read(n))
    return None if schema is None else hashlib.blake2b(schema, digest_size=16).digest()


def schema_key(path: str | Path) -> bytes | None:
    """A digest of a Parquet file's schema (None when the file is gone or its footer cannot be read)."""
    try:
        with open(path, "rb") as fh:
            # the open file's identity, not the path's: a partition swapped in meanwhile is another file
            st = os.fstat(fh.fileno())
            identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            with _LOCK:
                if identity in _KEYS:
                    _KEYS.move_to_end(identity)
                    return _KEYS[identity]
            key = _read_key(fh, st.st_size)
    except (OSError, IndexError, ValueError):
        return None
    with _LOCK:
        _KEYS[identity] = key
        if len(_KEYS) > KEPT_KEYS:
            _KEYS.popitem(last=False)
    return key


def forget() -> None:
    """Drop the kept keys (at the end of a Dagster run: the next one reads other partitions)."""
    with _LOCK:
        _KEYS.clear()


def same_schema(paths: Iterable[str | Path]) -> bool:
    """Whether every file of `paths` has one and the same schema (False where one cannot be read)."""
    keys = {schema_key(p) for p in paths}
    return len(keys) == 1 and None not in keys
