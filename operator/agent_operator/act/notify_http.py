"""One notification call, classified by what its outcome proves (``agent_operator.decide.notify_outcome``).
I/O.

Rules:

* **Checked, then marked, then sent.** ``prepare`` resolves the URL's host once and checks it against the
  operator's outbound policy (``agent_operator.act.outbound``) without connecting: a refused target or a name
  that
  does not resolve ends the call before the ledger row is marked ``issued`` (provably not sent). ``send`` then
  connects to the checked address and POSTs.
* **The phase says what a failure proves.** Failing to connect (refused, unreachable, no TCP or TLS handshake)
  sent nothing: not processed. Failing after the request went out (a timeout, a reset, a malformed answer)
  proves nothing: ambiguous. An answer is classified by its status (``notify_outcome.classify_status``); a
  redirect is not followed.
* **Nothing secret in what is said.** The headers (the token) are never logged; a URL is shown as scheme, host
  and port only (user info, path and query may carry a secret); a refused target's resolved address goes to
  the operator's log, never to the run.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import socket
import urllib.parse
from collections.abc import Mapping
from typing import Any

from agent_operator.act import outbound
from agent_operator.decide import notify_outcome as rules

logger = logging.getLogger(__name__)

USER_AGENT = "agentrun-operator"


@dataclasses.dataclass(frozen=True)
class Outcome:
    kind: str  # one of notify_outcome.KINDS: what the call proves (see that module)
    detail: str  # for the run's Event and the ledger row: never an address the policy refused
    status: int | None = None
    retry_after: float | None = None


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A target that passed the outbound policy: a connection pinned to its checked addresses, not open."""

    url: str
    connection: http.client.HTTPConnection
    target: str  # the request's path and query


def prepare(url: str, policy: outbound.Policy, timeout: float) -> Prepared | Outcome:
    """Resolve and check the target (no connection yet), or the outcome that ends this call before it."""
    try:
        conn, target = outbound.connection(url, policy, timeout)
    except outbound.Refused as exc:
        logger.warning("notification to %s refused by the outbound policy: %s", _where(url), exc.detail)
        return Outcome(rules.REFUSED, str(exc))
    except (socket.gaierror, UnicodeError) as exc:
        return Outcome(rules.NOT_PROCESSED, f"cannot reach {_where(url)}: the name does not resolve ({exc})")
    except ValueError as exc:
        return Outcome(rules.REJECTED, f"bad notify URL: {exc}")
    return Prepared(url, conn, target)


def send(prepared: Prepared, payload: Mapping[str, Any], headers: Mapping[str, str]) -> Outcome:
    """One POST over a prepared connection, classified by what it proves (``notify_outcome``). Nothing here
    logs the headers (they may carry the token)."""
    data = json.dumps(payload, sort_keys=True, default=str).encode()
    all_headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers}
    conn, where, timeout = prepared.connection, _where(prepared.url), prepared.connection.timeout
    try:
        try:
            conn.connect()
        except OSError as exc:
            # Refused, unreachable, no TCP handshake in time, TLS handshake failed: not a byte of the
            # request was sent.
            return Outcome(rules.NOT_PROCESSED, f"cannot reach {where}: {exc}")
        try:
            conn.request("POST", prepared.target, body=data, headers=all_headers)
            response = conn.getresponse()
        except TimeoutError:
            return Outcome(rules.AMBIGUOUS, f"no answer from {where} within {timeout:g}s")
        except (OSError, http.client.HTTPException) as exc:
            # The request may have been read and acted on before the connection broke.
            return Outcome(rules.AMBIGUOUS, f"{where}: {type(exc).__name__}: {exc}")
    finally:
        conn.close()  # the answer's body is not read: only its status says what happened
    code = response.status
    kind = rules.classify_status(code)
    if kind == rules.DELIVERED:
        detail = f"HTTP {code}"
    elif 300 <= code < 400:
        detail = f"HTTP {code} from the receiver: a redirect, not followed (set the final URL)"
    else:
        detail = f"HTTP {code} from the receiver"
    after = _retry_after(response.headers) if kind == rules.NOT_PROCESSED else None
    return Outcome(kind, detail, code, after)


def post(
    url: str, payload: Mapping[str, Any], headers: Mapping[str, str], timeout: float, policy: outbound.Policy
) -> Outcome:
    """``prepare`` then ``send``: one POST to ``url`` under ``policy``, classified."""
    prepared = prepare(url, policy, timeout)
    return prepared if isinstance(prepared, Outcome) else send(prepared, payload, headers)


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _where(url: str) -> str:
    """Scheme, host and port only: a webhook URL may carry a secret in its user info, path or query."""
    parsed = urllib.parse.urlsplit(url)
    return f"{parsed.scheme}://{parsed.netloc.rpartition('@')[2]}"
