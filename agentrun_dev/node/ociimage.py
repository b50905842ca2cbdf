"""Pure-ish: a one-file OCI image archive (for the pod sandbox's ``pause``), made without any image tool.

The archive is an OCI image layout in a tar (``oci-layout``, ``index.json``, ``blobs/sha256/…``), named by
the ``io.containerd.image.name`` annotation that ``ctr images import`` reads. Deterministic: fixed mtimes and
owners, so the same binary always gives the same image digest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def _digest(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def single_binary(binary: bytes, path: str, name: str, arch: str = "amd64") -> bytes:
    """The archive of an image whose only file is ``path`` (executable) and whose entrypoint it is."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as layer:
        _add(layer, path.lstrip("/"), binary, 0o755)
    layer_tar = raw.getvalue()
    layer_gz = gzip.compress(layer_tar, mtime=0)
    config: dict[str, Any] = {
        "architecture": arch,
        "os": "linux",
        "config": {"Entrypoint": [path], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer_tar)]},
    }
    config_b = json.dumps(config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": _digest(config_b), "size": len(config_b)},
        "layers": [{"mediaType": LAYER, "digest": _digest(layer_gz), "size": len(layer_gz)}],
    }
    manifest_b = json.dumps(manifest, sort_keys=True).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MANIFEST,
                "digest": _digest(manifest_b),
                "size": len(manifest_b),
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        for blob in (layer_gz, config_b, manifest_b):
            _add(tar, "blobs/sha256/" + _digest(blob).removeprefix("sha256:"), blob)
    return out.getvalue()


def write_pause(binary: Path, dest: Path, name: str) -> Path:
    dest.write_bytes(single_binary(binary.read_bytes(), "/pause", name))
    return dest
