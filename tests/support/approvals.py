"""What the tests of people steering runs on the dev cluster share: approvals, edits, forks, retries, the CLI
verbs (tests/integration/test_approval_*, test_fork_flow, test_hitl_flow, test_steer_flow, test_cli_verbs,
test_steering_guard).

* ``Scene`` and ``scene_fixture`` — the cluster, the operator, the admin, the test's database and folder,
  and the module's ``people`` in one value: a test names what it drives, not five fixtures.
* ``ticket_spec`` / ``bodies`` — the support-ticket agent's run and the emails the real SMTP sink received.
* ``create_as`` (a run created by a person, so the self-approval rule knows its creator), ``pending`` (the
  approval a parked run asks for), ``wait_condition`` (a status condition turned True).
"""

from __future__ import annotations

import dataclasses
import email
import email.policy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import kubernetes
import pytest

from agentrun_dev import smtp_sink
from tests.support.kube import condition, kubectl, run_body, run_status
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import TICKET, TICKET_GRAPH, run_spec, smtp_env
from tests.support.waiting import wait_for, wait_phase


@dataclasses.dataclass(frozen=True)
class Scene:
    """One test's run-driving world: ``kube`` (admin ApiClient), its ``operator`` (whose namespace is
    ``ns``), ``admin`` (the admin's kubeconfig), ``pg_dsn`` (the test's database), ``tmp_path``."""

    kube: kubernetes.client.ApiClient
    operator: OperatorHandle
    admin: Path
    pg_dsn: str
    tmp_path: Path
    request: pytest.FixtureRequest

    @property
    def ns(self) -> str:
        return self.operator.namespace

    @property
    def people(self) -> dict[str, Path]:
        """The module's ``people`` fixture, made only for the tests that ask for someone (identities and
        RBAC bindings are not free)."""
        found: dict[str, Path] = self.request.getfixturevalue("people")
        return found

    def wait_phase(self, name: str, phase: str | tuple[str, ...], timeout: float) -> dict[str, Any]:
        return wait_phase(self.kube, self.ns, name, phase, timeout, self.operator)


def scene_fixture() -> Any:
    """The module's ``scene`` fixture (``scene = scene_fixture()``): a ``Scene`` of the test's own."""

    @pytest.fixture
    def scene(
        kube: kubernetes.client.ApiClient,
        operator: OperatorHandle,
        admin_kubeconfig: Path,
        pg_dsn: str,
        tmp_path: Path,
        request: pytest.FixtureRequest,
    ) -> Scene:
        return Scene(kube, operator, admin_kubeconfig, pg_dsn, tmp_path, request)

    return scene


def ticket_spec(sink: smtp_sink.SmtpSink) -> dict[str, Any]:
    """The support-ticket agent's run, its emails sent to ``sink``."""
    return run_spec(TICKET_GRAPH, {"ticket": TICKET}, env=smtp_env("SUPPORT", sink))


def bodies(sink: smtp_sink.SmtpSink) -> list[str]:
    """The text of every email the SMTP sink received, in order (parsed from the raw message)."""
    out = []
    for meta in sink.store.find(None):
        message = email.message_from_bytes(sink.store.raw(int(meta["seq"])), policy=email.policy.default)
        part = message.get_body(preferencelist=("plain",))
        out.append(str(part.get_content()) if part is not None else "")
    return out


def create_as(who: Path, ns: str, name: str, spec: dict[str, Any]) -> None:
    made = kubectl(who, "create", "-n", ns, "-f", "-", stdin=json.dumps(run_body(name, spec)))
    assert made.returncode == 0, made.stderr


def pending(kube: kubernetes.client.ApiClient, ns: str, name: str, timeout: float = 240) -> dict[str, Any]:
    """The run's ``status.pendingApproval`` once it asks for one."""
    found = wait_for(lambda: run_status(kube, ns, name).get("pendingApproval"), timeout, f"{name}'s approval")
    return cast(dict[str, Any], found)


def wait_condition(
    kube: kubernetes.client.ApiClient,
    ns: str,
    name: str,
    type_: str,
    timeout: float,
    on_timeout: Callable[[], str] | None = None,
) -> dict[str, Any]:
    """The run's status once its condition ``type_`` is True."""
    status = wait_for(
        lambda: (s := run_status(kube, ns, name)) and condition(s, type_).get("status") == "True" and s,
        timeout,
        f"condition {type_}",
        on_timeout=on_timeout,
    )
    return cast(dict[str, Any], status)
