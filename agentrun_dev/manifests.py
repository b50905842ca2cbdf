"""Where the shipped manifests (``crds/``, ``deploy/``) are read from: the installed package, else the
checkout.

Rule: code that *reads* a manifest (the dev cluster applies the CRD and the admission policies, the demo
applies deploy/base, deploy/tenant and the example run) asks :func:`path`, which finds it through
``importlib.resources``. A wheel carries ``crds/`` and ``deploy/`` as ``agentrun_dev/_manifests/``
(pyproject's ``force-include``), so ``agentrun dev up`` and ``agentrun demo`` work from an installed wheel;
an editable install (``pip install -e``, what ``scripts/bootstrap`` makes) has no such directory and the
checkout the package lives in is the source. Generators that *write* a manifest (``agentrun_core.api.crdgen``,
``agentrun_dev.input_policy``, ``agentrun_dev.prometheusrule``) write the checkout's file: that is the one
source, and the wheel copies it.
"""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable
from pathlib import Path

PACKAGED = "_manifests"
# The top-level directories a wheel carries (pyproject.toml, [tool.hatch.build.targets.wheel.force-include]).
SHIPPED = ("crds", "deploy")
CHECKOUT = Path(__file__).resolve().parents[1]


def root() -> Traversable:
    """The directory holding ``crds/`` and ``deploy/``: the package's data if installed, else the checkout."""
    packaged = importlib.resources.files("agentrun_dev") / PACKAGED
    return packaged if packaged.is_dir() else CHECKOUT


def path(*parts: str) -> Path:
    """The manifest file or directory at ``parts`` (e.g. ``path("deploy", "admission")``), on disk.

    kubectl and kustomize read files, so a resource that is not a plain file (a zipped install) is refused
    with the reason rather than copied somewhere temporary that the caller would have to clean up.
    """
    if not parts or parts[0] not in SHIPPED:
        raise ValueError(f"not a shipped manifest: {'/'.join(parts)!r} (shipped: {', '.join(SHIPPED)})")
    found = root().joinpath(*parts)
    if not isinstance(found, Path):
        raise RuntimeError(f"agentrun_dev is installed where manifests are not files on disk: {found}")
    return found
