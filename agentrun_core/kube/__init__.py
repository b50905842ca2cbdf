"""The one Kubernetes API client of agentrun: worker, operator, CLI and dev pod runtime all call it.

Rule: only this package talks HTTP to the API server, through ``api.request`` / ``api.stream``, and every
failure is one of ``errors``' classes (``NotFound``, ``Conflict``/``AlreadyExists``, ``Forbidden``, ``Gone``,
``Unavailable``, ``ConfigError``, else ``KubeError``). Calls are grouped by resource: ``leases``, ``runs``
(AgentRuns), ``pods``, ``objects`` (Secrets, ConfigMaps, ServiceAccounts, Namespaces, Events, Nodes, admission
policies). Every call is synchronous; async callers run them in threads.

The Lease calls, the client loader and the error classes are also named here, as the Lease engine
(``agentrun_core.lease``) and the worker have always called them (``kube.get_lease``, ``kube.NotFound``).
"""

from __future__ import annotations

from agentrun_core.kube import api, errors, leases, objects, pods, runs, schedules
from agentrun_core.kube.api import ApiClient, Body, load_api_client
from agentrun_core.kube.errors import (
    AlreadyExists,
    ConfigError,
    Conflict,
    Forbidden,
    Gone,
    KubeError,
    NotFound,
    Unavailable,
)
from agentrun_core.kube.leases import (
    LeaseBody,
    create_lease,
    delete_lease,
    get_lease,
    micro_time,
    replace_lease,
)

__all__ = [
    "AlreadyExists",
    "ApiClient",
    "Body",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "Gone",
    "KubeError",
    "LeaseBody",
    "NotFound",
    "Unavailable",
    "api",
    "create_lease",
    "delete_lease",
    "errors",
    "get_lease",
    "leases",
    "load_api_client",
    "micro_time",
    "objects",
    "pods",
    "replace_lease",
    "runs",
    "schedules",
]
