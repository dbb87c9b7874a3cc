"""Accuracy of the detector on unseen simulated fleets, side by side with its parts and two baselines.

The training fleet carries the unnamed kinds the detector was tuned with; the scored fleets carry
all of them, so the kinds it never saw show how far the model generalises. False alarms are also
counted on the healthy real logs of the shared folder.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from lab.real_logs import DEFAULT_DIR, RealLogs, load_healthy
from lab.scoring import Scores, score_predictions
from lab.simulate.metric_keys import validation_keys
from lab.simulate.unnamed import TUNED_KINDS, UNNAMED_KINDS, add_unnamed_episodes
from lab.simulate.vocab import ANOMALY_CLASSES
from pipeline.derive import query_frames
from pipeline.detect.decide import decide
from pipeline.detect.features import build_features
from pipeline.detect.model import AnomalyModelConfig, FittedModel, fit_model
from pipeline.detect.rules import load_rules
from pipeline.detect.step_anomalies import score_frame
from pipeline.detect.warehouse import detector_frame

RAW_BASELINE_COLUMNS = (
    "gen", "old_log_prob", "ref", "values", "update_actor", "update_critic", "step_time", "throughput",
    "ppo_kl", "entropy", "pg_loss", "pg_clipfrac", "grad_norm", "response_length_mean", "reward_mean",
    "mem_allocated_gb", "mem_reserved_gb",
)


def trace_metrics(tr) -> pd.DataFrame:
    """step_metrics-like rows (run_id, step, key, value, segment) of one RunTrace's final timeline,
    each key only on the steps that print it (validation on test steps, checkpoint time on saves)."""
    last = {int(s): i for i, s in enumerate(tr.step)}
    steps = np.array(sorted(last), dtype=np.int64)
    pos = np.array([last[s] for s in steps], dtype=np.int64)
    test, save = tr.is_test[pos], tr.is_save[pos]
    only = {"timing_s/testing": test, "timing_s/save_checkpoint": save}
    val = set(validation_keys(tr.spec))
    parts = []
    for key in tr.keys:
        on = only.get(key, test if key in val else np.ones(len(pos), dtype=bool))
        parts.append(pd.DataFrame({"step": steps[on], "key": key, "value": tr.values[key][pos][on],
                                   "segment": tr.segment[pos][on]}))
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["step", "key", "value", "segment"])
    frame["key"] = pd.Categorical(frame["key"])
    frame.insert(0, "run_id", pd.Categorical([tr.spec.run_id] * len(frame)))
    return frame


def _concat_metrics(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate trace_metrics frames, keeping run_id and key categorical (a million steps of
    strings would not fit in memory)."""
    frames = [f for f in frames if len(f)] or frames[:1]
    out = {c: union_categoricals([f[c] for f in frames]) for c in ("run_id", "key")}
    out |= {c: np.concatenate([f[c].to_numpy() for f in frames]) for c in ("step", "value", "segment")}
    return pd.DataFrame(out)[["run_id", "step", "key", "value", "segment"]]


def trace_frames(traces) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """step_phases and step_health rows of simulator RunTraces (final timeline), derived by the very SQL that
    writes those tables (`derive.query_frames`), plus the traces' labels."""
    metrics = _concat_metrics([trace_metrics(tr) for tr in traces])
    metrics = metrics.assign(source="console", file="", line_no=np.int64(0))
    phases, health = (_frame(query_frames(name, {"step_metrics": metrics}))
                      for name in ("step_phases", "step_health"))
    labels = {tr.spec.run_id: {
        "failure_class": tr.spec.failure_class,
        "last_step": int(tr.spec.last_step),
        "n_steps_logged": len(set(tr.step.tolist())),
        "episodes": [e.label() for e in tr.spec.episodes],
    } for tr in traces}
    return phases, health, labels


def _frame(table) -> pd.DataFrame:
    """A derived table's rows by run and step, as the detector reads them (`detector_frame`)."""
    frame = detector_frame(table)
    frame["run_id"] = frame["run_id"].astype(str)  # step_metrics' categories come back as such, in no set order
    return frame.sort_values(["run_id", "step"]).reset_index(drop=True)


def simulated_traces(seed: int, runs: int, steps_scale: float = 1.0):
    """RunTraces of the fleet `verl-health simulate --runs RUNS --seed SEED` would write (in memory)."""
    from lab.simulate import fleet_specs, generate_run

    return [generate_run(spec) for spec in fleet_specs(runs, seed, steps_scale)]


def simulated_fleet(seed: int, runs: int, steps_scale: float = 1.0, kinds: tuple[str, ...] = ()):
    """(phases, health, metrics, labels) of the fleet `verl-health simulate --runs RUNS --seed SEED`
    would write, with unnamed episodes of `kinds` added to the runs that have episodes."""
    from lab.simulate import fleet_specs, generate_run

    specs = fleet_specs(runs, seed, steps_scale)
    if kinds:
        add_unnamed_episodes(specs, seed, kinds, share=1.0)
    traces = [generate_run(spec) for spec in specs]
    phases, health, labels = trace_frames(traces)
    return phases, health, _concat_metrics([trace_metrics(tr) for tr in traces]), labels


# The plain forest flags this share of the training steps (the detector's former setting): it has no
# rules to gate, so its contamination is its flag rate.
RAW_CONTAMINATION = 0.03


def raw_forest_baseline(train: pd.DataFrame, test: pd.DataFrame, config: AnomalyModelConfig) -> np.ndarray:
    """Baseline: an isolation forest on the raw metric values (no run baseline), the detector's trees,
    samples and seed, flagging RAW_CONTAMINATION of the training steps."""
    cols = [c for c in RAW_BASELINE_COLUMNS if c in train and c in test]

    def matrix(df):
        x = df[cols].to_numpy(dtype=float)
        x = np.where(np.isposinf(x), 1e6, np.where(np.isneginf(x), -1e6, x))
        return np.where(np.isnan(x), med, x)

    med = np.nanmedian(train[cols].to_numpy(dtype=float), axis=0)
    from sklearn.ensemble import IsolationForest

    forest = IsolationForest(n_estimators=config.n_estimators, contamination=RAW_CONTAMINATION,
                             max_samples=min(config.max_samples, len(train)), random_state=config.random_state)
    forest.fit(matrix(train))
    return forest.predict(matrix(test)) == -1


def _merge(phases, health):
    return phases.merge(health.drop(columns=[c for c in health if c in phases and c not in ("run_id", "step")]),
                        on=["run_id", "step"], how="left").sort_values(["run_id", "step"]).reset_index(drop=True)


DETECTORS = ("detector", "rules", "forest", "raw_iforest", "seed_thresholds")


def _predictions(model: FittedModel, features: pd.DataFrame, raw: pd.DataFrame, train_raw: pd.DataFrame,
                 config: AnomalyModelConfig) -> dict[str, pd.DataFrame]:
    """Each detector's step flags on one fleet."""
    seed_rules = tuple(replace(r, mode="flag") for r in load_rules(seed_only=True))
    plain = raw[["run_id", "step"]].copy()
    plain["is_anomaly"] = raw_forest_baseline(train_raw, raw, config)
    plain["anomaly_class"] = "other"
    return {
        "detector": decide(features, model),
        "rules": decide(features, model, use_model=False),
        "forest": decide(features, model, use_rules=False),
        "raw_iforest": plain,
        "seed_thresholds": decide(features, None, rules=seed_rules, thresholds={"loose": 1e9}),
    }


def real_log_flags(model: FittedModel, logs: RealLogs) -> dict:
    """Steps and flagged steps of each healthy real log, scored with `model` (fitted elsewhere)."""
    if logs.phases.empty:
        return {}
    result = score_frame(logs.phases, logs.health, model, metrics=logs.metrics if len(logs.metrics) else None)
    return {rid: (len(g), int(g["is_anomaly"].sum())) for rid, g in result.groupby("run_id")}


def evaluate(train_seed: int = 1, test_seeds=(101, 102), runs: int = 60,
             config: AnomalyModelConfig | None = None, steps_scale: float = 1.0,
             real_logs: str | None = str(DEFAULT_DIR)) -> dict:
    """Fit on a fleet simulated with `train_seed` (named episodes and the unnamed kinds the detector was
    tuned with), score fleets of unseen `test_seeds` (every unnamed kind); return the scores.

    Side by side on the same steps: the detector (rules, gate and forest), the rules alone, the forest
    alone, a plain isolation forest on raw metrics, and the seed articles' literal thresholds; per
    detector all episodes (`results`) and the named classes alone (`named`: the unnamed episodes
    neither help nor hurt). `real` counts the detector's flags on the healthy shared real logs
    (`real_logs`, None to skip), scored with the same model.
    """
    config = config or AnomalyModelConfig()
    t0 = time.time()
    tr_phases, tr_health, tr_metrics, _ = simulated_fleet(train_seed, runs, steps_scale, TUNED_KINDS)
    model = fit_model(build_features(tr_phases, tr_health, metrics=tr_metrics), config)
    fit_s = time.time() - t0
    results = {name: Scores(name) for name in DETECTORS}
    named = {name: Scores(name) for name in DETECTORS}
    n_steps, score_s = 0, 0.0
    train_raw = _merge(tr_phases, tr_health)
    for seed in test_seeds:
        phases, health, metrics, labels = simulated_fleet(seed, runs, steps_scale, tuple(UNNAMED_KINDS))
        t1 = time.time()
        features = build_features(phases, health, metrics=metrics)
        preds = _predictions(model, features, _merge(phases, health), train_raw, config)
        score_s += time.time() - t1
        n_steps += len(features)
        for name, pred in preds.items():
            results[name].add(score_predictions(name, pred, labels))
            named[name].add(score_predictions(name, pred, labels, set(ANOMALY_CLASSES)))
    logs = load_healthy(real_logs) if real_logs else None
    real = real_log_flags(model, logs) if logs is not None else {}
    return {"results": results, "named": named, "real": real, "fit_seconds": fit_s, "score_seconds": score_s,
            "test_steps": n_steps}


def format_table(out: dict) -> str:
    """The side-by-side tables: every detector on all episodes and on the named classes, the detector
    and the forest per class and per unnamed kind, and false alarms on the healthy real logs."""
    head = (f"{'':<16}{'precision':>10}{'recall':>8}{'F1':>7}{'ep.recall':>10}{'other':>7}"
            f"{'FA/1000':>9}{'stray/1000':>11}{'class acc':>10}")
    lines = []
    for title, table in (("all episodes", out["results"]), ("named classes only", out["named"])):
        lines += [title, head, "-" * len(head)]
        for sc in table.values():
            hit, n, _ = sc.by_class.get("other", [0, 0, 0])
            other = f"{hit}/{n}" if n else "-"
            lines.append(f"{sc.name:<16}{sc.precision:>10.3f}{sc.recall:>8.3f}{sc.f1:>7.3f}{sc.episode_recall:>10.3f}"
                         f"{other:>7}{sc.false_alarms_per_1000:>9.2f}{sc.stray_per_1000:>11.2f}"
                         f"{sc.class_accuracy:>10.3f}")
        lines.append("")
    det, forest, rules = (out["results"][k] for k in ("detector", "forest", "rules"))
    lines.append(f"{'episodes hit / episodes (class right)':<44}{'detector':>12}{'rules alone':>13}{'forest alone':>14}")

    def row(label: str, counts: list, of_rules: list, of_forest: list, right: str = "") -> str:
        n = counts[1]
        cells = [f"{c[0]}/{n}" if n else "-" for c in (counts, of_rules, of_forest)]
        return f"  {label:<42}{cells[0] + right:>12}{cells[1]:>13}{cells[2]:>14}"

    for cls, counts in sorted(det.by_class.items()):
        lines.append(row(cls, counts, rules.by_class[cls], forest.by_class[cls], f" ({counts[2]})"))
    for kind in (*TUNED_KINDS, *[k for k in UNNAMED_KINDS if k not in TUNED_KINDS]):
        seen = "tuned on" if kind in TUNED_KINDS else "never seen"
        none = [0, 0]
        lines.append(row(f"other: {kind} ({seen})", det.by_kind.get(kind, none), rules.by_kind.get(kind, none),
                         forest.by_kind.get(kind, none)))
    if out["real"]:
        steps = sum(n for n, _ in out["real"].values())
        flags = sum(f for _, f in out["real"].values())
        lines += ["", f"healthy shared real logs: {flags} of {steps} steps flagged ({100 * flags / steps:.2f}%)"]
        lines += [f"  {rid[:60]:<62}{f}/{n}" for rid, (n, f) in sorted(out["real"].items())]
    return "\n".join(lines)


def _as_json(out: dict) -> dict:
    def numbers(sc: Scores) -> dict:
        return {"precision": sc.precision, "recall": sc.recall, "f1": sc.f1, "episode_recall": sc.episode_recall,
                "false_alarms_per_1000": sc.false_alarms_per_1000, "stray_per_1000": sc.stray_per_1000,
                "class_accuracy": sc.class_accuracy, "by_class": sc.by_class, "by_kind": sc.by_kind}

    return {"all": {k: numbers(v) for k, v in out["results"].items()},
            "named": {k: numbers(v) for k, v in out["named"].items()},
            "real": {rid: {"steps": n, "flagged": f} for rid, (n, f) in out["real"].items()}}


def run_evaluate(args: argparse.Namespace | list[str] | None = None) -> int:
    """Entry point of `verl-health evaluate`: prints the tables; `--json` also prints the numbers."""
    if not isinstance(args, argparse.Namespace):
        args = add_evaluate_arguments(argparse.ArgumentParser(prog="verl-health evaluate")).parse_args(args)
    real = None if args.no_real_logs else args.real_logs
    out = evaluate(args.train_seed, tuple(args.test_seeds), args.runs, steps_scale=args.steps_scale, real_logs=real)
    print(f"fit on seed {args.train_seed}, scored seeds {list(args.test_seeds)}: {out['test_steps']} steps, "
          f"fit {out['fit_seconds']:.1f}s, score {out['score_seconds']:.1f}s")
    print(format_table(out))
    if getattr(args, "json", False):
        print(json.dumps(_as_json(out)))
    return 0


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the arguments of `verl-health evaluate` to `parser` (and return it)."""
    parser.add_argument("--runs", type=int, default=60, help="runs per simulated fleet")
    parser.add_argument("--train-seed", type=int, default=1, help="seed of the training fleet")
    parser.add_argument("--test-seeds", type=int, nargs="+", default=[101, 102], help="seeds of unseen fleets")
    parser.add_argument("--steps-scale", type=float, default=1.0, help="scale of run lengths")
    parser.add_argument("--real-logs", default=str(DEFAULT_DIR),
                        help="folder of real logs with LABELS.jsonl: false alarms on its healthy ones")
    parser.add_argument("--no-real-logs", action="store_true", help="skip the real logs")
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    return parser
