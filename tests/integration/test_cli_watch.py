"""``agentrun list -l/--phase`` and ``get|list -w`` against the dev cluster's real API server: the filters
pick the runs kubectl's selector and the phases pick, and a watch prints each change as it happens (a status
written after the watch started), through kubectl's plugin path as a user runs it."""

from __future__ import annotations

import os
import pathlib
import queue
import subprocess
import threading
import time
from typing import Any

import kubernetes
import pytest

from agentrun import cluster, watching
from tests.support.kube import GROUP, PLURAL, VENV_BIN, VERSION, kubectl


def _create(custom: Any, ns: str, name: str, labels: dict[str, str], phase: str | None) -> None:
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        ns,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "AgentRun",
            "metadata": {"name": name, "labels": labels},
            "spec": {"graph": "agentrun_examples.support_ticket:graph", "input": {}},
        },
    )
    if phase is not None:
        _set_phase(custom, ns, name, phase)


def _set_phase(custom: Any, ns: str, name: str, phase: str) -> None:
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, name, {"status": {"phase": phase, "attempts": 1}}
    )


def test_list_filters_by_label_selector_and_phase(
    kube: kubernetes.client.ApiClient, namespace: str, admin_kubeconfig: pathlib.Path
) -> None:
    custom = kubernetes.client.CustomObjectsApi(kube)
    _create(custom, namespace, "a-failed", {"team": "support"}, "Failed")
    _create(custom, namespace, "b-waiting", {"team": "support"}, "WaitingApproval")
    _create(custom, namespace, "c-failed", {"team": "billing"}, "Failed")
    _create(custom, namespace, "d-new", {"team": "support"}, None)

    def names(*args: str) -> list[str]:
        done = kubectl(admin_kubeconfig, "agentrun", "list", "-n", namespace, "-o", "name", *args)
        assert done.returncode == 0, done.stderr
        return [line.rsplit("/", 1)[1] for line in done.stdout.split()]

    assert names("-l", "team=support") == ["a-failed", "b-waiting", "d-new"]
    assert names("--phase", "Failed") == ["a-failed", "c-failed"]
    assert names("-l", "team=support", "--phase", "Failed,WaitingApproval") == ["a-failed", "b-waiting"]
    assert names("--phase", "Pending") == ["d-new"]  # no status yet counts as Pending
    assert names("-l", "team in (nobody)") == []
    bad = kubectl(admin_kubeconfig, "agentrun", "list", "-n", namespace, "--phase", "Done")
    assert bad.returncode == 1 and "unknown phase Done: choose from Pending, Running" in bad.stderr
    bad_selector = kubectl(admin_kubeconfig, "agentrun", "list", "-n", namespace, "-l", "team in (a")
    assert bad_selector.returncode == 1 and "list agentruns failed (HTTP 400)" in bad_selector.stderr


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    out: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return out


def _next_matching(out: queue.Queue[str], needle: str, timeout: float) -> list[str]:
    """Lines read until one contains ``needle`` (AssertionError after ``timeout`` seconds)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = out.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"no line with {needle!r} within {timeout}s; saw {seen}")


@pytest.mark.parametrize("verb", ["get", "list"])
def test_watch_prints_each_change_after_the_first_listing(
    kube: kubernetes.client.ApiClient, namespace: str, admin_kubeconfig: pathlib.Path, verb: str
) -> None:
    custom = kubernetes.client.CustomObjectsApi(kube)
    _create(custom, namespace, "watched", {"team": "support"}, "Running")
    _create(custom, namespace, "other", {"team": "billing"}, "Running")
    args = ["watched"] if verb == "get" else ["-l", "team=support"]
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["KUBECONFIG"] = str(admin_kubeconfig)
    proc = subprocess.Popen(
        ["kubectl", "agentrun", verb, *args, "-n", namespace, "-w"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        out = _lines(proc)
        first = _next_matching(out, "watched", 60)
        assert first[0].split()[:2] == ["NAME", "PHASE"] and "Running" in first[-1]
        _set_phase(custom, namespace, "other", "Failed")  # not selected / not named: never printed
        _set_phase(custom, namespace, "watched", "WaitingApproval")
        changed = _next_matching(out, "WaitingApproval", 60)
        assert all("other" not in line for line in first + changed), first + changed
        assert changed[-1].split()[:2] == ["watched", "WaitingApproval"]  # a row, no second header
        _set_phase(custom, namespace, "watched", "Succeeded")
        assert _next_matching(out, "Succeeded", 60)[-1].startswith("watched")
        assert proc.poll() is None  # a watch goes on until interrupted
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_get_watch_of_a_missing_run_says_so(namespace: str, admin_kubeconfig: pathlib.Path) -> None:
    done = kubectl(admin_kubeconfig, "agentrun", "get", "nope", "-n", namespace, "-w")
    assert done.returncode == 1 and 'AgentRun "nope" not found' in done.stderr


def test_phase_filter_is_pure() -> None:
    assert watching.phases(None) is None
    assert watching.phases("Failed, Succeeded") == {"Failed", "Succeeded"}
    with pytest.raises(cluster.CliError, match="unknown phase failed"):
        watching.phases("failed")
    runs = [{"status": {"phase": "Failed"}}, {"status": {}}, {}]
    assert watching.keep(runs, frozenset({"Pending"})) == [{"status": {}}, {}]
    assert watching.without_header("NAME  PHASE\nx     Running") == "x     Running"
