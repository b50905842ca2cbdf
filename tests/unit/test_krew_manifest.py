"""The krew plugin manifest (scripts/krew_package.py) against krew's schema, and its archive against the
manifest: what krew would install is what the manifest promises.

The schema check is written from krew's documented ``Plugin`` fields (apiVersion
krew.googlecontainertools.github.com/v1alpha2) and the rules krew's index validation applies: known fields
only (manifests are read strictly), a safe lowercase name, a ``v``-prefixed semantic version, a one-line
shortDescription, at least one platform, each with a selector, an http(s) uri, a lowercase hex sha256 of 64
characters, a bin, and files whose ``from``/``to`` are relative paths that do not climb out.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("krew_package", REPO / "scripts" / "krew_package.py")
assert _spec is not None and _spec.loader is not None
krew_package = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(krew_package)

API_VERSION = "krew.googlecontainertools.github.com/v1alpha2"
TOP = {"apiVersion", "kind", "metadata", "spec"}
SPEC = {"version", "homepage", "shortDescription", "description", "caveats", "platforms"}
PLATFORM = {"selector", "uri", "sha256", "bin", "files"}
SELECTOR = {"matchLabels", "matchExpressions"}
FILE = {"from", "to"}
SEMVER = re.compile(r"^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
SHA256 = re.compile(r"^[a-f0-9]{64}$")


def _unknown(where: str, doc: dict[str, Any], allowed: set[str]) -> list[str]:
    return [f"{where}: unknown field {k!r}" for k in sorted(set(doc) - allowed)]


def _relative(path: str) -> bool:
    return bool(path) and not path.startswith("/") and ".." not in Path(path).parts


def validate(doc: Any, name: str) -> list[str]:
    """krew's rules for a plugin manifest named ``name``; the list of problems (empty: valid)."""
    if not isinstance(doc, dict):
        return ["the manifest is not a mapping"]
    errors = _unknown("manifest", doc, TOP)
    if doc.get("apiVersion") != API_VERSION:
        errors.append(f"apiVersion must be {API_VERSION}")
    if doc.get("kind") != "Plugin":
        errors.append("kind must be Plugin")
    meta_name = (doc.get("metadata") or {}).get("name", "")
    if not NAME.match(meta_name) or meta_name != name:
        errors.append(f"metadata.name {meta_name!r} must be the safe plugin name {name!r}")
    spec = doc.get("spec") or {}
    errors += _unknown("spec", spec, SPEC)
    if not SEMVER.match(str(spec.get("version", ""))):
        errors.append(f"spec.version {spec.get('version')!r} is not a v-prefixed semantic version")
    short = str(spec.get("shortDescription") or "")
    if not short or "\n" in short:
        errors.append("spec.shortDescription must be one non-empty line")
    platforms = spec.get("platforms") or []
    if not platforms:
        errors.append("spec.platforms must list at least one platform")
    for i, plat in enumerate(platforms):
        where = f"spec.platforms[{i}]"
        errors += _unknown(where, plat, PLATFORM)
        selector = plat.get("selector")
        if not isinstance(selector, dict) or not (
            selector.get("matchLabels") or selector.get("matchExpressions")
        ):
            errors.append(f"{where}.selector is required (matchLabels or matchExpressions)")
        else:
            errors += _unknown(f"{where}.selector", selector, SELECTOR)
        if not re.match(r"^https?://", str(plat.get("uri", ""))):
            errors.append(f"{where}.uri must be an http(s) URL")
        if not SHA256.match(str(plat.get("sha256", ""))):
            errors.append(f"{where}.sha256 must be 64 lowercase hex characters")
        if not _relative(str(plat.get("bin", ""))):
            errors.append(f"{where}.bin must be a relative path inside the plugin")
        for j, f in enumerate(plat.get("files") or []):
            errors += _unknown(f"{where}.files[{j}]", f, FILE)
            if not (_relative(str(f.get("from", ""))) and _relative(str(f.get("to", "")))):
                errors.append(f"{where}.files[{j}] from/to must be relative paths")
    return errors


@pytest.fixture
def packaged(tmp_path: Path) -> tuple[dict[str, Any], bytes]:
    wheel = tmp_path / "agentrun-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip: the packager only copies it
    out = tmp_path / "dist"
    assert (
        krew_package.main([str(wheel), "--base-url", "https://example.com/releases", "--out", str(out)]) == 0
    )
    doc = yaml.safe_load((out / "agentrun.yaml").read_text())
    return doc, (out / "kubectl-agentrun-v0.1.0.tar.gz").read_bytes()


def test_manifest_is_valid_for_krew(packaged: tuple[dict[str, Any], bytes]) -> None:
    doc, _ = packaged
    assert validate(doc, "agentrun") == []
    assert doc["spec"]["version"] == "v0.1.0"
    assert {tuple(p["selector"]["matchLabels"].values()) for p in doc["spec"]["platforms"]} == set(
        krew_package.PLATFORMS
    )


def test_the_checker_refuses_what_krew_refuses(packaged: tuple[dict[str, Any], bytes]) -> None:
    doc, _ = packaged
    plat = doc["spec"]["platforms"][0]
    broken: list[tuple[str, Any]] = [
        ("apiVersion", "krew.googlecontainertools.github.com/v1alpha1"),
        ("version", "0.1.0"),
        ("sha256", "ABC"),
        ("bin", "../kubectl-agentrun"),
        ("selector", None),
        ("extra", "field"),
    ]
    for field, value in broken:
        bad = yaml.safe_load(yaml.safe_dump(doc))
        target = (
            bad
            if field == "apiVersion"
            else bad["spec"]
            if field == "version"
            else bad["spec"]["platforms"][0]
        )
        target[field] = value
        assert validate(bad, "agentrun"), (field, value)
    assert validate(doc, "other-name")
    assert plat["sha256"] != "ABC"


def test_archive_matches_the_manifest(packaged: tuple[dict[str, Any], bytes]) -> None:
    doc, data = packaged
    for plat in doc["spec"]["platforms"]:
        assert plat["sha256"] == hashlib.sha256(data).hexdigest()
        assert plat["uri"].endswith("/v0.1.0/kubectl-agentrun-v0.1.0.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {f["from"] for f in doc["spec"]["platforms"][0]["files"]}
        launcher = members[doc["spec"]["platforms"][0]["bin"]]
        assert launcher.mode & 0o111, "bin must be executable"
        text = tar.extractfile(launcher).read().decode()  # type: ignore[union-attr]
    assert "agentrun-0.1.0-py3-none-any.whl" in text and 'exec "$venv/bin/kubectl-agentrun" "$@"' in text
