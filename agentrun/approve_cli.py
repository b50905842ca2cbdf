"""``agentrun approve NAME`` / ``agentrun reject NAME [--comment TEXT]`` (also ``kubectl agentrun …``).

Annotates the AgentRun with the id of its *current* pending approval (read from its status), as the current
user: the API server's admission policies decide whether that user may approve, and stamp who did. Naming the
id keeps a late click from approving a later interrupt (``--id`` pins it explicitly).
"""

from __future__ import annotations

import argparse
import sys

from agentrun import cluster

MULTI_COMMAND = True

ANN = {"approve": "agentrun.dev/approve", "reject": "agentrun.dev/reject"}
ANN_COMMENT = "agentrun.dev/comment"


def patch_for(decision: str, approval_id: str, comment: str | None) -> dict[str, str | None]:
    """The merge patch: set this decision, remove the opposite one (the operator refuses both at once)."""
    other = "reject" if decision == "approve" else "approve"
    patch: dict[str, str | None] = {ANN[decision]: approval_id, ANN[other]: None}
    if comment is not None:
        patch[ANN_COMMENT] = comment
    return patch


def run(decision: str, argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=f"agentrun {decision}")
    p.add_argument("name", help="the AgentRun's name")
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    p.add_argument("--comment", help="a comment recorded with the decision")
    p.add_argument("--id", dest="approval_id", help="the approval id (default: the run's pending approval)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    args = p.parse_args(argv)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    resource = cluster.get_run(api, namespace, args.name)
    status = resource.get("status") or {}
    pending = (status.get("pendingApproval") or {}).get("id")
    approval_id = args.approval_id or pending
    if not approval_id:
        raise cluster.CliError(
            f"AgentRun {namespace}/{args.name} has no pending approval "
            f"(phase {status.get('phase') or 'unknown'})"
        )
    if args.approval_id and pending and args.approval_id != pending:
        print(
            f"agentrun: warning: {args.approval_id} is not the pending approval ({pending}); the operator "
            "will refuse it",
            file=sys.stderr,
        )
    cluster.annotate(api, namespace, args.name, patch_for(decision, approval_id, args.comment))
    verb = "approved" if decision == "approve" else "rejected"
    print(
        f"agentrun/{args.name} {verb}: approval {approval_id} (the operator applies it and resumes the run)"
    )
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ANN:
        print("usage: agentrun approve|reject NAME [-n NS] [--comment TEXT]", file=sys.stderr)
        return 2
    try:
        return run(argv[0], argv[1:])
    except cluster.CliError as exc:
        print(f"agentrun: {exc}", file=sys.stderr)
        return 1
