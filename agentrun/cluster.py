"""The CLI's Kubernetes access: AgentRuns read and annotated through the API server as the current user
(KUBECONFIG), with the server's own refusal messages passed on verbatim.

Rule: no HTTP here. Requests go through ``agentrun_core.kube``; this module only turns its errors into the
``CliError`` the user reads (``translated``), with the messages the CLI has always printed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from agentrun import stamps
from agentrun_core import kube

GROUP, VERSION, PLURAL = kube.runs.GROUP, kube.runs.VERSION, kube.runs.PLURAL

T = TypeVar("T")


class CliError(Exception):
    """A message for the user; the CLI prints it and exits 1. ``status``: the API server's HTTP status when
    it answered, None when it was never reached."""

    def __init__(self, message: str, status: int | None = -1) -> None:
        super().__init__(message)
        self.status = status


# Answers that say "ask again later" rather than "no": the request may succeed unchanged.
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def dispatch(
    argv: list[str], verbs: Mapping[str, Callable[[list[str]], int]], usage: str, *, failed: int = 1
) -> int:
    """A command module's ``main``: run the verb ``argv[0]`` names with the rest; a missing or unknown verb
    prints ``usage`` (exit 2), a ``CliError`` its message (exit ``failed``)."""
    if not argv or argv[0] not in verbs:
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    try:
        return verbs[argv[0]](argv[1:])
    except CliError as exc:
        print(f"agentrun: {exc}", file=sys.stderr)
        return failed


def transient(exc: CliError) -> bool:
    """True when the same request may succeed later: the server unreachable, throttling, a 5xx. Pure."""
    return exc.status is None or exc.status in _TRANSIENT_STATUS


# kubectl's --as / --as-group for this invocation (agentrun.cli sets them around one command): every client
# ``connect`` builds then impersonates that identity. None: the kubeconfig's own identity.
_AS: tuple[str, tuple[str, ...]] | None = None


@contextlib.contextmanager
def impersonating(user: str | None, groups: tuple[str, ...] = ()) -> Iterator[None]:
    """Within: clients from ``connect`` act as ``user`` (with ``groups``); ``user`` None: as themselves."""
    global _AS
    before, _AS = _AS, ((user, tuple(groups)) if user else None)
    try:
        yield
    finally:
        _AS = before


def connect(kubeconfig: str | None = None, context: str | None = None) -> tuple[kube.ApiClient, str]:
    """An API client and the namespace of the current context (``default`` when it names none), impersonating
    the identity of ``--as`` / ``--as-group`` when given (``impersonating``)."""
    try:
        api, namespace = kube.api.user_client(kubeconfig, context)
    except kube.ConfigError as exc:
        raise CliError(f"cannot load kubeconfig: {exc}") from exc
    if _AS is not None:
        kube.api.impersonate(api, *_AS)
    return api, namespace


def message(exc: kube.KubeError, what: str, namespace: str = "", name: str | None = None) -> str:
    """What the user reads when ``what`` failed with ``exc``. Pure."""
    if exc.status is None:  # never reached the API server (refused, timed out, TLS)
        return f"cannot reach the API server: {exc.detail}"
    if exc.status == 404 and name is not None:
        return f'AgentRun "{name}" not found in namespace "{namespace}"'
    if exc.status == 403:
        return f"the API server refused to {what}: {exc.detail}"
    return f"{what} failed (HTTP {exc.status}): {exc.detail}"


@contextlib.contextmanager
def translated(what: str, namespace: str = "", name: str | None = None) -> Iterator[None]:
    """Turn the core client's errors raised inside into a CliError (``name``: a 404 means that AgentRun)."""
    try:
        yield
    except kube.KubeError as exc:
        raise CliError(message(exc, what, namespace, name), exc.status) from exc


def call(what: str, fn: Callable[[], T]) -> T:
    """``fn()`` (core client calls) with the API server's refusals and connection errors as a CliError."""
    with translated(what):
        return fn()


def get_run(api: kube.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    with translated(f"get agentrun {name}", namespace, name):
        return kube.runs.get(api, namespace, name)


def name_field(name: str | None) -> str | None:
    """The field selector that picks one run by name (None: every run)."""
    return f"metadata.name={name}" if name else None


def list_runs_at(
    api: kube.ApiClient, namespace: str | None, *, selector: str | None = None, name: str | None = None
) -> tuple[list[dict[str, Any]], str]:
    """The runs (all namespaces with None), sorted as ``list`` prints them, and the list's resourceVersion
    (where a watch continues from). ``selector``: a label selector; ``name``: only that run."""
    with translated("list agentruns", namespace or "", name):
        body = kube.runs.listing(api, namespace, label_selector=selector, field_selector=name_field(name))
    items = sorted(
        body.get("items") or [], key=lambda i: (i["metadata"].get("namespace", ""), i["metadata"]["name"])
    )
    return items, str((body.get("metadata") or {}).get("resourceVersion") or "")


def list_runs(api: kube.ApiClient, namespace: str | None) -> list[dict[str, Any]]:
    return list_runs_at(api, namespace)[0]


def identity(api: kube.ApiClient) -> stamps.Identity | None:
    """The caller as the API server authenticated it (SelfSubjectReview); None when it cannot say (RBAC
    without ``create selfsubjectreviews``, a server before 1.28): requests then go without stamps, which
    the MutatingAdmissionPolicies write anyway and a VAP-only install refuses, naming the annotation."""
    try:
        return stamps.of_review(kube.objects.whoami(api))
    except kube.KubeError as exc:
        if exc.status in (403, 404):
            return None
        raise CliError(message(exc, "ask the API server who you are"), exc.status) from exc


def annotate(api: kube.ApiClient, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
    """Merge-patch annotations (None removes one), with the stamps a decision or resolve needs (``stamps``).
    Admission policies may refuse: their message is shown."""
    if stamps.needs_identity(annotations):
        annotations = stamps.annotation_patch(annotations, identity(api))
    with translated(f"annotate agentrun {name}", namespace, name):
        kube.runs.patch(api, namespace, name, {"metadata": {"annotations": annotations}})


def create_run(api: kube.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create an AgentRun stamped with its creator (``stamps.created``); the API server's refusal is shown."""
    name = str((body.get("metadata") or {}).get("name") or "")
    stamped = stamps.created(body, identity(api))
    with translated(f"create agentrun {name}", namespace):
        return kube.runs.create(api, namespace, stamped)


def patch_run(
    api: kube.ApiClient, namespace: str, name: str, body: dict[str, Any], *, what: str
) -> dict[str, Any]:
    """Merge-patch an AgentRun (e.g. its spec; a retry gets its stamp). The API server's refusal (schema,
    CEL, policies) is shown."""
    if "retryGeneration" in (body.get("spec") or {}):
        body = stamps.run_patch(body, identity(api))
    with translated(what, namespace, name):
        return kube.runs.patch(api, namespace, name, body)
