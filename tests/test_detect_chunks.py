"""A run's anomalies do not depend on which runs share its chunk: the model is fitted and the runs scored a
bounded chunk of runs at a time, with the very numbers of one whole batch, and a run scored alone (`analyze
--run`) gets the rows it gets in any batch."""

from __future__ import annotations

import math
import shutil

import pytest

from pipeline import lake
from pipeline.detect import step_anomalies
from pipeline.detect.warehouse import fit_anomaly_model, load_model, model_paths, score_runs


def _rows(warehouse) -> list[tuple]:
    con = lake.connect(warehouse, only=["step_anomalies"])
    try:
        return sorted(con.execute("select run_id, step, is_anomaly, score, anomaly_class, explanation, episode_id, "
                                  "episode_first_step, episode_last_step, rule_hits, drivers "
                                  "from step_anomalies").fetchall(), key=lambda r: (r[0], r[1]))
    finally:
        con.close()


def _exact(a, b) -> bool:
    """Equal to the bit (NaN equal to NaN)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


@pytest.fixture(scope="module")
def scored(analyzed_fleet, tmp_path_factory):
    """The analysed fleet's model fitted and its runs scored in one chunk, one run a chunk, and one run at a time."""
    out = tmp_path_factory.mktemp("detect_chunks")
    whole, chunked, alone = (shutil.copytree(analyzed_fleet.warehouse, out / name)
                             for name in ("whole", "chunked", "alone"))
    run_ids = sorted({r[0] for r in _rows(whole)})
    fit_anomaly_model(whole)
    score_runs(whole, run_ids)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(step_anomalies, "CHUNK_STEPS", 1)  # every chunk one run
        fit_anomaly_model(chunked)
        score_runs(chunked, run_ids)
    for path in model_paths(chunked):
        shutil.copy2(path, alone / path.relative_to(chunked))
    for rid in run_ids[::7]:
        score_runs(alone, [rid])
    return dict(whole=whole, chunked=chunked, alone=alone, run_ids=run_ids)


def test_the_model_fitted_a_run_at_a_time_is_the_one_fitted_on_the_whole_fleet(scored):
    whole, chunked = load_model(scored["whole"]), load_model(scored["chunked"])
    assert whole.forest is not None and len(scored["run_ids"]) >= 30
    assert (whole.gate, whole.typical_score) == (chunked.gate, chunked.typical_score)
    assert whole.floor.tolist() == chunked.floor.tolist()


def test_scored_a_run_at_a_time_every_row_is_the_one_batch_gives(scored):
    got, want = _rows(scored["chunked"]), _rows(scored["whole"])
    assert len(got) == len(want) > 1000 and any(r[2] for r in want)
    assert all(_exact(a, b) for g, w in zip(got, want, strict=True) for a, b in zip(g, w, strict=True))


def test_a_run_scored_alone_gets_the_rows_it_gets_in_the_whole_batch(scored):
    alone = [r for r in _rows(scored["alone"]) if r[0] in scored["run_ids"][::7]]
    batch = [r for r in _rows(scored["whole"]) if r[0] in scored["run_ids"][::7]]
    assert len(alone) == len(batch) > 0
    assert all(_exact(a, b) for g, w in zip(alone, batch, strict=True) for a, b in zip(g, w, strict=True))
