"""A run seeded straight into the API server and the store, the way the operator and its workers would have
left it, for the CLI tests that read a run (list, trace, ledger, output formats) and need neither running.
"""

from __future__ import annotations

from typing import Any

import kubernetes
import psycopg

from tests.support.kube import GROUP, PLURAL, VERSION, create_run
from tests.support.specs import TICKET_GRAPH


def seed_run(kube: kubernetes.client.ApiClient, namespace: str, dsn: str, name: str) -> dict[str, Any]:
    """An AgentRun evicted once and now waiting on an approval, with its ledger."""
    custom = kubernetes.client.CustomObjectsApi(kube)
    obj = create_run(kube, namespace, name, {"graph": TICKET_GRAPH, "input": {"ticket": {"id": "T-1"}}})
    uid = obj["metadata"]["uid"]
    approval_id = "a-" + uid.replace("-", "")[:12]
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {
            "status": {
                "phase": "WaitingApproval",
                "attempts": 2,
                "currentStep": "review",
                "pendingApproval": {
                    "id": approval_id,
                    "prompt": {"question": "send this reply?"},
                    "deadline": "2099-01-01T00:00:00Z",
                },
                "effects": {"pending": 0, "sent": 1, "confirmed": 0, "failed": 0, "needsHuman": 0},
            }
        },
    )
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO agentrun_runs (run_id, namespace, name, graph, input, spec_hash, status,"
            " current_step) VALUES (%s, %s, %s, 'agentrun_examples.support_ticket:graph', '{}', 'h',"
            " 'parked', 'review')",
            (uid, namespace, name),
        )
        conn.execute(
            "INSERT INTO agentrun_attempts (run_id, attempt, pod, epoch, start_reason, ended_at,"
            " outcome, detail) VALUES (%s, 1, %s, 1, 'first', now(), 'drained', 'Evicted'),"
            " (%s, 2, %s, 2, 'evicted', now(), 'parked', NULL)",
            (uid, f"{name}-1", uid, f"{name}-2"),
        )
        conn.execute(
            "INSERT INTO agentrun_step_events (run_id, attempt, step, checkpoint_id, started_at,"
            " duration_seconds, checkpoint_seconds, effect_keys) VALUES"
            " (%s, 1, 'analyze', 'ck-1', now(), 0.1, 0.003, '{}'),"
            " (%s, 1, 'notify', 'ck-2', now(), 0.3, 0.004, '{k-notify}'),"
            " (%s, 2, 'notify', 'ck-3', now(), 0.2, 0.004, '{k-notify}')",
            (uid, uid, uid),
        )
        conn.execute(
            "INSERT INTO agentrun_effects (idempotency_key, run_id, step, action, tool, args_hash,"
            " args, status, attempts, duplicates_prevented, provider_ref, epoch) VALUES"
            " ('k-notify', %s, 'notify', 'send_email', 'email', 'h1', '{\"to\": \"ada@example.com\"}',"
            " 'sent', 1, 1, 'smtp-42', 2)",
            (uid,),
        )
        conn.execute(
            "INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt, deadline)"
            " VALUES (%s, %s, 'i1', '{}', '2099-01-01')",
            (approval_id, uid),
        )
    return {"uid": uid, "approval_id": approval_id}
