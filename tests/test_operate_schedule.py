"""The nightly schedule: one keyed run request per night; the model refit only when it is due."""

import json
from datetime import UTC, datetime

from dagster import AssetKey, build_schedule_context, materialize

from pipeline.defs.assets import NIGHTLY_ASSETS
from pipeline.defs.jobs import FORKED_STEPS
from pipeline.defs.resources import WarehouseResource
from pipeline.defs.schedules import nightly_schedule, nightly_selection

TICK = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
DAY_S = 86400


def _request(warehouse):
    context = build_schedule_context(
        scheduled_execution_time=TICK,
        resources={"warehouse": WarehouseResource(path=str(warehouse))},
    )
    return nightly_schedule()(context)


def _write_model_meta(warehouse, fitted_at):
    models = warehouse / "models"
    models.mkdir(parents=True)
    (models / "anomaly_model.json").write_text(json.dumps({"fitted_at_unix": fitted_at}))


def test_first_night_fits_the_model(tmp_path):
    request = _request(tmp_path / "w")
    assert request.run_key == "nightly-2026-11-29"
    assert request.tags["verl-health/day"] == "2026-11-29"
    assert request.tags["verl-health/mail"] == "true" and request.tags["verl-health/nightly"] == "true"
    assert request.run_config == FORKED_STEPS  # its steps forked from the preloaded server
    assert set(request.asset_selection) == {AssetKey(a) for a in [*NIGHTLY_ASSETS, "anomaly_model"]}


def test_fresh_model_is_not_refitted(tmp_path):
    _write_model_meta(tmp_path / "w", TICK.timestamp() - DAY_S)
    request = _request(tmp_path / "w")
    assert AssetKey("anomaly_model") not in request.asset_selection
    assert set(request.asset_selection) == {AssetKey(a) for a in NIGHTLY_ASSETS}


def test_week_old_model_is_refitted(tmp_path):
    _write_model_meta(tmp_path / "w", TICK.timestamp() - 8 * DAY_S)
    assert AssetKey("anomaly_model") in _request(tmp_path / "w").asset_selection


def test_refit_limit_comes_from_the_environment_when_asked(tmp_path, monkeypatch):
    """VERL_HEALTH_REFIT_DAYS is read at the tick, not when the package was imported."""
    _write_model_meta(tmp_path / "w", TICK.timestamp() - 2 * DAY_S)
    assert AssetKey("anomaly_model") not in _request(tmp_path / "w").asset_selection
    monkeypatch.setenv("VERL_HEALTH_REFIT_DAYS", "1.5")
    assert AssetKey("anomaly_model") in _request(tmp_path / "w").asset_selection


def test_refit_threshold():
    assert "anomaly_model" in nightly_selection(None, 7)
    assert "anomaly_model" in nightly_selection(7.0, 7)
    assert "anomaly_model" not in nightly_selection(6.9, 7)
    assert "anomaly_model" in nightly_selection(3.0, 2)


def test_fleet_report_is_dated_by_the_schedule_tick(tmp_path):
    from report_fixtures import build_warehouse, every_class_specs

    from pipeline.defs.assets.report import DAY_TAG, fleet_report
    from pipeline.defs.resources import ReportsResource, SmtpResource

    warehouse = build_warehouse(tmp_path / "wh", every_class_specs())
    result = materialize(
        [fleet_report], tags={DAY_TAG: "2026-11-29"},
        resources={"warehouse": WarehouseResource(path=str(warehouse)),
                   "reports": ReportsResource(path=str(tmp_path / "reports")), "smtp": SmtpResource()},
    )
    assert result.success
    assert (tmp_path / "reports" / "fleet" / "2026-11-29.html").is_file()
