"""What every container gets besides its own env: the base environment and the pod's kubeconfig — pure."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrun_dev.podruntime import settings as settings_mod

# From the runtime's own environment, passed through because a process is not useful without them.
PASSTHROUGH = ("HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "TERM")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def base_env(
    s: settings_mod.Settings, pod_name: str, kubeconfig: Path, host_env: Mapping[str, str]
) -> dict[str, str]:
    """The runtime's environment is NOT inherited (a container would not see kubelet's): only these.

    The pod's own ``env`` overrides any of them, ``PATH`` and ``KUBECONFIG`` included.
    """
    env = {k: host_env[k] for k in PASSTHROUGH if k in host_env}
    env.update(
        {
            "PATH": f"{s.python_prefix}/bin:{host_env.get('PATH') or DEFAULT_PATH}",
            "VIRTUAL_ENV": str(s.python_prefix),
            "PYTHONPATH": str(s.repo),
            # Logs go to a file; unbuffered output keeps `agentrun dev logs` current. A convenience:
            # a real container's stdout is buffered the same way, and no test relies on it.
            "PYTHONUNBUFFERED": "1",
            "HOSTNAME": pod_name,
            "KUBECONFIG": str(kubeconfig),
        }
    )
    return env


def kubeconfig(
    *, server: str, ca_pem: bytes | None, verify_tls: bool, namespace: str, token: str | None
) -> dict[str, Any]:
    """A kubeconfig for the pod: the service account's token (or none: anonymous); namespace = the pod's."""
    cluster: dict[str, Any] = {"server": server}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    if not verify_tls:
        cluster["insecure-skip-tls-verify"] = True
    user: dict[str, Any] = {"token": token} if token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": "agentrun-dev", "cluster": cluster}],
        "users": [{"name": "pod", "user": user}],
        "contexts": [
            {"name": "pod", "context": {"cluster": "agentrun-dev", "user": "pod", "namespace": namespace}}
        ],
        "current-context": "pod",
    }


def write_private(path: Path, doc: Mapping[str, Any]) -> None:
    """JSON is YAML; written 0600 then renamed, so a reader never sees half a token."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.touch(mode=0o600)
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)
