"""Retry decisions for tool calls (pure: no sleeping, no I/O; randomness is passed in).

A failed provider call is classified into one of three kinds, because they call for different actions:

* ``refused`` — the provider provably did nothing (429/503 with or without ``Retry-After``, connection
  refused, a tool raising ``Retryable``): safe to call again after a backoff.
* ``ambiguous`` — the call may or may not have taken effect (timeout, connection reset, other 5xx): only a
  provider that dedupes by idempotency key may be called again blindly; otherwise the outcome must be
  reconciled (lookup hook) or handed to a human.
* ``permanent`` — retrying cannot help (4xx, ``Permanent``, any other exception type: a bug fails fast).
"""

from __future__ import annotations

import dataclasses
import email.utils
import http.client
import random
import socket
import time
import urllib.error
from typing import Literal

Kind = Literal["refused", "ambiguous", "permanent"]
Action = Literal["retry", "reconcile", "fail"]


class Retryable(Exception):
    """Raise from a tool: the provider refused and did nothing; retry (after ``retry_after`` if given)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Ambiguous(Exception):
    """Raise from a tool: the call may have taken effect (e.g. a timeout after sending)."""


class Permanent(Exception):
    """Raise from a tool: do not retry."""


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


@dataclasses.dataclass(frozen=True)
class Decision:
    action: Action
    delay: float = 0.0
    reason: str = ""


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


def classify(exc: BaseException) -> Failure:
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, Retryable):
        return Failure("refused", exc.retry_after, message=message)
    if isinstance(exc, Ambiguous):
        return Failure("ambiguous", message=message)
    if isinstance(exc, Permanent):
        return Failure("permanent", message=message)
    if isinstance(exc, urllib.error.HTTPError):
        retry_after = parse_retry_after(exc.headers.get("Retry-After") if exc.headers else None)
        if exc.code in (429, 503):
            return Failure("refused", retry_after, exc.code, message)
        if exc.code >= 500:
            return Failure("ambiguous", None, exc.code, message)
        return Failure("permanent", None, exc.code, message)
    if isinstance(exc, ConnectionRefusedError):
        return Failure("refused", message=message)
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, ConnectionRefusedError):
        return Failure("refused", message=message)
    if isinstance(
        exc,
        TimeoutError | socket.timeout | ConnectionError | http.client.HTTPException | urllib.error.URLError,
    ):
        return Failure("ambiguous", message=message)
    return Failure("permanent", message=message)


def backoff(policy: RetryPolicy, calls_made: int, rng: random.Random) -> float:
    """Delay before call number ``calls_made + 1`` (calls_made >= 1): capped exponential with jitter."""
    raw = policy.initial_backoff * policy.multiplier ** max(0, calls_made - 1)
    capped = min(policy.max_backoff, raw)
    return capped * (1.0 - policy.jitter * rng.random())


def decide(
    policy: RetryPolicy, calls_made: int, failure: Failure, *, dedupes_by_key: bool, rng: random.Random
) -> Decision:
    """What to do after the ``calls_made``-th call failed with ``failure``."""
    if failure.kind == "permanent":
        return Decision("fail", reason=f"non-retryable: {failure.message}")
    if failure.kind == "ambiguous" and not dedupes_by_key:
        # Calling again could do it twice: find out first (lookup hook) or stop for a human.
        return Decision("reconcile", reason=f"unknown outcome: {failure.message}")
    if calls_made >= policy.max_attempts:
        return Decision("fail", reason=f"gave up after {calls_made} calls: {failure.message}")
    if failure.retry_after is not None:
        if failure.retry_after > policy.max_retry_after:
            return Decision(
                "fail", reason=f"Retry-After {failure.retry_after:g}s exceeds {policy.max_retry_after:g}s"
            )
        # Honour the provider's wait exactly (a little jitter above it, never below).
        return Decision("retry", failure.retry_after * (1.0 + 0.1 * rng.random()), "Retry-After")
    return Decision("retry", backoff(policy, calls_made, rng), failure.message)
