"""``kubectl agentrun suspend | resume | logs [-f] [--attempt N]`` and the global ``--as`` / ``--as-group``
(impersonation) on a run of the real operator with real worker Pods, and the run's image pin as the dev
cluster reports it (the local pod runtime reports no image digest: the pin is the admitted reference, said
so in status, recorded in Postgres)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import kubernetes
import psycopg

from agent_operator.decide import imagepin
from agentrun_core import store
from tests.support.approvals import Scene, scene_fixture
from tests.support.kube import bind, create_run, kubectl, pods, run_status, user_env
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import APPROVAL, FLAKY, run_spec
from tests.support.waiting import wait_for, wait_phase

scene = scene_fixture()


def follow_logs(
    kubeconfig: Path, ns: str, name: str
) -> tuple[subprocess.Popen[str], list[str], threading.Thread]:
    """``kubectl agentrun logs NAME -f`` running, with the lines it printed so far (filled by a reader)."""
    follow = subprocess.Popen(
        ["kubectl", "agentrun", "logs", name, "-n", ns, "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=user_env(kubeconfig),
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(follow.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    return follow, lines, reader


def test_suspend_resume_logs_and_the_image_pin(scene: Scene) -> None:
    kube, operator, ns = scene.kube, scene.operator, scene.ns
    out = scene.tmp_path / "effects.txt"
    uid = create_run(kube, ns, "sus", run_spec(FLAKY, {"path": str(out), "pause": {"prepare": 600}}))[
        "metadata"
    ]["uid"]
    wait_for(
        lambda: (
            (s := run_status(kube, ns, "sus")).get("phase") == "Running" and s.get("lease", {}).get("holder")
        ),
        180,
        "attempt 1's worker holds the run's Lease",
        on_timeout=lambda: operator.logs()[-3000:],
    )

    # logs -f streams attempt 1's worker log while it runs, and ends when the worker exits (the suspend)
    follow, lines, reader = follow_logs(scene.admin, ns, "sus")
    # the stream is open once the worker's first line (its Lease) arrived through it
    wait_for(lambda: any("acquired by sus-1" in line for line in lines), 120, "the log stream of attempt 1")
    suspended = kubectl(scene.admin, "agentrun", "suspend", "sus", "-n", ns)
    assert suspended.returncode == 0 and "suspend requested" in suspended.stdout, suspended.stderr
    status = wait_phase(kube, ns, "sus", "Suspended", 120, operator)
    assert follow.wait(timeout=120) == 0, follow.stderr.read()  # type: ignore[union-attr]
    reader.join(timeout=30)
    assert any("SIGTERM: draining at the next step boundary" in line for line in lines), lines
    again = kubectl(scene.admin, "agentrun", "suspend", "sus", "-n", ns)
    assert again.returncode == 0 and "already suspended" in again.stdout

    # the pin: the admitted reference, and explicitly no digest (the local runtime reports imageID "")
    pin = status["image"]
    assert pin["ref"] and pin["retryGeneration"] == 0 and "digest" not in pin, pin
    assert pin["note"] == imagepin.NO_DIGEST
    with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT worker_image, image_digest FROM agentrun_runs WHERE run_id = %s", (uid,)
        ).fetchone()
    assert row == (pin["ref"], None)

    # resume: a second attempt, from the checkpoint, runs the pinned image
    resumed = kubectl(scene.admin, "agentrun", "resume", "sus", "-n", ns)
    assert resumed.returncode == 0 and "resumed" in resumed.stdout, resumed.stderr
    wait_for(
        lambda: len(pods(kube, ns, "sus")) >= 1 and pods(kube, ns, "sus")[-1].metadata.name == "sus-2",
        120,
        "attempt 2's Pod",
    )
    (second,) = [p for p in pods(kube, ns, "sus") if p.metadata.name == "sus-2"]
    assert second.spec.containers[0].image == pin["ref"]
    assert run_status(kube, ns, "sus")["image"]["ref"] == pin["ref"]

    # logs of an attempt whose Pod is gone (suspend deleted it) say which attempts have Pods
    gone = kubectl(scene.admin, "agentrun", "logs", "sus", "-n", ns, "--attempt", "1")
    assert gone.returncode == 1
    assert "AgentRun sus has no Pod for attempt 1 (Pods exist for: 2)" in gone.stderr, gone.stderr
    missing = kubectl(scene.admin, "agentrun", "logs", "nope", "-n", ns)
    assert missing.returncode == 1 and 'AgentRun "nope" not found' in missing.stderr
    wait_for(
        lambda: run_status(kube, ns, "sus").get("lease", {}).get("holder") == "sus-2", 180, "attempt 2 runs"
    )
    latest = kubectl(scene.admin, "agentrun", "logs", "sus", "-n", ns, "--tail", "5")
    assert latest.returncode == 0, latest.stderr
    # a finished run has nothing to suspend
    assert kubectl(scene.admin, "agentrun", "cancel", "sus", "-n", ns).returncode == 0
    wait_phase(kube, ns, "sus", "Cancelled", 120, operator)
    late = kubectl(scene.admin, "agentrun", "suspend", "sus", "-n", ns)
    assert late.returncode == 1 and "AgentRun sus is Cancelled: there is nothing to suspend" in late.stderr
    assert not out.exists()  # prepare never finished: no effect was performed


def test_a_retry_with_a_new_image_repins_the_run(scene: Scene) -> None:
    kube, operator, ns = scene.kube, scene.operator, scene.ns
    out, flag = scene.tmp_path / "effects.txt", scene.tmp_path / "fixed"
    uid = create_run(
        kube, ns, "img", run_spec(FLAKY, {"path": str(out), "flag": str(flag), "fail_with": "bug"})
    )["metadata"]["uid"]
    failed = wait_phase(kube, ns, "img", "Failed", 180, operator)
    first = failed["image"]["ref"]
    assert first != "reg.example/worker:fixed" and failed["image"]["retryGeneration"] == 0
    # Attempt 1's Pod ran the admitted image; read it now: the operator deletes an earlier attempt's Pod once
    # a later attempt has started (finished-Pod cleanup).
    (pod_1,) = pods(kube, ns, "img")
    assert (pod_1.metadata.name, pod_1.spec.containers[0].image) == ("img-1", first)
    flag.write_text("")  # the fix, in the (local runtime's) code; the new image names it
    retried = kubectl(
        scene.admin, "agentrun", "retry", "img", "-n", ns, "--image", "reg.example/worker:fixed"
    )
    assert retried.returncode == 0, retried.stderr
    done = wait_phase(kube, ns, "img", "Succeeded", 180, operator)
    assert done["image"]["ref"] == "reg.example/worker:fixed" and done["image"]["retryGeneration"] == 1
    images = {p.metadata.name: p.spec.containers[0].image for p in pods(kube, ns, "img")}
    assert images["img-2"] == "reg.example/worker:fixed", images
    with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT worker_image, image_digest, image_generation FROM agentrun_runs WHERE run_id = %s", (uid,)
        ).fetchone()
    assert row == ("reg.example/worker:fixed", None, 1)
    assert len(out.read_text().splitlines()) == 1  # the effect sent before the bug was not repeated


def test_logs_follow_goes_on_into_the_next_attempt_and_stops_when_no_attempt_will_come(scene: Scene) -> None:
    kube, operator, ns = scene.kube, scene.operator, scene.ns
    create_run(
        kube,
        ns,
        "hop",
        run_spec(FLAKY, {"path": str(scene.tmp_path / "effects.txt"), "pause": {"prepare": 600}}),
    )
    wait_for(
        lambda: run_status(kube, ns, "hop").get("lease", {}).get("holder") == "hop-1",
        180,
        "attempt 1's worker holds the run's Lease",
        on_timeout=lambda: operator.logs()[-3000:],
    )
    follow, lines, reader = follow_logs(scene.admin, ns, "hop")
    wait_for(lambda: any("acquired by hop-1" in line for line in lines), 120, "the log stream of attempt 1")
    # The Pod is lost (a force delete, as a node's loss ends it): the operator starts attempt 2 by itself.
    kubernetes.client.CoreV1Api(kube).delete_namespaced_pod("hop-1", ns, grace_period_seconds=0)
    wait_for(
        lambda: any("acquired by hop-2" in line for line in lines),
        240,
        "attempt 2's log through the same follow",
        on_timeout=lambda: (
            f"follow exit {follow.poll()}: "
            + (follow.stderr.read() if follow.poll() is not None else "")  # type: ignore[union-attr]
            + "".join(lines)[-3000:]
            + operator.logs()[-3000:]
        ),
    )
    assert follow.poll() is None  # still following attempt 2
    assert kubectl(scene.admin, "agentrun", "cancel", "hop", "-n", ns).returncode == 0
    wait_phase(kube, ns, "hop", "Cancelled", 120, operator)
    assert follow.wait(timeout=120) == 0
    reader.join(timeout=30)
    err = follow.stderr.read()  # type: ignore[union-attr]
    assert "following attempt 2 (pod hop-2)" in err and "hop is Cancelled: no further attempt" in err, err


def test_as_impersonates_like_kubectl(
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    admin_kubeconfig: Path,
    identity: Callable[..., Path],
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    """``--as USER [--as-group G]`` (global, as kubectl's): the dev cluster's admin, who may impersonate, acts
    as each identity, and each is allowed or refused by its own RBAC; the decision is recorded under the
    impersonated name (the API server stamps request.userInfo). Someone who may not impersonate is refused."""
    ns, out = operator.namespace, tmp_path / "out.txt"
    bind(kube, ns, "manager", "agentrun-approver")
    bind(kube, ns, "mallory", "agentrun-editor")  # may patch AgentRuns, not approve them
    body = {
        "graph": APPROVAL,
        "input": {"path": str(out), "line": "impersonated"},
        "lease": {"durationSeconds": 8},
        "retry": {"backoffSeconds": 0},
    }
    uid = create_run(kube, ns, "imp", body)["metadata"]["uid"]
    status = wait_phase(kube, ns, "imp", "WaitingApproval", 180, operator)
    aid = str(status["pendingApproval"]["id"])
    approve = ("agentrun", "approve", "imp", "-n", ns, "--id", aid)

    as_mallory = kubectl(admin_kubeconfig, *approve, "--as", "mallory", "--as-group", "devs")
    assert as_mallory.returncode != 0, as_mallory.stdout
    assert "may not approve or reject" in as_mallory.stderr, as_mallory.stderr
    # the manager may not impersonate anyone: the API server refuses before anything else
    manager = identity("manager", ["managers"])
    hijack = kubectl(manager, *approve, "--as=mallory")
    assert hijack.returncode != 0 and "cannot impersonate" in hijack.stderr, hijack.stderr
    assert run_status(kube, ns, "imp")["phase"] == "WaitingApproval"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert [a.status for a in store.list_approvals(conn, uid)] == ["pending"]

    # --as before the verb, as a global option: the manager's own RBAC allows it
    as_manager = kubectl(
        admin_kubeconfig, "agentrun", "--as", "manager", "--as-group", "managers", *approve[1:]
    )
    assert as_manager.returncode == 0, as_manager.stderr
    status = wait_phase(kube, ns, "imp", ("Succeeded", "Failed"), 180, operator)
    assert status["phase"] == "Succeeded", status
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        (decided,) = store.list_approvals(conn, uid)
    assert (decided.status, decided.decided_by) == ("approved", "manager")
    assert len(out.read_text().splitlines()) == 1  # the approved effect, once, at its provider

    # usage errors are the CLI's, before any request
    lonely = kubectl(admin_kubeconfig, *approve, "--as-group", "managers")
    assert lonely.returncode == 2 and "--as-group needs --as" in lonely.stderr, lonely.stderr
