"""A stand-in worker that only holds its run's Lease, and how tests read a run's Lease.

Operator tests that are about ownership (hang takeover, stale watches, name reuse) need a worker Pod that
takes the run's Lease with the worker's own LeaseKeeper and then idles: nothing else of a run happens, so what
the operator does is only about the Lease. Attempt 2 waits for the Lease like a real worker would.
"""

from __future__ import annotations

from typing import Any

import kubernetes

HOLDER = """
import os, time
from agentrun_core import kube, lease
api = kube.load_api_client()
cfg = lease.LeaseConfig(os.environ["AGENTRUN_NAMESPACE"], os.environ["AGENTRUN_LEASE_NAME"],
                        holder=os.environ["AGENTRUN_POD_NAME"],
                        duration_seconds=int(os.environ["AGENTRUN_LEASE_DURATION_SECONDS"]),
                        labels={"agentrun.dev/run": os.environ["AGENTRUN_RUN_NAME"]})
keeper = lease.LeaseKeeper(api, cfg)
print("epoch", keeper.acquire(wait_seconds=60), flush=True)
keeper.start()
time.sleep(600)
"""


def holder_spec(lease_seconds: int) -> dict[str, Any]:
    """An AgentRun spec whose every attempt is a Lease holder (no backoff between attempts)."""
    return {
        "graph": "pkg.mod:graph",
        "lease": {"durationSeconds": lease_seconds},
        "retry": {"backoffSeconds": 0},
        "worker": {"command": ["python", "-c", HOLDER]},
    }


def lease_spec(kube: kubernetes.client.ApiClient, namespace: str, run: str) -> Any:
    """The spec of the run's Lease, or None while it does not exist."""
    coord = kubernetes.client.CoordinationV1Api(kube)
    try:
        return coord.read_namespaced_lease(f"agentrun-{run}", namespace).spec
    except kubernetes.client.ApiException:
        return None
