"""The one error hierarchy of every Kubernetes API call in agentrun (worker, operator, CLI, dev pod runtime).

Rule: an HTTP status becomes exactly one class here, in ``translate``, and nowhere else. 404 is ``NotFound``,
409 ``Conflict`` (``AlreadyExists`` on create), 403 ``Forbidden``, 410 ``Gone`` (a watch's resourceVersion
expired); transport failures, timeouts, 429 and 5xx are ``Unavailable``; anything else a plain
``KubeError``. Callers decide what each means to them (ownership, a user message, a retry).
"""

from __future__ import annotations

import json


class KubeError(Exception):
    """A Kubernetes API call failed.

    ``status`` is the HTTP status (None for transport failures), ``reason`` the API's reason
    (``NotFound``, ``AlreadyExists``...), ``detail`` the API server's own words (a Status object's
    message, else the raw body or the HTTP reason): what a user is shown.
    """

    def __init__(
        self, message: str, status: int | None = None, reason: str | None = None, detail: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.detail = message if detail is None else detail


class NotFound(KubeError):
    """404: the object does not exist (or was deleted under us)."""


class Conflict(KubeError):
    """409: the compare-and-swap lost (``resourceVersion`` or a uid precondition is stale)."""


class AlreadyExists(Conflict):
    """409 on create: somebody created the object first."""


class Forbidden(KubeError):
    """403: RBAC or an admission policy refused; ``detail`` says why, in the API server's words."""


class Gone(KubeError):
    """410: the resourceVersion a watch started from is too old; list again."""


class Unavailable(KubeError):
    """The API server could not be reached or asked us to come back later (timeout, refused, 429, 5xx)."""


class ConfigError(KubeError):
    """The kubeconfig could not be loaded (missing file, unknown context): no request was made."""


def translate(status: int | None, reason: str | None, text: str | None) -> KubeError:
    """The error for an HTTP answer ``status`` with body ``text`` (a Status object, usually)."""
    detail, api_reason = text or "", reason
    shown = text or reason or ""
    try:
        payload = json.loads(text or "")
        detail = payload.get("message", detail)
        api_reason = payload.get("reason", reason)
        shown = str(payload.get("message") or reason)
    except (ValueError, AttributeError):
        pass
    message = f"HTTP {status} {api_reason}: {detail}"
    cls: type[KubeError] = KubeError
    if status == 404:
        cls = NotFound
    elif status == 409:
        cls = AlreadyExists if api_reason == "AlreadyExists" else Conflict
    elif status == 403:
        cls = Forbidden
    elif status == 410:
        cls = Gone
    elif status is None or status == 0 or status == 429 or status >= 500:
        cls = Unavailable
    return cls(message, status, api_reason, shown)
