"""The forest as arrays scores every step exactly as scikit-learn's IsolationForest does, without importing it."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest
from sklearn.ensemble import IsolationForest

from pipeline.detect.forest import ForestArrays


def _inputs(seed: int, rows: int, width: int = 12) -> np.ndarray:
    return np.log1p(np.abs(np.random.default_rng(seed).standard_normal((rows, width)) * 3))


@pytest.mark.parametrize("settings", [
    {"max_samples": 256},
    {"max_samples": 64, "max_features": 0.5},  # each tree reads its own columns
    {"max_samples": 256, "n_estimators": 7, "bootstrap": True},
])
def test_scores_equal_sklearn_to_the_bit(settings):
    train = _inputs(1, 3000)
    forest = IsolationForest(random_state=5, **settings).fit(train)
    steps = np.vstack([_inputs(2, 20000) * 1.5, train[:500], np.zeros((3, 12)), np.full((3, 12), 1e6)])
    assert np.array_equal(ForestArrays.of(forest).score_samples(steps), forest.score_samples(steps))


def test_a_one_sample_forest_scores_as_sklearn():
    forest = IsolationForest(max_samples=1, random_state=0).fit(_inputs(3, 10))
    steps = _inputs(4, 5)
    assert np.array_equal(ForestArrays.of(forest).score_samples(steps), forest.score_samples(steps))


def test_a_missing_input_is_refused():
    forest = ForestArrays.of(IsolationForest(random_state=0, n_estimators=3).fit(_inputs(5, 100)))
    steps = _inputs(6, 4)
    steps[2, 1] = np.nan
    with pytest.raises(ValueError, match="finite"):
        forest.score_samples(steps)


def test_scoring_a_stored_model_imports_no_sklearn(tmp_path):
    forest = ForestArrays.of(IsolationForest(random_state=0, n_estimators=5).fit(_inputs(7, 200)))
    path = tmp_path / "forest.pickle"

    path.write_bytes(pickle.dumps(forest))
    code = ("import pickle, sys, numpy as np\n"
            f"f = pickle.loads(open({str(path)!r}, 'rb').read())\n"
            "print(f.score_samples(np.ones((2, 12))).shape, 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[-1] == "False"
