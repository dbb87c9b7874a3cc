"""Write a run's files as users archive them: a folder, a `.tar.gz` of the folder, or one `.log.gz`."""

from __future__ import annotations

import gzip
import os
import shutil
import tarfile
from pathlib import Path


def gzip_file(src: Path, dst: Path, mtime: float) -> None:
    """Gzip `src` into `dst` reproducibly (fixed header mtime, no file name)."""
    with open(src, "rb") as fin, open(dst, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=int(mtime), compresslevel=6) as gz:
        shutil.copyfileobj(fin, gz, 1 << 20)


def tar_folder(folder: Path, dst: Path, mtime: float, name: str | None = None) -> None:
    """Pack `folder` as `<name>/...` (default: the folder's name) into a reproducible `.tar.gz`."""
    name = name or folder.name
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    with open(dst, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=int(mtime), compresslevel=6) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            info = tarfile.TarInfo(f"{name}/{path.relative_to(folder).as_posix()}")
            info.size = path.stat().st_size
            info.mtime = int(mtime)
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(path, "rb") as fh:
                tar.addfile(info, fh)


def set_mtime(path: Path, mtime: float) -> None:
    """Give `path` (and everything under it) the run's end time, as a copied archive keeps it."""
    targets = [path] + (sorted(path.rglob("*")) if path.is_dir() else [])
    for p in reversed(targets):
        os.utime(p, (mtime, mtime))


def finish_entry(staging: Path, archive_dir: Path, run_id: str, form: str, mtime: float) -> Path:
    """Turn the staged run folder into the archive entry of `form`; return the entry path."""
    if form == "dir":
        entry = archive_dir / run_id
        staging.rename(entry)
    elif form == "tar.gz":
        entry = archive_dir / f"{run_id}.tar.gz"
        tar_folder(staging, entry, mtime, name=run_id)
        shutil.rmtree(staging)
    else:
        entry = archive_dir / f"{run_id}.log.gz"
        gzip_file(staging / "train.log", entry, mtime)
        shutil.rmtree(staging)
    set_mtime(entry, mtime)
    return entry
