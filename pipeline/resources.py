"""Typed Dagster resources: the run archive, the warehouse, the reports folder and the SMTP server."""

from __future__ import annotations

import os
from pathlib import Path

from dagster import ConfigurableResource, EnvVar
from pydantic import Field


class ArchiveResource(ConfigurableResource):
    """The archive root that holds one entry (folder, .tar.gz, .zip or .gz) per verl run."""

    root: str = Field(description="Archive root: a local folder or an s3:// URL (mirrored into cache_dir).")
    quiet_period_s: int = Field(
        default=600, description="A run unchanged for this many seconds counts as finished."
    )
    cache_dir: str = Field(default="", description="Local mirror of an s3:// archive; empty: a temp folder.")
    max_run_gb: float = Field(
        default=64.0, description="Decompressed bytes read per run (GiB): the decompression-bomb guard."
    )
    max_line_mb: float = Field(default=64.0, description="Longer lines are kept truncated to this size (MiB).")

    def limits(self):
        """The ingest limits these settings give."""
        from pipeline.ingest.readers import IngestLimits

        return IngestLimits(max_total_bytes=int(self.max_run_gb * 2**30), max_line_bytes=int(self.max_line_mb * 2**20))

    def local_root(self) -> Path:
        """The folder ingest reads: the root itself, or the refreshed local mirror of an s3:// root."""
        from pipeline import objectstore

        if not objectstore.is_url(self.root):
            return Path(self.root)
        cache = self.cache_dir or objectstore.default_cache_dir(self.root, "archive")
        return objectstore.stage_archive(self.root, cache)

    def discover(self, now: float | None = None):
        """Discover the run entries under the root."""
        from pipeline.ingest import discover_runs

        return discover_runs(self.local_root(), quiet_period_s=self.quiet_period_s, now=now)


class WarehouseResource(ConfigurableResource):
    """The Parquet lake and its DuckDB catalog."""

    path: str = Field(description="Warehouse folder, or an s3:// URL it is published to (built in cache_dir).")
    cache_dir: str = Field(default="", description="Local build folder of an s3:// warehouse; empty: a temp folder.")

    @property
    def root(self) -> Path:
        """The local warehouse folder, created on first use."""
        from pipeline import objectstore

        if objectstore.is_url(self.path):
            p = Path(self.cache_dir or objectstore.default_cache_dir(self.path, "warehouse"))
        else:
            p = Path(self.path)
        p.mkdir(parents=True, exist_ok=True)
        return p

    def publish(self) -> dict[str, int] | None:
        """Upload the local warehouse to its s3:// URL; None for a local warehouse."""
        from pipeline import objectstore

        return objectstore.publish_warehouse(self.root, self.path) if objectstore.is_url(self.path) else None

    def connect(self):
        """A DuckDB connection with a view per table."""
        from pipeline.lake import connect

        return connect(self.root)


class ReportsResource(ConfigurableResource):
    """The folder HTML reports are written to."""

    path: str = Field(description="Reports folder (runs/ and fleet/ below it).")

    @property
    def root(self) -> Path:
        """The reports folder, created on first use."""
        p = Path(self.path)
        p.mkdir(parents=True, exist_ok=True)
        return p


class SmtpResource(ConfigurableResource):
    """An SMTP server for the fleet report and alerts. Secrets come from the environment via EnvVar."""

    host: str = Field(default="", description="SMTP host; empty disables mail.")
    port: int = Field(default=587)
    security: str = Field(default="starttls", description="'starttls', 'ssl' or 'none'.")
    user: str = Field(default="")
    password: str = Field(default="")
    sender: str = Field(default="verl-health@localhost")
    recipients: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=30.0)
    ca_file: str = Field(default="", description="CA bundle to trust (a private server's); empty: the system's.")
    reports_url: str = Field(
        default="", description="Where the reports folder is served (https://...): mails link the reports there."
    )

    @property
    def enabled(self) -> bool:
        """True when a host and at least one recipient are configured."""
        return bool(self.host and self.recipients)

    def settings(self) -> dict:
        """Connection settings for `pipeline.report.mail.send_mail` (password included; never log this)."""
        return {
            "host": self.host,
            "port": self.port,
            "security": self.security,
            "user": self.user or None,
            "password": self.password or None,
            "timeout": self.timeout_s,
            "ca_file": self.ca_file or None,
        }


def _secret(name: str):
    """An EnvVar when the variable is set, so secrets never sit in config; empty otherwise."""
    return EnvVar(name) if os.environ.get(name) else ""


def smtp_from_env() -> SmtpResource:
    """The SMTP resource configured from VERL_HEALTH_SMTP_* / VERL_HEALTH_MAIL_* variables."""
    env = os.environ
    return SmtpResource(
        host=env.get("VERL_HEALTH_SMTP_HOST", ""),
        port=int(env.get("VERL_HEALTH_SMTP_PORT", "587")),
        security=env.get("VERL_HEALTH_SMTP_SECURITY", "starttls"),
        user=_secret("VERL_HEALTH_SMTP_USER"),
        password=_secret("VERL_HEALTH_SMTP_PASSWORD"),
        sender=env.get("VERL_HEALTH_MAIL_FROM", "verl-health@localhost"),
        recipients=[r.strip() for r in env.get("VERL_HEALTH_MAIL_TO", "").split(",") if r.strip()],
        ca_file=env.get("VERL_HEALTH_SMTP_CA_FILE", ""),
        reports_url=env.get("VERL_HEALTH_REPORTS_URL", ""),
    )


def archive_from_env(archive: str | Path, quiet_period_s: int = 600) -> ArchiveResource:
    """The archive resource for `archive`, with the ingest limits of VERL_HEALTH_MAX_RUN_GB / _LINE_MB."""
    return ArchiveResource(
        root=str(archive), quiet_period_s=quiet_period_s,
        max_run_gb=float(os.environ.get("VERL_HEALTH_MAX_RUN_GB", "64")),
        max_line_mb=float(os.environ.get("VERL_HEALTH_MAX_LINE_MB", "64")),
    )


def bound_resources(
    archive: str | Path,
    warehouse: str | Path,
    reports: str | Path,
    quiet_period_s: int = 600,
    smtp: SmtpResource | None = None,
) -> dict[str, ConfigurableResource]:
    """The resources every asset, sensor and job uses, bound to the given folders."""
    return {
        "archive": archive_from_env(archive, quiet_period_s),
        "warehouse": WarehouseResource(path=str(warehouse)),
        "reports": ReportsResource(path=str(reports)),
        "smtp": smtp or smtp_from_env(),
    }
