"""The AgentRun spec as one field table: the CRD's spec schema and the operator's spec defaults.

Rule: a field of ``spec`` (its type, bounds, enum, pattern, default, CEL rule) is written here and nowhere
else (the ``spec.approval`` object in ``agentrun_core.api.spec_approval``, which this table places).
``agentrun_core.api.crdgen`` renders this table into crds/agentrun.dev_agentruns.yaml (a unit test checks the
checked-in file is the rendering) and ``model.RunSpec.from_body`` reads its defaults and enums from here
(``default``, ``enum``), so the API server and the operator cannot disagree on them.
Pure data and pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentrun_core.api import limits, openapi, protocol, spec_approval, spec_budget

ON_TIMEOUT = spec_approval.ON_TIMEOUT
NOTIFY_FORMATS = spec_approval.NOTIFY_FORMATS
# A CEL rule keeps state paths (spec.forkOf.set/setJson keys) to identifiers joined by dots, at most 8 deep.
# Run deadlines (spec.activeDeadlineSeconds, progressDeadlineSeconds): positive, at most ten years.
MAX_DEADLINE_SECONDS = 315360000
_STATE_PATH = "^[A-Za-z_][A-Za-z0-9_]*([.][A-Za-z_][A-Za-z0-9_]*){0,7}$"


def _state_edits(field: str, description: str) -> openapi.Schema:
    """spec.forkOf.set / setJson: state path -> value text, the keys kept to state paths by a CEL rule."""
    return openapi.obj(
        description=description,
        max_properties=32,
        rules=[
            openapi.rule(
                f"self.all(k, k.matches('{_STATE_PATH}'))",
                f"spec.forkOf.{field} keys are state paths: identifiers joined by dots (e.g. draft.body)",
            )
        ],
        additional=openapi.string(max_length=limits.FORK_VALUE_MAX_CHARS),
    )


# spec: what a user writes. Comments say why a rule is there; descriptions are what `kubectl explain` shows.
SPEC: openapi.Schema = openapi.obj(
    {
        "graph": openapi.string(
            "The graph to run, as package.module:attribute (e.g. agentrun_examples.support_ticket:graph).",
            min_length=3,
            max_length=253,
            rules=[
                openapi.rule(
                    "self.matches('^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$')",
                    (
                        "spec.graph must look like package.module:attribute (e.g. "
                        "agentrun_examples.support_ticket:graph)"
                    ),
                )
            ],
        ),
        "input": openapi.obj(
            description="The graph's input (free-form JSON object). Immutable.", preserve_unknown=True
        ),
        "durability": openapi.string(
            "LangGraph checkpoint durability; sync is the safe default for runs with effects.",
            enum=protocol.DURABILITIES,
            default="sync",
        ),
        "worker": openapi.obj(
            {
                "image": openapi.string(max_length=512),
                "command": openapi.array(openapi.string(max_length=4096), max_items=32),
                "args": openapi.array(openapi.string(max_length=4096), max_items=64),
                "serviceAccountName": openapi.string(max_length=253),
                "priorityClassName": openapi.string(max_length=253),
                "nodeSelector": openapi.obj(max_properties=32, additional=openapi.string()),
                "tolerations": openapi.array(openapi.obj(preserve_unknown=True), max_items=32),
                "resources": openapi.obj(
                    {
                        "limits": openapi.obj(additional=openapi.int_or_string()),
                        "requests": openapi.obj(additional=openapi.int_or_string()),
                    }
                ),
                "env": openapi.array(
                    openapi.obj(
                        {
                            "name": openapi.string(min_length=1, max_length=256),
                            "value": openapi.string(),
                        },
                        required=["name"],
                        preserve_unknown=True,
                        rules=[
                            openapi.rule(
                                (
                                    "!self.name.startsWith('AGENTRUN_') || self.name == "
                                    "'AGENTRUN_FAULT_POINTS' || "
                                    "self.name.matches('^AGENTRUN_FAULT_POINTS_ATTEMPT_[0-9]+$')"
                                ),
                                (
                                    "AGENTRUN_* variables are set by the operator (only "
                                    "AGENTRUN_FAULT_POINTS and AGENTRUN_FAULT_POINTS_ATTEMPT_<n> may be "
                                    "given)"
                                ),
                            )
                        ],
                    ),
                    "Extra environment variables (the AGENTRUN_* variables are set by the operator).",
                    max_items=64,
                    list_map_keys=["name"],
                ),
            },
            "Settings of the worker Pod started for each attempt.",
        ),
        "concurrency": openapi.obj(
            {
                "key": openapi.string(
                    (
                        "Runs of this namespace with the same key share the limit; default: spec.graph (a "
                        "limit per graph)."
                    ),
                    min_length=1,
                    max_length=253,
                ),
                "limit": openapi.integer(
                    "At most this many runs of the key have a worker Pod at once; the others wait in line.",
                    minimum=1,
                    maximum=10000,
                ),
            },
            (
                "A start limit shared by the runs of this namespace with the same key (default: the graph): "
                "the runs beyond it wait, first come first served, and start as Pods of the key end. Applies "
                "with the operator's per-namespace limit; running workers are never stopped for it."
            ),
            required=["limit"],
        ),
        "lease": openapi.obj(
            {
                "durationSeconds": openapi.integer(
                    "Lease duration in seconds; the worker renews every third of it.",
                    minimum=3,
                    maximum=600,
                    default=15,
                ),
            },
            "The run's Lease (held by the worker of the current attempt).",
        ),
        "retry": openapi.obj(
            {
                "maxAttempts": openapi.integer(
                    (
                        "Attempts that may be lost (evicted, killed, failed) before the run is Failed; "
                        "resumes after an approval do not count."
                    ),
                    minimum=1,
                    maximum=100,
                    default=5,
                ),
                "backoffSeconds": openapi.integer(
                    "Delay before the second attempt, in seconds; doubled for each further attempt.",
                    minimum=0,
                    maximum=3600,
                    default=2,
                ),
                "maxBackoffSeconds": openapi.integer(
                    "Upper bound of the delay between attempts, in seconds.",
                    minimum=0,
                    maximum=86400,
                    default=60,
                ),
            },
            "What to do when an attempt's Pod ends or disappears before the run is finished.",
            rules=[
                openapi.rule(
                    (
                        "!has(self.backoffSeconds) || !has(self.maxBackoffSeconds) || self.maxBackoffSeconds "
                        ">= self.backoffSeconds"
                    ),
                    "spec.retry.maxBackoffSeconds must be >= spec.retry.backoffSeconds",
                )
            ],
        ),
        "approval": spec_approval.APPROVAL,
        "budget": spec_budget.BUDGET,
        "ttlSecondsAfterFinished": openapi.integer(
            "Delete the AgentRun this many seconds after it finished (unset = keep).",
            minimum=0,
            maximum=31536000,
        ),
        "activeDeadlineSeconds": openapi.integer(
            (
                "Fail the run (reason DeadlineExceeded) once it has been active this long: the time it had a "
                "worker attempt, from each attempt's start to its end. Not counted: time parked on an "
                "approval (that wait has its own deadline, spec.approval.timeoutSeconds), suspended, queued "
                "for a worker slot or backing off between attempts; a retry starts the count again. The "
                "worker is fenced at once (no new effect; an effect in flight keeps its ledger row) and its "
                "Pod deleted, as a cancel does. Unset = no limit."
            ),
            minimum=1,
            maximum=MAX_DEADLINE_SECONDS,
        ),
        "progressDeadlineSeconds": openapi.integer(
            (
                "Fail the run (reason ProgressDeadlineExceeded) when its worker runs this long without "
                "finishing a step (a worker that heartbeats inside one step, or hangs, makes no progress). "
                "Counted from the later of the current worker's claim of the run and the last recorded "
                "step; not while no attempt runs (parked, suspended). Under durability exit the steps of "
                "an attempt are recorded at its end, so this counts from the worker's claim. Unset = no "
                "limit."
            ),
            minimum=1,
            maximum=MAX_DEADLINE_SECONDS,
        ),
        "cancel": openapi.boolean(
            "Stop the run at a step boundary and mark it Cancelled (cannot be undone).", default=False
        ),
        "suspend": openapi.boolean(
            "Stop the worker at a step boundary and start no new attempt until false again.", default=False
        ),
        "retryGeneration": openapi.integer(
            (
                "Raise by one to retry a stopped (Failed, needs-human, Cancelled) run under the same run id: "
                "it resumes from its last checkpoint, sent effects return their stored result, failed "
                "effects proven not performed are tried again under a new key generation (the others keep "
                "their key: reconciled, or resolved by a human). Needs the RBAC verb retry on agentruns "
                "(kubectl agentrun retry NAME). Only increases."
            ),
            minimum=0,
            maximum=1000000,
        ),
        "forkOf": openapi.obj(
            {
                "run": openapi.string(
                    "The source AgentRun's name (same namespace).", min_length=1, max_length=253
                ),
                "runUid": openapi.string(
                    (
                        "The source AgentRun's uid (kubectl agentrun fork records it; a later run of the "
                        "same name is then never used)."
                    ),
                    max_length=64,
                ),
                "checkpoint": openapi.string(
                    "A root checkpoint id of the source run (agentrun trace shows them).",
                    min_length=1,
                    max_length=64,
                    pattern="^[A-Za-z0-9][A-Za-z0-9-]*$",
                ),
                "step": openapi.string(
                    "Fork from the checkpoint written after the latest completed step of this name.",
                    min_length=1,
                    max_length=128,
                    pattern="^[A-Za-z_][A-Za-z0-9_.:-]*$",
                ),
                "set": _state_edits(
                    "set",
                    "Edits of the state at that checkpoint: dotted path (draft.body) -> new string value; "
                    "applied with LangGraph's update_state by the fork's first worker.",
                ),
                "approve": openapi.boolean(
                    "The requester approves what the fork carries past a gate: the source's decided "
                    "approvals at that checkpoint and the edits (set, setJson). Needs the RBAC verb approve "
                    "on the source run (admission policy agentrun-fork); implied by edits. Without it, the "
                    "operator refuses a fork from a checkpoint written after a decided approval."
                ),
                "setJson": _state_edits(
                    "setJson",
                    "Like set, with each value JSON text (a number, list, object ...): kubectl agentrun fork "
                    "--set-json.",
                ),
            },
            (
                "Start from a checkpoint of another AgentRun of this namespace (kubectl agentrun fork NAME "
                "--step STEP|--checkpoint ID --as NEW). The run gets its own run id, hence its own effects; "
                "spec.input is not used. Needs get on the source run, and approve on it with edits or "
                "approve: true. Set at creation only."
            ),
            required=["run"],
            rules=[
                openapi.rule(
                    "has(self.checkpoint) != has(self.step)",
                    (
                        "spec.forkOf needs exactly one of checkpoint (a checkpoint id) or step (the step "
                        "after which to fork)"
                    ),
                )
            ],
        ),
    },
    required=["graph"],
    rules=[
        openapi.rule(
            "self.graph == oldSelf.graph",
            "spec.graph is immutable: create a new AgentRun to run another graph",
            reason="FieldValueForbidden",
            field_path=".graph",
        ),
        openapi.rule(
            "(has(self.input) == has(oldSelf.input)) && (!has(self.input) || self.input == oldSelf.input)",
            "spec.input is immutable: the run's input is part of its admission record",
            reason="FieldValueForbidden",
            field_path=".input",
        ),
        openapi.rule(
            (
                "(has(self.forkOf) == has(oldSelf.forkOf)) && (!has(self.forkOf) || self.forkOf == "
                "oldSelf.forkOf)"
            ),
            "spec.forkOf is immutable: it says where the run started (create another fork instead)",
            reason="FieldValueForbidden",
            field_path=".forkOf",
        ),
        openapi.rule(
            "!has(oldSelf.durability) || (has(self.durability) && self.durability == oldSelf.durability)",
            "spec.durability is immutable",
            reason="FieldValueForbidden",
            field_path=".durability",
        ),
        openapi.rule(
            (
                "!has(oldSelf.retryGeneration) || (has(self.retryGeneration) && self.retryGeneration >= "
                "oldSelf.retryGeneration)"
            ),
            "spec.retryGeneration can only increase (raise it by one to retry a stopped run)",
            reason="FieldValueForbidden",
            field_path=".retryGeneration",
        ),
        openapi.rule(
            (
                "!has(self.retryGeneration) || self.retryGeneration <= (has(oldSelf.retryGeneration) ? "
                "oldSelf.retryGeneration : 0) || !has(self.cancel) || !self.cancel"
            ),
            (
                "raising spec.retryGeneration retries the run: set spec.cancel to false in the same change "
                "(a cancelled run is retried with cancel: false)"
            ),
            reason="FieldValueInvalid",
            field_path=".cancel",
        ),
        # Runs keep their code (agent_operator.decide.imagepin): the image is pinned at admission; it may
        # change only
        # together with a retry (a new retry generation re-pins), never under a running attempt.
        openapi.rule(
            (
                "(has(self.worker) && has(self.worker.image) ? self.worker.image : '') == "
                "(has(oldSelf.worker) && has(oldSelf.worker.image) ? oldSelf.worker.image : '') || "
                "(has(self.retryGeneration) ? self.retryGeneration : 0) > (has(oldSelf.retryGeneration) ? "
                "oldSelf.retryGeneration : 0)"
            ),
            (
                "spec.worker.image is pinned for the run's attempts: change it only together with a retry of "
                "a stopped run (agentrun retry NAME --image IMAGE), or create a new AgentRun"
            ),
            reason="FieldValueForbidden",
        ),
    ],
)


def field(path: str) -> openapi.Schema:
    """The schema of a spec field by dotted path (``retry.maxAttempts``)."""
    node = SPEC
    for name in path.split("."):
        node = node["properties"][name]
    return node


def default(path: str) -> Any:
    """The CRD default of a spec field: what the operator assumes when the field (or its object) is absent."""
    return field(path)["default"]


def enum(path: str) -> tuple[str, ...]:
    return tuple(field(path)["enum"])


def walk(node: openapi.Schema = SPEC, path: str = "") -> Iterable[tuple[str, openapi.Schema]]:
    """Every field under ``node`` as (dotted path, schema), parents before children."""
    for name, child in (node.get("properties") or {}).items():
        here = f"{path}.{name}" if path else name
        yield here, child
        yield from walk(child, here)
