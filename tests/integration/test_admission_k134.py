"""Kubernetes 1.34+: approvals and steering keep their guarantee on an API server that does not serve
MutatingAdmissionPolicy v1, with only the ValidatingAdmissionPolicies of deploy/admission-vap-only.

A real kube-apiserver v1.34.4 (``agentrun dev apiserver up``: built from Go modules, beside the dev
cluster's, sharing its etcd under another prefix and its PKI). Nothing stamps there: every creation,
decision, resolve and retry must carry the requester's own ``request.userInfo`` in its stamp, and any other
value — none, or another identity's — is refused. The matrix: the five identities of
tests/integration/test_approval_admission.py times the verbs (approve, reject, resolve, retry through the
agentrun CLI, which sets the stamps from a SelfSubjectReview; fork, cancel, suspend, resume), each also
sent without its stamp and with someone else's. Only who may do it as on 1.36+ (the same ALLOWED sets)
succeeds, and a stamp that took effect is always the requester's own. The operator's admission check, run
against this server, finds mode "validating-only".
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from test_approval_admission import APPROVE, CUSTOM, DECIDED_BY, GROUPS, PENDING, REJECT, _run_body
from test_steering_admission import ACTORS, RESOLVE, SteerArena
from test_steering_admission import ALLOWED as STEER_ALLOWED
from test_steering_admission import _attempt as steer_attempt

from agent_operator import kube as operator_kube
from agent_operator.decide import admission
from agentrun_core import kube as core_kube
from agentrun_dev import second_apiserver
from tests.support.kube import kubectl

# serial: scripts/bootstrap builds the v1.34 kube-apiserver in the background (15-30 min cold on 2 cores),
# and the first test here waits for that build: run after the parallel part, it finds the build done or
# nearly done, and the module may wait up to an hour for it (cached afterwards: seconds).
pytestmark = [pytest.mark.serial, pytest.mark.timeout(3600)]

CREATED_BY, RESOLVED_BY, RETRIED_BY = (
    "agentrun.dev/created-by",
    "agentrun.dev/resolved-by",
    "agentrun.dev/retried-by",
)
STAMPED = ("approve", "reject", "resolve", "retry", "fork")
VERBS = (*STAMPED, "cancel", "suspend", "resume")
# As on 1.36+: the steering verbs' sets are tests/integration/test_steering_admission.py's own; approve: only
# the listed approver who did not create the run; reject: the approver and the creator, who can always stop
# their own run.
ALLOWED = {
    "approve": {"approver"},
    "reject": {"approver", "creator"},
    **{verb: STEER_ALLOWED[verb] for verb in ("resolve", "retry", "fork", "cancel", "suspend", "resume")},
}
RESULTS: collections.Counter[str] = collections.Counter()


class K134Arena(SteerArena):
    """The steering arena on the second API server: every kubeconfig points at it, and runs are created
    with the creator's stamp (what the agentrun CLI sends; nothing else would write it)."""

    def __init__(self, kube: kubernetes.client.ApiClient, admin: Path, settings: Any, tmp: Path) -> None:
        super().__init__(kube, admin, settings, tmp)
        self.ns = self.ns.replace("approval-matrix", "k134-matrix")
        self.names["admin"] = "agentrun-admin"

    def path(self, actor: str) -> Path:
        path = self.kubeconfigs[actor]
        if actor == "admin" or path.stem.endswith(second_apiserver.minor(second_apiserver.VERSION)):
            return path
        self.kubeconfigs[actor] = second_apiserver.for_server(path, self.settings)
        return self.kubeconfigs[actor]

    def kubectl(self, actor: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return kubectl(self.path(actor), "-n", self.ns, *args, stdin=stdin, timeout=60)

    def _create(self, actor: str, body: dict[str, Any]) -> None:
        body["metadata"].setdefault("annotations", {})[CREATED_BY] = self.names[actor]
        super()._create(actor, body)

    def cli(self, actor: str, *args: str) -> subprocess.CompletedProcess[str]:
        """The agentrun CLI as ``actor`` (it sends the stamps itself)."""
        return subprocess.run(
            [
                str(Path(sys.executable).parent / "agentrun"),
                *args,
                "-n",
                self.ns,
                "--kubeconfig",
                str(self.path(actor)),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )

    def reset_all(self) -> None:
        self.reset()
        self.steer_reset()
        for run in ("gate", "stopped"):  # the operator removes applied stamps' requests; here the admin
            ann = self.annotations(run)
            gone = {k: None for k in (RESOLVED_BY, RETRIED_BY) if k in ann}
            if gone:
                self.admin_patch(run, {"metadata": {"annotations": gone}})


@pytest.fixture(scope="module")
def k134(request: pytest.FixtureRequest, dev_cluster: Any) -> Path:
    """The v1.34 API server with crds/ and deploy/admission-vap-only applied; its admin kubeconfig. A build
    still running (scripts/bootstrap starts it in the background) is waited for, its progress shown."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    ctx = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
    with ctx:
        return second_apiserver.up(dev_cluster.settings, out=sys.stderr)


@pytest.fixture(scope="module")
def arena(k134: Path, dev_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[K134Arena]:
    api = kubernetes.config.new_client_from_config(config_file=str(k134))  # type: ignore[no-untyped-call]
    try:
        with K134Arena.opened(api, k134, dev_cluster.settings, tmp_path_factory.mktemp("k134-arena")) as a:
            yield a
    finally:
        api.close()


def test_the_server_is_134_without_mutating_admission_policy(k134: Path) -> None:
    """The premise: a 1.34 API server, where MutatingAdmissionPolicy v1 is not served."""
    api = kubernetes.config.new_client_from_config(config_file=str(k134))  # type: ignore[no-untyped-call]
    try:
        version = kubernetes.client.VersionApi(api).get_code()
        assert (version.major, version.minor, version.git_version) == ("1", "34", "v1.34.4")
        group = kubernetes.client.AdmissionregistrationV1Api(api).get_api_resources()
        served = {r.name for r in group.resources}
        assert "validatingadmissionpolicies" in served and "mutatingadmissionpolicies" not in served
    finally:
        api.close()


def test_the_operator_finds_validating_only_mode(k134: Path) -> None:
    """The operator's own look (what it logs and exports as agentrun_operator_admission_mode)."""
    api = core_kube.load_api_client(str(k134))
    assert operator_kube.admission_state(api) == (admission.VALIDATING_ONLY, [])


def _stamp_for(a: K134Arena, actor: str, verb: str, who: str | None) -> tuple[bool, str]:
    """``actor`` sends ``verb`` with kubectl and the stamp naming ``who`` (None: no stamp)."""

    def patch(run: str, body: dict[str, Any]) -> str:
        proc = a.kubectl(actor, "patch", "ar", run, "--type", "merge", "-p", json.dumps(body))
        return proc.stderr if proc.returncode else ""

    if verb in ("approve", "reject"):
        ann: dict[str, Any] = {APPROVE if verb == "approve" else REJECT: PENDING}
        if who is not None:
            ann.update({DECIDED_BY: who, GROUPS: ""})
        answer = patch("gate", {"metadata": {"annotations": ann}})
        return any(k in a.annotations("gate") for k in (APPROVE, REJECT)), answer
    if verb == "resolve":
        ann = {RESOLVE: "e-0123456789ab=not-sent", **({RESOLVED_BY: who} if who is not None else {})}
        answer = patch("stopped", {"metadata": {"annotations": ann}})
        return RESOLVE in a.annotations("stopped"), answer
    if verb == "retry":
        before = int(a.spec("stopped").get("retryGeneration") or 0)
        body: dict[str, Any] = {"spec": {"retryGeneration": before + 1}}
        if who is not None:
            body["metadata"] = {"annotations": {RETRIED_BY: who}}
        answer = patch("stopped", body)
        return int(a.spec("stopped").get("retryGeneration") or 0) > before, answer
    if verb == "fork":
        fork = _run_body("fork", {})
        fork["spec"]["forkOf"] = {"run": "gate", "step": "review"}
        if who is not None:
            fork["metadata"]["annotations"] = {CREATED_BY: who}
        proc = a.kubectl(actor, "create", "-f", "-", stdin=json.dumps(fork))
        return a.fork_exists(), proc.stderr if proc.returncode else ""
    raise AssertionError(verb)


def _with_the_cli(a: K134Arena, actor: str, verb: str) -> tuple[bool, str]:
    """``actor`` sends ``verb`` as a user would: the agentrun CLI (stamps from a SelfSubjectReview)."""
    if verb in ("approve", "reject"):
        proc = a.cli(actor, verb, "gate", "--id", PENDING, "--yes")
        return any(k in a.annotations("gate") for k in (APPROVE, REJECT)), proc.stderr
    if verb == "resolve":
        proc = a.cli(actor, "resolve", "stopped", "e-0123456789ab", "--not-sent")
        return RESOLVE in a.annotations("stopped"), proc.stderr
    if verb == "retry":
        before = int(a.spec("stopped").get("retryGeneration") or 0)
        proc = a.cli(actor, "retry", "stopped", "--wait", "0")
        return int(a.spec("stopped").get("retryGeneration") or 0) > before, proc.stderr
    if verb == "fork":  # the CLI's fork waits for the operator's verdict: its body, stamped as it does
        return _stamp_for(a, actor, verb, a.names[actor])
    return steer_attempt(a, actor, verb)


def _stamps_are_the_requesters(a: K134Arena, actor: str, verb: str) -> None:
    user = a.names[actor]
    if verb in ("approve", "reject"):
        ann = a.annotations("gate")
        assert ann[DECIDED_BY] == user, ann
        assert "system:authenticated" in ann[GROUPS].split(","), ann
    elif verb == "resolve":
        assert a.annotations("stopped")[RESOLVED_BY] == user
    elif verb == "retry":
        assert a.annotations("stopped")[RETRIED_BY] == user
    elif verb == "fork":
        assert a.annotations("fork")[CREATED_BY] == user


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("actor", ACTORS)
def test_verb_by_identity_on_134(arena: K134Arena, actor: str, verb: str) -> None:
    a = arena
    a.reset_all()
    try:
        took, answer = _with_the_cli(a, actor, verb)
        RESULTS["applied" if took else "refused"] += 1
        if actor in ALLOWED[verb]:
            assert took, f"{actor} {verb} refused: {answer}"
            _stamps_are_the_requesters(a, actor, verb)
        else:
            assert not took, f"{actor} {verb} took effect"
            assert answer, f"{actor} {verb}: nothing said why it was refused"
        if verb not in STAMPED:
            return
        # The same request without its stamp, and stamped with another identity: refused for everyone.
        for who in (None, "ceo" if actor == "approver" else "manager"):
            a.reset_all()
            took, answer = _stamp_for(a, actor, verb, who)
            RESULTS["forged-applied" if took else "forged-refused"] += 1
            assert not took, f"{actor} {verb} stamped {who!r} took effect"
            assert answer, f"{actor} {verb} stamped {who!r}: accepted"
    finally:
        a.reset_all()


def test_refusals_name_the_stamp_to_send(arena: K134Arena) -> None:
    """A kubectl user on 1.34 reads what to add: the annotation and its exact value."""
    a = arena
    a.reset_all()
    _, answer = _stamp_for(a, "approver", "approve", None)
    assert 'must carry agentrun.dev/decided-by: "manager"' in answer, answer
    assert 'agentrun.dev/decided-by-groups: "managers,system:authenticated"' in answer, answer
    _, answer = _stamp_for(a, "approver", "resolve", None)
    assert 'must carry agentrun.dev/resolved-by: "manager"' in answer, answer
    _, answer = _stamp_for(a, "approver", "retry", None)
    assert 'must carry agentrun.dev/retried-by: "manager"' in answer, answer
    _, answer = _stamp_for(a, "approver", "approve", "ceo")
    assert 'must carry agentrun.dev/decided-by: "manager"' in answer, answer
    body = _run_body("unstamped", {})
    proc = a.kubectl("creator", "create", "-f", "-", stdin=json.dumps(body))
    assert proc.returncode != 0 and 'created-by must be the creator, "carol"' in proc.stderr, proc.stderr
    body["metadata"]["annotations"] = {CREATED_BY: "manager"}
    proc = a.kubectl("creator", "create", "-f", "-", stdin=json.dumps(body))
    assert proc.returncode != 0 and 'created-by must be the creator, "carol"' in proc.stderr, proc.stderr
    a.reset_all()


def test_self_approval_still_refused_with_a_correct_stamp(arena: K134Arena) -> None:
    """The stamp is what the policies judge by: carol stamping her own name may not approve her run."""
    a = arena
    a.reset_all()
    proc = a.cli("creator", "approve", "gate", "--id", PENDING, "--yes")
    assert proc.returncode != 0 and "self-approval refused" in proc.stderr, proc.stderr
    assert APPROVE not in a.annotations("gate")
    a.reset_all()


def test_zz_k134_matrix_counts(arena: K134Arena) -> None:
    total = len(ACTORS) * len(VERBS)
    forged = len(ACTORS) * len(STAMPED) * 2
    print(
        f"\n1.34 matrix: {total} requests through the CLI, {RESULTS['applied']} took effect; "
        f"{forged} with a missing or foreign stamp, {RESULTS['forged-applied']} took effect"
    )
    if RESULTS["applied"] + RESULTS["refused"] == total:
        assert RESULTS["applied"] == sum(len(v) for v in ALLOWED.values())
        assert RESULTS["forged-applied"] == 0 and RESULTS["forged-refused"] == forged


def test_the_documented_kubectl_recipe_creates_a_run(arena: K134Arena, tmp_path: Path) -> None:
    """README: on 1.34 a run from a file is created with its creator's stamp by kubectl alone."""
    a = arena
    manifest = tmp_path / "run.yaml"
    manifest.write_text(json.dumps(_run_body("from-file", {})))
    kubeconfig = str(a.path("creator"))
    env = {**os.environ, "KUBECONFIG": kubeconfig, "NS": a.ns, "RUN": str(manifest)}
    recipe = (
        'kubectl annotate --local -f "$RUN" -o yaml '
        "agentrun.dev/created-by=\"$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')\" "
        '| kubectl create -n "$NS" -f -'
    )
    proc = subprocess.run(["bash", "-c", recipe], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert a.annotations("from-file")[CREATED_BY] == "carol"
    a.custom.delete_namespaced_custom_object(*CUSTOM, a.ns, "agentruns", "from-file")


def test_the_k8s_134_overlay_is_accepted_whole_by_134(arena: K134Arena, tmp_path: Path) -> None:
    """What a 1.34 user applies (deploy/overlays/k8s-1.34: CRD, admission, RBAC, operator) is accepted by a
    1.34 API server (server-side dry run, into the arena's namespace); deploy/base is not: it carries
    MutatingAdmissionPolicies, which 1.34 does not serve."""
    from tests.support import deploy as ds

    (tmp_path / "k134").mkdir()
    (tmp_path / "base").mkdir()
    overlay = ds.overlay_into(tmp_path / "k134", "overlays/k8s-1.34", arena.ns)
    done = ds.kubectl(arena.admin, "apply", "--dry-run=server", "-k", str(overlay), check=False)
    assert done.returncode == 0, done.stderr
    applied = {line.split()[0] for line in done.stdout.splitlines() if line.strip()}
    assert "deployment.apps/agentrun-operator" in applied
    assert "validatingadmissionpolicy.admissionregistration.k8s.io/agentrun-approvals" in applied
    base = ds.overlay_into(tmp_path / "base", "base", arena.ns)
    refused = ds.kubectl(arena.admin, "apply", "--dry-run=server", "-k", str(base), check=False)
    assert refused.returncode != 0 and "MutatingAdmissionPolicy" in refused.stderr, refused.stderr
