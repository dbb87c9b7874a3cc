"""Bad input never raises out of ingest: each case leaves a clear problem and keeps what could be read."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import zipfile

from pipeline.ingest import IngestLimits, readers
from tests.test_ingest_helpers import ingest_root, ingest_text, values

GOOD = "".join(f"(TaskRunner pid=1) step:{i} - a:{i}.5 - b:{i}\nnoise line {i}\n" for i in range(1, 2001))


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _problems(run) -> str:
    return "\n".join(run.run["problems"])


def test_truncated_gzip_keeps_what_was_read(tmp_path):
    blob = gzip.compress(GOOD.encode() * 20)
    run = ingest_text(tmp_path, blob[: len(blob) // 2], name="run-t.log.gz")
    assert "truncated compressed stream" in _problems(run)
    assert 0 < len(run.lines) < GOOD.count("\n") * 20
    assert [ln["line_no"] for ln in run.lines] == list(range(1, len(run.lines) + 1))
    assert run.run["archive_form"] == "gz"


def test_corrupt_tar_keeps_members_before_the_damage(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        _add(tar, "run-c/train.log", GOOD.encode())
        _add(tar, "run-c/worker.err", os.urandom(200_000))
    blob = buf.getvalue()
    root = tmp_path / "archive"
    root.mkdir()
    (root / "run-c.tar.gz").write_bytes(blob[: int(len(blob) * 0.8)])
    run = ingest_root(root, tmp_path / "wh")["run-c"]
    assert "truncated compressed stream" in _problems(run) or "corrupt tar" in _problems(run)
    assert sum(1 for ln in run.lines if ln["file"] == "train.log") == GOOD.count("\n")
    assert len(values(run)) == 4000


def test_garbage_named_tar_gz(tmp_path):
    run = ingest_text(tmp_path, os.urandom(5000), name="run-g.tar.gz")
    assert "unreadable" in _problems(run) or "corrupt" in _problems(run)
    assert run.run["n_lines"] == 0


def test_unsafe_tar_members_refused_never_extracted(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        _add(tar, "../evil.log", b"step:1 - evil:1\n")
        _add(tar, "/tmp/abs-evil.log", b"step:1 - evil:2\n")
        _add(tar, "run-u/logs/../../../evil2.log", b"step:1 - evil:3\n")
        _add(tar, "run-u/train.log", b"step:1 - a:1\n")
    root = tmp_path / "archive"
    root.mkdir()
    (root / "run-u.tar.gz").write_bytes(buf.getvalue())
    run = ingest_root(root, tmp_path / "wh")["run-u"]
    assert values(run) == {(1, "a"): 1.0}
    assert _problems(run).count("refused") == 3
    assert {ln["file"] for ln in run.lines} == {"train.log"}
    assert not (tmp_path / "evil.log").exists() and not os.path.exists("/tmp/abs-evil.log")


def test_unsafe_zip_members_refused(tmp_path):
    root = tmp_path / "archive"
    root.mkdir()
    with zipfile.ZipFile(root / "run-z.zip", "w") as zf:
        zf.writestr("../evil.log", "step:1 - evil:1\n")
        zf.writestr("run-z/train.log", "step:1 - a:1\n")
    run = ingest_root(root, tmp_path / "wh")["run-z"]
    assert values(run) == {(1, "a"): 1.0}
    assert "refused" in _problems(run)
    assert run.run["archive_form"] == "zip"


def test_decompression_bomb_is_bounded(tmp_path):
    bomb = gzip.compress(b"\n" * (30 * 2**20))
    limits = IngestLimits(max_total_bytes=2**20, block_bytes=2**16)
    run = ingest_text(tmp_path, bomb, name="run-b.gz", limits=limits)
    assert "decompression bomb" in _problems(run)
    assert run.run["n_bytes"] <= 2**20
    assert len(run.lines) <= 2**20


def test_binary_garbage_kept_with_replacement_characters(tmp_path):
    data = os.urandom(300_000)
    run = ingest_text(tmp_path, data, name="run-bin.log")
    expected = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    assert len(run.lines) == expected == run.run["n_lines"] == run.run["n_lines_read"]
    assert run.run["n_undecodable_lines"] > 0
    assert any("\ufffd" in ln["text"] for ln in run.lines)
    assert "not valid UTF-8" in _problems(run)


def test_empty_run_file_and_folder(tmp_path):
    root = tmp_path / "archive"
    (root / "run-emptydir").mkdir(parents=True)
    (root / "run-empty.log").write_bytes(b"")
    runs = ingest_root(root, tmp_path / "wh")
    for rid in ("run-empty", "run-emptydir"):
        assert runs[rid].lines == [] and runs[rid].metrics == []
        assert "empty run" in _problems(runs[rid])


def test_fifty_megabyte_single_line(tmp_path):
    # kept as its first MiB (VERL_HEALTH_MAX_LINE_MB's default) and counted: no table carries the 50 MB
    data = b"y" * (50 * 2**20) + b"\nstep:1 - a:1\n"
    run = ingest_text(tmp_path, data, name="run-long.log")
    assert len(run.lines) == 2
    assert run.lines[0]["text"] == "y" * 2**20
    assert values(run) == {(1, "a"): 1.0}
    assert "run-long.log: 1 line(s) longer than 1048576 bytes kept truncated" in _problems(run)


def test_over_long_line_truncated_not_lost(tmp_path):
    data = b"z" * 5000 + b"\nstep:1 - a:1\n" + b"q" * 3000
    run = ingest_text(
        tmp_path, data, name="run-l.log", limits=IngestLimits(max_line_bytes=1000, block_bytes=512)
    )
    assert [len(ln["text"]) for ln in run.lines] == [1000, 12, 1000]
    assert run.run["n_lines_read"] == 3  # two newlines, and a last line without one
    assert values(run) == {(1, "a"): 1.0}
    assert "truncated" in _problems(run)


def test_small_blocks_give_the_same_result(tmp_path):
    big = ingest_text(tmp_path / "a", GOOD)
    small = ingest_text(tmp_path / "b", GOOD, limits=IngestLimits(block_bytes=777))
    assert big.lines == small.lines
    assert values(big) == values(small)


def test_file_vanishing_during_scan(tmp_path, monkeypatch):
    root = tmp_path / "archive" / "run-v"
    root.mkdir(parents=True)
    (root / "train.log").write_text("step:1 - a:1\n")
    real = readers._dir_files
    monkeypatch.setattr(readers, "_dir_files", lambda r, p: real(r, p) + [r / "gone.log"])
    run = ingest_root(tmp_path / "archive", tmp_path / "wh")["run-v"]
    assert "gone.log: file vanished during the scan" in _problems(run)
    assert values(run) == {(1, "a"): 1.0}
