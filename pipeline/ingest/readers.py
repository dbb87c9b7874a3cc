"""Byte streams of the files in one run entry (folder, .tar.gz, .zip, .gz, plain log), read safely.

Archive members are read as streams and never extracted to disk. Every problem (corrupt archive,
unsafe member path, decompression bomb, vanished file) is appended to `problems` as a clear
message and reading goes on with what can be read; nothing here raises for bad data.
"""

from __future__ import annotations

import gzip
import os
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

ENTRY_SUFFIXES = (".tar.gz", ".tgz", ".zip", ".log.gz", ".gz", ".log", ".txt")
READ_BYTES = 2**20  # small reads: a truncated compressed stream then loses at most this much
READ_ERRORS = (OSError, EOFError, zlib.error, tarfile.TarError, zipfile.BadZipFile, ValueError)
MARKER_NAMES = {".done", "_SUCCESS"}


@dataclass(frozen=True)
class IngestLimits:
    """Safety and speed limits of one run's ingest."""

    max_total_bytes: int = 64 * 2**30  # decompressed bytes per run: the decompression-bomb guard
    max_members: int = 100_000  # files per run (folder files or archive members)
    # longer lines are kept truncated to this size: a derive query holds a batch's texts, so a few multi-MB lines
    # (a 50 MB line beside a decompression bomb's 64 MB of NULs) ran its connection out of memory
    max_line_bytes: int = 2**20
    block_bytes: int = 16 * 2**20  # bytes per block: several blocks are in flight at once
    metric_rows_in_memory: int = 2**20  # a run's metric rows beyond this go to a scratch file DuckDB reconciles


def entry_stem(name: str) -> str:
    """Entry name without its archive/log suffix."""
    for suffix in ENTRY_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


class ByteBudget:
    """Counts decompressed bytes across a run and stops reading past the limit."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self.exhausted = False

    def take(self, n: int) -> int:
        """Grant up to n more bytes."""
        granted = max(0, min(n, self.limit - self.used))
        self.used += granted
        if granted < n:
            self.exhausted = True
        return granted


def member_name_problem(name: str) -> str | None:
    """Why an archive member name is unsafe (absolute, `..`), or None."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return f"archive member {name!r} has an absolute path: refused, not read"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return f"archive member {name!r} escapes the archive with '..': refused, not read"
    return None


class NotRegularFile(OSError):
    """A path that is not a regular file (a FIFO, a device, a socket): reading it could block or never end."""


def file_kind(mode: int) -> str:
    """What a file mode says the file is, in words."""
    for test, kind in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "folder"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return "special file"


def open_regular(path: str | Path) -> BinaryIO:
    """`path` opened for binary reading if it is a regular file reached without a symbolic link; else
    NotRegularFile (or the OSError of the open). A FIFO is opened without waiting for a writer, then refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"a {file_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _chunks(
    fh: BinaryIO, name: str, limits: IngestLimits, budget: ByteBudget, problems: list[str]
) -> Iterator[bytes]:
    """Read `fh` in blocks, within the byte budget; a read error ends the file with a problem."""
    got = 0
    while True:
        try:
            data = fh.read(READ_BYTES)
        except READ_ERRORS as exc:
            problems.append(f"{name}: read failed after {got} bytes ({_describe(exc)}): kept what was read")
            return
        if not data:
            return
        allowed = budget.take(len(data))
        if allowed < len(data):
            problems.append(
                f"{name}: decompressed-size limit of {budget.limit} bytes per run reached "
                f"(possible decompression bomb): the rest was not read"
            )
            if allowed:
                yield data[:allowed]
            return
        got += len(data)
        yield data


def _describe(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "truncated compressed stream"
    return f"{type(exc).__name__}: {exc}"


def _maybe_gunzip(fh: BinaryIO, name: str) -> BinaryIO:
    return gzip.GzipFile(fileobj=fh, mode="rb") if name.endswith(".gz") else fh


def _dir_files(root: Path, problems: list[str]) -> list[Path]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: problems.append(f"cannot list {e}")):
        dirnames.sort()
        for fn in sorted(filenames):
            path = Path(dirpath) / fn
            try:
                mode = path.lstat().st_mode
            except OSError:
                mode = stat.S_IFREG  # vanished: its open says so
            if fn in MARKER_NAMES or stat.S_ISLNK(mode):
                continue
            if not stat.S_ISREG(mode):
                problems.append(f"{path.relative_to(root).as_posix()}: a {file_kind(mode)}, not a regular file: "
                                "skipped, not read")
                continue
            files.append(path)
    return files


FileStream = tuple[str, Iterator[bytes]]


def iter_files(
    path: str | Path, form: str, limits: IngestLimits, problems: list[str]
) -> Iterator[FileStream]:
    """Yield (file name inside the entry, byte chunks) for every readable file of a run entry.

    Each chunk iterator must be consumed before the next file is requested (archives stream).
    """
    path = Path(path)
    budget = ByteBudget(limits.max_total_bytes)
    readers: dict[str, Callable[[], Iterator[FileStream]]] = {
        "dir": lambda: _iter_dir(path, limits, budget, problems),
        "tar.gz": lambda: _iter_tar(path, limits, budget, problems),
        "zip": lambda: _iter_zip(path, limits, budget, problems),
        "gz": lambda: _iter_single(path, True, limits, budget, problems),
        "log": lambda: _iter_single(path, False, limits, budget, problems),
    }
    if form not in readers:
        problems.append(f"unknown archive form {form!r}: nothing read")
        return
    try:
        yield from readers[form]()
    except READ_ERRORS as exc:
        problems.append(f"{path.name}: archive unreadable ({_describe(exc)}): kept what was read")


def _open_reported(path: Path, label: str, problems: list[str], vanished: str, skipped: str) -> BinaryIO | None:
    """`open_regular(path)`, or None with a problem about `label` when it cannot be opened: `vanished` when the
    file is gone, `skipped` after the reason when it is no regular file."""
    try:
        return open_regular(path)
    except FileNotFoundError:
        problems.append(f"{label}: {vanished}")
    except NotRegularFile as exc:
        problems.append(f"{label}: {exc}: {skipped}")
    except OSError as exc:
        problems.append(f"{label}: cannot open ({exc})")
    return None


def _iter_single(path: Path, gz: bool, limits, budget, problems) -> Iterator[FileStream]:
    name = _shown(path.name) if gz else path.name
    raw = _open_reported(path, path.name, problems, "file vanished before it could be read", "not read")
    if raw is None:
        return
    with raw:
        fh = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
        yield name, _chunks(fh, name, limits, budget, problems)


def _iter_dir(root: Path, limits, budget, problems) -> Iterator[FileStream]:
    files = _dir_files(root, problems)
    if len(files) > limits.max_members:
        problems.append(f"{len(files)} files exceed the limit of {limits.max_members}: only the first read")
        files = files[: limits.max_members]
    for path in files:
        rel = path.relative_to(root).as_posix()
        if budget.exhausted:
            problems.append(f"{rel}: not read, the decompressed-size limit was reached")
            continue
        raw = _open_reported(path, rel, problems, "file vanished during the scan", "skipped, not read")
        if raw is None:
            continue
        with raw:
            yield _shown(rel), _chunks(_maybe_gunzip(raw, rel), rel, limits, budget, problems)


def _iter_tar(path: Path, limits, budget, problems) -> Iterator[FileStream]:
    top = entry_stem(path.name)
    with tarfile.open(path, mode="r|*") as tar:
        count = 0
        while True:
            try:
                member = tar.next()
            except READ_ERRORS as exc:
                problems.append(
                    f"{path.name}: corrupt tar after {count} members ({_describe(exc)}): stopped there"
                )
                return
            if member is None:
                return
            count += 1
            if count > limits.max_members:
                problems.append(f"{path.name}: more than {limits.max_members} members: the rest was not read")
                return
            unsafe = member_name_problem(member.name)
            if unsafe:
                problems.append(unsafe)
                continue
            if count == 1 and member.isdir():
                top = member.name.strip("/").removeprefix("./")
            if member.issym() or member.islnk():
                problems.append(f"archive member {member.name!r} is a link: refused, not read")
                continue
            if not member.isfile():
                if not member.isdir():
                    kind = "FIFO" if member.isfifo() else "device" if member.isdev() else "special file"
                    problems.append(f"archive member {member.name!r} is a {kind}, not a regular file: skipped")
                continue
            name = _member_to_read(member.name, top, budget, problems)
            if name is None:
                continue
            fh = tar.extractfile(member)
            yield _shown(name), _chunks(_maybe_gunzip(fh, name), name, limits, budget, problems)


def _iter_zip(path: Path, limits, budget, problems) -> Iterator[FileStream]:
    top = entry_stem(path.name)
    with zipfile.ZipFile(path) as zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        if len(infos) > limits.max_members:
            problems.append(f"{path.name}: {len(infos)} members exceed the limit of {limits.max_members}")
            infos = infos[: limits.max_members]
        for info in infos:
            unsafe = member_name_problem(info.filename)
            if unsafe:
                problems.append(unsafe)
                continue
            kind = stat.S_IFMT(info.external_attr >> 16)  # the Unix mode zip keeps for a member made on Unix
            if kind and kind != stat.S_IFREG:
                problems.append(f"archive member {info.filename!r} is a {file_kind(kind)}, not a regular file: "
                                "refused, not read")
                continue
            name = _member_to_read(info.filename, top, budget, problems)
            if name is None:
                continue
            try:
                fh = zf.open(info)
            except READ_ERRORS as exc:
                problems.append(f"{name}: cannot read member ({_describe(exc)})")
                continue
            with fh:
                yield _shown(name), _chunks(_maybe_gunzip(fh, name), name, limits, budget, problems)


def _member_to_read(member: str, top: str, budget: ByteBudget, problems: list[str]) -> str | None:
    """The name an archive member is read under, or None for a marker file or one past the size limit."""
    name = _inner_name(member, top)
    if PurePosixPath(name).name in MARKER_NAMES:
        return None
    if budget.exhausted:
        problems.append(f"{name}: not read, the decompressed-size limit was reached")
        return None
    return name


def _shown(name: str) -> str:
    """A file's name as the run shows it: without a `.gz` ending."""
    return name.removesuffix(".gz")


def _inner_name(name: str, top: str) -> str:
    """Member path without a leading `./` nor the run's own top folder: a folder named after the run
    (`run-7/train.log`, `.staging-run-7/train.log` -> `train.log`), or `top` when it is the archive's
    first member and a directory."""
    while name.startswith("./"):
        name = name[2:]
    head, sep, rest = name.partition("/")
    return rest if sep and rest and (head == top or top in head) else name
