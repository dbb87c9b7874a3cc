"""A real SMTP server for the mail tests: aiosmtpd on 127.0.0.1, keeping every message it receives."""

from __future__ import annotations

import email
import email.policy
import time
from email.message import EmailMessage
from typing import NamedTuple


class Mail(NamedTuple):
    """One message as the server received it: envelope, raw bytes and the parsed message."""

    sender: str
    recipients: list[str]
    raw: bytes
    message: EmailMessage


class Inbox:
    """An aiosmtpd handler that keeps every message it receives."""

    def __init__(self):
        self.mails: list[Mail] = []

    async def handle_DATA(self, server, session, envelope):
        raw = envelope.original_content or envelope.content
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        self.mails.append(Mail(envelope.mail_from, list(envelope.rcpt_tos), raw, parsed))
        return "250 OK"

    def wait(self, count: int = 1, timeout_s: float = 10.0) -> list[Mail]:
        """The mails once `count` have arrived; AssertionError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while len(self.mails) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.mails) >= count, f"{len(self.mails)} of {count} mails arrived"
        return self.mails

