"""``agentrun approve NAME`` / ``agentrun reject NAME [--id ID] [--comment TEXT]`` (``kubectl agentrun …``).

Rule: the id annotated is the id of the approval the human saw. Interactive (stdin and stdout are terminals,
no ``--id``/``--yes``): the pending approval's id and prompt are shown and the human confirms that one.
Non-interactive without ``--id``: accepted only when the run has asked exactly one approval so far (nothing
else could be meant); once it has asked several, the caller must name the id. ``--id`` must be the pending
approval (anything else is refused here, and by the API server). The annotation is set as the current user:
the admission policies decide whether that user may decide, and stamp who did.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys

from agentrun import batch_cli, cluster, deciding, respond_cli
from agentrun_core.api import meta

MULTI_COMMAND = True


def run(decision: str, argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=f"agentrun {decision}")
    p.add_argument("name", help="the AgentRun's name")
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    p.add_argument("--comment", help="a comment recorded with the decision")
    p.add_argument("--id", dest="approval_id", help="the approval id you saw (status.pendingApproval.id)")
    p.add_argument("--yes", action="store_true", help="do not ask (non-interactive rules apply)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    if decision == "approve":  # edits ride on the approval (agentrun.respond_cli)
        p.add_argument(
            "--set", action="append", default=[], metavar="[N.]FIELD=TEXT", help="edit a field (of action N)"
        )
        p.add_argument("--edits", metavar="FILE", help="edits as a YAML/JSON mapping of field: text")
        p.add_argument(
            "--reject", dest="rejects", action="append", default=[], metavar="N[=MESSAGE]",
            help="a tool-call batch: reject action N (the model gets MESSAGE); the others are approved",
        )  # fmt: skip
        p.add_argument(
            "--respond", dest="responds", action="append", default=[], metavar="N=TEXT",
            help="a tool-call batch: answer for action N's tool with TEXT (it does not run)",
        )  # fmt: skip
    p.add_argument(
        "--decisions", metavar="JSON|@FILE",
        help='a tool-call batch: one decision per action, in LangChain\'s shape ([{"type": "approve"}, ...])',
    )  # fmt: skip
    args = p.parse_args(argv)
    edits = respond_cli.parse_edits(args.set, args.edits) if decision == "approve" else {}
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    resource = cluster.get_run(api, namespace, args.name)
    interactive = not args.yes and sys.stdin.isatty() and sys.stdout.isatty()
    approval_id = deciding.choose(
        dict(resource.get("status") or {}),
        f"{namespace}/{args.name}",
        args.approval_id,
        interactive,
        ask=input,
        decision=decision,
    )
    patch = deciding.patch_for(decision, approval_id, args.comment)
    status = dict(resource.get("status") or {})
    batch = batch_cli.decisions(
        status,
        "approved" if decision == "approve" else "rejected",
        given=args.decisions,
        edits=edits if batch_cli.batch(status) is not None else None,
        rejects=getattr(args, "rejects", None),
        responds=getattr(args, "responds", None),
    )  # a tool-call batch: checked against it here, before anything is sent
    if batch is not None:
        patch[meta.DECISIONS] = batch
    elif edits and batch_cli.batch(status) is None:
        respond_cli.check_editable(status, edits)
        patch.update(respond_cli.edit_annotations(edits))
    cluster.annotate(api, namespace, args.name, patch)
    verb = "approved" if decision == "approve" else "rejected"
    with_edits = f" with edits of {', '.join(sorted(edits))}" if edits else ""
    if batch is not None:
        kinds = [str(d["type"]) for d in json.loads(batch)]
        with_edits = " per action: " + ", ".join(f"{i} {k}" for i, k in enumerate(kinds))
    print(
        f"agentrun/{args.name} {verb}: approval {approval_id}{with_edits} (the operator applies it and "
        "resumes the run)"
    )
    return 0


def main(argv: list[str]) -> int:
    return cluster.dispatch(
        argv,
        {verb: functools.partial(run, verb) for verb in deciding.ANN},
        "agentrun approve|reject NAME [-n NS] [--id ID] [--comment TEXT] [--yes] [--decisions JSON|@FILE]",
    )
