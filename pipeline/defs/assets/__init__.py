"""Dagster assets, one module per layer (ingest, derive, detect, report, publish), and the selections of
the graph that jobs and `analyze` run, read from the table registry (pipeline/tables.py)."""

import warnings

from dagster import BetaWarning

from pipeline import tables

# Every per-run asset uses BackfillPolicy.single_run() on purpose (one Dagster run for many
# partitions); the beta notice on each definition would only bury the pipeline's own output.
warnings.filterwarnings("ignore", message=".*backfill_policy.*", category=BetaWarning)

from pipeline.defs.assets.derive import fleet_table_assets, run_table_assets  # noqa: E402
from pipeline.defs.assets.detect import anomaly_model, anomaly_model_fresh, step_anomalies  # noqa: E402
from pipeline.defs.assets.ingest import ingested_run  # noqa: E402
from pipeline.defs.assets.publish import published_warehouse  # noqa: E402
from pipeline.defs.assets.report import fleet_report, fleet_report_mail, run_report  # noqa: E402

ASSETS = [
    ingested_run,
    *run_table_assets,
    *fleet_table_assets,
    anomaly_model,
    step_anomalies,
    run_report,
    fleet_report,
    fleet_report_mail,
    published_warehouse,
]
ASSET_CHECKS = [anomaly_model_fresh]


# The sensor's selection of analyze_batch (per run_id partition): a run's report and every table it reads, the
# fleet tables among them, so a report rendered there has the rows a command-line one has. The model is
# refitted by `analyze` and the nightly run only: the sensor's runs go side by side, and a fit is fleet-wide.
RUN_JOB_ASSETS = [*tables.names(), "run_report"]
# Fleet assets of the nightly run, the model aside (it is refitted only when due)
NIGHTLY_ASSETS = [*tables.fleet_tables(), "fleet_report", "fleet_report_mail", "published_warehouse"]
