"""Resolve a container's environment the way kubelet does — pure, over plain dicts.

Order (kubelet's ``makeEnvironmentVariables``): ``envFrom`` sources first (later sources win), then ``env``
entries in order; ``$(VAR)`` in a ``value`` expands to a variable defined earlier (``$$`` escapes), and
``command``/``args`` expand against the final environment. A required ``secretKeyRef``/``configMapKeyRef``
/``envFrom`` source that is missing raises :class:`ConfigError`; kubelet reports that as a container
Waiting with reason ``CreateContainerConfigError`` and retries, and so do we.

Secrets and ConfigMaps come through :class:`Lookup` (``None`` = not found), so this module never does I/O.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes import utils as kube_utils

Obj = Mapping[str, Any]

# kubelet skips envFrom keys that are not C identifiers-ish (IsEnvVarName: [-._a-zA-Z][-._a-zA-Z0-9]*).
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_FIELD_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class ConfigError(Exception):
    """The container cannot be configured yet (missing Secret/ConfigMap/key, bad field path)."""


@dataclasses.dataclass(frozen=True)
class Lookup:
    """Reads of the pod's namespace. Each returns the object's decoded ``data`` or ``None`` if absent."""

    secret: Callable[[str], Mapping[str, str] | None]
    config_map: Callable[[str], Mapping[str, str] | None]


def quantity(text: str) -> Decimal:
    """A resource quantity (``64Mi``, ``500m``) as a number; the client's parser is untyped."""
    value: Decimal = kube_utils.parse_quantity(text)  # type: ignore[no-untyped-call]
    return value


def decode_secret_data(secret: Obj) -> dict[str, str]:
    """``data`` is base64; values may be arbitrary bytes, kept as surrogate-escaped str for ``os.environ``."""
    data = secret.get("data") or {}
    out = {k: base64.b64decode(v).decode("utf-8", "surrogateescape") for k, v in data.items()}
    out.update(secret.get("stringData") or {})
    return out


def config_map_data(cm: Obj) -> dict[str, str]:
    return dict(cm.get("data") or {})


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names substitute, unknown stay literal, ``$$`` → ``$``."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else text[i : end + 1])
                    i = end + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)


def field_ref(pod: Obj, path: str) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(p.get("ip", "") for p in status.get("podIPs") or []),
        "status.hostIPs": ",".join(p.get("ip", "") for p in status.get("hostIPs") or []),
    }
    if path in simple:
        return str(simple[path] or "")
    m = _FIELD_SUBSCRIPT.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise ConfigError(f"unsupported fieldRef fieldPath {path!r}")


def resource_ref(container: Obj, ref: Obj, node_allocatable: Mapping[str, str]) -> str:
    """``resourceFieldRef``: limits fall back to the node's allocatable (as in kubelet); ceil(x/divisor)."""
    resource = str(ref.get("resource", ""))
    kind, _, name = resource.partition(".")
    if kind not in {"limits", "requests"} or not name:
        raise ConfigError(f"unsupported resourceFieldRef resource {resource!r}")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (resources.get("limits") or {}).get(name)
    if raw is None:
        raw = node_allocatable.get(name, "0")
    value = quantity(str(raw))
    divisor = quantity(str(ref.get("divisor") or "1"))
    if divisor == 0:
        raise ConfigError(f"resourceFieldRef {resource}: divisor is zero")
    return str(math.ceil(value / divisor))


def _key_ref(kind: str, ref: Obj, read: Callable[[str], Mapping[str, str] | None], ns: str) -> str | None:
    name, key, optional = str(ref.get("name", "")), str(ref.get("key", "")), bool(ref.get("optional"))
    data = read(name)
    if data is None:
        if optional:
            return None
        raise ConfigError(f'{kind.lower()} "{name}" not found')
    if key not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {key} in {kind} {ns}/{name}")
    return data[key]


def resolve(
    pod: Obj, container: Obj, lookup: Lookup, node_allocatable: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The container's own environment (without the runtime's base variables)."""
    ns = str((pod.get("metadata") or {}).get("namespace", ""))
    alloc = node_allocatable or {}
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        if "configMapRef" in source:
            ref, kind, read = source["configMapRef"], "ConfigMap", lookup.config_map
        elif "secretRef" in source:
            ref, kind, read = source["secretRef"], "Secret", lookup.secret
        else:
            continue
        data = read(str(ref.get("name", "")))
        if data is None:
            if ref.get("optional"):
                continue
            raise ConfigError(f'{kind.lower()} "{ref.get("name", "")}" not found')
        for k, v in data.items():
            if _ENV_NAME.match(prefix + k):
                env[prefix + k] = v
    for var in container.get("env") or []:
        name = str(var["name"])
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value") or ""), env)
            continue
        vf = var["valueFrom"]
        value: str | None
        if "fieldRef" in vf:
            value = field_ref(pod, str(vf["fieldRef"].get("fieldPath", "")))
        elif "resourceFieldRef" in vf:
            value = resource_ref(container, vf["resourceFieldRef"], alloc)
        elif "secretKeyRef" in vf:
            value = _key_ref("Secret", vf["secretKeyRef"], lookup.secret, ns)
        elif "configMapKeyRef" in vf:
            value = _key_ref("ConfigMap", vf["configMapKeyRef"], lookup.config_map, ns)
        else:
            raise ConfigError(f"env {name}: unsupported valueFrom {sorted(vf)}")
        if value is not None:
            env[name] = value
    return env


def argv(container: Obj, env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded. No image runs here: no entrypoint to default to."""
    words = [str(w) for w in (container.get("command") or [])]
    words += [str(w) for w in (container.get("args") or [])]
    if not words:
        raise ConfigError("container has no command or args: the local pod runtime does not run images")
    return [expand(w, env) for w in words]
