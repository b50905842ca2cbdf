"""One object can never stop the operator, and hostile inputs are refused before it ever sees them.

The API server refuses (ValidatingAdmissionPolicy ``agentrun-input-limits``, deploy/admission/
input-limits-policy.yaml) an AgentRun whose ``spec.input`` is nested deeper than 64 levels or larger than
256 KiB or holding more than 4,096 values at one nesting level, at ``kubectl apply``, with a message naming
the bound; 10,000 deep is refused as well (by the JSON
decoders first). An input exactly 64 deep, and one just under 256 KiB, are accepted: the deep one runs to
``Succeeded`` in the same namespace, the large one deletes cleanly (kopf's diff base does not carry the
input). An integer beyond 64 bits is refused at admission or ends ``Failed`` (InvalidSpec) without being
admitted. The operator stays up throughout."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import kubernetes

from agentrun_core.api import limits
from tests.support.kube import condition, create_run, kubectl, run_gone, run_status
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import STEPS
from tests.support.waiting import wait_for, wait_phase

DEPTH = 10_000


def _nested(depth: int) -> str:
    """JSON text of ``depth`` nested objects, built by hand: the object itself is level 1 and its innermost
    value (a number) level ``depth + 1`` — values count as levels, as in ``phases.input_problem``."""
    return '{"a": ' * (depth - 1) + '{"a": 1}' + "}" * (depth - 1)


def _write(tmp_path: Path, ns: str, name: str, input_json: str) -> Path:
    text = (
        '{"apiVersion": "agentrun.dev/v1alpha1", "kind": "AgentRun", '
        f'"metadata": {{"name": "{name}", "namespace": "{ns}"}}, '
        f'"spec": {{"graph": "pkg.mod:graph", "input": {input_json}, '
        '"worker": {"command": ["sleep", "600"]}}}'
    )
    path = tmp_path / f"{name}.json"
    path.write_text(text)
    return path


def _apply(kubeconfig: Path, path: Path) -> tuple[bool, str]:
    """``kubectl apply --server-side``: client-side apply would copy a 1 MiB input into its
    last-applied-configuration annotation and be refused for that (annotations over 256 KiB) first."""
    done = kubectl(kubeconfig, "apply", "--server-side", "-f", str(path))
    return done.returncode == 0, done.stderr + done.stdout


def _raw_create(kubeconfig: Path, ns: str, path: Path) -> tuple[bool, str]:
    """POST the bytes as they are (kubectl parses nothing): what the API server itself decides."""
    url = f"/apis/agentrun.dev/v1alpha1/namespaces/{ns}/agentruns"
    done = kubectl(kubeconfig, "create", "--raw", url, "-f", str(path))
    return done.returncode == 0, done.stderr + done.stdout


def _deleted(kube: kubernetes.client.ApiClient, ns: str, name: str) -> Callable[[], bool]:
    return lambda: run_gone(kube, ns, name)


def test_hostile_inputs_are_refused_at_admission(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, admin_kubeconfig: Path, tmp_path: Path
) -> None:
    ns = operator.namespace
    deep_bound = f"spec.input is nested deeper than {limits.INPUT_MAX_DEPTH} levels"
    size_bound = f"spec.input is larger than {limits.INPUT_MAX_BYTES // 1024} KiB"

    ok, out = _apply(admin_kubeconfig, _write(tmp_path, ns, "deep", _nested(DEPTH)))
    assert not ok and "exceeded max depth" in out, out
    # Deep enough to be hostile, within what the API server's decoder takes: the policy refuses it.
    ok, out = _raw_create(admin_kubeconfig, ns, _write(tmp_path, ns, "deep9k", _nested(9_000)))
    assert not ok and deep_bound in out, out
    ok, out = _apply(admin_kubeconfig, _write(tmp_path, ns, "deep65", _nested(limits.INPUT_MAX_DEPTH)))
    assert not ok and deep_bound in out, out
    mib = json.dumps({"blob": "x" * (1024 * 1024)})
    ok, out = _apply(admin_kubeconfig, _write(tmp_path, ns, "big", mib))
    assert not ok and size_bound in out, out
    done = kubectl(admin_kubeconfig, "create", "-f", str(tmp_path / "big.json"))
    assert done.returncode != 0 and size_bound in done.stderr, done.stderr
    # 20,000 small objects: refused by the breadth bound, which keeps the check itself cheap (without it,
    # this request ran past the API server's request timeout).
    wide = json.dumps({"items": [{"id": i, "name": "n" * 8} for i in range(20_000)]})
    ok, out = _apply(admin_kubeconfig, _write(tmp_path, ns, "wide", wide))
    assert not ok and f"more than {limits.INPUT_MAX_LEVEL_VALUES} values at one nesting level" in out, out
    huge_int_ok, _ = _apply(admin_kubeconfig, _write(tmp_path, ns, "bigint", '{"n": 18446744073709551616}'))

    # Within the bounds: exactly 64 levels deep runs to Succeeded, next to the refused ones.
    good_out = tmp_path / "good.txt"
    nest = json.loads(_nested(limits.INPUT_MAX_DEPTH - 2))  # under "nest": levels 2..64 (the number: 64)
    create_run(kube, ns, "good", {"graph": STEPS, "input": {"path": str(good_out), "nest": nest}})
    wait_phase(kube, ns, "good", "Succeeded", 120, operator)
    assert len(good_out.read_text().splitlines()) == 1
    # Just under the size bound: accepted, and deletes cleanly.
    ok, out = _apply(admin_kubeconfig, _write(tmp_path, ns, "large", json.dumps({"blob": "x" * 200_000})))
    assert ok, out

    if huge_int_ok:
        status = wait_phase(kube, ns, "bigint", "Failed", 60)
        assert condition(status, "Failed")["reason"] == "InvalidSpec", status
    for name in ("large", "bigint") if huge_int_ok else ("large",):
        kubectl(admin_kubeconfig, "delete", "-n", ns, f"ar/{name}", "--wait=false", check=True)
        wait_for(_deleted(kube, ns, name), 60, f"{name} deleted", on_timeout=operator.logs)
    assert operator.current.alive(), operator.logs()[-4000:]
    assert "RecursionError" not in operator.logs()
    assert run_status(kube, ns, "good")["phase"] == "Succeeded"
