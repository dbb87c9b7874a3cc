"""The `verl-health` command: analyze, and the sub-commands other installed packages add (the lab's
demo, simulate and evaluate) through the `verl_health.commands` entry points."""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import os
import sys
import time
from pathlib import Path

COMMANDS_GROUP = "verl_health.commands"
# a disk with less free space than this is full to SQLite, which needs room for its journal and shared memory
FULL_BELOW_BYTES = 2**20


def _print_model_note(outcome) -> None:
    from pipeline.defs.assets.detect import NO_STEPS

    if outcome.no_model:
        print(f"anomaly model: {NO_STEPS}")


def _dagster_instance(args: argparse.Namespace):
    """Where `analyze` records its Dagster runs: the Dagster home, or memory only with `--no-record`."""
    from pipeline.defs.instance import persistent_instance

    return None if args.no_record else persistent_instance(args.warehouse)


class Progress:
    """Prints what a long analysis is doing, with the time since it began, on stderr (stdout keeps the result)."""

    def __init__(self):
        self.started = time.perf_counter()

    def __call__(self, what: str) -> None:
        print(f"[{time.perf_counter() - self.started:6.1f} s] {what} ...", file=sys.stderr, flush=True)


def print_outcome(outcome, reports: Path) -> None:
    """Print what an analysis did: runs, outcomes, skips, problems and where the reports are."""
    print(f"analysed {len(outcome.run_ids)} runs in {outcome.seconds:.1f} s")
    if outcome.outcomes:
        print("outcomes:     " + ", ".join(f"{n} {label}" for label, n in outcome.outcomes.items()))
    _print_model_note(outcome)
    if outcome.unchanged:
        print(f"  {len(outcome.unchanged)} runs unchanged since their last analysis (--force redoes them)")
    for rid, why in sorted(outcome.skipped.items()):
        print(f"  skipped {rid}: {why}")
    for err in outcome.errors:
        print(f"  archive problem: {err}")
    for rid, why in sorted(outcome.not_analysed.items()):
        print(f"  not analysed {rid}: " + "; ".join(why))
    print(f"run reports:  {reports / 'runs'}")
    if outcome.fleet_report:
        print(f"fleet report: {outcome.fleet_report}")
        print(f"              {reports / 'fleet' / 'latest.html'}")


def cmd_analyze(args: argparse.Namespace) -> int:
    """Materialise every asset in-process for every run in the archive, or for the one run of `--run`."""
    from pipeline.selection import NoRunsError, RunSelection

    if args.run:
        return _analyze_one(args)
    if args.archive is None:
        print("error: name the archive to analyse (or one run with --run)", file=sys.stderr)
        return 2
    options = {"mail": args.mail, "force": args.force, "refit": args.refit,
               "select": RunSelection(args.include, args.since, args.until)}
    try:
        return _analyze_archive(args, options)
    except NoRunsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _analyze_archive(args: argparse.Namespace, options: dict) -> int:
    """`analyze ARCHIVE`, local or through the object store; raises NoRunsError when it finds no run."""
    from pipeline import objectstore
    from pipeline.defs.analysis import analyze_archive
    from pipeline.defs.object_store_analysis import analyze_with_object_store

    if objectstore.is_url(args.archive) or objectstore.is_url(args.warehouse):
        outcome, published = analyze_with_object_store(
            args.archive, args.warehouse, Path(args.reports), quiet_period_s=args.quiet_period, progress=Progress(),
            **options)
        print_outcome(outcome, Path(args.reports))
        if published is not None:
            print(f"warehouse published to {args.warehouse} ({published})")
        return 0
    archive = Path(args.archive)
    if not archive.is_dir():
        print(f"error: archive {archive} is not a folder", file=sys.stderr)
        return 2
    outcome = analyze_archive(archive, Path(args.warehouse), Path(args.reports), quiet_period_s=args.quiet_period,
                              instance=_dagster_instance(args), progress=Progress(), **options)
    print_outcome(outcome, Path(args.reports))
    return 0


def _analyze_one(args: argparse.Namespace) -> int:
    """`analyze --run`: one finished run, by path or by run_id under the archive (what a launcher calls),
    through the same asset jobs as a whole archive."""
    from pipeline import objectstore
    from pipeline.defs.analysis import analyze_archive
    from pipeline.defs.resources import archive_from_env
    from pipeline.run_entry import entry_root, resolve_entry
    from pipeline.run_outcomes import verdict

    if objectstore.is_url(args.warehouse) or args.mail:
        print("error: --run analyses into a local warehouse and sends no mail; run `analyze ARCHIVE` for "
              "s3:// warehouses or --mail", file=sys.stderr)
        return 2
    archive = archive_from_env(args.archive or ".", args.quiet_period)
    try:
        entry = resolve_entry(args.run, archive.root, archive.quiet_period_s)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    outcome = analyze_archive(entry_root(entry, archive.root), Path(args.warehouse), Path(args.reports),
                              instance=_dagster_instance(args), force=args.force, refit=args.refit,
                              include={entry.run_id}, progress=Progress())
    report = Path(args.reports) / "runs" / f"{entry.run_id}.html"
    print(f"{entry.run_id}: {verdict(args.warehouse, entry.run_id)} -> {report}")
    for why in outcome.not_analysed.get(entry.run_id, []):
        print(f"  {why}")
    _print_model_note(outcome)
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of every sub-command; an entry point's command gets its options only when
    `command` names it, so `--help` and `analyze` do not import the simulator nor scikit-learn."""
    parser = argparse.ArgumentParser(prog="verl-health", description="Health analytics for verl RL runs.")
    sub = parser.add_subparsers(dest="command", required=True)

    ana = sub.add_parser("analyze", help="analyse every run of an archive in-process")
    ana.add_argument("archive", nargs="?",
                     help="archive root (a folder or an s3:// URL): one folder, .tar.gz, .zip or .gz per run")
    ana.add_argument("--run", help="analyse only this finished run: its path, or its run_id under the archive")
    ana.add_argument("--warehouse", default="data/warehouse",
                     help="warehouse folder or s3:// URL to publish to (default data/warehouse)")
    ana.add_argument("--reports", default="reports", help="reports folder (default reports)")
    ana.add_argument("--quiet-period", type=int, default=0,
                     help="seconds a run must be unchanged to count as finished (default 0: all runs)")
    ana.add_argument("--mail", action="store_true", help="also mail the fleet report (VERL_HEALTH_SMTP_*)")
    ana.add_argument("--force", action="store_true", help="re-analyse runs that have not changed since the last time")
    ana.add_argument("--refit", action="store_true",
                     help="refit the anomaly model on the fleet even when the stored one is fresh")
    ana.add_argument("--no-record", action="store_true",
                     help="keep Dagster's record of this analysis in memory, not in the Dagster home: the same "
                          "warehouse and reports, sooner on a fleet (writing the record is ~40%% of a 100-run "
                          "analyze), but `make ui` will not list these materialisations")
    ana.add_argument("--include", metavar="GLOB", help="only the runs whose run_id matches (e.g. 'grpo-qwen7b-*')")
    ana.add_argument("--since", type=dt.date.fromisoformat, metavar="YYYY-MM-DD",
                     help="only runs last active on or after this day (their archive entry's modification time)")
    ana.add_argument("--until", type=dt.date.fromisoformat, metavar="YYYY-MM-DD",
                     help="only runs last active on or before this day")
    ana.set_defaults(func=cmd_analyze)

    from importlib.metadata import entry_points

    for command_ep in entry_points(group=COMMANDS_GROUP):
        command_ep.load()(sub, command == command_ep.name)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as exc:
        if (full := disk_full(exc, args)) is None:
            raise
        print(f"error: {full}", file=sys.stderr)
        return 1


def _nearly_full(folder: Path) -> bool:
    """Whether the disk holding `folder` has less than FULL_BELOW_BYTES free (False where it cannot be read)."""
    try:
        stats = os.statvfs(folder)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < FULL_BELOW_BYTES


def disk_full(exc: BaseException, args: argparse.Namespace) -> str | None:
    """What filled up, in words, when `exc` (or an error behind it) is a disk running full; else None.

    The tables and reports already written stay (each is swapped into place whole), and runs left unfinished
    are redone by the next analyze."""
    seen: BaseException | None = exc
    while seen is not None:
        text = str(seen)
        if getattr(args, "warehouse", None) and ("database or disk is full" in text or "disk I/O error" in text):
            from pipeline.defs.instance import record_home

            home = record_home(args.warehouse)
            # a write SQLite could not make on a full disk can surface as a disk I/O error instead
            if "database or disk is full" in text or _nearly_full(home):
                return (f"the disk holding the Dagster record ({home}) is full: the analysis stopped. What it wrote "
                        "is kept and the next analyze redoes the rest; free space there, set DAGSTER_HOME to another "
                        "disk, or run with --no-record")
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return (f"no space left on the device{f' writing {seen.filename}' if seen.filename else ''}: the "
                    "analysis stopped. What it wrote is kept and the next analyze redoes the rest")
        seen = seen.__cause__ or seen.__context__
    return None


if __name__ == "__main__":
    sys.exit(main())
