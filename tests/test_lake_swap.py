"""Swapping many partitions at once (`lake.swap_all_into_place`): each run ends with its new folder whole,
the folders replaced are removed, and a run that had no partition gets one."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import lake


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_a_batch_of_swaps_replaces_each_run_and_removes_what_it_replaced(tmp_path, monkeypatch, exchange):
    """run-a and run-b hold old rows, run-c has no partition: after one batch of swaps each holds its new file
    (3 rows), and the table folder holds the three runs and the lock folder, nothing else."""
    if not exchange:
        monkeypatch.setattr(lake, "_exchange", lambda a, b: False)
    for rid in ("run-a", "run-b"):
        lake.write_run_table(tmp_path, "step_health", rid, pa.table({"step": [0]}))
    staging = tmp_path / "staging"
    pairs = []
    for rid in ("run-a", "run-b", "run-c"):
        new = staging / rid
        new.mkdir(parents=True)
        pq.write_table(pa.table({"step": [1, 2, 3], "writer": [rid] * 3}), new / "part-0.parquet")
        pairs.append((new, lake.run_partition_dir(tmp_path, "step_health", rid)))
    lake.swap_all_into_place(pairs)
    folder = lake.table_dir(tmp_path, "step_health")
    assert sorted(p.name for p in folder.iterdir()) == [".locks", "run_id=run-a", "run_id=run-b", "run_id=run-c"]
    for rid in ("run-a", "run-b", "run-c"):
        [part] = lake.run_partition_dir(tmp_path, "step_health", rid).iterdir()
        assert pq.read_table(part).column("writer").to_pylist() == [rid] * 3
    assert list(staging.iterdir()) == []


def test_staged_partitions_replace_the_runs_together_or_not_at_all(tmp_path):
    """Written through `staged_run_partitions`: both runs hold the new rows and no staging folder is left; when
    the block fails half-way, both keep their old rows and no staging folder is left either."""
    def fill(staging, rows):
        for rid in ("run-a", "run-b"):
            (staging / f"run_id={rid}").mkdir()
            pq.write_table(pa.table({"step": rows}), staging / f"run_id={rid}" / "part-0.parquet")

    def steps(rid):
        [part] = lake.run_partition_dir(tmp_path, "step_health", rid).iterdir()
        return pq.read_table(part).column("step").to_pylist()

    for rid in ("run-a", "run-b"):
        lake.write_run_table(tmp_path, "step_health", rid, pa.table({"step": [0]}))
    with lake.staged_run_partitions(tmp_path, "step_health", ["run-a", "run-b"]) as staging:
        fill(staging, [1, 2])
    assert (steps("run-a"), steps("run-b")) == ([1, 2], [1, 2])
    with pytest.raises(RuntimeError), lake.staged_run_partitions(tmp_path, "step_health", ["run-a", "run-b"]) as staging:
        fill(staging, [7])
        raise RuntimeError("the query failed")
    assert (steps("run-a"), steps("run-b")) == ([1, 2], [1, 2])
    folder = lake.table_dir(tmp_path, "step_health")
    assert sorted(p.name for p in folder.iterdir()) == [".locks", "run_id=run-a", "run_id=run-b"]
