"""Retry decisions for tool calls (pure: no sleeping, no I/O; randomness is passed in).

A failed provider call is classified into one of three kinds, because they call for different actions:

* ``refused`` — the provider provably did nothing (429/503 with or without ``Retry-After``, including an
  ``HTTPError`` from ``raise_for_status()`` carrying the response; a refused or timed-out *connect*; a tool
  raising ``Retryable``): safe to call again after a backoff, honouring ``Retry-After``.
* ``ambiguous`` — the call may or may not have taken effect (read/write timeout, connection dropped after
  sending, other 5xx): only a provider that dedupes by idempotency key may be called again blindly; otherwise
  the outcome must be reconciled (lookup hook) or handed to a human.
* ``permanent`` — the provider did not perform the call and retrying cannot help (other 4xx, a malformed URL,
  ``Permanent``, or an exception type the tool declared with ``@effects.tool(permanent=(...))``).

An exception nobody classified (a ``ValueError``, ``ssl.SSLError``, ``smtplib.SMTPServerDisconnected``, any
other ``OSError``) is ``ambiguous``: the tool may have acted before raising it, so it is never taken as proof
that nothing happened. A tool that knows better says so: raise ``Permanent`` / ``Retryable``, or declare the
type permanent. ``refused`` and ``permanent`` failures prove nothing was performed
(``Failure.proves_not_performed``); only such a failure may record an effect ``failed`` in a way that a
retry re-keys (docs/worker.md, "Retries and outcomes").

requests, httpx, urllib3, urllib and aiohttp exceptions are recognised by class name and module, without
importing those libraries.
"""

from __future__ import annotations

import dataclasses
import email.utils
import http.client
import random
import socket
import time
import urllib.error
from typing import Any

from agentrun_core import backoff as backoff_math
from agentrun_core import outcomes

Kind = outcomes.Kind
Action = outcomes.Action
Decision = outcomes.Decision  # the ledger machine's input (agentrun_core.ledger), shared with notifications


class Retryable(Exception):
    """Raise from a tool: the provider refused and did nothing; retry (after ``retry_after`` if given)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Ambiguous(Exception):
    """Raise from a tool: the call may have taken effect (e.g. a timeout after sending)."""


class Permanent(Exception):
    """Raise from a tool: the provider did not perform the call and never will; do not retry."""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Per-tool retry policy. Times in seconds."""

    max_attempts: int = 5  # provider calls in total, including the first
    initial_backoff: float = 0.5  # delay before the 2nd call
    multiplier: float = 2.0
    max_backoff: float = 30.0  # cap of the computed (exponential) delay
    jitter: float = 0.5  # the delay is drawn uniformly from [delay*(1-jitter), delay]
    max_retry_after: float = 300.0  # a provider's Retry-After longer than this fails the effect instead

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter is a fraction in [0, 1]")


NO_RETRY = RetryPolicy(max_attempts=1)


@dataclasses.dataclass(frozen=True)
class Failure:
    kind: Kind
    retry_after: float | None = None
    status: int | None = None
    message: str = ""

    @property
    def proves_not_performed(self) -> bool:
        """The provider did nothing on this call (refused it, or it never left)."""
        return self.kind != "ambiguous"


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date. None when absent or unparseable."""
    if value is None:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


# HTTP client libraries are recognised by (top-level module, class name) along the exception's MRO, never
# imported: a graph that uses httpx must not pay for importing requests and aiohttp, and the worker image
# need not ship them. Names checked against requests 2.3x, httpx 0.2x, urllib3 2.x and aiohttp 3.x.
_CONNECT_PHASE = {  # the request never left: nothing can have happened at the provider
    ("requests", "ConnectTimeout"),
    ("httpx", "ConnectError"),
    ("httpx", "ConnectTimeout"),
    ("httpx", "PoolTimeout"),
    ("urllib3", "NewConnectionError"),  # includes NameResolutionError
    ("urllib3", "ConnectTimeoutError"),
    ("aiohttp", "ClientConnectorError"),
    ("aiohttp", "ConnectionTimeoutError"),
    ("builtins", "ConnectionRefusedError"),
    ("socket", "gaierror"),
}
_NOT_SENT_BUG = {  # the request could not even be built: retrying cannot help
    ("requests", "InvalidURL"),
    ("requests", "MissingSchema"),
    ("requests", "InvalidSchema"),
    ("requests", "InvalidHeader"),
    ("httpx", "UnsupportedProtocol"),
    ("httpx", "InvalidURL"),
    ("urllib3", "LocationParseError"),
    ("aiohttp", "InvalidURL"),
}
_TRANSPORT = {  # anything else from the client's transport: it may have been sent, the outcome is unknown
    ("requests", "RequestException"),
    ("httpx", "TransportError"),
    ("urllib3", "HTTPError"),
    ("aiohttp", "ClientConnectionError"),
    ("aiohttp", "ClientPayloadError"),
}


def _names(exc: BaseException) -> set[tuple[str, str]]:
    return {(cls.__module__.split(".", 1)[0], cls.__name__) for cls in type(exc).__mro__}


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what it wraps: requests puts urllib3's MaxRetryError in ``args``, whose
    ``reason`` is the connect/read error; urllib's URLError has ``reason``; plus __cause__/__context__."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < 12:
        cur = todo.pop(0)
        if any(cur is s for s in seen):
            continue
        seen.append(cur)
        nested = [cur.__cause__, cur.__context__, getattr(cur, "reason", None), *cur.args]
        todo += [n for n in nested if isinstance(n, BaseException)]
    return seen


def _response(exc: BaseException) -> tuple[int, Any] | None:
    """(status, headers) of an HTTP error response carried by the exception, if any."""
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code, exc.headers
    resp = getattr(exc, "response", None)  # requests.HTTPError, httpx.HTTPStatusError
    code = getattr(resp, "status_code", None)
    if isinstance(code, int):
        return code, getattr(resp, "headers", None)
    status = getattr(exc, "status", None)  # aiohttp.ClientResponseError
    if ("aiohttp", "ClientResponseError") in _names(exc) and isinstance(status, int):
        return status, getattr(exc, "headers", None)
    return None


def _by_status(code: int, headers: Any, message: str) -> Failure:
    """What the status proves: one table with the operator's notifications (``agentrun_core.outcomes``)."""
    kind = outcomes.classify_status(code) or "permanent"  # a 2xx raised as an error: the tool refused it
    raw = headers.get("Retry-After") if headers is not None and kind == "refused" else None
    return Failure(kind, parse_retry_after(raw), code, message)


def classify(exc: BaseException, *, permanent: tuple[type[BaseException], ...] = ()) -> Failure:
    """Refused (nothing happened: retry), ambiguous (may have happened: reconcile) or permanent (nothing
    happened, never will). ``permanent``: the exception types the tool declared permanent."""
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, Retryable):
        return Failure("refused", exc.retry_after, message=message)
    if isinstance(exc, Ambiguous):
        return Failure("ambiguous", message=message)
    if isinstance(exc, Permanent) or (permanent and isinstance(exc, permanent)):
        return Failure("permanent", message=message)
    response = _response(exc)
    if response is not None:
        return _by_status(response[0], response[1], message)
    names = _names(exc)
    if names & _NOT_SENT_BUG:
        return Failure("permanent", message=message)
    chain = _chain(exc)
    # A read timeout wrapping an earlier refused connection is still a read timeout: only a connect-phase
    # error at the top, or under a generic connection error, proves nothing was sent.
    if names & _CONNECT_PHASE or (
        not any("Read" in n or "Protocol" in n or "Disconnected" in n for _, n in names)
        and any(_names(c) & _CONNECT_PHASE for c in chain[1:])
    ):
        return Failure("refused", message=message)
    if names & _TRANSPORT or isinstance(
        exc,
        TimeoutError | socket.timeout | ConnectionError | http.client.HTTPException | urllib.error.URLError,
    ):
        return Failure("ambiguous", message=message)
    # Nobody knows what this exception means: the tool may have acted before raising it.
    return Failure("ambiguous", message=f"{message} (unclassified: the outcome is unknown)")


def backoff(policy: RetryPolicy, calls_made: int, rng: random.Random) -> float:
    """Delay before call number ``calls_made + 1`` (calls_made >= 1): capped exponential with jitter."""
    capped = backoff_math.capped(calls_made, initial=policy.initial_backoff, cap=policy.max_backoff,
                                 multiplier=policy.multiplier)
    return capped * (1.0 - policy.jitter * rng.random())


def decide(
    policy: RetryPolicy, calls_made: int, failure: Failure, *, dedupes_by_key: bool, rng: random.Random
) -> Decision:
    """What to do after the ``calls_made``-th call failed with ``failure`` (``agentrun_core.outcomes``: the
    table notifications use too); the delay is this policy's backoff, or the provider's Retry-After."""
    retrying = failure.kind == "refused" or (failure.kind == "ambiguous" and dedupes_by_key)
    delay = 0.0
    if retrying and calls_made < policy.max_attempts:
        if failure.retry_after is None:
            delay = backoff(policy, calls_made, rng)
        elif failure.retry_after > policy.max_retry_after:
            return Decision(
                "fail", reason=f"Retry-After {failure.retry_after:g}s exceeds {policy.max_retry_after:g}s"
            )
        else:  # honour the provider's wait exactly (a little jitter above it, never below)
            delay = failure.retry_after * (1.0 + 0.1 * rng.random())
    decision = outcomes.decide(
        failure.kind,
        calls_made,
        max_attempts=policy.max_attempts,
        dedupes_by_key=dedupes_by_key,
        delay=delay,
        message=failure.message,
    )
    if decision.action == "retry" and failure.retry_after is not None:
        return dataclasses.replace(decision, reason="Retry-After")
    return decision
