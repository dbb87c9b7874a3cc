"""`analyze` where the archive and/or the warehouse are s3:// URLs: mirror, analyse locally, publish."""

from __future__ import annotations

from pathlib import Path

from pipeline import objectstore
from pipeline.defs.analysis import analyze_archive


def analyze_with_object_store(archive: str, warehouse: str, reports: str | Path, quiet_period_s: int = 0,
                              cache_dir: str | Path | None = None, **options):
    """`analyze_archive` where the archive and/or the warehouse are s3:// URLs: mirror, analyse, publish.

    `options` go on to `analyze_archive` (mail, force, refit). Returns the `ArchiveOutcome` and the
    publish counts (None for a local warehouse).
    """
    def local(location: str, kind: str) -> Path:
        if not objectstore.is_url(location):
            return Path(location)
        return Path(cache_dir) / kind if cache_dir else objectstore.default_cache_dir(location, kind)

    local_archive = local(archive, "archive")
    if objectstore.is_url(archive):
        local_archive = objectstore.stage_archive(archive, local_archive)
    local_warehouse = local(warehouse, "warehouse")
    outcome = analyze_archive(local_archive, local_warehouse, reports, quiet_period_s=quiet_period_s, **options)
    published = None
    if objectstore.is_url(warehouse):
        published = objectstore.publish_warehouse(local_warehouse, warehouse)
    return outcome, published
