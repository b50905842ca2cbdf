"""Pod Security "restricted" as the project asks it of a tenant namespace (deploy/tenant/namespace.yaml).

Tests that must show something runs under "restricted" label their test namespace with these labels: the API
server then refuses (enforce) and warns about (warn) a Pod that would not be admitted in a tenant namespace.
"""

from __future__ import annotations

import yaml

from tests.support.deploy import DEPLOY

PREFIX = "pod-security.kubernetes.io/"


def tenant_labels() -> dict[str, str]:
    """The Pod Security labels of deploy/tenant/namespace.yaml."""
    namespace = yaml.safe_load((DEPLOY / "tenant" / "namespace.yaml").read_text())
    labels: dict[str, str] = namespace["metadata"]["labels"]
    return {k: v for k, v in labels.items() if k.startswith(PREFIX)}
