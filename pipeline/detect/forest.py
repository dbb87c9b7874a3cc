"""A fitted isolation forest as plain arrays, scored with numpy alone.

Scoring one run must not wait for scikit-learn's import (1.5 to 2 s, most of it SciPy) when all it does is walk
a hundred small trees: the fit (scikit-learn's) is kept as each tree's node arrays and path lengths, and
`score_samples` repeats scikit-learn's arithmetic in its order, so the scores are the same to the bit
(tests/test_forest.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ForestArrays:
    """Each tree's nodes (split feature, threshold, children as (left, right) pairs in one array; a leaf is its
    own child) and per-node path length (depth plus the average path length of the leaf's training samples),
    with the forest's denominator (trees x the average path length of `max_samples`)."""

    feature: tuple[np.ndarray, ...]
    threshold: tuple[np.ndarray, ...]
    children: tuple[np.ndarray, ...]
    path_length: tuple[np.ndarray, ...]
    columns: tuple[np.ndarray | None, ...]  # the input columns a tree reads, None for all of them in order
    depth: tuple[int, ...]
    denominator: float

    @classmethod
    def of(cls, forest) -> ForestArrays:
        """The arrays of a fitted `sklearn.ensemble.IsolationForest`."""
        from sklearn.ensemble._iforest import _average_path_length

        subsample = forest._max_features != forest.n_features_in_
        parts: dict[str, list] = {k: [] for k in ("feature", "threshold", "children", "path_length", "columns",
                                                  "depth")}
        for k, (tree, columns) in enumerate(zip(forest.estimators_, forest.estimators_features_, strict=True)):
            t = tree.tree_
            nodes = np.arange(t.node_count)
            leaf = t.children_left == -1
            parts["feature"].append(np.where(leaf, 0, t.feature).astype(np.intp))
            parts["threshold"].append(np.where(leaf, np.inf, t.threshold))
            parts["children"].append(np.column_stack([np.where(leaf, nodes, t.children_left),
                                                      np.where(leaf, nodes, t.children_right)]).ravel().astype(np.intp))
            parts["path_length"].append(forest._decision_path_lengths[k] + forest._average_path_length_per_tree[k]
                                        - 1.0)
            parts["columns"].append(np.asarray(columns, dtype=np.intp) if subsample else None)
            parts["depth"].append(int(t.max_depth))
        denominator = len(forest.estimators_) * float(_average_path_length([forest._max_samples])[0])
        return cls(**{k: tuple(v) for k, v in parts.items()}, denominator=denominator)

    def score_samples(self, x: np.ndarray) -> np.ndarray:
        """scikit-learn's `IsolationForest.score_samples` of finite `x` (lower = more unusual): the trees read
        the rows as float32, the depths add up tree by tree."""
        x = np.asarray(x, dtype=np.float32)
        if not np.isfinite(x).all():
            raise ValueError("the forest scores finite inputs only (model_matrix makes them so)")
        rows = len(x)
        whole = x.ravel(), np.arange(rows) * x.shape[1]  # every tree that reads all columns reads these
        depths = np.zeros(rows)
        for k in range(len(self.feature)):
            columns = self.columns[k]
            values, starts = whole if columns is None else (x[:, columns].ravel(), np.arange(rows) * len(columns))
            feature, threshold, children = self.feature[k], self.threshold[k], self.children[k]
            node = np.zeros(rows, dtype=np.intp)
            for _ in range(self.depth[k]):
                # left when the value is <= the threshold, as sklearn; a leaf is its own child either way
                node = children[2 * node + ~(values[starts + feature[node]] <= threshold[node])]
            depths += self.path_length[k][node]
        # a single training sample: depth and denominator are 0, and the score is set to 2 ** -1 as sklearn does
        ratio = np.divide(depths, self.denominator, out=np.ones_like(depths), where=self.denominator != 0)
        return -(2 ** -ratio)
