"""The Dagster deployment loads: one Definitions object, the asset graph, jobs, sensors and schedule."""

import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
from dagster import AssetKey

from pipeline.defs.definitions import build_definitions, defs

ROOT = Path(__file__).resolve().parents[1]


def test_defs_load_with_every_layer():
    repo = defs.get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    for name in ["runs", "log_lines", "step_metrics", "step_phases", "step_health", "run_events", "run_summary",
                 "config_findings", "fleet_daily", "fleet_weekly", "fleet_config_groups", "run_baselines",
                 "anomaly_model", "step_anomalies", "run_report", "fleet_report", "fleet_report_mail"]:
        assert name in keys, name
    groups = {repo.asset_graph.get(AssetKey(k)).group_name for k in keys}
    assert groups == {"ingest", "derive", "detect", "report"}
    assert {j.name for j in repo.get_all_jobs()} >= {"analyze_batch", "run_health_job", "analyze_archive_job"}
    assert {s.name for s in repo.sensor_defs} == {"finished_run_sensor", "pipeline_failure_mail", "run_attention_mail"}
    assert [s.name for s in repo.schedule_defs] == ["nightly_schedule"]


def test_per_run_assets_are_partitioned_by_run_id(tmp_path):
    repo = build_definitions(tmp_path / "a", tmp_path / "w", tmp_path / "r").get_repository_def()
    for name in ["log_lines", "step_phases", "run_summary", "step_anomalies", "run_report"]:
        pdef = repo.asset_graph.get(AssetKey(name)).partitions_def
        assert pdef is not None and pdef.name == "run_id", name
    for name in ["anomaly_model", "fleet_report", "fleet_daily"]:
        assert repo.asset_graph.get(AssetKey(name)).partitions_def is None, name


def test_workspace_validates_with_the_dagster_cli():
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _imports() -> dict[str, set[str]]:
    """Each pipeline module with the pipeline modules it imports, at top level or inside a function."""
    import ast

    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / "pipeline").rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])])
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names}
        graph[name] = (found & set(files)) - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of the graph, or [] (a depth-first walk)."""
    state: dict[str, int] = {}
    path: list[str] = []

    def walk(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := walk(node)):
            return found
    return []


def test_no_import_cycle_among_pipeline_modules():
    graph = _imports()
    assert graph["pipeline.defs.launchers"] >= {"pipeline.defs.analysis"}
    assert graph["pipeline.defs.object_store_analysis"] >= {"pipeline.defs.analysis", "pipeline.objectstore"}
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))
    assert _cycle({**graph, "pipeline.objectstore": {"pipeline.defs.object_store_analysis"}}), "the walk finds a known cycle"


def test_public_dagster_apis_only():
    """No module of pipeline/ names a private Dagster module: no import, no `module: dagster._...` string."""
    private = [f"{p.relative_to(ROOT)}:{n}" for p in (ROOT / "pipeline").rglob("*.py")
               for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bdagster\._", line)]
    assert private == []


def _upstream(name: str) -> set[str]:
    """Every asset upstream of `name` in the asset graph, through each definition's declared deps."""
    from pipeline.defs.assets import ASSETS

    deps = {spec.key.to_user_string(): {d.asset_key.to_user_string() for d in spec.deps}
            for a in ASSETS for spec in a.specs}
    seen, todo = set(), [name]
    while todo:
        for parent in deps.get(todo.pop(), ()):
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


def test_the_reports_depend_on_every_table_their_code_reads_and_the_run_job_refreshes_them():
    """Each report depends on every warehouse table the report code names (pipeline/report/*.py), and the
    sensor's run job selects every table upstream of the run report (its baseline row, its templates)."""
    from pipeline import tables
    from pipeline.defs.assets import RUN_JOB_ASSETS

    code = "\n".join(p.read_text() for p in (ROOT / "pipeline" / "report").glob("*.py"))
    named = {t for t in tables.names() if re.search(rf"\b{t}\b", code)}
    assert {"run_baselines", "error_templates", "step_anomalies", "fleet_weekly", "run_samples"} <= named
    for report in ("run_report", "fleet_report"):
        assert named <= _upstream(report), (report, named - _upstream(report))
    # the model aside: `analyze` and the nightly job refit it, not the runs the sensor starts side by side
    assert _upstream("run_report") - {tables.MODEL} <= set(RUN_JOB_ASSETS)


def test_settings_reach_the_resources_when_a_run_starts(tmp_path, monkeypatch):
    """`defs` was built at import with no folders; the VERL_HEALTH_* variables set afterwards decide where a
    run reads and writes and how long a line may be (a 5,000-byte line kept as 1,048 bytes)."""
    from dagster import DagsterInstance, materialize

    from pipeline.defs.partitions import RUN_PARTITIONS_NAME

    run = tmp_path / "archive" / "run-a"
    run.mkdir(parents=True)
    (run / "train.log").write_text("step:1 - actor/pg_loss:0.5\n" + "x" * 5000 + "\nstep:2 - actor/pg_loss:0.4\n")
    for name, value in {"ARCHIVE": tmp_path / "archive", "WAREHOUSE": tmp_path / "wh", "REPORTS": tmp_path / "rep",
                        "QUIET_PERIOD_S": 0, "MAX_LINE_MB": 0.001}.items():
        monkeypatch.setenv(f"VERL_HEALTH_{name}", str(value))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(RUN_PARTITIONS_NAME, ["run-a"])
    result = materialize(list(defs.assets), resources=defs.resources, instance=instance, partition_key="run-a",
                         selection=["runs", "log_lines", "step_metrics"])
    assert result.success

    lines = pq.read_table(tmp_path / "wh" / "log_lines" / "run_id=run-a").column("text").to_pylist()
    assert [len(t) for t in lines] == [len("step:1 - actor/pg_loss:0.5"), int(0.001 * 2**20), len("step:2 - actor/pg_loss:0.4")]


def test_nightly_cron_is_read_when_the_definitions_are_built(monkeypatch):
    monkeypatch.setenv("VERL_HEALTH_NIGHTLY_CRON", "30 5 * * *")
    monkeypatch.setenv("VERL_HEALTH_TIMEZONE", "Europe/Paris")
    [nightly] = build_definitions().get_repository_def().schedule_defs
    assert (nightly.cron_schedule, nightly.execution_timezone) == ("30 5 * * *", "Europe/Paris")


def _external_imports(path: Path) -> set[str]:
    """The top-level package names a module imports, at top level or inside a function."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_core_imports_no_dagster_and_the_product_nothing_of_the_lab():
    """pipeline/defs/ is the Dagster shell; the rest of pipeline/ is plain Python over Arrow and DuckDB
    (the CLI reaches the shell lazily), and nothing in pipeline/ imports the lab."""
    graph = _imports()
    core = [p for p in (ROOT / "pipeline").rglob("*.py")
            if "defs" not in p.relative_to(ROOT).parts and p.name != "cli.py"]
    assert len(core) > 50
    uses_dagster = sorted(str(p.relative_to(ROOT)) for p in core
                          if any(m == "dagster" or m.startswith("dagster_") for m in _external_imports(p)))
    assert uses_dagster == []
    into_shell = sorted(f"{m} -> {d}" for m, deps in graph.items()
                        if not m.startswith("pipeline.defs") and m != "pipeline.cli"
                        for d in deps if d.startswith("pipeline.defs"))
    assert into_shell == []
    uses_lab = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "pipeline").rglob("*.py")
                      if "lab" in _external_imports(p))
    assert uses_lab == []
    assert (ROOT / "lab" / "simulate").is_dir() and not (ROOT / "pipeline" / "simulate").exists()
