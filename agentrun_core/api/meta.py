"""The annotation and label keys of the steering contract: what ``kubectl agentrun`` (and ``kubectl
annotate``) writes on an AgentRun or its Namespace, what the admission policies judge and stamp, and what
the operator reads.

Rule: each name is written here once. The CLI (``agentrun``), the operator (``agent_operator``) and the
admission policies (deploy/admission, rendered from templates by ``python -m agentrun_core.api.policygen``)
take it from here; tests/unit/test_vocabulary.py fails on a copy anywhere else in source. The limits on
what these annotations carry are in ``agentrun_core.api.limits``; the labels and annotations of the worker's
own objects (Pods, Leases) in ``agentrun_core.api.protocol``, a schedule's in ``agentrun_core.api.schedules``.
"""

from __future__ import annotations

from typing import Final

# The operator's finalizer on every AgentRun (kopf removes it once the run's Pods are gone).
FINALIZER: Final = "agentrun.dev/finalizer"

# --- A decision (kubectl agentrun approve / reject / respond) --------------------------------------------
APPROVE: Final = "agentrun.dev/approve"  # value: the pending approval's id
REJECT: Final = "agentrun.dev/reject"  # value: the pending approval's id
COMMENT: Final = "agentrun.dev/comment"  # the decider's comment, only with a decision
# What a decision carries to the graph (agent_operator.decide.edits, deploy/admission/edits-policy.yaml):
EDIT_PREFIX: Final = "edit.agentrun.dev/"  # + <field>: the edited text, only with APPROVE
RESPONSE: Final = (
    "agentrun.dev/response"  # the message the graph gets instead of going ahead, only with REJECT
)
DECISIONS: Final = "agentrun.dev/decisions"  # JSON list: a HumanInTheLoopMiddleware batch decided per action

# --- Who did it: stamped from request.userInfo (deploy/admission) or checked against it (admission-vap-only)
CREATED_BY: Final = "agentrun.dev/created-by"
# The person who last wrote an AgentRunSchedule's spec.runTemplate (stamped on the schedule), carried by the
# operator onto the runs its ticks create: those runs' author for self-approval and four eyes.
SCHEDULE_AUTHOR: Final = "agentrun.dev/schedule-author"
DECIDED_BY: Final = "agentrun.dev/decided-by"
# The decider's groups as the API server saw them (comma-joined), stamped with DECIDED_BY: the operator
# checks spec.approval.approvers.groups against them.
DECIDED_BY_GROUPS: Final = "agentrun.dev/decided-by-groups"
RESOLVED_BY: Final = "agentrun.dev/resolved-by"
RETRIED_BY: Final = "agentrun.dev/retried-by"

# --- Steering an effect of unknown outcome (kubectl agentrun resolve) ------------------------------------
RESOLVE: Final = "agentrun.dev/resolve"  # "<effect key>=sent" | "<effect key>=not-sent"
RESOLVE_RESULT: Final = "agentrun.dev/resolve-result"  # JSON: the tool's return value for =sent

# --- On the Namespace ------------------------------------------------------------------------------------
LABEL_FOUR_EYES: Final = "agentrun.dev/require-four-eyes"  # "true": nobody approves a run they created
APPROVER_GROUPS: Final = "agentrun.dev/approver-groups"  # "group-a,group-b": only these decide here

# Groups, in the order the operator and the CLI use them.
DECISION_VERBS: Final = (APPROVE, REJECT)
DECISION_ANNOTATIONS: Final = (APPROVE, REJECT, COMMENT, DECIDED_BY, DECIDED_BY_GROUPS)
RESOLVE_ANNOTATIONS: Final = (RESOLVE, RESOLVE_RESULT, RESOLVED_BY)
