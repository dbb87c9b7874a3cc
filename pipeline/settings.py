"""Every VERL_HEALTH_* setting, declared once: its variable, default and meaning.

A setting is read from the environment when it is used (a run or a sensor tick starts, a resource
is set up), never when a module is imported; docs/operations.md lists these (a test holds it to this list).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    """One environment variable with its default (as the environment would spell it) and its meaning."""

    name: str
    default: str
    meaning: str

    def value(self) -> str:
        """The variable's value now, or the default when it is unset or empty."""
        return os.environ.get(self.name) or self.default


SETTINGS = {s.name: s for s in (
    Setting("VERL_HEALTH_ARCHIVE", "data/archive",
            "archive root: one folder / `.tar.gz` / `.zip` / `.gz` per run; or `s3://bucket/prefix`"),
    Setting("VERL_HEALTH_WAREHOUSE", "data/warehouse",
            "warehouse folder; or `s3://bucket/prefix` (built locally, published, section 7)"),
    Setting("VERL_HEALTH_REPORTS", "reports", "where `runs/<run_id>.html` and `fleet/<date>.html` go"),
    Setting("VERL_HEALTH_QUIET_PERIOD_S", "600",
            "a run unchanged this long counts as finished (an end marker also does)"),
    Setting("VERL_HEALTH_MAX_RUN_GB", "64",
            "decompressed GiB ingest reads per run (the decompression-bomb guard; the rest is reported, not read)"),
    Setting("VERL_HEALTH_MAX_LINE_MB", "1",
            "a longer line is kept truncated to this many MiB (and counted): no table carries multi-MB texts"),
    Setting("VERL_HEALTH_NIGHTLY_CRON", "0 2 * * *", "the nightly schedule (read when the code location loads)"),
    Setting("VERL_HEALTH_TIMEZONE", "UTC", "its timezone (read when the code location loads)"),
    Setting("VERL_HEALTH_REFIT_DAYS", "7",
            "refit the anomaly model when it is at least this old; the `anomaly_model_fresh` check warns past it"),
    Setting("VERL_HEALTH_SMTP_HOST", "", "mail server; no host = no mail"),
    Setting("VERL_HEALTH_SMTP_PORT", "587", "its port"),
    Setting("VERL_HEALTH_SMTP_SECURITY", "starttls", "`starttls`, `ssl` or `none`"),
    Setting("VERL_HEALTH_SMTP_USER", "", "login, read when mail is sent, never stored in run config or logs"),
    Setting("VERL_HEALTH_SMTP_PASSWORD", "", "password, the same"),
    Setting("VERL_HEALTH_MAIL_FROM", "verl-health@localhost", "sender"),
    Setting("VERL_HEALTH_MAIL_TO", "", "comma-separated recipients"),
    Setting("VERL_HEALTH_SMTP_CA_FILE", "",
            "CA bundle to trust for a server with a private certificate (empty: the system's CAs)"),
    Setting("VERL_HEALTH_CACHE", "",
            "local mirror of an `s3://` archive / build folder of an `s3://` warehouse (empty: `$TMPDIR/verl-health-cache`)"),
    Setting("VERL_HEALTH_REPORTS_URL", "", "where the reports folder is served; the mails then link each report there"),
)}


def setting(name: str) -> str:
    """The current value of the declared setting `name`."""
    return SETTINGS[name].value()


def markdown() -> str:
    """The settings table of docs/operations.md, generated from SETTINGS."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [f"| `{s.name}` | {f'`{s.default}`' if s.default else '—'} | {s.meaning} |" for s in SETTINGS.values()]
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown())
