"""The CLI's Kubernetes access: AgentRuns read and annotated through the API server as the current user
(KUBECONFIG), with the server's own refusal messages passed on verbatim."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client, config
from kubernetes.client import exceptions as kexc

GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentruns"


class CliError(Exception):
    """A message for the user; the CLI prints it and exits 1."""


def connect(kubeconfig: str | None = None, context: str | None = None) -> tuple[client.ApiClient, str]:
    """An API client and the namespace of the current context (``default`` when it names none)."""
    try:
        config.load_kube_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
        _, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError) as exc:
        raise CliError(f"cannot load kubeconfig: {exc}") from exc
    if context:
        contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        active = next((c for c in contexts if c["name"] == context), active)
    namespace = (active or {}).get("context", {}).get("namespace") or "default"
    return client.ApiClient(), namespace


def api_message(exc: kexc.ApiException) -> str:
    """The API server's own words (a Status object's message), or the raw body."""
    try:
        body = json.loads(exc.body or "")
        return str(body.get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.body or exc.reason)


def _call(what: str, namespace: str, name: str | None, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except kexc.ApiException as exc:
        if exc.status == 404 and name is not None:
            raise CliError(f'AgentRun "{name}" not found in namespace "{namespace}"') from exc
        if exc.status == 403:
            raise CliError(f"the API server refused to {what}: {api_message(exc)}") from exc
        raise CliError(f"{what} failed (HTTP {exc.status}): {api_message(exc)}") from exc
    except OSError as exc:  # urllib3 wraps connection errors in subclasses of OSError
        raise CliError(f"cannot reach the API server: {exc}") from exc
    except Exception as exc:
        if type(exc).__module__.startswith("urllib3"):
            raise CliError(f"cannot reach the API server: {exc}") from exc
        raise


def call(what: str, fn: Any) -> Any:
    """``fn()`` with the API server's refusals and connection errors turned into a CliError."""
    return _call(what, "", None, fn)


def get_run(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(api)
    obj: dict[str, Any] = _call(
        f"get agentrun {name}",
        namespace,
        name,
        custom.get_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
    )
    return obj


def list_runs(api: client.ApiClient, namespace: str | None) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(api)
    if namespace is None:
        body = _call("list agentruns", "", None, custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
    else:
        body = _call(
            "list agentruns",
            namespace,
            None,
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
        )
    items: list[dict[str, Any]] = body.get("items", [])
    return sorted(items, key=lambda i: (i["metadata"].get("namespace", ""), i["metadata"]["name"]))


def annotate(api: client.ApiClient, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
    """Merge-patch annotations (None removes one). Admission policies may refuse: their message is shown."""
    custom = client.CustomObjectsApi(api)
    _call(
        f"annotate agentrun {name}",
        namespace,
        name,
        custom.patch_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {"metadata": {"annotations": annotations}},
    )


def patch_run(
    api: client.ApiClient, namespace: str, name: str, body: dict[str, Any], *, what: str
) -> dict[str, Any]:
    """Merge-patch an AgentRun (e.g. its spec). The API server's refusal (schema, CEL, policies) is shown."""
    custom = client.CustomObjectsApi(api)
    obj: dict[str, Any] = _call(
        what,
        namespace,
        name,
        custom.patch_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        body,
    )
    return obj
