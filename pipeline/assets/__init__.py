"""Dagster assets, one module per layer: ingest, derive, detect, report."""
