"""``agentrun approve NAME --id ID --set FIELD=TEXT | --edits FILE`` and ``agentrun respond NAME --id ID
--message TEXT``: decisions that carry something to the graph (also ``kubectl agentrun …``).

Rule: what is carried rides on the decision, in the same request: edits as ``edit.agentrun.dev/<field>``
annotations set together with ``agentrun.dev/approve``; a response as ``agentrun.dev/response`` set
together with ``agentrun.dev/reject`` (the graph is told not to go ahead, and why). So every guarantee of a
decision holds for them (RBAC verb ``approve``, approvers, no self-approval, the decided-by stamp from
request.userInfo, judged against the run as it was before the request), and the API server refuses a
malformed payload (deploy/admission/edits-policy.yaml). The graph resumes with LangGraph's human-in-the-loop
response: ``{"type": "edit", "args": {"action": ..., "args": {field: text}}}`` or ``{"type": "response",
"args": text}`` (``agentrun_core.store.rows.resume_payload``).

Fields must be listed under ``editable`` in the pending approval's prompt; this command checks that first,
from the run's status, so a typo is refused before anything is sent.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import yaml

from agentrun import batch_cli, cluster, deciding
from agentrun_core.api import limits, meta

MULTI_COMMAND = True

FIELD = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")  # an annotation name's part


def parse_edits(pairs: list[str], edits_file: str | None) -> dict[str, str]:
    """``--set FIELD=TEXT`` pairs and ``--edits FILE`` (a YAML/JSON mapping of field -> text). Pure but
    for reading the file."""
    edits: dict[str, str] = {}
    if edits_file is not None:
        try:
            doc = yaml.safe_load(Path(edits_file).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise cluster.CliError(f"--edits {edits_file}: cannot read it: {exc}") from exc
        if not isinstance(doc, dict) or not doc:
            raise cluster.CliError(f"--edits {edits_file}: expected a mapping of field: text")
        for key, value in doc.items():
            if not isinstance(value, str):
                raise cluster.CliError(
                    f"--edits {edits_file}: {key} is a {type(value).__name__}; edited fields are text"
                )
            edits[str(key)] = value
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise cluster.CliError(f"--set {pair!r}: expected FIELD=TEXT (e.g. body='Dear Ada, ...')")
        if key in edits:
            raise cluster.CliError(f"--set {key}: given twice")
        edits[key] = value
    for key, value in edits.items():
        if not FIELD.match(key):
            raise cluster.CliError(f"{key!r} is not a field name (letters, digits, '_', '-', '.')")
        if len(value) > limits.EDIT_MAX_CHARS:
            raise cluster.CliError(f"the edit of {key} is longer than {limits.EDIT_MAX_CHARS} characters")
    if len(edits) > limits.EDIT_MAX_FIELDS:
        raise cluster.CliError(f"at most {limits.EDIT_MAX_FIELDS} edited fields")
    return edits


def check_editable(status: dict[str, Any], edits: dict[str, str]) -> None:
    """Refuse fields the pending approval's prompt does not list under ``editable``. Pure."""
    prompt = (status.get("pendingApproval") or {}).get("prompt")
    allowed = prompt.get("editable") if isinstance(prompt, dict) else None
    allowed = [str(f) for f in allowed] if isinstance(allowed, list) else []
    unknown = sorted(set(edits) - set(allowed))
    if unknown:
        raise cluster.CliError(
            f"cannot edit {', '.join(unknown)}: the pending approval lets you edit "
            f"{', '.join(allowed) if allowed else 'nothing'}; nothing annotated"
        )


def edit_annotations(edits: dict[str, str]) -> dict[str, str | None]:
    return {meta.EDIT_PREFIX + k: v for k, v in edits.items()}


def respond(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="agentrun respond", description="answer the pending approval with text")
    p.add_argument("name", help="the AgentRun's name")
    p.add_argument("--id", dest="approval_id", required=True, help="the approval id (status.pendingApproval)")
    p.add_argument("--message", required=True, help="the text the graph gets instead of going ahead")
    p.add_argument("--comment", help="a comment recorded with the decision")
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    args = p.parse_args(argv)
    if not 0 < len(args.message) <= limits.RESPONSE_MAX_CHARS:
        raise cluster.CliError(f"--message must be 1 to {limits.RESPONSE_MAX_CHARS} characters")
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    ns = args.namespace or default_ns
    resource = cluster.get_run(api, ns, args.name)
    where = f"{ns}/{args.name}"
    status = dict(resource.get("status") or {})
    approval_id = deciding.choose(status, where, args.approval_id, False)
    # A tool-call batch: every action is rejected with the message; refused here if one does not allow it.
    batch_cli.decisions(status, "rejected", response=args.message)
    patch = deciding.patch_for("reject", approval_id, args.comment)
    patch[meta.RESPONSE] = args.message
    cluster.annotate(api, ns, args.name, patch)
    print(f"agentrun/{args.name} responded to approval {approval_id}: {json.dumps(args.message)}")
    return 0


def main(argv: list[str]) -> int:
    usage = "agentrun respond NAME --id ID --message TEXT [-n NS]"
    return cluster.dispatch(argv, {"respond": respond}, usage)
