"""Archive and warehouse as `s3://` URLs, through pyarrow's S3FileSystem (no DuckDB extension needed).

The archive is mirrored into a local staging cache that ingest reads like any archive folder; the
warehouse is built locally and its Parquet files are published to the bucket, where DuckDB queries
them as Arrow datasets that pyarrow opens.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlparse

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from pipeline.lake import open_database
from pipeline.settings import setting
from pipeline.tables import fleet_tables, names, per_run_tables

SCHEME = "s3://"
MANIFEST = ".published.json"
# Folders and files of the warehouse that are published besides the tables.
EXTRA_PREFIXES = ("models/",)


def is_url(location: str | Path) -> bool:
    """True when `location` is an `s3://` URL rather than a local path."""
    return str(location).startswith(SCHEME)


def bucket_path(url: str) -> str:
    """The `bucket/prefix` form pyarrow's filesystems use, without trailing slash."""
    if not is_url(url):
        raise ValueError(f"not an s3:// URL: {url}")
    return url[len(SCHEME):].strip("/")


def s3_filesystem(endpoint: str | None = None) -> pafs.S3FileSystem:
    """An S3FileSystem; credentials from the AWS chain, endpoint from AWS_ENDPOINT_URL(_S3) for MinIO & co."""
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    kwargs: dict = {"region": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"}
    if endpoint:
        parsed = urlparse(endpoint)
        kwargs["endpoint_override"] = parsed.netloc or parsed.path
        kwargs["scheme"] = parsed.scheme or "https"
    return pafs.S3FileSystem(**kwargs)


def default_cache_dir(url: str, kind: str) -> Path:
    """A stable local folder for one URL: VERL_HEALTH_CACHE or the temp dir, then kind and a URL hash."""
    base = Path(setting("VERL_HEALTH_CACHE") or Path(tempfile.gettempdir()) / "verl-health-cache")
    return base / kind / hashlib.sha256(url.encode()).hexdigest()[:16]


def _remote_files(fs: pafs.FileSystem, base: str) -> dict[str, pafs.FileInfo]:
    """Files below `base`, keyed by their path relative to it."""
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return {i.path[len(base) + 1:]: i for i in infos if i.type == pafs.FileType.File}


def stage_archive(url: str, cache_dir: str | Path, fs: pafs.FileSystem | None = None) -> Path:
    """Mirror the archive at `url` into `cache_dir` and return it; only new or changed objects are fetched.

    Each local file gets its object's modification time, so the quiet period that tells a finished
    run works on the mirror as on the bucket. Local files whose object is gone are removed.
    """
    fs = fs or s3_filesystem()
    base = bucket_path(url)
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    remote = _remote_files(fs, base)
    for rel, info in remote.items():
        local = cache / rel
        mtime = info.mtime.timestamp()
        if local.is_file() and local.stat().st_size == info.size and int(local.stat().st_mtime) == int(mtime):
            continue
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex}.part")
        _download(fs, info.path, tmp)
        os.utime(tmp, (mtime, mtime))
        os.replace(tmp, local)
    for local in sorted(cache.rglob("*"), reverse=True):
        rel = local.relative_to(cache).as_posix()
        if local.is_file() and rel not in remote:
            local.unlink()
        elif local.is_dir():
            children = list(local.iterdir())
            if not children:
                local.rmdir()
            else:
                # A folder's own mtime is when we staged it; give it its newest object's, as discovery reads it.
                newest = max(c.stat().st_mtime for c in children)
                os.utime(local, (newest, newest))
    return cache


def _download(fs: pafs.FileSystem, src: str, dst: Path) -> None:
    pafs.copy_files(src, str(dst), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())


def _publishable(warehouse: Path) -> dict[str, Path]:
    """Warehouse files that belong in the bucket: table Parquet and the model, no staging or temp files."""
    found = {}
    for path in warehouse.rglob("*"):
        if not path.is_file():
            continue
        rel = path.relative_to(warehouse).as_posix()
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        top = rel.split("/", 1)[0].removesuffix(".parquet")
        if top in names() or rel.startswith(EXTRA_PREFIXES):
            found[rel] = path
    return found


def publish_warehouse(warehouse: str | Path, url: str, fs: pafs.FileSystem | None = None) -> dict[str, int]:
    """Upload the local warehouse's changed files to `url` and delete objects no longer present.

    A manifest of (size, mtime) per file in the local warehouse remembers what was uploaded, so a
    nightly publish with nothing changed sends nothing. Returns counts of uploaded, deleted, kept.
    """
    fs = fs or s3_filesystem()
    warehouse = Path(warehouse)
    base = bucket_path(url)
    manifest_path = warehouse / MANIFEST
    sent = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    if sent.get("url") != url:
        sent = {"url": url, "files": {}}
    local = _publishable(warehouse)
    remote = _remote_files(fs, base)
    uploaded = kept = deleted = 0
    for rel, path in sorted(local.items()):
        st = path.stat()
        stamp = [st.st_size, st.st_mtime_ns]
        if sent["files"].get(rel) == stamp and rel in remote:
            kept += 1
            continue
        pafs.copy_files(str(path), f"{base}/{rel}", source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)
        sent["files"][rel] = stamp
        uploaded += 1
    for rel, info in remote.items():
        if rel not in local:
            fs.delete_file(info.path)
            sent["files"].pop(rel, None)
            deleted += 1
    tmp = manifest_path.with_name(f"{MANIFEST}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(sent, sort_keys=True))
    os.replace(tmp, manifest_path)
    return {"uploaded": uploaded, "deleted": deleted, "kept": kept}


def remote_tables(url: str, fs: pafs.FileSystem | None = None) -> dict[str, ds.Dataset]:
    """Each table published at `url` as a pyarrow Dataset (per-run tables with their `run_id` column)."""
    fs = fs or s3_filesystem()
    base = bucket_path(url)
    files = _remote_files(fs, base)
    tables: dict[str, ds.Dataset] = {}
    for table in per_run_tables():
        parts = sorted(f"{base}/{rel}" for rel in files if rel.startswith(f"{table}/run_id=") and rel.endswith(".parquet"))
        if parts:
            tables[table] = _dataset(parts, fs, hive_base=f"{base}/{table}")
    for table in fleet_tables():
        if f"{table}.parquet" in files:
            tables[table] = _dataset([f"{base}/{table}.parquet"], fs)
    return tables


def _dataset(paths: list[str], fs: pafs.FileSystem, hive_base: str | None = None) -> ds.Dataset:
    """A dataset over `paths` whose schema is the union of every file's (columns that are all NULL in one
    run's file are typed `null` there)."""
    partitioning = (
        ds.partitioning(pa.schema([("run_id", pa.string())]), flavor="hive") if hive_base else None
    )
    first = ds.dataset(paths, filesystem=fs, format="parquet", partitioning=partitioning,
                       partition_base_dir=hive_base)
    schemas = [frag.physical_schema for frag in first.get_fragments()]
    schema = pa.unify_schemas(schemas, promote_options="permissive")
    if hive_base:
        schema = pa.unify_schemas([schema, pa.schema([("run_id", pa.string())])])
    return ds.dataset(paths, filesystem=fs, format="parquet", partitioning=partitioning,
                      partition_base_dir=hive_base, schema=schema)


def connect_remote(url: str, fs: pafs.FileSystem | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view per table published at `url`, read through pyarrow."""
    con = open_database()
    for table, dataset in remote_tables(url, fs).items():
        con.register(table, dataset)
    return con
