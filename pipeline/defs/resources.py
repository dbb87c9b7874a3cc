"""Typed Dagster resources: the run archive, the warehouse, the reports folder and the SMTP server.

A field left unset (None) takes its VERL_HEALTH_* setting (pipeline/settings.py) when Dagster sets the
resource up for a run or a sensor tick, so `defs` reads nothing from the environment at import; a value
given in code or run config wins. Outside Dagster, `resolved()` does the same.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from dagster import ConfigurableResource, EnvVar, InitResourceContext
from pydantic import Field

from pipeline.settings import setting


def _recipients(value: str) -> list[str]:
    return [r.strip() for r in value.split(",") if r.strip()]


class _FromEnvironment(ConfigurableResource):
    """A resource whose unset fields are filled from their settings when it is set up."""

    def _settings(self) -> dict[str, tuple[str, type]]:
        """Field -> (setting, how to read its text)."""
        return {}

    def resolved(self):
        """This resource with every unset field read from its setting now."""
        values = {name: getattr(self, name) for name in type(self).model_fields}
        for name, (variable, kind) in self._settings().items():
            if values[name] is None:
                values[name] = kind(setting(variable))
        return type(self)(**values)

    def create_resource(self, context: InitResourceContext):
        """What a run or a sensor tick gets: the settings read when it starts."""
        return self.resolved()


class ArchiveResource(_FromEnvironment):
    """The archive root that holds one entry (folder, .tar.gz, .zip or .gz) per verl run."""

    root: str | None = Field(
        default=None, description="Archive root: a local folder or an s3:// URL; unset: VERL_HEALTH_ARCHIVE."
    )
    quiet_period_s: int | None = Field(
        default=None, description="A run unchanged this many seconds counts as finished; unset: VERL_HEALTH_QUIET_PERIOD_S."
    )
    cache_dir: str = Field(default="", description="Local mirror of an s3:// archive; empty: VERL_HEALTH_CACHE.")
    max_run_gb: float | None = Field(
        default=None, description="Decompressed GiB read per run (the decompression-bomb guard); unset: VERL_HEALTH_MAX_RUN_GB."
    )
    max_line_mb: float | None = Field(
        default=None, description="Longer lines are kept truncated to this many MiB; unset: VERL_HEALTH_MAX_LINE_MB."
    )

    def _settings(self) -> dict[str, tuple[str, type]]:
        return {"root": ("VERL_HEALTH_ARCHIVE", str), "quiet_period_s": ("VERL_HEALTH_QUIET_PERIOD_S", int),
                "max_run_gb": ("VERL_HEALTH_MAX_RUN_GB", float), "max_line_mb": ("VERL_HEALTH_MAX_LINE_MB", float)}

    def limits(self):
        """The ingest limits these settings give."""
        from pipeline.ingest.readers import IngestLimits

        res = self.resolved()
        return IngestLimits(max_total_bytes=int(res.max_run_gb * 2**30), max_line_bytes=int(res.max_line_mb * 2**20))

    def local_root(self) -> Path:
        """The folder ingest reads: the root itself, or the refreshed local mirror of an s3:// root."""
        from pipeline import objectstore

        if not objectstore.is_url(self.root):
            return Path(self.root)
        cache = self.cache_dir or objectstore.default_cache_dir(self.root, "archive")
        return objectstore.stage_archive(self.root, cache)

    def discover(self, now: float | None = None, only: Collection[str] | None = None):
        """Discover the run entries under the root (those of the run_ids `only`, when given)."""
        from pipeline.ingest import discover_runs

        res = self.resolved()
        return discover_runs(res.local_root(), quiet_period_s=res.quiet_period_s, now=now, only=only)


class WarehouseResource(_FromEnvironment):
    """The Parquet lake and its DuckDB catalog."""

    path: str | None = Field(
        default=None,
        description="Warehouse folder, or an s3:// URL it is published to (built in cache_dir); unset: VERL_HEALTH_WAREHOUSE.",
    )
    cache_dir: str = Field(default="", description="Local build folder of an s3:// warehouse; empty: VERL_HEALTH_CACHE.")

    def _settings(self) -> dict[str, tuple[str, type]]:
        return {"path": ("VERL_HEALTH_WAREHOUSE", str)}

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


class ReportsResource(_FromEnvironment):
    """The folder HTML reports are written to."""

    path: str | None = Field(default=None, description="Reports folder (runs/ and fleet/ below it); unset: VERL_HEALTH_REPORTS.")

    def _settings(self) -> dict[str, tuple[str, type]]:
        return {"path": ("VERL_HEALTH_REPORTS", str)}

    @property
    def root(self) -> Path:
        """The reports folder, created on first use."""
        p = Path(self.path)
        p.mkdir(parents=True, exist_ok=True)
        return p


class SmtpResource(_FromEnvironment):
    """An SMTP server for the fleet report and alerts; each unset field is its VERL_HEALTH_SMTP_* / _MAIL_* setting."""

    host: str | None = Field(default=None, description="SMTP host; empty disables mail.")
    port: int | None = Field(default=None)
    security: str | None = Field(default=None, description="'starttls', 'ssl' or 'none'.")
    user: str | None = Field(default=None)
    password: str | None = Field(default=None)
    sender: str | None = Field(default=None)
    recipients: list[str] | None = Field(default=None)
    timeout_s: float = Field(default=30.0)
    ca_file: str | None = Field(default=None, description="CA bundle to trust (a private server's); empty: the system's.")
    reports_url: str | None = Field(
        default=None, description="Where the reports folder is served (https://...): mails link the reports there."
    )

    def _settings(self) -> dict[str, tuple[str, type]]:
        return {
            "host": ("VERL_HEALTH_SMTP_HOST", str), "port": ("VERL_HEALTH_SMTP_PORT", int),
            "security": ("VERL_HEALTH_SMTP_SECURITY", str), "user": ("VERL_HEALTH_SMTP_USER", str),
            "password": ("VERL_HEALTH_SMTP_PASSWORD", str), "sender": ("VERL_HEALTH_MAIL_FROM", str),
            "recipients": ("VERL_HEALTH_MAIL_TO", _recipients), "ca_file": ("VERL_HEALTH_SMTP_CA_FILE", str),
            "reports_url": ("VERL_HEALTH_REPORTS_URL", str),
        }

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


def smtp_from_env() -> SmtpResource:
    """The SMTP resource as the environment sets it now, the login kept as EnvVars (Dagster resolves them
    when a run starts, so they never sit in run config)."""
    resolved = SmtpResource().resolved()
    secrets = {name: EnvVar(resolved._settings()[name][0]) if getattr(resolved, name) else ""
               for name in ("user", "password")}
    return SmtpResource(**{**{n: getattr(resolved, n) for n in SmtpResource.model_fields}, **secrets})


def archive_from_env(archive: str | Path, quiet_period_s: int | None = None) -> ArchiveResource:
    """The archive resource for `archive`, its other settings read from the environment now."""
    return ArchiveResource(root=str(archive), quiet_period_s=quiet_period_s).resolved()


def _text(value) -> str | None:
    return None if value is None else str(value)


def bound_resources(
    archive: str | Path | None = None,
    warehouse: str | Path | None = None,
    reports: str | Path | None = None,
    quiet_period_s: int | None = None,
    smtp: SmtpResource | None = None,
) -> dict[str, ConfigurableResource]:
    """The resources every asset, sensor and job uses; what is not given comes from the settings at run time."""
    return {
        "archive": ArchiveResource(root=_text(archive), quiet_period_s=quiet_period_s),
        "warehouse": WarehouseResource(path=_text(warehouse)),
        "reports": ReportsResource(path=_text(reports)),
        "smtp": smtp or SmtpResource(),
    }
