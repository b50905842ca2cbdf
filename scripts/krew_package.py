"""Package ``kubectl agentrun`` for krew: an archive and its plugin manifest (``Plugin``, krew's v1alpha2).

    python scripts/krew_package.py WHEEL --base-url URL [--out DIR]

Rule: krew installs a plugin by unpacking an archive and linking one executable (``bin``) as
``kubectl-agentrun``; it knows nothing about Python. The archive therefore holds the project's wheel and a
launcher (``kubectl-agentrun``, POSIX sh): its first run installs the wheel into its own venv next to it
(``python3 -m venv`` + ``pip install`` of the wheel: the same "CLI alone, without the dev extras" install as
pipx), later runs exec that venv's ``kubectl-agentrun``. The manifest's ``sha256`` is the archive's, computed
here, so the manifest and the archive are always published together. The same archive serves every
platform with python3 >= 3.11 (the wheel is pure Python; its dependencies come from the package index).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

import yaml

PLATFORMS = [("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64")]

LAUNCHER = """#!/bin/sh
# kubectl-agentrun (krew): installs the agentrun wheel next to this script on first use, then runs it.
set -eu
here=$(cd "$(dirname "$(readlink -f "$0" 2>/dev/null || echo "$0")")" && pwd)
venv="$here/venv"
if [ ! -x "$venv/bin/kubectl-agentrun" ]; then
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \\
        || { echo "kubectl-agentrun needs python3 >= 3.11" >&2; exit 1; }
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet "$here"/{wheel} >&2
fi
exec "$venv/bin/kubectl-agentrun" "$@"
"""


def archive(wheel: Path) -> bytes:
    """A .tar.gz with the launcher (mode 0755) and the wheel, reproducible (fixed mtimes and owners)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in (
            ("kubectl-agentrun", LAUNCHER.replace("{wheel}", wheel.name).encode(), 0o755),
            (wheel.name, wheel.read_bytes(), 0o644),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def version_of(wheel: Path) -> str:
    match = re.match(r"^agentrun-([0-9][^-]*)-", wheel.name)
    if match is None:
        raise SystemExit(f"{wheel.name} is not an agentrun wheel")
    return "v" + match.group(1)


def manifest(wheel: Path, sha256: str, base_url: str) -> dict[str, Any]:
    version = version_of(wheel)
    uri = f"{base_url.rstrip('/')}/{version}/kubectl-agentrun-{version}.tar.gz"
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": "agentrun"},
        "spec": {
            "version": version,
            "homepage": "https://github.com/agentrun/agentrun",
            "shortDescription": "Steer and inspect durable LangGraph AgentRuns",
            "description": (
                "Read and steer AgentRuns (agentrun.dev): list, get, trace, ledger, logs, wait, approve,\n"
                "reject, retry, resolve, cancel, suspend, resume. Every verb is an API request made with\n"
                "your kubeconfig; the API server's RBAC and admission policies decide.\n"
            ),
            "caveats": (
                "The first run installs the agentrun wheel into a virtualenv next to the plugin\n"
                "(python3 >= 3.11 and access to a Python package index are needed once).\n"
                "trace and ledger read the ledger database: set AGENTRUN_DSN.\n"
            ),
            "platforms": [
                {
                    "selector": {"matchLabels": {"os": os_, "arch": arch}},
                    "uri": uri,
                    "sha256": sha256,
                    "bin": "kubectl-agentrun",
                    "files": [
                        {"from": "kubectl-agentrun", "to": "."},
                        {"from": wheel.name, "to": "."},
                    ],
                }
                for os_, arch in PLATFORMS
            ],
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("wheel", type=Path)
    p.add_argument("--base-url", required=True, help="where releases are published (URL of the version dirs)")
    p.add_argument("--out", type=Path, default=Path("dist"))
    args = p.parse_args(argv)
    data = archive(args.wheel)
    version = version_of(args.wheel)
    args.out.mkdir(parents=True, exist_ok=True)
    tarball = args.out / f"kubectl-agentrun-{version}.tar.gz"
    tarball.write_bytes(data)
    doc = manifest(args.wheel, hashlib.sha256(data).hexdigest(), args.base_url)
    (args.out / "agentrun.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    print(f"{tarball}\n{args.out / 'agentrun.yaml'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
