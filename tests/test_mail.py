"""The fleet report mailed through a real local SMTP server (aiosmtpd) with STARTTLS and login."""

from __future__ import annotations

import datetime as dt
import email
import email.policy
import ipaddress
import logging
import re
import smtplib
import ssl

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from dagster import EnvVar, materialize
from mail_support import Inbox
from operate_support import free_port
from report_fixtures import build_warehouse, every_class_specs, parse_html

from pipeline.defs.assets.report import fleet_report_mail
from pipeline.defs.definitions import smtp_from_env
from pipeline.defs.resources import ReportsResource, SmtpResource, WarehouseResource
from pipeline.report import build_fleet_mail, render_fleet_report, send_mail
from pipeline.report.render import fleet_mail_page

USER, PASSWORD = "reporter", "s3cret-Pa55"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1; the client trusts it through `ca_file`."""
    folder = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


class LoginInbox(Inbox):
    """An inbox that also checks the login and records each successful one."""

    def __init__(self):
        super().__init__()
        self.logins: list[str] = []

    def authenticate(self, server, session, envelope, mechanism, auth_data):
        ok = isinstance(auth_data, LoginPassword) and auth_data.login == USER.encode() \
            and auth_data.password == PASSWORD.encode()
        if ok:
            self.logins.append(mechanism)
        return AuthResult(success=ok, handled=False)


def _server_context(certificate) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*certificate)
    return ctx


@pytest.fixture()
def starttls_server(certificate):
    inbox = LoginInbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port(), tls_context=_server_context(certificate),
                            require_starttls=True, auth_required=True, authenticator=inbox.authenticate)
    controller.start()
    try:
        yield inbox, controller.port
    finally:
        controller.stop()


DAY = dt.date(2026, 11, 28)


@pytest.fixture(scope="module")
def fleet_warehouse(tmp_path_factory):
    return build_warehouse(tmp_path_factory.mktemp("mailfleet") / "wh", every_class_specs())


@pytest.fixture(scope="module")
def fleet_report(fleet_warehouse):
    return render_fleet_report(fleet_warehouse, fleet_warehouse.parent / "reports", DAY)


@pytest.fixture(scope="module")
def mail_page(fleet_warehouse):
    return fleet_mail_page(fleet_warehouse, DAY)


def settings(port, certificate, **overrides):
    base = {"host": "127.0.0.1", "port": port, "security": "starttls", "user": USER, "password": PASSWORD,
            "timeout": 10, "ca_file": str(certificate[0])}
    base.update(overrides)
    return base


def test_fleet_mail_arrives_with_parts_inline_images_and_attachment(starttls_server, certificate, fleet_report,
                                                                     mail_page, caplog):
    inbox, port = starttls_server
    message = build_fleet_mail(fleet_report, sender="verl-health@example.org",
                               recipients=["a@example.org", "b@example.org"], subject="verl-health fleet 2026-11-28",
                               mail_page=mail_page)
    with caplog.at_level(logging.DEBUG, logger="pipeline"):
        refused = send_mail(message, settings(port, certificate))
    assert refused == {}
    assert inbox.logins, "the client logged in"
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("pipeline"))
    assert "mailed" in ours and PASSWORD not in ours

    [(mail_from, rcpts, raw, _)] = inbox.mails
    assert mail_from == "verl-health@example.org"
    assert rcpts == ["a@example.org", "b@example.org"]
    assert PASSWORD.encode() not in raw
    got = email.message_from_bytes(raw, policy=email.policy.default)
    assert got["Subject"] == "verl-health fleet 2026-11-28"
    assert got.get_content_type() == "multipart/mixed"
    alternative, attachment = got.get_payload()
    assert alternative.get_content_type() == "multipart/alternative"
    plain, related = alternative.get_payload()
    assert plain.get_content_type() == "text/plain"
    assert "need attention" in plain.get_content() and "Needs attention" in plain.get_content()
    assert related.get_content_type() == "multipart/related"
    html_part, *images = related.get_payload()
    assert html_part.get_content_type() == "text/html"
    doc = parse_html(html_part.get_content())
    cids = [img.attrs["src"] for img in doc.find_all("img")]
    assert len(cids) == 3 and all(src.startswith("cid:") for src in cids)
    inline = {f"cid:{p['Content-ID'].strip('<>')}": p for p in images}
    assert set(cids) == set(inline)
    for part in inline.values():
        assert part.get_content_type() == "image/png"
        assert part.get_content_disposition() == "inline"
        assert part.get_content()[:8] == b"\x89PNG\r\n\x1a\n"
    assert attachment.get_content_disposition() == "attachment"
    assert attachment.get_filename() == fleet_report.name
    assert attachment.get_payload(decode=True) == fleet_report.read_bytes()
    assert not parse_html(html_part.get_content()).find_all("script")


def test_text_part_carries_the_report_tables(fleet_report):
    """A reader without HTML sees every run with its step and outcome, and the counts by class."""
    message = build_fleet_mail(fleet_report, sender="s@example.org", recipients=["r@example.org"], subject="x")
    rows = [[cell.strip() for cell in line.split("|")[1:]]
            for line in message.get_body(("plain",)).get_content().splitlines() if line.startswith("| ")]
    by_run = {row[0]: row for row in rows}
    for spec in every_class_specs():
        expected = spec.n_steps if spec.failure_class == "completed" else 2 * spec.n_steps
        assert by_run[spec.run_id][2] == f"{spec.n_steps} / {expected}", spec.run_id
    counts = {row[0]: row[1] for row in rows if len(row) == 4}
    assert (counts["Completed"], counts["Python exception"], counts["CUDA OOM"], counts["Hung"]) == ("2", "2", "1", "1")


def test_text_part_is_rendered_from_the_data_not_read_off_the_html(fleet_report, tmp_path):
    """The text part is the report's own text rendering: the same week over week (6 runs ended in the last
    week of every_class_specs, 3 the week before) with an HTML page that says nothing."""
    bare = tmp_path / "fleet" / fleet_report.name
    bare.parent.mkdir()
    bare.write_text("<html><body></body></html>", encoding="utf-8")
    bare.with_suffix(".txt").write_bytes(fleet_report.with_suffix(".txt").read_bytes())
    text = build_fleet_mail(bare, sender="s@example.org", recipients=["r@example.org"],
                            subject="x").get_body(("plain",)).get_content()
    assert "Runs ended: 6 (before: 3)" in text
    assert "| run-cuda-oom | CUDA OOM | 50 / 100 |" in text


def test_links_become_absolute_when_the_report_is_published(fleet_report):
    message = build_fleet_mail(fleet_report, sender="s@example.org", recipients=["r@example.org"], subject="x",
                               report_url="https://reports.example.org/fleet/latest.html")
    html = message.get_body(("html",)).get_content()
    hrefs = [a.attrs["href"] for a in parse_html(html).find_all("a") if not a.attrs["href"].startswith("#")]
    assert hrefs and all(h.startswith("https://reports.example.org/") for h in hrefs)
    assert "https://reports.example.org/runs/run-cuda-oom.html" in hrefs


def test_wrong_password_is_refused_and_not_logged(starttls_server, certificate, fleet_report, caplog):
    _, port = starttls_server
    message = build_fleet_mail(fleet_report, sender="s@example.org", recipients=["r@example.org"], subject="x")
    with caplog.at_level(logging.DEBUG, logger="pipeline"), pytest.raises(smtplib.SMTPAuthenticationError) as err:
        send_mail(message, settings(port, certificate, password="wrong-Secret-99"))
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("pipeline"))
    assert "wrong-Secret-99" not in ours and "wrong-Secret-99" not in str(err.value)


def test_untrusted_certificate_is_refused(starttls_server, certificate, fleet_report):
    _, port = starttls_server
    message = build_fleet_mail(fleet_report, sender="s@example.org", recipients=["r@example.org"], subject="x")
    with pytest.raises(ssl.SSLCertVerificationError):
        send_mail(message, settings(port, certificate, ca_file=None))


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_implicit_ssl(certificate, fleet_report):
    inbox = LoginInbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port(), ssl_context=_server_context(certificate),
                            auth_required=True, authenticator=inbox.authenticate,
                            # aiosmtpd only counts STARTTLS as TLS; this whole connection is TLS.
                            auth_require_tls=False)
    controller.start()
    try:
        message = build_fleet_mail(fleet_report, sender="s@example.org", recipients=["r@example.org"], subject="ssl")
        send_mail(message, settings(controller.port, certificate, security="ssl"))
    finally:
        controller.stop()
    assert len(inbox.mails) == 1 and inbox.logins


def test_bad_security_setting_is_refused(fleet_report):
    message = build_fleet_mail(fleet_report, sender="s@example.org", recipients=["r@example.org"], subject="x")
    with pytest.raises(ValueError, match="security"):
        send_mail(message, {"host": "127.0.0.1", "port": 1, "security": "tls-please"})


def test_fleet_report_mail_asset_sends_through_the_smtp_resource(starttls_server, certificate, fleet_report,
                                                                 monkeypatch, caplog):
    inbox, port = starttls_server
    before = len(inbox.mails)
    monkeypatch.setenv("TEST_SMTP_USER", USER)
    monkeypatch.setenv("TEST_SMTP_PASSWORD", PASSWORD)
    smtp = SmtpResource(host="127.0.0.1", port=port, security="starttls", user=EnvVar("TEST_SMTP_USER"),
                        password=EnvVar("TEST_SMTP_PASSWORD"), sender="verl-health@example.org",
                        recipients=["team@example.org"], ca_file=str(certificate[0]), timeout_s=10)
    reports = fleet_report.parent.parent
    (reports / "fleet" / "latest.html").write_bytes(fleet_report.read_bytes())
    with caplog.at_level(logging.DEBUG):
        result = materialize([fleet_report_mail], resources={"reports": ReportsResource(path=str(reports)),
                                                             "warehouse": WarehouseResource(path=str(reports.parent / "wh")),
                                                             "smtp": smtp})
    assert result.success
    [event] = result.get_asset_materialization_events()
    assert event.materialization.metadata["sent"].value is True
    [(mail_from, rcpts, raw, _)] = inbox.mails[before:]
    assert (mail_from, rcpts) == ("verl-health@example.org", ["team@example.org"])
    got = email.message_from_bytes(raw, policy=email.policy.default)
    assert got["Subject"].startswith("verl-health fleet report ")
    assert PASSWORD not in caplog.text and PASSWORD.encode() not in raw
    assert len(parse_html(got.get_body(("html",)).get_content()).find_all("img")) == 3
    assert [p.get_content_type() for p in got.walk() if p.get_content_disposition() == "inline"] == ["image/png"] * 3
    # mailed on its own days after the report (no day tag: a re-send), the mail shows the report it attaches
    html, attached = _html_and_attached(got)
    assert _heading(html) == _heading(attached)


def _heading(html: str) -> tuple[str, str]:
    """A fleet page's title and its line of run counts and days, the time it was generated aside."""
    page = parse_html(html)
    return page.find("h1").text(), re.sub(r"\s*·\s*generated.*", "", page.find("span", cls="meta").text(), flags=re.S)


def test_the_page_draws_its_charts_as_svg_and_the_mail_as_png(fleet_report, mail_page):
    """The page's charts are inline SVG; mail clients show none, so the mail's page is the same but for its
    charts, drawn as PNG images."""
    page = fleet_report.read_text(encoding="utf-8")
    assert not parse_html(page).find_all("img")
    charts = {"failures", "weekly", "shares"}
    assert {d.attrs["data-chart"] for d in parse_html(page).find_all("div", cls="vhc")} == charts
    assert {i.attrs["data-chart"] for i in parse_html(mail_page).find_all("img")} == charts
    assert "<svg" not in mail_page

    def bare(html):
        return re.sub(r"<figure.*?</figure>|\d{4}-\d\d-\d\d \d\d:\d\d [A-Z]+", "", html, flags=re.S)

    assert bare(page) == bare(mail_page)


def test_smtp_settings_from_the_environment(starttls_server, certificate, fleet_report, monkeypatch):
    """smtp_from_env reads host, port, STARTTLS, login, private CA, sender and recipients from VERL_HEALTH_*;
    the login stays an EnvVar in the resource's config and is resolved only when the mail asset runs."""
    inbox, port = starttls_server
    for name, value in {"SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port), "SMTP_SECURITY": "starttls",
                        "SMTP_USER": USER, "SMTP_PASSWORD": PASSWORD, "SMTP_CA_FILE": str(certificate[0]),
                        "MAIL_FROM": "nightly@example.org", "MAIL_TO": "a@example.org,b@example.org"}.items():
        monkeypatch.setenv(f"VERL_HEALTH_{name}", value)
    smtp = smtp_from_env()
    assert (smtp.user, smtp.password) == (EnvVar("VERL_HEALTH_SMTP_USER"), EnvVar("VERL_HEALTH_SMTP_PASSWORD"))
    reports = fleet_report.parent.parent
    (reports / "fleet" / "latest.html").write_bytes(fleet_report.read_bytes())
    result = materialize([fleet_report_mail], resources={"reports": ReportsResource(path=str(reports)), "smtp": smtp,
                                                         "warehouse": WarehouseResource(path=str(reports.parent / "wh"))})
    assert result.success
    [(mail_from, rcpts, raw, _)] = inbox.mails
    assert (mail_from, rcpts) == ("nightly@example.org", ["a@example.org", "b@example.org"])
    assert inbox.logins and PASSWORD.encode() not in raw


def test_mailed_fleet_report_carries_no_script(tmp_path):
    """The browser copy of the fleet report sorts and filters with a small script; the mail drops it."""
    from datetime import date

    from report_fixtures import build_warehouse, every_class_specs

    from pipeline.report import render_fleet_report
    from pipeline.report.mail import build_fleet_mail

    warehouse = build_warehouse(tmp_path / "wh", every_class_specs())
    path = render_fleet_report(warehouse, tmp_path / "rep", date(2026, 11, 28))
    assert "<script" in path.read_text()
    msg = build_fleet_mail(path, sender="a@test.local", recipients=["b@test.local"], subject="fleet")
    body = msg.get_body(("html",)).get_content()
    assert "<script" not in body and 'id="run-filter"' not in body
    assert "run-filter" not in msg.get_body(("plain",)).get_content()


def _mailed(inbox, before: int) -> tuple[str, str]:
    """The HTML part and the attached report of the one mail the inbox got since `before`."""
    [(_, _, raw, _)] = inbox.mails[before:]
    return _html_and_attached(email.message_from_bytes(raw, policy=email.policy.default))


def _html_and_attached(got) -> tuple[str, str]:
    """A mail's HTML part and its one attached report."""
    [attached] = [p.get_payload(decode=True).decode("utf-8") for p in got.walk()
                  if p.get_content_disposition() == "attachment"]
    return got.get_body(("html",)).get_content(), attached


def test_a_run_that_mails_the_report_shows_the_page_it_attaches_though_a_run_came_in_between(
        starttls_server, certificate, fleet_warehouse, tmp_path, monkeypatch):
    """A Dagster run tagged to mail renders the report and its mail page together; a run written into the
    warehouse before the mail step is in neither: the mail lists the report's runs, as its attachment does,
    not one more. A run that does not mail leaves no mail page, and removes one an earlier run left."""
    import shutil

    from report_fixtures import RunSpec, write_run

    from pipeline.defs.assets.report import MAIL_TAG, fleet_report
    from pipeline.report.render import mail_page_path

    inbox, port = starttls_server
    wh = tmp_path / "wh"
    shutil.copytree(fleet_warehouse, wh)
    reports = tmp_path / "reports"
    smtp = SmtpResource(host="127.0.0.1", port=port, security="starttls", user=USER, password=PASSWORD,
                        sender="verl-health@example.org", recipients=["team@example.org"],
                        ca_file=str(certificate[0]), timeout_s=10)
    resources = {"reports": ReportsResource(path=str(reports)), "warehouse": WarehouseResource(path=str(wh)),
                 "smtp": smtp}
    tags = {"verl-health/day": DAY.isoformat(), MAIL_TAG: "true"}
    assert materialize([fleet_report], resources=resources, tags=tags).success
    assert mail_page_path(reports, DAY).is_file()
    write_run(wh, RunSpec(run_id="run-arrived-late", ended_at=dt.datetime(2026, 11, 28, 9, 0), seed=3))
    before = len(inbox.mails)
    assert materialize([fleet_report_mail], resources=resources, tags=tags).success
    html, attached = _mailed(inbox, before)
    assert _heading(html) == _heading(attached)
    n_runs = len(every_class_specs())  # the runs the module's warehouse was built from
    assert f"{n_runs} runs" in _heading(attached)[1]
    assert "run-arrived-late" not in html and "run-arrived-late" not in attached
    # the same report rendered by a run that does not mail it: its mail page is gone, a mail renders one now
    assert materialize([fleet_report], resources=resources, tags={"verl-health/day": DAY.isoformat()}).success
    assert not mail_page_path(reports, DAY).exists()
    before = len(inbox.mails)
    assert materialize([fleet_report_mail], resources=resources, tags=tags).success
    html, attached = _mailed(inbox, before)
    assert f"{n_runs + 1} runs" in _heading(attached)[1] and _heading(html) == _heading(attached)


def test_a_report_whose_mail_page_cannot_be_written_leaves_no_older_mail_page(fleet_warehouse, tmp_path, monkeypatch):
    """The day's report is rendered again for a mail, and writing its mail page fails (a full disk): the new
    report stands, and the mail page an earlier rendering left is gone, so a mail renders its page from the
    warehouse instead of showing the earlier data beside the new attachment."""
    from pipeline.report import render

    reports = tmp_path / "reports"
    render_fleet_report(fleet_warehouse, reports, DAY, mail_page=True)
    earlier = render.mail_page_path(reports, DAY)
    earlier.write_text("the earlier rendering's mail page", encoding="utf-8")
    write = render._write

    def disk_full_for_the_mail_page(path, text):
        if path == earlier:
            raise OSError(28, "No space left on device")
        return write(path, text)

    monkeypatch.setattr(render, "_write", disk_full_for_the_mail_page)
    with pytest.raises(OSError):
        render_fleet_report(fleet_warehouse, reports, DAY, mail_page=True)
    assert (reports / "fleet" / f"{DAY.isoformat()}.html").is_file()
    assert not earlier.exists()
