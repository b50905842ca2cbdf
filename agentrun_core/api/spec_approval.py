"""The AgentRun's ``spec.approval`` object: its part of the spec's one field table
(``agentrun_core.api.spec_schema`` places it under ``approval``; split off to keep each module small).

Rule: as ``spec_schema``'s — a field of ``spec.approval`` is written here and nowhere else. Pure data.
"""

from __future__ import annotations

from agentrun_core.api import openapi

# spec.approval.onTimeout: keep waiting (Event + condition), cancel the run, or resume with effects refused.
ON_TIMEOUT = ("escalate", "cancel", "readOnly")
# spec.approval.notify.format
NOTIFY_FORMATS = ("json", "slack")

APPROVAL: openapi.Schema = openapi.obj(
    {
        "timeoutSeconds": openapi.integer(
            "Seconds a pending approval may wait before onTimeout applies.",
            minimum=1,
            maximum=2592000,
            default=86400,
        ),
        "onTimeout": openapi.string(
            (
                "escalate: Event + condition, keep waiting; cancel: cancel the run; readOnly: resume "
                "with effects refused."
            ),
            enum=ON_TIMEOUT,
            default="escalate",
        ),
        "allowSelfApproval": openapi.boolean(
            "Whether the user who created the run may approve it.", default=False
        ),
        "approvers": openapi.obj(
            {
                "users": openapi.array(openapi.string(max_length=256), max_items=64),
                "groups": openapi.array(openapi.string(max_length=256), max_items=64),
            },
            "Optional narrowing of who may approve, on top of the RBAC verb approve on agentruns.",
        ),
        "notify": openapi.obj(
            {
                "url": openapi.string(
                    "http(s) URL the operator POSTs to.",
                    max_length=2048,
                    rules=[
                        openapi.rule(
                            ("isURL(self) && (self.startsWith('https://') || self.startsWith('http://'))"),
                            "spec.approval.notify.url must be an absolute http:// or https:// URL",
                        )
                    ],
                ),
                "format": openapi.string(
                    (
                        "json: the generic payload (event, run, approval, commands, text); slack: a "
                        "Slack incoming-webhook message (text + blocks)."
                    ),
                    enum=NOTIFY_FORMATS,
                    default="json",
                ),
                "tokenSecretRef": openapi.obj(
                    {
                        "name": openapi.string(
                            max_length=253,
                            rules=[
                                openapi.rule(
                                    "self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",
                                    (
                                        "spec.approval.notify.tokenSecretRef.name must be a Secret "
                                        "name (DNS subdomain)"
                                    ),
                                )
                            ],
                        ),
                        "key": openapi.string(max_length=253, default="token"),
                    },
                    (
                        "A Secret in the run's own namespace holding a bearer token (sent as "
                        "Authorization: Bearer). There is no namespace field: a run cannot name "
                        "another namespace's Secret."
                    ),
                    required=["name"],
                ),
                "receiverDedupes": openapi.boolean(
                    "The receiver dedupes by the Idempotency-Key header, so a notification whose "
                    "outcome is unknown (the operator died mid-call) may be sent again with the "
                    "same key. Unset: true for format json, false for slack (an unknown outcome "
                    "is then flagged for a human, never resent)."
                ),
            },
            (
                "A webhook told when an approval is requested, escalated or expired and when the run "
                "needs a human. Each notification is an effect in the ledger keyed by (run, approval "
                "id or flagged effect, event): sent once, with the key as the Idempotency-Key header."
            ),
            required=["url"],
        ),
    },
    "Policy for human approvals (LangGraph interrupts).",
)
