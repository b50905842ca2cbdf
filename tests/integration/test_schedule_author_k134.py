"""Kubernetes 1.34/1.35 (deploy/admission-vap-only, no MutatingAdmissionPolicy): a schedule's author still
may not approve the runs its ticks create. Nothing stamps there: the schedule's creation must carry its
author (the requester's own name, any other refused), the operator's own create (agentrun_operator's
Scheduler, real code) carries it onto the tick's run, nobody else may, and the author's approval through the
agentrun CLI is refused — also in a four-eyes namespace when the run allows self-approval. On a real
kube-apiserver v1.34.4 (``agentrun dev apiserver``, as tests/integration/test_admission_k134.py).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from agent_operator.act import scheduler
from agentrun_core import kube as core_kube
from agentrun_core.api import schedules
from agentrun_dev import identities, second_apiserver
from tests.support.kube import kubectl

pytestmark = [pytest.mark.serial, pytest.mark.timeout(3600)]

CUSTOM = ("agentrun.dev", "v1alpha1")
CREATED_BY, APPROVE = "agentrun.dev/created-by", "agentrun.dev/approve"
PENDING = "a-aaaaaaaaaaaa"
PEOPLE = {"carol": ["devs"], "manager": ["managers"]}


@pytest.fixture(scope="module")
def k134(request: pytest.FixtureRequest, dev_cluster: Any) -> Path:
    capman = request.config.pluginmanager.getplugin("capturemanager")
    ctx = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
    with ctx:
        return second_apiserver.up(dev_cluster.settings, out=sys.stderr)


class Place:
    """A namespace on the 1.34 server; carol writes schedules and approves, manager approves."""

    def __init__(self, k134: Path, settings: Any) -> None:
        self.admin = k134
        self.api = kubernetes.config.new_client_from_config(config_file=str(k134))  # type: ignore[no-untyped-call]
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.ns = f"k134-author-{secrets.token_hex(3)}"
        labels = {"agentrun.dev/test": "true", "agentrun.dev/test-session": str(os.getpid())}
        kubernetes.client.CoreV1Api(self.api).create_namespace(
            {"metadata": {"name": self.ns, "labels": labels}}
        )
        for user, role in (
            ("carol", "agentrun-editor"),
            ("carol", "agentrun-approver"),
            ("manager", "agentrun-approver"),
        ):
            kubernetes.client.RbacAuthorizationV1Api(self.api).create_namespaced_role_binding(
                self.ns,
                {
                    "metadata": {"name": f"{user}-{role}"},
                    "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                },
            )
        self.kubeconfigs = {
            user: second_apiserver.for_server(identities.kubeconfig_for(user, groups, settings), settings)
            for user, groups in PEOPLE.items()
        }

    def kubectl(self, user: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return kubectl(self.kubeconfigs[user], "-n", self.ns, *args, stdin=stdin, timeout=60)

    def cli(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        """The agentrun CLI as ``user`` (it sends the stamps a 1.34 server requires)."""
        return subprocess.run(
            [str(Path(sys.executable).parent / "agentrun"), *args, "-n", self.ns],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfigs[user]), "PYTHONWARNINGS": "ignore"},
        )

    def get(self, plural: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(*CUSTOM, self.ns, plural, name)
        return found

    def tick(self, schedule: str) -> str:
        """What the operator does at a tick: its Scheduler creates the run (with its own credentials)."""
        body = self.get("agentrunschedules", schedule)
        when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        run = schedules.tick_run_name(schedule, when)
        api = core_kube.load_api_client(str(self.admin))
        scheduler.Scheduler(api=api)._create(body, run, when)
        status = {"status": {"phase": "WaitingApproval", "pendingApproval": {"id": PENDING}}}
        self.custom.patch_namespaced_custom_object_status(*CUSTOM, self.ns, "agentruns", run, status)
        return run

    def close(self) -> None:
        with contextlib.suppress(kubernetes.client.ApiException):
            kubernetes.client.CoreV1Api(self.api).delete_namespace(self.ns)
        self.api.close()


@pytest.fixture
def place(k134: Path, dev_cluster: Any) -> Iterator[Place]:
    p = Place(k134, dev_cluster.settings)
    try:
        yield p
    finally:
        p.close()


def schedule(name: str, author: str | None, allow_self: bool = False) -> str:
    body: dict[str, Any] = {
        "apiVersion": "agentrun.dev/v1alpha1",
        "kind": "AgentRunSchedule",
        "metadata": {"name": name},
        "spec": {
            "schedule": "0 3 * * *",
            "suspend": True,
            "runTemplate": {
                "spec": {"graph": "pkg.mod:graph", "approval": {"allowSelfApproval": allow_self}}
            },
        },
    }
    if author is not None:
        body["metadata"]["annotations"] = {schedules.ANN_AUTHOR: author}
    return json.dumps(body)


def test_the_author_of_a_schedule_cannot_approve_its_ticks_run_on_134(place: Place) -> None:
    p = place
    for forged in (None, "manager"):  # unstamped, or naming someone else: refused, saying what to send
        proc = p.kubectl("carol", "create", "-f", "-", stdin=schedule("nightly", forged))
        assert proc.returncode != 0, proc.stdout
        assert f'{schedules.ANN_AUTHOR} must be "carol"' in proc.stderr, proc.stderr
    proc = p.kubectl("carol", "create", "-f", "-", stdin=schedule("nightly", "carol"))
    assert proc.returncode == 0, proc.stderr

    run = p.tick("nightly")
    ann = p.get("agentruns", run)["metadata"]["annotations"]
    assert ann[CREATED_BY] == identities.ADMIN_USER and ann[schedules.ANN_AUTHOR] == "carol", ann

    # carol cannot carry an author onto a run of her own (only the operator's verb "tick" may)
    fake: dict[str, Any] = {
        "apiVersion": "agentrun.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": "forged", "annotations": {CREATED_BY: "carol", schedules.ANN_AUTHOR: "manager"}},
        "spec": {"graph": "pkg.mod:graph", "suspend": True},
    }
    proc = p.kubectl("carol", "create", "-f", "-", stdin=json.dumps(fake))
    assert proc.returncode != 0 and 'the RBAC verb "tick"' in proc.stderr, proc.stderr

    mine = p.cli("carol", "approve", run, "--id", PENDING, "--yes")
    assert mine.returncode != 0 and "self-approval refused" in mine.stderr, mine.stderr
    assert "wrote the AgentRunSchedule nightly" in mine.stderr, mine.stderr
    assert APPROVE not in p.get("agentruns", run)["metadata"]["annotations"]
    theirs = p.cli("manager", "approve", run, "--id", PENDING, "--yes")
    assert theirs.returncode == 0, theirs.stderr
    ann = p.get("agentruns", run)["metadata"]["annotations"]
    assert ann[APPROVE] == PENDING and ann["agentrun.dev/decided-by"] == "manager", ann


def test_a_four_eyes_namespace_refuses_the_author_even_where_the_run_allows_self_approval(
    place: Place,
) -> None:
    p = place
    proc = p.kubectl("carol", "create", "-f", "-", stdin=schedule("selfish", "carol", allow_self=True))
    assert proc.returncode == 0, proc.stderr
    run = p.tick("selfish")
    kubernetes.client.CoreV1Api(p.api).patch_namespace(
        p.ns, {"metadata": {"labels": {"agentrun.dev/require-four-eyes": "true"}}}
    )
    mine = p.cli("carol", "approve", run, "--id", PENDING, "--yes")
    assert mine.returncode != 0 and "requires four eyes" in mine.stderr, mine.stderr
    assert APPROVE not in p.get("agentruns", run)["metadata"]["annotations"]


def test_the_author_changes_only_with_the_template_on_134(place: Place) -> None:
    p = place
    assert p.kubectl("carol", "create", "-f", "-", stdin=schedule("weekly", "carol")).returncode == 0
    suspend = json.dumps({"spec": {"suspend": False}})
    assert p.kubectl("carol", "patch", "ars", "weekly", "--type", "merge", "-p", suspend).returncode == 0
    template = {"spec": {"runTemplate": {"spec": {"input": {"a": 1}}}}}
    proc = p.kubectl("carol", "patch", "ars", "weekly", "--type", "merge", "-p", json.dumps(template))
    assert proc.returncode == 0, proc.stderr  # carol again: her own name stands
    moved = {"metadata": {"annotations": {schedules.ANN_AUTHOR: "manager"}}}
    proc = p.kubectl("carol", "patch", "ars", "weekly", "--type", "merge", "-p", json.dumps(moved))
    assert proc.returncode != 0 and "changes only with spec.runTemplate" in proc.stderr, proc.stderr
    assert p.get("agentrunschedules", "weekly")["metadata"]["annotations"][schedules.ANN_AUTHOR] == "carol"
