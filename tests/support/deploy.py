"""Helpers of the deploy/ tests: run kubectl as the admin, render kustomizations into a test namespace.

Imported by tests/integration/test_deploy*.py and the admission tests.
"""

from __future__ import annotations

import functools
import os
import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

import yaml

from tests.support import kube

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# Kinds kustomize does not know to be cluster-scoped, plus the usual ones.
CLUSTER_KINDS = frozenset(
    {
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)


# Deploying is all or nothing: a kubectl that fails fails the test, unless the caller says check=False.
kubectl = functools.partial(kube.kubectl, check=True)


def overlay_into(
    tmp: pathlib.Path, target: str, namespace: str, *, drop_namespace_object: bool = True
) -> pathlib.Path:
    """A throwaway kustomization in ``tmp`` that builds ``deploy/<target>`` into ``namespace``.

    Uses a relative path to the checkout (kustomize refuses absolute ones) and deletes the Namespace object
    (the test namespace already exists, with its Pod Security labels).
    """
    relative = os.path.relpath(DEPLOY / target, tmp)
    lines = [
        "apiVersion: kustomize.config.k8s.io/v1beta1",
        "kind: Kustomization",
        f"namespace: {namespace}",
        "resources:",
        f"  - {relative}",
    ]
    if drop_namespace_object:
        lines += [
            "patches:",
            "  - target: {kind: Namespace}",
            "    patch: |-",
            "      $patch: delete",
            "      apiVersion: v1",
            "      kind: Namespace",
            "      metadata: {name: any}",
        ]
    (tmp / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    return tmp


def load_docs(paths: Iterable[pathlib.Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def retarget(docs: Sequence[dict[str, Any]], namespace: str, suffix: str) -> list[dict[str, Any]]:
    """Place namespaced objects in ``namespace`` and give cluster-scoped ones a unique ``suffix``, so a
    test applies RBAC for real without touching the cluster's own agentrun objects."""
    cluster_names = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in CLUSTER_KINDS}
    out = []
    for doc in docs:
        doc = yaml.safe_load(yaml.safe_dump(doc))  # deep copy
        meta = doc["metadata"]
        if doc["kind"] in CLUSTER_KINDS:
            meta["name"] = meta["name"] + suffix
            meta.pop("namespace", None)
        else:
            meta["namespace"] = namespace
        ref = doc.get("roleRef")
        if ref and (ref["kind"], ref["name"]) in cluster_names:
            ref["name"] = ref["name"] + suffix
        for subject in doc.get("subjects", []):
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
        out.append(doc)
    return out


def dump(docs: Iterable[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


def parse_can_i_list(text: str) -> set[tuple[str, str, str, str]]:
    """``kubectl auth can-i --list`` as a set of (resource, non-resource URLs, resource names, verb)."""
    rows: set[tuple[str, str, str, str]] = set()
    lines = text.splitlines()
    header = lines[0]
    starts = [header.index(col) for col in ("Resources", "Non-Resource URLs", "Resource Names", "Verbs")]
    for line in lines[1:]:
        if not line.strip():
            continue
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], len(line) + 1], strict=True)]
        resource, urls, names, verbs = cells
        for verb in verbs.strip("[]").split():
            rows.add((resource, urls, names, verb))
    return rows


def format_rows(rows: Iterable[tuple[str, str, str, str]]) -> str:
    return "".join(f"{r or '-'}\t{u or '-'}\t{n or '-'}\t{v}\n" for r, u, n, v in sorted(rows))


def read_allowlist(path: pathlib.Path) -> set[tuple[str, str, str, str]]:
    rows = set()
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            r, u, n, v = (c if c != "-" else "" for c in line.split("\t"))
            rows.add((r, u, n, v))
    return rows
