"""``agentrun demo``: the support-ticket agent on the dev cluster: evicted mid-run, approved, one email.

1. the demo namespace from ``deploy/tenant`` (worker ServiceAccount + RoleBinding, SMTP settings pointing at
   the dev cluster's SMTP sink), and an approver: user ``manager`` in group ``support-managers``, bound to
   the ``agentrun-approver`` ClusterRole in that namespace;
2. the operator as a background process (pid and log under ``$AGENTRUN_DEV_HOME/demo/``);
3. ``kubectl apply -f deploy/examples/support-ticket.yaml`` (a previous run of that name is deleted first and
   the dev mailbox emptied, so the demo can be re-run);
4. while the worker is inside ``retrieve``, its Pod is evicted through the Eviction API; the operator starts
   attempt 2, which resumes from the last checkpoint;
5. at ``WaitingApproval`` the manager approves with ``kubectl annotate ar … agentrun.dev/approve=<id>``;
6. ``kubectl wait --for=condition=Succeeded``, then the run's trace, its ledger and the mailbox.

``agentrun demo stop`` stops the demo's operator.
"""

from __future__ import annotations

import email
import email.message
import email.policy
import os
import pathlib
import sys
import time
from typing import Any, cast

import kubernetes

from agentrun_core.api import meta
from agentrun_core.api import status as api_status
from agentrun_dev import demo_support as ds
from agentrun_dev import manifests

NAMESPACE = "agentrun-demo"
RUN = "support-ticket"
APPROVER, APPROVER_GROUP = "manager", "support-managers"
EXAMPLE = manifests.path("deploy", "examples", "support-ticket.yaml")
GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentruns"


def _tenant_overlay(env: dict[str, str]) -> pathlib.Path:
    """deploy/tenant, placed in the demo namespace and pointed at the dev cluster's Postgres and SMTP sink."""
    root = ds._state_dir(env) / "tenant"
    root.mkdir(exist_ok=True)
    base = os.path.relpath(manifests.path("deploy", "tenant"), root)
    (root / "kustomization.yaml").write_text(
        f"""# Written by `agentrun demo`: deploy/tenant for the dev cluster.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {NAMESPACE}
resources:
  - {base}
  - approver.yaml
patches:
  - target: {{kind: Namespace}}
    patch: |-
      - {{op: replace, path: /metadata/name, value: {NAMESPACE}}}
configMapGenerator:
  - name: support-ticket-config
    behavior: replace
    literals:
      - smtp_host={env["AGENTRUN_SMTP_HOST"]}
      - smtp_port={env["AGENTRUN_SMTP_PORT"]}
      - smtp_api={env.get("AGENTRUN_SMTP_API", "")}
    options: {{disableNameSuffixHash: true}}
"""
    )
    (root / "approver.yaml").write_text(
        f"""# Members of {APPROVER_GROUP} may decide approvals in this namespace (the RBAC verb `approve`).
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: support-managers-approve
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: agentrun-approver
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: Group
    name: {APPROVER_GROUP}
"""
    )
    return root


class Watcher:
    """Polls the AgentRun and prints each change of phase / step / attempt / pod."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.last: tuple[Any, ...] | None = None

    def status(self) -> dict[str, Any]:
        try:
            obj = cast(
                dict[str, Any],
                self.custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, RUN),
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        status: dict[str, Any] = obj.get("status") or {}
        seen = (
            status.get("phase"),
            status.get("currentStep"),
            status.get("attempts"),
            status.get("workerPod"),
        )
        if seen != self.last:
            self.last = seen
            phase, current, attempts, pod = seen
            ds.say(f"run: phase={phase} lastStep={current or '-'} attempt={attempts or 0} pod={pod or '-'}")
        return status

    def until(self, what: str, predicate: Any, timeout: float) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            status = self.status()
            if status.get("phase") == api_status.FAILED:
                raise ds.DemoError(f"the run failed: {status.get('error') or status.get('message')}")
            return status if predicate(status) else None

        result: dict[str, Any] = ds.wait_until(what, check, timeout, interval=0.3)
        return result


def demo() -> int:
    env = ds.dev_env()
    # The commands run as a user would type them, with this virtualenv's agentrun and kubectl first on PATH.
    bindir = str(pathlib.Path(sys.executable).parent)
    kenv = {**os.environ, **env, "PATH": os.pathsep.join([bindir, os.environ.get("PATH", "")])}
    api = kubernetes.config.new_client_from_config(config_file=env["KUBECONFIG"])  # type: ignore[no-untyped-call]
    timings: dict[str, float] = {}
    mark = time.monotonic()

    ds.step("1. the demo namespace (deploy/tenant) and an approver")
    overlay = _tenant_overlay(env)
    # The ClusterRole the tenant's RoleBinding refers to (deploy/base installs it on a real cluster).
    ds.run(["kubectl", "apply", "-f", str(manifests.path("deploy", "base", "rbac-worker.yaml"))], kenv)
    ds.run(["kubectl", "apply", "-k", str(overlay)], kenv)
    manager = ds.run(["agentrun", "dev", "kubeconfig", APPROVER, APPROVER_GROUP], kenv, show=False).strip()
    ds.say(f"approver identity: user {APPROVER!r} in group {APPROVER_GROUP!r} (kubeconfig {manager})")

    ds.step("2. the schema and the operator (background process)")
    applied = ds.migrate(env["AGENTRUN_DSN"])
    ds.say(f"Postgres schema at {env['AGENTRUN_DSN']}: {', '.join(applied) if applied else 'up to date'}")
    # The operator runs as its own ServiceAccount with deploy/base's RBAC, not as the cluster admin.
    base = manifests.path("deploy", "base")
    ds.run(["kubectl", "create", "namespace", "agentrun-system"], kenv, check=False, show=False)
    ds.run(
        ["kubectl", "apply", "-f", str(base / "rbac-operator.yaml"), "-f", str(base / "rbac-leader.yaml")],
        kenv,
    )
    # A fresh token each time (a running operator that re-reads its kubeconfig gets it too).
    token = ds.run(
        [
            "kubectl",
            "create",
            "token",
            "agentrun-operator",
            "-n",
            "agentrun-system",
            f"--duration={ds.TOKEN_SECONDS}s",
        ],
        kenv,
        show=False,
    ).strip()
    kubeconfig = ds.operator_kubeconfig(env, token)
    ds.say(f"operator identity: system:serviceaccount:agentrun-system:agentrun-operator ({kubeconfig})")
    pid, started = ds.start_operator(env, NAMESPACE, kubeconfig)
    log = ds._state_dir(env) / "operator.log"
    ds.say(f"operator pid {pid} ({'started' if started else 'already running'}); log {log}")
    ds.wait_operator_healthy(env, pid)
    ds.say(f"operator healthy; metrics at {ds.metrics_url(env)}")
    timings["setup"] = time.monotonic() - mark

    ds.step("3. apply the support-ticket AgentRun")
    ds.run(
        [
            "kubectl",
            "delete",
            "ar",
            RUN,
            "-n",
            NAMESPACE,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=90s",
        ],
        kenv,
    )
    if env.get("AGENTRUN_SMTP_API"):
        cleared = ds.http_json(env["AGENTRUN_SMTP_API"].rstrip("/") + "/messages", method="DELETE")
        ds.say(f"dev mailbox emptied ({cleared})")
    mark = time.monotonic()
    ds.run(["kubectl", "apply", "-n", NAMESPACE, "-f", str(EXAMPLE)], kenv)
    watcher = Watcher(api)

    ds.step("4. evict the worker in the middle of the run")
    status = watcher.until(
        "the worker to be inside `retrieve` (last completed step: analyze)",
        lambda s: (
            s.get("phase") == api_status.RUNNING and s.get("currentStep") == "analyze" and s.get("workerPod")
        ),
        timeout=120,
    )
    pod = status["workerPod"]
    ds.say(f"worker {pod} is sleeping inside `retrieve` (options.pause_seconds) — evicting it")
    print(
        f"  POST /api/v1/namespaces/{NAMESPACE}/pods/{pod}/eviction"
        "   (kubernetes CoreV1Api.create_namespaced_pod_eviction)"
    )
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_pod_eviction(
        pod,
        NAMESPACE,
        kubernetes.client.V1Eviction(metadata=kubernetes.client.V1ObjectMeta(name=pod, namespace=NAMESPACE)),
    )
    evicted_at = time.monotonic()
    status = watcher.until(
        "attempt 2", lambda s: (s.get("attempts") or 0) >= 2 and s.get("workerPod") != pod, 120
    )
    ds.say(
        f"resumed: attempt {status['attempts']} in pod {status['workerPod']} "
        f"({time.monotonic() - evicted_at:.1f}s after the eviction; "
        f"reason {status.get('attemptReason', '?')})"
    )

    ds.step("5. a manager approves the draft")
    status = watcher.until(
        api_status.WAITING_APPROVAL, lambda s: s.get("phase") == api_status.WAITING_APPROVAL, 120
    )
    pending = status.get("pendingApproval") or {}
    prompt = pending.get("prompt") or {}
    ds.say(f"pending approval {pending.get('id')} (deadline {pending.get('deadline')}); the draft:")
    print("    To:      " + str(prompt.get("to")))
    print("    Subject: " + str(prompt.get("subject")))
    print("    " + str(prompt.get("body", "")).replace("\n", "\n    "))
    ds.run(["kubectl", "get", "ar", RUN, "-n", NAMESPACE], kenv)
    ds.run(
        [
            "kubectl",
            "--kubeconfig",
            manager,
            "annotate",
            "ar",
            RUN,
            "-n",
            NAMESPACE,
            f"{meta.APPROVE}={pending['id']}",
        ],
        kenv,
    )
    ds.run(
        [
            "kubectl",
            "wait",
            f"--for=condition={api_status.SUCCEEDED}",
            f"ar/{RUN}",
            "-n",
            NAMESPACE,
            "--timeout=180s",
        ],
        kenv,
    )
    watcher.status()
    timings["run"] = time.monotonic() - mark

    ds.step("6. what happened")
    ds.run(["agentrun", "trace", RUN, "-n", NAMESPACE], kenv)
    ds.run(["agentrun", "ledger", RUN, "-n", NAMESPACE], kenv)
    emails = 0
    if env.get("AGENTRUN_SMTP_API"):
        mailbox = ds.http_json(env["AGENTRUN_SMTP_API"].rstrip("/") + "/messages?raw=1")
        emails = int(mailbox.get("count", 0))
        ds.say(f"mailbox of the dev SMTP sink: {emails} email(s)")
        for message in mailbox.get("messages", []):
            parsed = email.message_from_string(str(message.get("raw", "")), policy=email.policy.default)
            for header in ("From", "To", "Subject", "Message-ID"):
                print(f"    {header + ':':<12}{parsed[header]}")
            body = parsed.get_body(("plain",))
            text = body.get_content() if isinstance(body, email.message.EmailMessage) else ""
            print("\n    " + text.strip().replace("\n", "\n    "))
    if emails != 1:
        raise ds.DemoError(f"expected exactly one email in the mailbox, found {emails}")

    ds.step("done")
    ds.say(f"setup {timings['setup']:.1f}s, run (apply → Succeeded) {timings['run']:.1f}s")
    print(
        f"""
Poke at it (in this shell: eval "$(agentrun dev env)"):
  kubectl get ar -n {NAMESPACE}                    # Phase, Step, Attempts, Approval columns
  kubectl describe ar {RUN} -n {NAMESPACE}         # conditions and Events
  kubectl agentrun trace {RUN} -n {NAMESPACE}      # the kubectl plugin (same as `agentrun trace`)
  kubectl agentrun ledger {RUN} -n {NAMESPACE}
  curl -s {ds.metrics_url(env)} | grep ^agentrun_
  curl -s {env.get("AGENTRUN_SMTP_API", "<AGENTRUN_SMTP_API>")}/messages          # the mailbox
  agentrun dev logs {RUN}-1 -n {NAMESPACE}         # a worker's log (attempt 1)
  less {log}
Stop it:
  agentrun demo stop      # the demo's operator
  make down               # the operator and the dev cluster
"""
    )
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] in {"-h", "--help"}:
        print("usage: agentrun demo [stop]\n\n" + (__doc__ or ""))
        return 0
    try:
        if argv and argv[0] == "stop":
            pid = ds.stop_operator(ds.dev_env())
            print(f"demo operator {f'stopped (pid {pid})' if pid else 'was not running'}")
            return 0
        if argv:
            print(
                f"agentrun demo: unknown argument {argv[0]!r} (usage: agentrun demo [stop])", file=sys.stderr
            )
            return 2
        return demo()
    except ds.DemoError as exc:
        print(f"\nagentrun demo: {exc}", file=sys.stderr)
        return 1
