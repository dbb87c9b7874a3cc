"""An archive of good runs beside bad ones, as an operator's worst night brings them (tests/test_fault_injection.py).

The good runs are copies of shared real logs, read when the archive is built; the bad ones are written here.
"""

from __future__ import annotations

import gzip
import io
import random
import tarfile
from pathlib import Path

GOOD_LOGS = ("16_opd_qwen_1_5b_normal_12steps_wandb_output.log",
             "27_charcount_grpo_final_step_hardwrapped_benign_sigterm_at_exit.log")
# the file a tar-slip member aims at, relative to the archive folder
SLIP_TARGET = "../slipped.txt"
BOMB_BYTES = 2 << 30
LONG_LINE_BYTES = 50 << 20
MANY_LINES = 5_000_000
DUPKEY_TEXT = "step:1 - actor/entropy:0.5 - actor/entropy:0.6 - timing_s/step:10.0\nstep:2 - actor/entropy:0.4 - timing_s/step:11.0\n"


def _tar_gz(members: dict[str, bytes]) -> bytes:
    sink = io.BytesIO()
    with tarfile.open(fileobj=sink, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return sink.getvalue()


def _gzip_bomb(total: int) -> bytes:
    """A gzip of `total` NUL bytes, cheap to build: one compressed 64 MiB member repeated (gzip allows members
    one after another)."""
    block = 64 << 20
    member = gzip.compress(bytes(block), compresslevel=9, mtime=0)
    return member * (total // block)


def build(archive: Path, real_logs: Path) -> dict[str, list[str]]:
    """Write the archive; returns the run ids of each kind: good, readable bad, unreadable bad."""
    archive.mkdir(parents=True)
    good = []
    for name in GOOD_LOGS:
        (archive / name).write_bytes((real_logs / name).read_bytes())
        good.append(name.removesuffix(".log"))
    whole = (real_logs / GOOD_LOGS[0]).read_bytes()
    (archive / "truncated.log.gz").write_bytes(gzip.compress(whole, mtime=0)[: len(whole) // 6])
    (archive / "slip.tar.gz").write_bytes(_tar_gz({"driver.log": b"step:1 - actor/entropy:0.5\n",
                                                   SLIP_TARGET: b"outside\n"}))
    (archive / "corrupt.tar.gz").write_bytes(gzip.compress(b"this is no tar " * 4000, mtime=0))
    (archive / "garbage.log").write_bytes(random.Random(7).randbytes(300_000))
    (archive / "empty.log").write_bytes(b"")
    (archive / "crlf-latin1.log").write_bytes(
        "Caf\u00e9 d\u00e9marr\u00e9\r\nstep:1 - actor/entropy:0.5 - timing_s/step:10.0\r\n"
        "step:2 - actor/entropy:0.4 - timing_s/step:11.0\r\n".encode("latin-1"))
    (archive / "long-line.log").write_bytes(b"step:1 - actor/entropy:0.5\n" + b"a" * LONG_LINE_BYTES + b"\n")
    (archive / "bomb.log.gz").write_bytes(_gzip_bomb(BOMB_BYTES))
    (archive / "dupkey.log").write_text(DUPKEY_TEXT)
    (archive / "many-lines.log").write_bytes(b"x\n" * MANY_LINES)
    return {
        "good": good,
        "readable": ["truncated", "slip", "garbage", "empty", "crlf-latin1", "long-line", "bomb", "dupkey",
                     "many-lines"],
        "unreadable": ["corrupt"],
    }
