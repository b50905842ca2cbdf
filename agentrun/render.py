"""Readable tables for the CLI, from the JSON-ready data of ``agentrun.trace`` (pure: strings out)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if v is None or v == "" else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def when(iso: str | None) -> str | None:
    """Timestamps in UTC to the second: a trace is read next to logs and Events."""
    if not iso:
        return None
    t = datetime.datetime.fromisoformat(iso)
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def seconds(value: float | None) -> str | None:
    if value is None:
        return None
    if value < 0.001:  # checkpoint writes can be sub-millisecond
        return f"{value * 1e6:.0f}us"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def age(iso: str | None, now: datetime.datetime) -> str:
    if not iso:
        return "-"
    s = int((now - datetime.datetime.fromisoformat(iso.replace("Z", "+00:00"))).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{max(s, 0)}s"


def lineage_lines(lineage: Mapping[str, Any]) -> list[str]:
    """ "forked from SOURCE (uid) at checkpoint ID (after step S), edits ..." and "forks: A (at ID), ..."."""
    out = []
    src = lineage.get("forkedFrom")
    if src:
        step = f" (after step {src['step']})" if src.get("step") else ""
        edits = f", edits {', '.join(src['set'])}" if src.get("set") else ""
        out.append(
            f"forked from {src['run']} (uid {src['runUid']}) at checkpoint {src['checkpointId']}{step}{edits}"
        )
    if lineage.get("forks"):
        forks = ", ".join(f"{f['run']} (at {f['checkpointId']})" for f in lineage["forks"])
        out.append(f"forks: {forks}")
    return out


def _outcome(attempt: Mapping[str, Any]) -> str | None:
    """The attempt's outcome; a loss the control plane caused (not counted against maxAttempts) says so."""
    outcome = attempt["outcome"] or ("running" if not attempt["endedAt"] else None)
    return f"{outcome} (control plane)" if attempt.get("controlPlane") else outcome


def trace(data: Mapping[str, Any], *, wide: bool = False) -> str:
    """The timeline; ``wide`` shows the effects with every ledger column and full keys."""
    run = data["run"]
    out = [
        f"AgentRun {run['namespace']}/{run['name']}  uid {run['uid']}",
        f"phase {run['phase'] or '-'}  ledger {run['ledgerStatus'] or '-'}  step {run['currentStep'] or '-'}"
        f"  attempts {run['attempts'] or len(data['attempts'])}",
    ]
    if run.get("error") or run.get("statusReason"):
        out.append(f"reason {run.get('statusReason') or '-'}  error {run.get('error') or '-'}")
    out += lineage_lines(data.get("lineage") or {})
    if run.get("pendingApproval"):
        p = run["pendingApproval"]
        out.append(f"pending approval {p.get('id')} (deadline {p.get('deadline') or '-'})")
        for i, action in enumerate(p.get("actions") or ()):  # a tool-call batch: each decision's subject
            allows = ", ".join(action.get("allowedDecisions") or ()) or "nothing"
            args = json.dumps(action.get("args"), default=str)
            out.append(f"  [{i}] {action.get('tool')} {args}  (allows {allows})")
    out += [
        "",
        "ATTEMPTS",
        table(
            ["#", "POD", "EPOCH", "REASON", "STARTED", "ENDED", "OUTCOME", "DETAIL"],
            [
                [
                    a["attempt"],
                    a["pod"],
                    a["epoch"],
                    a["startReason"],
                    when(a["startedAt"]),
                    when(a["endedAt"]),
                    _outcome(a),
                    a["detail"],
                ]
                for a in data["attempts"]
            ],
        ),
    ]
    # spec.budget: a TOKENS column (the step's model calls, total tokens) when the run counted any
    tokens_head = ["TOKENS"] if data.get("modelUsage") else []
    out += [
        "",
        "STEPS",
        table(
            ["ATTEMPT", "STEP", "CHECKPOINT", "STARTED", "DURATION", "CKPT-WRITE", *tokens_head, "EFFECTS"],
            [
                [
                    s["attempt"],
                    s["step"],
                    s["checkpointId"],
                    when(s["startedAt"]),
                    seconds(s["durationSeconds"]),
                    seconds(s["checkpointSeconds"]),
                    *([s.get("modelUsage", {}).get("totalTokens", "")] if tokens_head else []),
                    ", ".join(short(k) for k in s["effectKeys"]),
                ]
                for s in data["steps"]
            ],
        ),
    ]
    out += ["", "EFFECTS", effects_table(data["effects"], wide=wide)]
    out += [
        "",
        "APPROVALS",
        table(
            ["ID", "REQUESTED", "DEADLINE", "DECISION", "BY", "AT", "COMMENT"],
            [
                [
                    a["id"],
                    when(a["requestedAt"]),
                    when(a["deadline"]),
                    a["decision"],
                    a["by"],
                    when(a["at"]),
                    a["comment"],
                ]
                for a in data["approvals"]
            ],
        ),
    ]
    if data.get("interventions"):
        out += [
            "",
            "INTERVENTIONS",
            table(
                ["KIND", "BY", "AT", "RUN WAS", "EFFECT / GENERATION"],
                [
                    [i["kind"], i["by"], when(i["at"]), i["fromStatus"], i["key"] or i["generation"]]
                    for i in data["interventions"]
                ],
            ),
        ]
    if data["reruns"]:
        out += ["", "RE-RUN STEPS"]
        for r in data["reruns"]:
            ran = ", ".join(str(a) for a in r["attempts"])
            if not r["diverged"]:
                out.append(
                    f"  {r['step']}: ran in attempts {ran}; same effect keys (the ledger returned stored "
                    "results)"
                )
                continue
            out.append(f"  {r['step']}: ran in attempts {ran}; DIVERGED")
            for k in r["only_earlier"]:
                out.append(f"    only in the earlier attempt: {k}")
            for k in r["only_later"]:
                out.append(f"    only in the later attempt:   {k}")
            for c in r["arg_changes"]:
                out.append(
                    f"    {c['action']}#{c['occurrence']} argument {c['field']!r}: "
                    f"{c['earlier']!r} -> {c['later']!r}"
                )
    return "\n".join(out)


def short(key: str) -> str:
    return key if len(key) <= 20 else key[:18] + ".."


def effect_status(e: Mapping[str, Any]) -> str:
    """A failed effect says whether a retry re-keys it (not performed) or keeps its key (may have
    happened)."""
    if e["status"] == "failed":
        return "failed (not performed)" if e.get("notPerformed") else "failed (may have happened)"
    return str(e["status"]) + (" (needs human)" if e["needsHuman"] else "")


def effects_table(effects: Sequence[Mapping[str, Any]], *, wide: bool) -> str:
    if wide:
        return table(
            [
                "KEY",
                "STEP",
                "ACTION",
                "TOOL",
                "#",
                "STATUS",
                "CALLS",
                "DUPS-PREVENTED",
                "DIVERGED",
                "PROVIDER-REF",
                "EPOCH",
                "CREATED",
                "SENT",
                "CONFIRMED",
                "ERROR",
            ],
            [
                [
                    e["key"],
                    e["step"],
                    e["action"],
                    e["tool"],
                    e["occurrence"],
                    effect_status(e),
                    e["attempts"],
                    e["duplicatesPrevented"],
                    e.get("divergences", 0),
                    e["providerRef"],
                    e["epoch"],
                    when(e["createdAt"]),
                    when(e["sentAt"]),
                    when(e["confirmedAt"]),
                    e["error"],
                ]
                for e in effects
            ],
        )
    return table(
        ["KEY", "STEP", "ACTION", "TOOL", "STATUS", "CALLS", "DUPS-PREVENTED", "DIVERGED", "PROVIDER-REF"],
        [
            [
                short(e["key"]),
                e["step"],
                e["action"],
                e["tool"],
                effect_status(e),
                e["attempts"],
                e["duplicatesPrevented"],
                e.get("divergences", 0),
                e["providerRef"],
            ]
            for e in effects
        ],
    )


def run_image(item: Mapping[str, Any]) -> str | None:
    """The image the run's attempts use: the pinned digest when the cluster reported one (status.image)."""
    pinned = (item.get("status") or {}).get("image") or {}
    worker = (item.get("spec") or {}).get("worker") or {}
    return pinned.get("pinned") or pinned.get("ref") or worker.get("image")


def run_list(
    items: Sequence[Mapping[str, Any]], now: datetime.datetime, all_namespaces: bool, *, wide: bool = False
) -> str:
    rows = []
    for item in items:
        meta, st = item.get("metadata", {}), item.get("status", {}) or {}
        eff = st.get("effects") or {}
        effects = " ".join(
            f"{k}={eff[k]}" for k in ("pending", "sent", "confirmed", "failed", "needsHuman") if eff.get(k)
        )
        row = [
            meta.get("name"),
            st.get("phase"),
            st.get("currentStep"),
            st.get("attempts"),
            (st.get("pendingApproval") or {}).get("id"),
            effects,
            age(meta.get("creationTimestamp"), now),
        ]
        if wide:
            spec = item.get("spec") or {}
            row += [spec.get("graph"), run_image(item), st.get("retryGeneration"), st.get("message")]
        rows.append(([meta.get("namespace")] if all_namespaces else []) + row)
    headers = ["NAME", "PHASE", "STEP", "ATTEMPTS", "PENDING-APPROVAL", "EFFECTS", "AGE"]
    if wide:
        headers += ["GRAPH", "IMAGE", "RETRIES", "MESSAGE"]
    return table((["NAMESPACE"] if all_namespaces else []) + headers, rows)
