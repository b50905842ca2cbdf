"""AgentRunSchedule calls (``agentrun.dev/v1alpha1``, ``agentrunschedules``), for the operator and the CLI.

Rule: as ``runs``: merge patches, ``.status`` only through the status subresource.
"""

from __future__ import annotations

from agentrun_core.kube import api as api_

Body = api_.Body

GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentrunschedules"
SCHEDULES = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}"
SCHEDULE = SCHEDULES + "/{name}"


def get(api: api_.ApiClient, namespace: str, name: str, *, timeout: float | None = None) -> Body:
    return api_.request(api, "GET", SCHEDULE, {"namespace": namespace, "name": name}, timeout=timeout)


def list_(api: api_.ApiClient, namespace: str, *, timeout: float | None = None) -> list[Body]:
    items: list[Body] = api_.request(api, "GET", SCHEDULES, {"namespace": namespace}, timeout=timeout).get(
        "items", []
    )
    return items


def patch_status(
    api: api_.ApiClient, namespace: str, name: str, body: Body, *, timeout: float | None = None
) -> Body:
    params = {"namespace": namespace, "name": name}
    return api_.patch(api, SCHEDULE + "/status", params, body, api_.MERGE_PATCH, timeout=timeout)
