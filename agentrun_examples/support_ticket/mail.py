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


class NotSent(RuntimeError):
    """The server provably did not take the message (connection refused, a 4xx before or at DATA)."""


class Rejected(RuntimeError):
    """The server refused the message for good (5xx): sending again cannot help."""


class OutcomeUnknown(RuntimeError):
    """The connection broke after the message data went out: it may or may not have been taken."""


def send(config: settings.SMTPSettings, *, key: str, to: str, subject: str, body: str) -> dict[str, Any]:
    """Hand the message to the SMTP server; returns what the ledger stores as the result.

    The SMTP dialogue is split so a failure says whether the message could have been taken: anything up to
    and including the server's answer to ``DATA``'s content is attributable (:class:`NotSent`,
    :class:`Rejected`); a broken connection while the content is in flight is :class:`OutcomeUnknown`.
    """
    msg = build_message(config, key=key, to=to, subject=subject, body=body)
    try:
        client = smtplib.SMTP(config.host, config.port, timeout=config.timeout_seconds)
    except OSError as exc:
        raise NotSent(f"cannot connect to SMTP {config.host}:{config.port}: {exc}") from exc
    try:
        try:
            client.ehlo_or_helo_if_needed()
            code, reply = client.mail(config.sender)
            if code != 250:
                raise _refusal(code, reply, "MAIL FROM")
            code, reply = client.rcpt(to)
            if code not in (250, 251):
                raise _refusal(code, reply, f"RCPT TO {to}")
        except (smtplib.SMTPException, OSError) as exc:
            if isinstance(exc, NotSent | Rejected):
                raise
            raise NotSent(f"SMTP {config.host}:{config.port} before DATA: {exc}") from exc
        try:
            code, reply = client.data(msg.as_bytes())
        except smtplib.SMTPDataError as exc:  # the answer to DATA itself (not 354)
            raise _refusal(exc.smtp_code, exc.smtp_error, "DATA") from exc
        except (smtplib.SMTPException, OSError) as exc:
            raise OutcomeUnknown(f"SMTP {config.host}:{config.port} during DATA: {exc}") from exc
        # smtplib returns (not raises) the server's verdict on the message content: a 451 here means
        # "not taken, try again", a 5xx "refused".
        if code != 250:
            raise _refusal(code, reply, "end of DATA")
    finally:
        try:
            client.quit()
        except (smtplib.SMTPException, OSError):
            client.close()  # the message is already decided; a failed QUIT changes nothing
    return {"message_id": msg["Message-ID"], "to": to, "smtp": f"{config.host}:{config.port}"}


def _refusal(code: int, reply: bytes | str, stage: str) -> NotSent | Rejected:
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
    exc_type = NotSent if 400 <= code < 500 else Rejected
    return exc_type(f"SMTP refused at {stage}: {code} {text}")


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
