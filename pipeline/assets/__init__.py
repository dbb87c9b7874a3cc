"""Dagster assets, one module per layer: ingest, derive, detect, report."""

import warnings

from dagster import BetaWarning

# Every per-run asset uses BackfillPolicy.single_run() on purpose (one Dagster run for many
# partitions); the beta notice on each definition would only bury the pipeline's own output.
warnings.filterwarnings("ignore", message=".*backfill_policy.*", category=BetaWarning)
