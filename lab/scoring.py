"""Step and episode accuracy of a detector's flags against simulated ground truth, as score_fleet.py counts."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

TOL = 2  # steps around an episode where a flag is neither TP nor FP (as score_fleet.py)


@dataclass
class Scores:
    """Step and episode accuracy of one detector on one or more fleets."""

    name: str
    tp: int = 0
    fp: int = 0
    fn: int = 0
    episodes: int = 0
    episodes_hit: int = 0
    class_right: int = 0
    healthy_steps: int = 0  # steps of runs without episodes (score_fleet.py's false-alarm base)
    healthy_flags: int = 0
    clear_steps: int = 0  # steps of any run outside every episode and its TOL margin
    clear_flags: int = 0
    by_class: dict = field(default_factory=dict)  # class -> [hit, episodes, class right]
    by_kind: dict = field(default_factory=dict)  # unnamed kind -> [hit, episodes]

    @property
    def precision(self) -> float:
        """Share of flagged steps that lie in an episode."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        """Share of episode steps that were flagged."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def episode_recall(self) -> float:
        """Share of episodes with at least one flagged step."""
        return self.episodes_hit / self.episodes if self.episodes else 0.0

    @property
    def class_accuracy(self) -> float:
        """Share of detected episodes whose anomaly_class is the labelled one."""
        return self.class_right / self.episodes_hit if self.episodes_hit else 0.0

    @property
    def false_alarms_per_1000(self) -> float:
        """Flagged steps per 1,000 steps of runs without episodes (score_fleet.py's false_alarm x 1000)."""
        return 1000.0 * self.healthy_flags / self.healthy_steps if self.healthy_steps else 0.0

    @property
    def stray_per_1000(self) -> float:
        """Flagged steps per 1,000 steps that lie outside every episode and its margin, in any run."""
        return 1000.0 * self.clear_flags / self.clear_steps if self.clear_steps else 0.0

    def add(self, part: Scores) -> None:
        """Accumulate another fleet's counts."""
        for f in ("tp", "fp", "fn", "episodes", "episodes_hit", "class_right", "healthy_steps", "healthy_flags",
                  "clear_steps", "clear_flags"):
            setattr(self, f, getattr(self, f) + getattr(part, f))
        for mine, theirs in ((self.by_class, part.by_class), (self.by_kind, part.by_kind)):
            for key, counts in theirs.items():
                total = mine.setdefault(key, [0] * len(counts))
                for i, c in enumerate(counts):
                    total[i] += c


def _span(e: dict) -> set[int]:
    return set(range(e["first_step"], e["last_step"] + 1))


def _margin(e: dict) -> set[int]:
    a, b = e["first_step"], e["last_step"]
    return set(range(a - TOL, a)) | set(range(b + 1, b + TOL + 1))


def score_predictions(name: str, pred: pd.DataFrame, labels: dict, classes: set[str] | None = None) -> Scores:
    """Score step predictions (run_id, step, is_anomaly, anomaly_class) against labels, as score_fleet.py.

    With `classes`, only episodes of those classes count; the steps of the others (and their margins)
    count neither way, as if those episodes were not in the fleet.
    """
    sc = Scores(name)
    flagged = pred[pred["is_anomaly"].astype(bool)]
    by_run = {rid: g for rid, g in flagged.groupby("run_id")}
    steps_by_run = pred.groupby("run_id")["step"].apply(lambda s: set(s.astype(int)))
    for rid, lab in labels.items():
        g = by_run.get(rid)
        fl = set(g["step"].astype(int)) if g is not None else set()
        cls_of = dict(zip(g["step"].astype(int), g["anomaly_class"], strict=True)) if g is not None else {}
        counted = [e for e in lab["episodes"] if classes is None or e["class"] in classes]
        ignored = set()
        for e in lab["episodes"]:
            if e not in counted:
                ignored |= _span(e) | _margin(e)
        inside, near = set(), set()
        for e in counted:
            rng = _span(e)
            inside |= rng
            near |= _margin(e)
            hit = rng & fl
            sc.episodes += 1
            stats = sc.by_class.setdefault(e["class"], [0, 0, 0])
            stats[1] += 1
            if e.get("kind"):
                sc.by_kind.setdefault(e["kind"], [0, 0])[1] += 1
            if hit:
                sc.episodes_hit += 1
                stats[0] += 1
                if e.get("kind"):
                    sc.by_kind[e["kind"]][0] += 1
                votes = pd.Series([cls_of[s] for s in hit]).value_counts()
                if votes.index[0] == e["class"]:
                    sc.class_right += 1
                    stats[2] += 1
        near -= inside
        counted_fl = fl - (ignored - inside)
        sc.tp += len(counted_fl & inside)
        sc.fn += len(inside - fl)
        sc.fp += len(counted_fl - inside - near)
        clear = steps_by_run.get(rid, set()) - inside - near - ignored
        sc.clear_steps += len(clear)
        sc.clear_flags += len(fl & clear)
        if not lab["episodes"]:
            logged = {s for s in steps_by_run.get(rid, set()) if s >= 1}
            sc.healthy_steps += len(logged)
            sc.healthy_flags += len(fl & logged)
    return sc
