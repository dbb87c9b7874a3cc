"""Find the runs in an archive root: one entry per run, a stable run_id each, finished or not."""

from __future__ import annotations

import gzip
import os
import re
import stat
import time
import zlib
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from .readers import MARKER_NAMES, entry_stem, file_kind, open_regular
from .roles import NOT_LOGS, role_of

END_MARKERS = re.compile(
    rb"Final validation metrics|Error executing job|Set the environment variable HYDRA_FULL_ERROR"
)
LAST_ERROR = re.compile(rb"^\S*(?:\([^)]*\) )?[\w.]*(?:Error|Exception)\b.*$", re.M)
TAIL_BYTES = 64 * 1024
# Files that sit beside the runs in an archive folder and are not runs: what a person or a tool wrote
# about them. Matched on the name's first part (before any dot) or its last suffix, case-insensitive.
NOT_RUNS = {
    "documentation": ({"readme", "sources", "notes", "changelog", "license", "licence", "authors"},
                      {".md", ".rst", ".pdf", ".html"}),
    "labels": ({"labels", "label"}, set()),
    "checksums": ({"checksums", "sha256sums", "sha512sums", "sha1sums", "md5sums"},
                  {".sha256", ".sha512", ".sha1", ".md5", ".asc", ".sig"}),
}
GZ_TAIL_SCAN_LIMIT = 64 * 2**20  # decompress a .gz to read its tail only if it is this small
# An archive folder named `wandb` that holds W&B run folders (`wandb/run-<date>_<time>-<id>`, offline ones
# too) is W&B's own directory: each run folder is a run (its `latest-run` link is not another one).
WANDB_DIR = "wandb"
WANDB_RUN_DIR = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-\w+$")


@dataclass(frozen=True)
class RunEntry:
    """One run in the archive."""

    run_id: str
    path: Path
    form: str  # dir | tar.gz | zip | gz | log
    size: int
    mtime: float
    finished: bool
    end_marker: str | None


@dataclass
class Discovery:
    """The runs found, the files that are not runs (name -> why), and the entries that could not become runs;
    `n_unread`: the runs named in the archive but left out by `discover_runs(only=...)`."""

    entries: list[RunEntry] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    n_unread: int = 0


def not_a_run(name: str) -> str | None:
    """Why a file of an archive folder is not a run (documentation, labels, checksums), or None."""
    lower = name.lower()
    first, suffix = lower.split(".", 1)[0], Path(lower).suffix
    for kind, (stems, suffixes) in NOT_RUNS.items():
        if first in stems or suffix in suffixes:
            return f"not a run ({kind})"
    return None


def run_id_for(name: str) -> str:
    """Stable run_id of an entry name: suffix dropped, other characters mapped to `_`, with a letter."""
    rid = re.sub(r"[^A-Za-z0-9._-]", "_", entry_stem(name))
    if not rid or not rid[0].isalnum() or not re.search(r"[A-Za-z]", rid):
        rid = "run_" + rid
    return rid


def entry_form(path: Path) -> str:
    """dir, tar.gz, zip, gz or log."""
    name = path.name
    if path.is_dir():
        return "dir"
    if name.endswith((".tar.gz", ".tgz")):
        return "tar.gz"
    if name.endswith(".zip"):
        return "zip"
    if name.endswith(".gz"):
        return "gz"
    return "log"


def _dir_stats(path: Path) -> tuple[int, float, list[Path]]:
    size, mtime, files = 0, 0.0, []
    for dirpath, _, filenames in os.walk(path):
        for fn in filenames:
            p = Path(dirpath) / fn
            try:
                st = p.lstat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):  # a link, a FIFO, a device: ingest does not read it either
                continue
            size += st.st_size
            mtime = max(mtime, st.st_mtime)
            files.append(p)
    return size, mtime or path.stat().st_mtime, files


def _tail(path: Path, gz: bool) -> bytes:
    try:
        if gz:
            if path.stat().st_size > GZ_TAIL_SCAN_LIMIT:
                return b""
            tail = b""
            with open_regular(path) as raw, gzip.GzipFile(fileobj=raw, mode="rb") as fh:
                while chunk := fh.read(1 << 20):
                    tail = (tail + chunk)[-TAIL_BYTES:]
            return tail
        with open_regular(path) as fh:  # a FIFO would block, a device never end
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - TAIL_BYTES))
            return fh.read(TAIL_BYTES)
    except (OSError, EOFError, zlib.error):
        return b""


def end_marker_in(tail: bytes) -> str | None:
    """The end marker in a log's tail: final validation, Hydra's error wrapper, or a final exception line."""
    m = END_MARKERS.search(tail)
    if m:
        return m.group(0).decode()
    last = [ln for ln in tail.rstrip().splitlines()[-3:] if ln.strip()]
    if last and b"Traceback" in tail and LAST_ERROR.match(last[-1].strip()):
        return "final traceback"
    return None


def _end_marker(path: Path, form: str, files: list[Path]) -> str | None:
    for marker in MARKER_NAMES:
        if (path.parent / f"{path.name}{marker}").exists() or (form == "dir" and (path / marker).exists()):
            return marker
    if form in ("log", "gz"):
        return end_marker_in(_tail(path, form == "gz"))
    if form == "dir":
        # the largest logs: a TensorBoard event file, a JSONL metrics file or a logger's side file prints no ending
        logs = [p for p in files if p.name not in MARKER_NAMES and role_of(p.name) not in NOT_LOGS]
        for p in sorted(logs, key=lambda p: p.stat().st_size if p.exists() else 0, reverse=True)[:3]:
            found = end_marker_in(_tail(p, p.name.endswith(".gz")))
            if found:
                return found
    return None


def _wandb_run_dirs(path: Path) -> list[Path]:
    """The W&B run folders directly in a `wandb` folder (symbolic links such as `latest-run` left out)."""
    try:
        return [p for p in sorted(path.iterdir())
                if WANDB_RUN_DIR.match(p.name) and p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def discover_runs(root: str | Path, quiet_period_s: float = 600, now: float | None = None,
                  only: Collection[str] | None = None) -> Discovery:
    """List the run entries under `root` (folders, .tar.gz/.tgz, .zip, .gz, other files).

    A run is finished when unchanged for `quiet_period_s` or carrying an end marker. Files that are
    not runs (a README, SOURCES.md, label files, checksums) are listed in `skipped`. Entries that
    map to the same run_id are all reported in `errors` and none is listed. With `only`, just the entries
    of those run_ids are listed: the others are named but neither walked nor read (one run of a big archive).
    """
    root = Path(root)
    now = time.time() if now is None else now
    found = Discovery()
    by_id: dict[str, list[Path]] = {}
    try:
        names = sorted(os.listdir(root))
    except OSError as exc:
        found.errors.append(f"cannot list archive root {root}: {exc}")
        return found
    for name in names:
        path = root / name
        if name.startswith(".") or name in MARKER_NAMES or name.endswith(tuple(MARKER_NAMES)):
            continue
        try:
            mode = path.lstat().st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            found.errors.append(f"{name}: a symbolic link: refused, not followed (a run must lie inside the archive)")
            continue
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            found.errors.append(f"{name}: a {file_kind(mode)}, not a run folder nor a file: skipped, not read")
            continue
        why = not_a_run(name) if stat.S_ISREG(mode) else None
        if why:
            found.skipped[name] = why
            continue
        wandb_runs = _wandb_run_dirs(path) if name == WANDB_DIR else []
        for run_path in wandb_runs or [path]:
            by_id.setdefault(run_id_for(run_path.name), []).append(run_path)
    for rid, paths in sorted(by_id.items()):
        if only is not None and rid not in only:
            found.n_unread += len(paths) == 1
            continue
        if len(paths) > 1:
            found.errors.append(
                f"run_id {rid!r} is given by {len(paths)} entries ({', '.join(p.name for p in paths)}): none ingested"
            )
            continue
        path = paths[0]
        form = entry_form(path)
        try:
            if form == "dir":
                size, mtime, files = _dir_stats(path)
            else:
                st = path.stat()
                size, mtime, files = st.st_size, st.st_mtime, []
        except OSError as exc:
            found.errors.append(f"{path.name}: vanished during discovery ({exc})")
            continue
        marker = _end_marker(path, form, files)
        finished = marker is not None or now - mtime >= quiet_period_s
        found.entries.append(RunEntry(rid, path, form, size, mtime, finished, marker))
    return found
