"""docs/quickstart.md on the real node: every ``sh`` block, verbatim and in order, as a user pastes them.

Needs ``agentrun dev up --node=real`` and the image loaded (``make e2e`` does both, then runs this after
tests/e2e/test_real_node.py). Blocks preceded by ``<!-- e2e: skip … -->`` are the kind / k3d specifics (image
load, in-cluster Postgres) that the real node does differently; the page says so next to each.

What the harness adds around the page, and why (none of it changes a command of the page):
- the two namespaces exist first, annotated so their Pods go to the real node (docs/dev/real-node.md);
- ``AGENTRUN_DSN`` is the dev cluster's Postgres as Pods reach it (the page's one input);
- the real node has no cluster DNS (no CoreDNS, no kube-proxy), so once the mail catcher runs, a
  MutatingAdmissionPolicy gives the namespace's new Pods a ``hostAliases`` entry ``agentrun-mail`` -> the mail
  catcher's Pod IP: what cluster DNS does on kind and k3d. The Service's ports equal the container's, so the
  page's host and port are the same either way.

It ends as the page does: the run Succeeded, approved by the approver ServiceAccount (``status.approvals``,
from the decided-by stamp), and exactly one email in the in-cluster catcher.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentrun_dev import settings as settings_mod
from agentrun_dev.node import config, lifecycle
from tests.e2e import realnode_support as rs
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

PAGE = rs.ROOT / "docs" / "quickstart.md"
SKIP = re.compile(r"<!--\s*e2e:\s*skip\b")
APPROVER = f"system:serviceaccount:{rs.RUNS_NS}:approver"
SHIM = "e2e-cluster-dns-agentrun-mail"


def sh_blocks(text: str) -> list[str]:
    """The page's ```sh blocks, minus those right after an ``<!-- e2e: skip -->`` comment."""
    blocks = []
    # A comment counts only when the block follows it directly; (?!-->) keeps one from spanning blocks.
    for m in re.finditer(r"(?ms)^(<!--(?:(?!-->).)*-->[ \t]*\n)?```sh\n(.*?)^```[ \t]*$", text):
        if not (m.group(1) and SKIP.search(m.group(1))):
            blocks.append(m.group(2))
    return blocks


def test_sh_blocks_extraction() -> None:
    page = (
        "<!-- a note -->\na\n```sh\necho 1\n```\n<!-- e2e: skip (why) -->\n```sh\necho 2\n```\n"
        "```text\nno\n```\n```sh\necho 3\n```\n"
    )
    assert sh_blocks(page) == ["echo 1\n", "echo 3\n"]
    assert len(sh_blocks(PAGE.read_text())) >= 7


def dns_shim(ip: str) -> str:
    return f"""apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {{name: {SHIM}}}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
      - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}}
  mutations:
    # JSONPatch, not ApplyConfiguration: hostAliases[].hostnames is an atomic list, which apply may not set.
    - patchType: JSONPatch
      jsonPatch:
        expression: >
          [JSONPatch{{op: "add", path: "/spec/hostAliases",
            value: [Object.spec.hostAliases{{ip: "{ip}", hostnames: ["agentrun-mail"]}}]}}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {{name: {SHIM}}}
spec:
  policyName: {SHIM}
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {rs.RUNS_NS}}}
"""


def test_quickstart_verbatim_on_the_real_node(tmp_path: Path) -> None:
    s = settings_mod.from_env()
    phase = rs.Phases()
    assert all(r.healthy for r in lifecycle.status(s)), lifecycle.status(s)

    phase("fresh start: namespaces on the real node, no run, operator or mail catcher left from before")
    rs.pre_create_namespaces(s)
    rs.kubectl(
        s, "delete", "mutatingadmissionpolicybinding,mutatingadmissionpolicy", SHIM, "--ignore-not-found"
    )
    rs.kubectl(s, "delete", "ar", "support-ticket", "-n", rs.RUNS_NS, "--ignore-not-found", "--timeout=180s")
    rs.kubectl(s, "delete", "deployment", "agentrun-mail", "-n", rs.RUNS_NS, "--ignore-not-found")
    # Fresh operator Pods on the image just loaded: the page's install creates the Deployment.
    rs.kubectl(s, "delete", "deployment", "agentrun-operator", "-n", rs.SYSTEM_NS, "--ignore-not-found")
    wait_for(
        lambda: (
            not rs.get_json(s, "pods", "-n", rs.RUNS_NS, "-l", "app.kubernetes.io/component=mailcatcher").get(
                "items"
            )
        ),
        180,
        "the old mail catcher Pods to go",
    )

    # The page runs where it says "from a checkout": deploy/ and scripts/ as they are, files it writes here.
    work = tmp_path / "checkout"
    work.mkdir()
    for name in ("deploy", "scripts"):
        (work / name).symlink_to(rs.ROOT / name)
    env = {
        **os.environ,
        "KUBECONFIG": str(s.kubeconfig),
        "AGENTRUN_DSN": rs.pod_dsn(s),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    outputs = []
    for i, block in enumerate(sh_blocks(PAGE.read_text()), 1):
        phase(f"quickstart block {i}: {block.splitlines()[0][:60]}")
        print(block, flush=True)
        res = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block], cwd=work, env=env,
            capture_output=True, text=True, timeout=1200, check=False,
        )  # fmt: skip
        print(res.stdout + res.stderr, flush=True)
        assert res.returncode == 0, f"quickstart block {i} failed ({res.returncode}):\n{block}\n{res.stderr}"
        outputs.append(res.stdout)
        if "deploy/examples/mailcatcher.yaml" in block:
            pods = rs.get_json(s, "pods", "-n", rs.RUNS_NS, "-l", "app.kubernetes.io/component=mailcatcher")
            [pod] = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
            assert pod["spec"]["nodeName"] == config.NODE_NAME, pod["spec"]
            subprocess.run(
                ["kubectl", f"--kubeconfig={s.kubeconfig}", "apply", "-f", "-"],
                input=dns_shim(pod["status"]["podIP"]), env=env, text=True, check=True, timeout=60,
            )  # fmt: skip

    phase("checks: who approved, where the worker ran, the mailbox")
    run = rs.get_json(s, "ar", "support-ticket", "-n", rs.RUNS_NS)
    approvals = run["status"].get("approvals") or []
    assert [(a["by"], a["decision"]) for a in approvals] == [(APPROVER, "approved")], approvals
    assert outputs[-2].splitlines()[-1] == APPROVER, outputs[-2]  # what the page shows the reader
    assert run["status"]["phase"] == "Succeeded", run["status"]
    worker = rs.get_json(s, "pod", run["status"]["workerPod"], "-n", rs.RUNS_NS)
    assert worker["spec"]["nodeName"] == config.NODE_NAME
    assert outputs[-1].splitlines()[0] == "1 message(s)", outputs[-1]
    assert "ada@example.com" in outputs[-1], outputs[-1]
    print(f"[e2e] approved by {approvals[0]['by']}; mailbox: {json.dumps(outputs[-1])}")
    phase.report()
