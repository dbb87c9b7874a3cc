"""The fleet report as a mail: HTML with inline (CID) charts, its plain-text rendering and the report attached."""

from __future__ import annotations

import base64
import logging
import re
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from email.message import EmailMessage
from email.utils import formatdate, getaddresses, make_msgid
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from pipeline.report.render import text_path

log = logging.getLogger(__name__)

DATA_URI_RE = re.compile(r'src="data:image/(png|jpeg|gif);base64,([A-Za-z0-9+/=\s]+)"')
# the browser-only parts of a report (the runs table's filter box and script): a mail stays static
INTERACTIVE_RE = re.compile(r'<(script|p) class="interactive">.*?</\1>', re.S)
HREF_RE = re.compile(r'href="((?:\.\./|\./)?[A-Za-z0-9._/-]+\.html(?:#[A-Za-z0-9_-]*)?)"')


def mail_html(page: str, report_url: str | None = None) -> tuple[str, list[tuple[str, str, bytes]]]:
    """The report's HTML for a mail: no script or filter box, each embedded chart image referenced by a CID
    (returned with its subtype and bytes), links absolute against `report_url` when it is given."""
    images: list[tuple[str, str, bytes]] = []

    def to_cid(match: re.Match) -> str:
        cid = make_msgid(domain="verl-health.local")
        images.append((cid, match.group(1), base64.b64decode(match.group(2))))
        return f'src="cid:{cid[1:-1]}"'

    html = DATA_URI_RE.sub(to_cid, INTERACTIVE_RE.sub("", page))
    if report_url:
        html = HREF_RE.sub(lambda m: f'href="{urljoin(report_url, m.group(1))}"', html)
    return html, images


def build_fleet_mail(
    report_path: str | Path,
    *,
    sender: str,
    recipients: Sequence[str],
    subject: str,
    report_url: str | None = None,
    mail_page: str | None = None,
) -> EmailMessage:
    """A multipart mail of the report: its text rendering (the .txt written beside it from the same data),
    its HTML (charts as CID inline images, no script) and the report attached.

    `mail_page` is the HTML to mail in place of the page: the page rendered with PNG charts
    (render.fleet_mail_page), since the page's SVG charts show in no common mail client.
    `report_url`, when given, is where the report is published; relative links are made absolute
    against it so they work from a mail client.
    """
    report_path = Path(report_path)
    page = report_path.read_text(encoding="utf-8")
    html, images = mail_html(page if mail_page is None else mail_page, report_url)
    msg = EmailMessage()
    msg["Subject"] = subject
    msg["From"] = sender
    msg["To"] = ", ".join(recipients)
    msg["Date"] = formatdate(localtime=True)
    msg["Message-ID"] = make_msgid(domain="verl-health.local")
    text = text_path(report_path).read_text(encoding="utf-8")
    msg.set_content(text + f"\nThe full report is attached ({report_path.name}).\n")
    msg.add_alternative(html, subtype="html")
    html_part = msg.get_payload()[1]
    for i, (cid, subtype, data) in enumerate(images):
        html_part.add_related(data, maintype="image", subtype=subtype, cid=cid, filename=f"chart-{i + 1}.{subtype}",
                              disposition="inline")
    # Bytes, so the attached report arrives byte-identical (base64) rather than re-wrapped as text;
    # the attachment is the browser copy, filter and sorting included
    msg.add_attachment(page.encode("utf-8"), maintype="text", subtype="html", filename=report_path.name)
    return msg


def _setting(settings: Mapping[str, Any] | Any, key: str, default: Any = None) -> Any:
    value = settings.get(key, default) if isinstance(settings, Mapping) else getattr(settings, key, default)
    return default if value is None else value


def send_mail(message: EmailMessage, smtp_settings: Mapping[str, Any] | Any) -> dict[str, tuple[int, bytes]]:
    """Send `message` over SMTP (security 'starttls', 'ssl' or 'none'; login when a user is set).

    `smtp_settings` is a mapping or object with host, port, security, user, password, timeout and,
    optionally, ca_file (a CA bundle to trust, for a private server). Returns the refused recipients.
    """
    host = _setting(smtp_settings, "host")
    if not host:
        raise ValueError("smtp_settings has no host")
    port = int(_setting(smtp_settings, "port", 587))
    security = str(_setting(smtp_settings, "security", "starttls")).lower()
    timeout = float(_setting(smtp_settings, "timeout", 30.0))
    user = _setting(smtp_settings, "user")
    password = _setting(smtp_settings, "password", "")
    if security not in ("starttls", "ssl", "none"):
        raise ValueError(f"security must be 'starttls', 'ssl' or 'none', not {security!r}")
    context = ssl.create_default_context(cafile=_setting(smtp_settings, "ca_file"))
    if security == "ssl":
        client: smtplib.SMTP = smtplib.SMTP_SSL(host, port, timeout=timeout, context=context)
    else:
        client = smtplib.SMTP(host, port, timeout=timeout)
    with client:
        client.ehlo()
        if security == "starttls":
            client.starttls(context=context)
            client.ehlo()
        if user:
            client.login(user, password)
        refused = client.send_message(message)
    log.info("mailed %r to %d recipient(s) via %s:%d (%s)", message["Subject"],
             len(getaddresses(message.get_all("To", []))), host, port, security)
    return refused
