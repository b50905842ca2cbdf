"""spec.approval.notify on the dev cluster: the operator, real worker Pods, a real loopback webhook receiver.

Every count is taken at the receiver (``webhook_receiver``: each request it read), never from our ledger:
one delivery per (approval, event); the approve command the message carries is run as the manager through
the real ``kubectl agentrun`` plugin; retries on 503/429 carry the same Idempotency-Key; a missing Secret or
an unreachable URL shows as a Warning and the ``NotificationFailed`` condition while the approval still works.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from agent_operator.decide import notify
from agentrun_core import store
from agentrun_core.store import notifications
from agentrun_dev.webhook_receiver import Receiver
from tests.support.kube import condition, create_run, events, kubectl, run_status
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import STEPS, approval_spec
from tests.support.waiting import wait_for, wait_phase

TOKEN = "s3cr3t-t0ken-for-the-receiver"


@pytest.fixture
def manager(kube: kubernetes.client.ApiClient, namespace: str, identity: Callable[..., Path]) -> Path:
    binding: Any = {
        "metadata": {"name": "manager-approver"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "agentrun-approver",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "manager"}],
    }
    kubernetes.client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(namespace, binding)
    return identity("manager", ["managers"])


def token_secret(kube: kubernetes.client.ApiClient, namespace: str, name: str = "agentrun-notify") -> None:
    secret: Any = {"metadata": {"name": name}, "data": {"token": base64.b64encode(TOKEN.encode()).decode()}}
    kubernetes.client.CoreV1Api(kube).create_namespaced_secret(namespace, secret)


def spec(path: Path, notify_: dict[str, Any], **approval: Any) -> dict[str, Any]:
    return approval_spec(path, **approval, notify=notify_)


def pending(kube: kubernetes.client.ApiClient, op: OperatorHandle, name: str) -> str:
    status = wait_phase(kube, op.namespace, name, "WaitingApproval", 120, op)
    return str(status["pendingApproval"]["id"])


def asked(pg_dsn: str, uid: str, op: OperatorHandle) -> str:
    """The id of the run's first approval, from Postgres: with a 3 s deadline the status may go
    WaitingApproval → Cancelled between two polls, but the approval row stays."""

    def first() -> str | None:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            found = store.list_approvals(conn, uid)
        return found[0].approval_id if found else None

    return str(wait_for(first, 120, f"an approval of run {uid}", on_timeout=op.logs))


def delivered(receiver: Receiver, key: str, op: OperatorHandle, timeout: float = 60) -> Any:
    return wait_for(lambda: receiver.delivered.get(key), timeout, f"delivery of {key}", on_timeout=op.logs)


def as_user(kubeconfig: Path, command: str) -> subprocess.CompletedProcess[str]:
    """Run a command line as printed in a notification (``kubectl agentrun …``) as that identity."""
    program, *args = shlex.split(command)
    assert program == "kubectl", command
    return kubectl(kubeconfig, *args, "--yes", timeout=120)


def test_requested_notification_carries_prompt_deadline_and_commands_that_work(
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    receiver: Receiver,
    manager: Path,
    tmp_path: Path,
    pg_dsn: str,
) -> None:
    ns, out = operator.namespace, tmp_path / "effects.txt"
    token_secret(kube, ns)
    hook = {"url": receiver.url, "tokenSecretRef": {"name": "agentrun-notify"}}
    uid = create_run(kube, ns, "ok", spec(out, hook))["metadata"]["uid"]
    approval_id = pending(kube, operator, "ok")
    key, _ = notify.key_for(uid, approval_id, "requested")
    got = delivered(receiver, key, operator)
    assert got.headers["Authorization"] == f"Bearer {TOKEN}" and got.event == "requested"
    body = got.body
    assert (
        body["approval"]["id"] == approval_id and body["approval"]["prompt"]["question"] == "append the line?"
    )
    assert body["approval"]["deadline"] and body["approval"]["deadline"] in body["text"]
    approve = f"kubectl agentrun approve -n {ns} ok --id {approval_id}"
    assert body["commands"]["approve"] == approve and approve in body["text"]
    assert f"kubectl agentrun reject -n {ns} ok --id {approval_id}" in body["text"]
    # The exact command of the message, run by the approver, is what resumes the run.
    done = as_user(manager, approve)
    assert done.returncode == 0, done.stdout + done.stderr
    wait_phase(kube, ns, "ok", "Succeeded", 120, operator)
    assert len(out.read_text().splitlines()) == 1  # the effect after the approval, once
    assert len(receiver.requests) == 1  # nothing else was sent, nothing twice
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        (row,) = notifications.list_notifications(conn, uid)
    assert (row.idempotency_key, row.status, row.attempts, row.action) == (key, "sent", 1, "requested")
    assert TOKEN not in operator.logs()
    assert TOKEN not in " ".join(str(e.message) for e in events(kube, ns, "ok"))


def test_escalated_and_expired_each_notified_once(
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    receiver: Receiver,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    ns = operator.namespace
    hook = {"url": receiver.url, "format": "slack"}
    esc = create_run(kube, ns, "esc", spec(tmp_path / "a", hook, timeoutSeconds=3, onTimeout="escalate"))
    late = create_run(kube, ns, "late", spec(tmp_path / "b", hook, timeoutSeconds=3, onTimeout="cancel"))
    esc_id = asked(pg_dsn, esc["metadata"]["uid"], operator)
    late_id = asked(pg_dsn, late["metadata"]["uid"], operator)
    escalated, _ = notify.key_for(esc["metadata"]["uid"], esc_id, "escalated")
    expired, _ = notify.key_for(late["metadata"]["uid"], late_id, "expired")
    got = delivered(receiver, escalated, operator)
    assert (
        "past its deadline" in got.body["text"] and got.body["blocks"][0]["text"]["text"] == got.body["text"]
    )
    assert f"kubectl agentrun approve -n {ns} esc --id {esc_id}" in got.body["text"]
    assert "expired" in delivered(receiver, expired, operator).body["text"]
    wait_phase(kube, ns, "late", "Cancelled", 60, operator)
    for uid, approval_id, owed in (
        (esc["metadata"]["uid"], esc_id, ("requested", "escalated")),
        (late["metadata"]["uid"], late_id, ("requested", "expired")),
    ):
        for event in owed:
            key, _ = notify.key_for(uid, approval_id, event)
            assert len(receiver.by_key(key)) == 1, (event, [r.event for r in receiver.requests])
    assert len(receiver.requests) == 4


def test_needs_human_notified_once_with_the_resolve_commands(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, receiver: Receiver, tmp_path: Path
) -> None:
    ns = operator.namespace
    body = {
        "graph": STEPS,
        "input": {"path": str(tmp_path / "effects.txt")},
        "lease": {"durationSeconds": 8},
        "retry": {"backoffSeconds": 0},
        "worker": {"env": [{"name": "AGENTRUN_FAULT_POINTS_ATTEMPT_1", "value": "after_call"}]},
        "approval": {"notify": {"url": receiver.url}},
    }
    create_run(kube, ns, "s", body)
    status = wait_phase(kube, ns, "s", "Failed", 180, operator)
    assert condition(status, "Failed")["reason"] == "NeedsHuman"
    got = wait_for(
        lambda: receiver.delivered and list(receiver.delivered.values()),
        60,
        "a delivery",
        on_timeout=operator.logs,
    )
    (req,) = got
    effect_key = req.body["effect"]["key"]
    assert (
        req.event == "needs_human"
        and f"kubectl agentrun resolve -n {ns} s {effect_key} --sent" in req.body["text"]
    )
    wait_for(lambda: "Notified" in [e.reason for e in events(kube, ns, "s")], 30, "Notified event")
    assert len(receiver.requests) == 1


def test_5xx_and_429_retried_with_backoff_under_one_key(
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    receiver: Receiver,
    tmp_path: Path,
    pg_dsn: str,
) -> None:
    ns = operator.namespace
    operator.reconfigure(kube, AGENTRUN_NOTIFY_BACKOFF_SECONDS="0.5")
    receiver.answers = [503, 429, 500]
    receiver.retry_after = "1"
    uid = create_run(kube, ns, "r", spec(tmp_path / "e", {"url": receiver.url}))["metadata"]["uid"]
    approval_id = pending(kube, operator, "r")
    key, _ = notify.key_for(uid, approval_id, "requested")
    delivered(receiver, key, operator)
    answered = [r.answered for r in receiver.by_key(key)]
    assert answered == [503, 429, 500, 200], answered
    assert len(receiver.requests) == 4 and {r.key for r in receiver.requests} == {key}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        (row,) = notifications.list_notifications(conn, uid)
    assert (row.status, row.attempts) == ("sent", 4)
    reasons = [e.reason for e in events(kube, ns, "r")]
    assert "NotificationRetrying" in reasons and "Notified" in reasons


def failed_with(kube: kubernetes.client.ApiClient, ns: str, name: str, reason: str) -> dict[str, Any] | None:
    """The run's status once its NotificationFailed condition has this reason."""
    status = run_status(kube, ns, name)
    return status if condition(status, "NotificationFailed").get("reason") == reason else None


def test_missing_secret_and_unreachable_url_do_not_block_the_approval(
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    manager: Path,
    tmp_path: Path,
    pg_dsn: str,
) -> None:
    ns = operator.namespace
    operator.reconfigure(kube, AGENTRUN_NOTIFY_BACKOFF_SECONDS="0.2", AGENTRUN_NOTIFY_MAX_ATTEMPTS="2")
    missing = {"url": "http://127.0.0.1:9/none", "tokenSecretRef": {"name": "no-such-secret"}}
    uids = {
        "nosecret": create_run(kube, ns, "nosecret", spec(tmp_path / "a", missing))["metadata"]["uid"],
        "nowhere": create_run(kube, ns, "nowhere", spec(tmp_path / "b", {"url": "http://127.0.0.1:9/hook"}))[
            "metadata"
        ]["uid"],
    }
    for name, reason, text in (
        ("nosecret", "NotificationSecretMissing", f"Secret {ns}/no-such-secret key 'token'"),
        ("nowhere", "NotificationFailed", "cannot reach http://127.0.0.1:9"),
    ):
        approval_id = pending(kube, operator, name)
        status = wait_for(
            functools.partial(failed_with, kube, ns, name, reason),
            60,
            f"{name}: NotificationFailed",
            on_timeout=operator.logs,
        )
        cond = condition(status, "NotificationFailed")
        assert cond["status"] == "True" and cond["reason"] == reason and text in cond["message"], cond
        assert reason in [e.reason for e in events(kube, ns, name)]
        code = kubectl(
            manager, "annotate", "-n", ns, "--overwrite", f"ar/{name}", f"agentrun.dev/approve={approval_id}"
        )
        assert code.returncode == 0, code.stderr
        wait_phase(kube, ns, name, "Succeeded", 120, operator)
    # The notification nobody could send while the Secret was missing is settled once the approval is decided:
    # never called (no Secret, no call), so provably not sent; it is not sent late either.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        (row,) = notifications.list_notifications(conn, uids["nosecret"])
        assert row.attempts == 0
        wait_for(
            lambda: notifications.list_notifications(conn, uids["nosecret"])[0].status == "failed",
            30,
            "the moot notification settled",
            on_timeout=operator.logs,
        )
        (row,) = notifications.list_notifications(conn, uids["nowhere"])
        assert (row.status, row.attempts) == ("failed", 2)  # AGENTRUN_NOTIFY_MAX_ATTEMPTS


def test_bad_notify_specs_refused_by_the_api_server(
    kube: kubernetes.client.ApiClient, namespace: str, admin_kubeconfig: Path, tmp_path: Path
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"url": "ftp://example.com/x"},
            "spec.approval.notify.url must be an absolute http:// or https:// URL",
        ),
        ({"url": "not a url"}, "spec.approval.notify.url must be an absolute http:// or https:// URL"),
        ({"url": "https://x.test/", "format": "teams"}, 'Unsupported value: "teams"'),
        ({"url": "https://x.test/", "tokenSecretRef": {"name": "../other-ns"}}, "must be a Secret name"),
    ]
    for i, (hook, message) in enumerate(cases):
        with pytest.raises(kubernetes.client.ApiException) as err:
            create_run(kube, namespace, f"bad-{i}", spec(tmp_path / "x", hook))
        assert message in json.loads(str(err.value.body))["message"], (hook, err.value.body)
    # There is no namespace field: a run cannot name another namespace's Secret (kubectl validates strictly).
    manifest = tmp_path / "other-ns.json"
    other: dict[str, Any] = {
        "url": "https://x.test/",
        "tokenSecretRef": {"name": "s", "namespace": "kube-system"},
    }
    body = {"apiVersion": "agentrun.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": "bad-ns"}}
    manifest.write_text(json.dumps({**body, "spec": spec(tmp_path / "x", other)}))
    applied = kubectl(admin_kubeconfig, "apply", "-n", namespace, "-f", str(manifest))
    assert applied.returncode != 0
    assert 'unknown field "spec.approval.notify.tokenSecretRef.namespace"' in applied.stderr, applied.stderr


def test_readme_example_runs(
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    receiver: Receiver,
    tmp_path: Path,
    admin_kubeconfig: Path,
) -> None:
    """The README's notify example, applied with kubectl (only the URL and the graph input changed)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = re.search(r"<!-- notify-example -->\n```yaml\n(.*?)```", readme, re.S)
    assert example is not None
    text = example.group(1).replace("https://hooks.example.com/agentrun", receiver.url)
    text = text.replace("/tmp/ticket-effects.txt", str(tmp_path / "effects.txt"))
    manifest = tmp_path / "example.yaml"
    manifest.write_text(text)
    applied = kubectl(admin_kubeconfig, "apply", "-n", operator.namespace, "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    wait_phase(kube, operator.namespace, "refund-42", "WaitingApproval", 120, operator)
    got = wait_for(lambda: list(receiver.delivered.values()), 60, "a delivery", on_timeout=operator.logs)
    assert got[0].headers["Authorization"].startswith("Bearer ") and got[0].event == "requested"
    assert "kubectl agentrun approve" in got[0].body["text"]
