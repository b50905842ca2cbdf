"""Steering runs on the dev cluster, as users would: ``kubectl wait``, ``kubectl agentrun retry | resolve |
cancel`` and ``agentrun wait`` with real identities (client certificates), the real admission policies, the
operator and real worker Pods. Effects are counted in the effect file the graphs append to (one line per
performed call), never inferred from our own tables."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes
import psycopg
import pytest

from agentrun_core import store
from agentrun_dev import http_provider
from tests.support import cli
from tests.support.approvals import Scene, scene_fixture
from tests.support.kube import Team, condition, create_run, events, get_run, kubectl, run_status, user_env
from tests.support.specs import FLAKY, STEPS, lines, run_spec
from tests.support.waiting import wait_for, wait_phase

scene = scene_fixture()


def agentrun(
    kubeconfig: Path, *args: str, timeout: float = 300, dsn: str = ""
) -> subprocess.CompletedProcess[str]:
    return cli.agentrun(*args, timeout=timeout, env=user_env(kubeconfig, dsn))


@pytest.fixture
def people(team: Team) -> dict[str, Path]:
    """oncall may retry and resolve; mallory may edit AgentRuns (patch too) but neither retry nor resolve."""
    return team(
        {"oncall": ("sre", "agentrun-retrier", "agentrun-resolver"), "mallory": ("devs", "agentrun-editor")}
    )


def pending_key(dsn: str, uid: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        (row,) = [e for e in store.list_effects(conn, uid) if e.status == "pending"]
    return row.idempotency_key


def test_finished_condition_and_wait_exit_codes(scene: Scene) -> None:
    kube, operator, ns = scene.kube, scene.operator, scene.ns
    create_run(kube, ns, "ok", run_spec(STEPS, {"path": str(scene.tmp_path / "ok.txt")}))
    create_run(
        kube,
        ns,
        "bug",
        run_spec(
            FLAKY,
            {"path": str(scene.tmp_path / "bug.txt"), "flag": str(scene.tmp_path / "no"), "fail_with": "bug"},
        ),
    )
    create_run(
        kube,
        ns,
        "stop",
        run_spec(STEPS, {"path": str(scene.tmp_path / "stop.txt"), "pause": {"prepare": 120}}),
    )
    wait_phase(kube, ns, "stop", "Running", 120, operator)
    timed_out = agentrun(scene.admin, "wait", "stop", "-n", ns, "--timeout", "1")
    assert timed_out.returncode == 4 and "timed out after 1s; still Running" in timed_out.stderr
    cancel = kubectl(scene.admin, "agentrun", "cancel", "stop", "-n", ns)
    assert cancel.returncode == 0, cancel.stderr
    for name in ("ok", "bug", "stop"):
        waited = kubectl(
            scene.admin, "wait", "-n", ns, "--for=condition=Finished", f"ar/{name}", "--timeout=180s"
        )
        assert waited.returncode == 0, (name, waited.stderr, operator.logs()[-4000:])
    expected = {"ok": (0, "Succeeded"), "bug": (1, "Failed (GraphFailed)"), "stop": (3, "Cancelled")}
    for name, (code, text) in expected.items():
        proc = agentrun(scene.admin, "wait", name, "-n", ns, "--timeout", "60")
        assert proc.returncode == code, (name, proc.stdout, proc.stderr)
        assert f"agentrun/{name} {text}" in proc.stdout + proc.stderr
        assert condition(run_status(kube, ns, name), "Finished")["reason"] == text.split()[0]
    assert "bug in node check" in agentrun(scene.admin, "wait", "bug", "-n", ns).stderr
    missing = agentrun(scene.admin, "wait", "no-such-run", "-n", ns, "--timeout", "5")
    assert missing.returncode == 5 and 'AgentRun "no-such-run" not found' in missing.stderr, missing.stderr


def test_retry_after_fixing_the_graph_does_not_repeat_the_sent_effect(scene: Scene) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    out, flag = scene.tmp_path / "effects.txt", scene.tmp_path / "fixed"
    uid = create_run(
        kube, ns, "fix", run_spec(FLAKY, {"path": str(out), "flag": str(flag), "fail_with": "bug"})
    )["metadata"]["uid"]
    status = wait_phase(kube, ns, "fix", "Failed", 120, operator)
    assert condition(status, "Failed")["reason"] == "GraphFailed" and len(lines(out)) == 1
    refused = kubectl(people["mallory"], "agentrun", "retry", "fix", "-n", ns)
    assert refused.returncode != 0 and "may not retry AgentRun" in refused.stderr, refused.stderr
    forged = kubectl(
        people["mallory"],
        "patch",
        "ar",
        "fix",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec": {"retryGeneration": 1}}',
    )
    assert forged.returncode != 0 and 'the RBAC verb "retry"' in forged.stderr, forged.stderr
    flag.touch()  # the fix: the node no longer raises
    retried = kubectl(people["oncall"], "agentrun", "retry", "fix", "-n", ns)
    assert retried.returncode == 0, retried.stderr
    assert "retry generation 1 requested" in retried.stdout
    done = agentrun(scene.admin, "wait", "fix", "-n", ns, "--timeout", "180")
    assert done.returncode == 0, (done.stderr, operator.logs()[-6000:])
    assert len(lines(out)) == 1  # the first effect was not repeated
    status = run_status(kube, ns, "fix")
    assert status["phase"] == "Succeeded" and status["attemptReason"] == "retry"
    assert status["retryGeneration"] == 1 and status["reopened"] == 1
    (entry,) = status["interventions"]
    assert (entry["kind"], entry["by"], entry["generation"]) == ("retry", "oncall", 1) and entry["at"]
    assert get_run(kube, ns, "fix")["metadata"]["annotations"]["agentrun.dev/retried-by"] == "oncall"
    with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
        attempts = store.list_attempts(conn, uid)
    assert [a.start_reason for a in attempts][-1] == "retry"
    trace = agentrun(scene.admin, "trace", "fix", "-n", ns, timeout=60, dsn=scene.pg_dsn)
    assert "retry" in trace.stdout and "oncall" in trace.stdout, trace.stdout + trace.stderr
    again = kubectl(people["oncall"], "agentrun", "retry", "fix", "-n", ns)
    assert again.returncode != 0 and "is Succeeded" in again.stderr


def test_cancelled_run_with_a_pending_effect_retried_then_resolved_not_sent(scene: Scene) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    out = scene.tmp_path / "effects.txt"
    body = run_spec(STEPS, {"path": str(out)})
    body["retry"] = {"backoffSeconds": 120, "maxBackoffSeconds": 120}  # attempt 2 would wait: we cancel first
    body["worker"] = {"env": [{"name": "AGENTRUN_FAULT_POINTS_ATTEMPT_1", "value": "after_reserve"}]}
    uid = create_run(kube, ns, "c", body)["metadata"]["uid"]
    wait_for(
        lambda: run_status(kube, ns, "c").get("nextAttemptAt"),
        120,
        "attempt 1 killed after reserve",
        on_timeout=operator.logs,
    )
    assert kubectl(scene.admin, "agentrun", "cancel", "c", "-n", ns).returncode == 0
    status = wait_phase(kube, ns, "c", "Cancelled", 120, operator)
    assert "1 effect(s) left pending" in status["message"] and status["effects"]["pending"] == 1
    assert lines(out) == []  # reserved, never performed
    # Retried: the pending row of the killed attempt is reconciled, not guessed: this tool has no lookup
    # hook and its provider does not dedupe, so a human must say.
    assert kubectl(people["oncall"], "agentrun", "retry", "c", "-n", ns).returncode == 0
    status = wait_for(
        lambda: (s := run_status(kube, ns, "c")) and s.get("reopened") == 1 and s["phase"] == "Failed" and s,
        180,
        "the retried run to stop for a human",
        on_timeout=operator.logs,
    )
    assert condition(status, "Failed")["reason"] == "NeedsHuman" and lines(out) == []
    key = pending_key(scene.pg_dsn, uid)
    refused = kubectl(people["mallory"], "agentrun", "resolve", "c", key, "--not-sent", "-n", ns)
    assert refused.returncode != 0 and "may not resolve effects" in refused.stderr, refused.stderr
    resolved = kubectl(people["oncall"], "agentrun", "resolve", "c", key, "--not-sent", "-n", ns)
    assert resolved.returncode == 0, resolved.stderr
    done = agentrun(scene.admin, "wait", "c", "-n", ns, "--timeout", "180")
    assert done.returncode == 0, (done.stderr, operator.logs()[-6000:])
    assert len(lines(out)) == 1 and lines(out)[0].startswith(key)  # performed exactly once, under its key
    kinds = [(i["kind"], i["by"]) for i in run_status(kube, ns, "c")["interventions"]]
    assert kinds == [("retry", "oncall"), ("resolve_not_sent", "oncall")]


def test_needs_human_retried_then_resolved_sent(scene: Scene) -> None:
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    out = scene.tmp_path / "effects.txt"
    body = run_spec(STEPS, {"path": str(out)})
    body["worker"] = {"env": [{"name": "AGENTRUN_FAULT_POINTS_ATTEMPT_1", "value": "after_call"}]}
    uid = create_run(kube, ns, "s", body)["metadata"]["uid"]
    status = wait_phase(kube, ns, "s", "Failed", 180, operator)
    assert condition(status, "Failed")["reason"] == "NeedsHuman" and len(lines(out)) == 1
    # A retry alone does not guess either: the run stops for the human again, nothing is called.
    assert kubectl(people["oncall"], "agentrun", "retry", "s", "-n", ns).returncode == 0
    wait_for(
        lambda: (s := run_status(kube, ns, "s")) and s.get("reopened") == 1 and s["phase"] == "Failed",
        180,
        "the retried run to stop for a human again",
        on_timeout=operator.logs,
    )
    key = pending_key(scene.pg_dsn, uid)
    bad = kubectl(people["oncall"], "agentrun", "resolve", "s", key, "--sent", "--result", "{nope", "-n", ns)
    assert bad.returncode != 0 and "--result is not JSON" in bad.stderr
    result = '{"path": "recorded-by-a-human", "line": "hello"}'
    ok = kubectl(people["oncall"], "agentrun", "resolve", "s", key, "--sent", "--result", result, "-n", ns)
    assert ok.returncode == 0, ok.stderr
    done = agentrun(scene.admin, "wait", "s", "-n", ns, "--timeout", "180")
    assert done.returncode == 0, (done.stderr, operator.logs()[-6000:])
    assert len(lines(out)) == 1  # the effect happened once, before the crash; never again
    status = run_status(kube, ns, "s")
    assert status["result"]["written"] == {"path": "recorded-by-a-human", "line": "hello"}
    assert [(i["kind"], i["by"]) for i in status["interventions"]] == [
        ("retry", "oncall"),
        ("resolve_sent", "oncall"),
    ]
    annotations = get_run(kube, ns, "s")["metadata"].get("annotations", {})
    assert "agentrun.dev/resolve" not in annotations  # consumed


def test_admission_rules_of_retry_and_resolve(
    kube: kubernetes.client.ApiClient, namespace: str, admin_kubeconfig: Path, people: dict[str, Path]
) -> None:
    """API server only (no operator): the CRD's CEL and the steering policies, with their messages."""
    create_run(kube, namespace, "adm", run_spec(STEPS, {"path": "/nonexistent"}))
    ns = ["-n", namespace]

    def patch(who: Path, body: str) -> subprocess.CompletedProcess[str]:
        return kubectl(who, "patch", "ar", "adm", *ns, "--type=merge", "-p", body)

    early = patch(admin_kubeconfig, '{"spec": {"retryGeneration": 1}}')
    assert early.returncode != 0 and "only a Failed (including needs-human) or Cancelled run" in early.stderr
    status = {"status": {"phase": "Cancelled", "conditions": []}}
    kubernetes.client.CustomObjectsApi(kube).patch_namespaced_custom_object_status(
        "agentrun.dev", "v1alpha1", namespace, "agentruns", "adm", status
    )
    both = patch(admin_kubeconfig, '{"spec": {"retryGeneration": 1, "cancel": true}}')
    assert both.returncode != 0 and "set spec.cancel to false" in both.stderr, both.stderr
    ok = patch(people["oncall"], '{"spec": {"retryGeneration": 2}}')
    assert ok.returncode == 0, ok.stderr
    assert get_run(kube, namespace, "adm")["metadata"]["annotations"]["agentrun.dev/retried-by"] == "oncall"
    down = patch(admin_kubeconfig, '{"spec": {"retryGeneration": 1}}')
    assert down.returncode != 0 and "can only increase" in down.stderr, down.stderr
    forged = patch(people["oncall"], '{"metadata": {"annotations": {"agentrun.dev/retried-by": "someone"}}}')
    assert forged.returncode != 0 and "cannot be forged" in forged.stderr, forged.stderr
    bad = kubectl(people["oncall"], "annotate", "ar", "adm", *ns, "agentrun.dev/resolve=ak-1=maybe")
    assert bad.returncode != 0 and "<effect key>=sent or <effect key>=not-sent" in bad.stderr, bad.stderr
    good = kubectl(people["oncall"], "annotate", "ar", "adm", *ns, "agentrun.dev/resolve=ak-1=sent")
    assert good.returncode == 0, good.stderr
    annotations = get_run(kube, namespace, "adm")["metadata"]["annotations"]
    assert annotations["agentrun.dev/resolved-by"] == "oncall"


def test_retry_rekeys_only_the_failed_effect_proven_not_performed_and_says_which(scene: Scene) -> None:
    """`agentrun retry` of a run with two failed effects: the gift card the provider refused (proven not
    performed) gets a new key; the charge whose first call timed out and committed late (then a refusal
    used its last attempt) keeps its key. Cents counted at the real HTTP provider: once per effect."""
    kube, operator, people, ns = scene.kube, scene.operator, scene.people, scene.ns
    with http_provider.HttpProvider(scene.tmp_path / "http") as provider:
        for fault in (
            {"mode": "429", "retry_after": 1000},  # gift_card: refused for longer than its policy waits
            {"mode": "late", "delay": 2.0},  # charge_twice call 1: times out (1 s), commits at 2 s
            {"mode": "503", "retry_after": 0},  # charge_twice call 2, its last: refused
        ):
            assert http_provider.request(f"{provider.url}/control/faults", "POST", fault)[0] == 200
        body = run_spec("tests.integration.retry_graphs:bill_graph", {"shape": "two"})
        body["worker"] = {"env": [{"name": "BILLING_URL", "value": provider.url}]}
        uid = create_run(kube, ns, "two", body)["metadata"]["uid"]
        wait_phase(kube, ns, "two", "Failed", 180, operator)
        wait_for(
            lambda: http_provider.stats(provider.url)["effects_performed_total"] == 1,
            60,
            "the provider's late commit of the charge",
        )
        with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
            failed = {e.tool: e for e in store.list_effects(conn, uid)}
        gift, charge = failed["gift_card"].idempotency_key, failed["charge_twice"].idempotency_key
        assert [failed[t].status for t in ("gift_card", "charge_twice")] == ["failed", "failed"]
        retried = kubectl(people["oncall"], "agentrun", "retry", "two", "-n", ns, "--wait", "120")
        assert retried.returncode == 0, retried.stderr
        out = retried.stdout
        assert "retry generation 1 applied:" in out, (out, retried.stderr)
        rekeyed = next(line for line in out.splitlines() if "re-keyed" in line)
        kept = next(line for line in out.splitlines() if "kept under its key" in line)
        assert gift in rekeyed and charge not in rekeyed, out
        assert charge in kept and gift not in kept, out
        assert f"agentrun resolve two {charge} --sent|--not-sent" in out
        done = agentrun(scene.admin, "wait", "two", "-n", ns, "--timeout", "180")
        assert done.returncode == 0, (done.stderr, operator.logs()[-6000:])
        status = run_status(kube, ns, "two")
        (entry,) = status["interventions"]
        assert (entry["rekeyed"], entry["kept"]) == ([gift], [charge])
        (event,) = [e for e in events(kube, ns, "two") if e.reason == "Retried"]
        assert gift in event.message and charge in event.message and "proven not performed" in event.message
        with psycopg.connect(scene.pg_dsn, autocommit=True) as conn:
            final = store.list_effects(conn, uid)
        (new_gift,) = [e.idempotency_key for e in final if e.tool == "gift_card" and e.status == "sent"]
        assert new_gift != gift
        charged = [(e.idempotency_key, e.status) for e in final if e.tool == "charge_twice"]
        assert charged == [(charge, "sent")]  # the same key: the provider answered it, performed nothing
        performed = http_provider.stats(provider.url)["effects_performed"]
        cents = {
            key: n * http_provider.request(f"{provider.url}/effects/{key}")[1]["request"]["cents"]
            for key, n in performed.items()
        }
        assert cents == {new_gift: 100, charge: 500}  # once per effect, counted at the provider
