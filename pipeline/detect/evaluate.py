"""Accuracy of the detector against simulated ground truth, side by side with two baselines."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sklearn.ensemble import IsolationForest

from pipeline.detect.features import build_features
from pipeline.detect.model import AnomalyModelConfig, decide, fit_model
from pipeline.detect.rules import load_rules

TOL = 2  # steps around an episode where a flag is neither TP nor FP (as score_fleet.py)

# verl metric key -> step_phases / step_health column, the same mapping as sql/step_*.sql
PHASE_KEYS = {
    "timing_s/gen": "gen", "timing_s/reward": "reward", "timing_s/old_log_prob": "old_log_prob",
    "timing_s/ref": "ref", "timing_s/values": "values", "timing_s/adv": "adv",
    "timing_s/update_critic": "update_critic", "timing_s/update_actor": "update_actor",
    "timing_s/update_weights": "update_weights", "timing_s/testing": "testing",
    "timing_s/save_checkpoint": "save_checkpoint", "timing_s/step": "step_time",
    "perf/total_num_tokens": "total_tokens", "perf/throughput": "throughput",
}
HEALTH_KEYS = {
    "critic/score/mean": "score_mean", "critic/rewards/mean": "reward_mean", "actor/ppo_kl": "ppo_kl",
    "actor/kl_loss": "kl_loss", "actor/entropy": "entropy", "actor/pg_loss": "pg_loss",
    "actor/pg_clipfrac": "pg_clipfrac", "actor/grad_norm": "grad_norm", "critic/vf_loss": "vf_loss",
    "response_length/mean": "response_length_mean", "perf/max_memory_allocated_gb": "mem_allocated_gb",
    "perf/max_memory_reserved_gb": "mem_reserved_gb", "perf/cpu_memory_used_gb": "cpu_memory_used_gb",
}
RAW_BASELINE_COLUMNS = (
    "gen", "old_log_prob", "ref", "values", "update_actor", "update_critic", "step_time", "throughput",
    "ppo_kl", "entropy", "pg_loss", "pg_clipfrac", "grad_norm", "response_length_mean", "reward_mean",
    "mem_allocated_gb", "mem_reserved_gb",
)
INSIDE = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "update_weights")


def trace_frames(traces) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """step_phases-like and step_health-like frames plus labels from simulator RunTraces (final timeline)."""
    phase_parts, health_parts, labels = [], [], {}
    for tr in traces:
        last = {}
        for i, s in enumerate(tr.step):
            last[int(s)] = i
        steps = np.array(sorted(last), dtype=np.int64)
        pos = np.array([last[s] for s in steps], dtype=np.int64)
        run_id = tr.spec.run_id
        ph = {"run_id": run_id, "step": steps}
        for key, col in PHASE_KEYS.items():
            if key in tr.values:
                ph[col] = tr.values[key][pos]
        phases = pd.DataFrame(ph)
        if "testing" in phases:
            phases.loc[~tr.is_test[pos], "testing"] = np.nan
        if "save_checkpoint" in phases:
            phases.loc[~tr.is_save[pos], "save_checkpoint"] = np.nan
        inside = [c for c in INSIDE if c in phases]
        phases["other_time"] = phases["step_time"] - phases[inside].sum(axis=1)
        for c in inside + ["other_time"]:
            phases[f"share_{c}"] = phases[c] / phases["step_time"]
        he = {"run_id": run_id, "step": steps}
        for key, col in HEALTH_KEYS.items():
            if key in tr.values:
                he[col] = tr.values[key][pos]
        health = pd.DataFrame(he)
        numeric = np.column_stack([tr.values[k][pos] for k in tr.keys if not k.startswith(("val-", "timing_s/t",
                                                                                            "timing_s/s"))])
        health["has_nan"] = ~np.isfinite(numeric).all(axis=1)
        phase_parts.append(phases)
        health_parts.append(health)
        labels[run_id] = {
            "failure_class": tr.spec.failure_class,
            "last_step": int(tr.spec.last_step),
            "n_steps_logged": int(len(steps)),
            "episodes": [e.label() for e in tr.spec.episodes],
        }
    return pd.concat(phase_parts, ignore_index=True), pd.concat(health_parts, ignore_index=True), labels


def simulated_traces(seed: int, runs: int, steps_scale: float = 1.0):
    """RunTraces of the fleet `verl-health simulate --runs RUNS --seed SEED` would write (in memory)."""
    from pipeline.simulate import fleet_specs, generate_run

    return [generate_run(spec) for spec in fleet_specs(runs, seed, steps_scale)]


@dataclass
class Scores:
    """Step and episode accuracy of one detector on one fleet."""

    name: str
    tp: int = 0
    fp: int = 0
    fn: int = 0
    episodes: int = 0
    episodes_hit: int = 0
    class_right: int = 0
    healthy_steps: int = 0
    healthy_flags: int = 0
    by_class: dict = field(default_factory=dict)

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
        """Flagged steps per 1,000 steps of runs without episodes."""
        return 1000.0 * self.healthy_flags / self.healthy_steps if self.healthy_steps else 0.0


def score_predictions(name: str, pred: pd.DataFrame, labels: dict) -> Scores:
    """Score step predictions (run_id, step, is_anomaly, anomaly_class) against labels, as score_fleet.py."""
    sc = Scores(name)
    flagged = pred[pred["is_anomaly"]]
    by_run = {rid: g for rid, g in flagged.groupby("run_id")}
    steps_by_run = pred.groupby("run_id")["step"].apply(lambda s: set(s.astype(int)))
    for rid, lab in labels.items():
        g = by_run.get(rid)
        fl = set(g["step"].astype(int)) if g is not None else set()
        cls_of = dict(zip(g["step"].astype(int), g["anomaly_class"], strict=True)) if g is not None else {}
        inside, near = set(), set()
        for e in lab["episodes"]:
            a, b = e["first_step"], e["last_step"]
            rng = set(range(a, b + 1))
            inside |= rng
            near |= set(range(a - TOL, a)) | set(range(b + 1, b + TOL + 1))
            hit = rng & fl
            sc.episodes += 1
            stats = sc.by_class.setdefault(e["class"], [0, 0, 0])
            stats[1] += 1
            if hit:
                sc.episodes_hit += 1
                stats[0] += 1
                votes = pd.Series([cls_of[s] for s in hit]).value_counts()
                if votes.index[0] == e["class"]:
                    sc.class_right += 1
                    stats[2] += 1
        near -= inside
        sc.tp += len(fl & inside)
        sc.fn += len(inside - fl)
        sc.fp += len(fl - inside - near)
        healthy = steps_by_run.get(rid, set()) - inside - near
        sc.healthy_steps += len(healthy)
        sc.healthy_flags += len(fl & healthy)
    return sc


def raw_forest_baseline(train: pd.DataFrame, test: pd.DataFrame, config: AnomalyModelConfig) -> np.ndarray:
    """Baseline 1: an isolation forest on the raw metric values (no run baseline), same settings."""
    cols = [c for c in RAW_BASELINE_COLUMNS if c in train and c in test]

    def matrix(df):
        x = df[cols].to_numpy(dtype=float)
        x = np.where(np.isposinf(x), 1e6, np.where(np.isneginf(x), -1e6, x))
        return np.where(np.isnan(x), med, x)

    med = np.nanmedian(train[cols].to_numpy(dtype=float), axis=0)
    forest = IsolationForest(n_estimators=config.n_estimators, contamination=config.contamination,
                             max_samples=min(config.max_samples, len(train)), random_state=config.random_state)
    forest.fit(matrix(train))
    return forest.predict(matrix(test)) == -1


def _merge(phases, health):
    return phases.merge(health.drop(columns=[c for c in health if c in phases and c not in ("run_id", "step")]),
                        on=["run_id", "step"], how="left").sort_values(["run_id", "step"]).reset_index(drop=True)


def evaluate(train_seed: int = 1, test_seeds=(101, 102), runs: int = 60,
             config: AnomalyModelConfig | None = None, steps_scale: float = 1.0) -> dict:
    """Fit on a fleet simulated with `train_seed`, score fleets of unseen `test_seeds`; return scores.

    Three detectors on the same test steps: this detector (features + forest + rules), a plain
    isolation forest on raw metrics, and the seed articles' literal thresholds alone; plus the
    detector without its forest, to show what the forest adds.
    """
    config = config or AnomalyModelConfig()
    t0 = time.time()
    tr_phases, tr_health, _ = trace_frames(simulated_traces(train_seed, runs, steps_scale))
    train_features = build_features(tr_phases, tr_health)
    model = fit_model(train_features, config)
    fit_s = time.time() - t0
    seed_rules = load_rules(seed_only=True)
    results = {"detector": Scores("detector"), "raw_iforest": Scores("raw_iforest"),
               "seed_thresholds": Scores("seed_thresholds"), "no_forest": Scores("no_forest")}
    n_steps, score_s = 0, 0.0
    train_raw = _merge(tr_phases, tr_health)
    for seed in test_seeds:
        phases, health, labels = trace_frames(simulated_traces(seed, runs, steps_scale))
        t1 = time.time()
        feats = build_features(phases, health)
        pred = decide(feats, model)
        score_s += time.time() - t1
        n_steps += len(pred)
        raw = _merge(phases, health)
        base_pred = raw[["run_id", "step"]].copy()
        base_pred["is_anomaly"] = raw_forest_baseline(train_raw, raw, config)
        base_pred["anomaly_class"] = "other"
        seed_pred = decide(feats, None, rules=tuple(_as_flag(r) for r in seed_rules), thresholds={"loose": 1e9})
        ablation = decide(feats, model, use_model=False)
        for name, p in (("detector", pred), ("raw_iforest", base_pred), ("seed_thresholds", seed_pred),
                        ("no_forest", ablation)):
            _accumulate(results[name], score_predictions(name, p, labels))
    return {"results": results, "fit_seconds": fit_s, "score_seconds": score_s, "test_steps": n_steps}


def _as_flag(rule):
    from dataclasses import replace

    return replace(rule, mode="flag")


def _accumulate(total: Scores, part: Scores) -> None:
    for f in ("tp", "fp", "fn", "episodes", "episodes_hit", "class_right", "healthy_steps", "healthy_flags"):
        setattr(total, f, getattr(total, f) + getattr(part, f))
    for cls, (hit, n, right) in part.by_class.items():
        stats = total.by_class.setdefault(cls, [0, 0, 0])
        stats[0] += hit
        stats[1] += n
        stats[2] += right


def format_table(results: dict) -> str:
    """The side-by-side table of the detectors."""
    head = f"{'detector':<16}{'precision':>10}{'recall':>8}{'F1':>7}{'ep.recall':>10}{'FA/1000':>9}{'class acc':>10}"
    lines = [head, "-" * len(head)]
    for sc in results.values():
        lines.append(f"{sc.name:<16}{sc.precision:>10.3f}{sc.recall:>8.3f}{sc.f1:>7.3f}{sc.episode_recall:>10.3f}"
                     f"{sc.false_alarms_per_1000:>9.2f}{sc.class_accuracy:>10.3f}")
    det = results["detector"]
    lines.append("")
    lines.append("detector by class (episodes hit / episodes, class right):")
    for cls, (hit, n, right) in sorted(det.by_class.items()):
        lines.append(f"  {cls:<26}{hit:>4}/{n:<4} class {right}/{hit}")
    return "\n".join(lines)


def run_evaluate(args: argparse.Namespace | list[str] | None = None) -> int:
    """Entry point of `verl-health evaluate`: prints the table; `--json` also prints the numbers."""
    if not isinstance(args, argparse.Namespace):
        args = add_evaluate_arguments(argparse.ArgumentParser(prog="verl-health evaluate")).parse_args(args)
    out = evaluate(args.train_seed, tuple(args.test_seeds), args.runs, steps_scale=args.steps_scale)
    print(f"fit on seed {args.train_seed}, scored seeds {list(args.test_seeds)}: {out['test_steps']} steps, "
          f"fit {out['fit_seconds']:.1f}s, score {out['score_seconds']:.1f}s")
    print(format_table(out["results"]))
    if getattr(args, "json", False):
        print(json.dumps({k: {"precision": v.precision, "recall": v.recall, "f1": v.f1,
                              "episode_recall": v.episode_recall, "false_alarms_per_1000": v.false_alarms_per_1000,
                              "class_accuracy": v.class_accuracy} for k, v in out["results"].items()}))
    return 0


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the arguments of `verl-health evaluate` to `parser` (and return it)."""
    parser.add_argument("--runs", type=int, default=60, help="runs per simulated fleet")
    parser.add_argument("--train-seed", type=int, default=1, help="seed of the training fleet")
    parser.add_argument("--test-seeds", type=int, nargs="+", default=[101, 102], help="seeds of unseen fleets")
    parser.add_argument("--steps-scale", type=float, default=1.0, help="scale of run lengths")
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    return parser
