"""Sending the reply over SMTP, and finding a sent reply again by its Message-ID.

SMTP does not deduplicate: a message sent twice arrives twice. So the effect ledger's idempotency key
becomes the email's ``Message-ID`` and :func:`lookup` asks the mailbox (the dev SMTP sink's HTTP API, ``GET
{SUPPORT_SMTP_API}/messages?message_id=<id>``) whether a message with that id arrived. When a worker dies
between handing the message to the server and recording it, the next attempt calls the lookup instead of
sending again: found → recorded as sent, not found → safe to send, no lookup possible → the run stops for a
human.
"""

from __future__ import annotations

import email.message
import email.utils
import json
import smtplib
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from agentrun_examples.support_ticket import settings

# The domain part of our Message-IDs. Fixed (not the host name) so the id depends only on the key.
MESSAGE_ID_DOMAIN = "agentrun.invalid"


def message_id(key: str) -> str:
    """The RFC 5322 Message-ID for an idempotency key: ``<key@agentrun.invalid>``."""
    if not key or any(c in key for c in "<>@ \t\r\n"):
        raise ValueError(f"idempotency key {key!r} cannot be used in a Message-ID")
    return f"<{key}@{MESSAGE_ID_DOMAIN}>"


def build_message(
    config: settings.SMTPSettings, *, key: str, to: str, subject: str, body: str
) -> email.message.EmailMessage:
    msg = email.message.EmailMessage()
    msg["From"] = config.sender
    msg["To"] = to
    msg["Subject"] = subject
    msg["Message-ID"] = message_id(key)
    # Also as a plain header: some mailboxes rewrite Message-ID; this one is ours to search by.
    msg["X-Idempotency-Key"] = key
    msg.set_content(body)
    return msg


def send(config: settings.SMTPSettings, *, key: str, to: str, subject: str, body: str) -> dict[str, Any]:
    """Hand the message to the SMTP server. Returns what the ledger stores as the result."""
    msg = build_message(config, key=key, to=to, subject=subject, body=body)
    with smtplib.SMTP(config.host, config.port, timeout=config.timeout_seconds) as client:
        refused = client.send_message(msg)
    if refused:
        # Partial refusal: the server accepted the message for nobody we care about. Not retryable by us.
        raise smtplib.SMTPRecipientsRefused(refused)
    return {"message_id": msg["Message-ID"], "to": to, "smtp": f"{config.host}:{config.port}"}


class LookupUnavailable(RuntimeError):
    """No mailbox lookup is configured or it did not answer: the outcome stays unknown."""


def lookup(config: settings.SMTPSettings, key: str) -> dict[str, Any] | None:
    """Find the message sent with this key. ``None`` = it provably never arrived; raises when unknowable."""
    if not config.api_url:
        raise LookupUnavailable("SUPPORT_SMTP_API is not set: cannot look up sent messages")
    mid = message_id(key)
    url = f"{config.api_url.rstrip('/')}/messages?{urllib.parse.urlencode({'message_id': mid})}"
    try:
        with urllib.request.urlopen(url, timeout=config.timeout_seconds) as response:
            found = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise LookupUnavailable(f"mailbox lookup {url} failed: {exc}") from exc
    messages = found.get("messages", found) if isinstance(found, dict) else found
    if not isinstance(messages, list):
        raise LookupUnavailable(f"mailbox lookup {url} returned an unexpected body")
    if not messages:
        return None
    return {"message_id": mid, "found": len(messages)}
