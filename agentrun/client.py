"""``agentrun.client``: start, follow and answer AgentRuns from Python, as the caller.

::

    from agentrun import client

    runs = client.Client()                                   # $KUBECONFIG / ~/.kube/config, its namespace
    run = runs.create("ticket-1042", graph="my_agents.tickets:graph", input={"ticket": {"id": 1042}})
    run = runs.wait("ticket-1042", until={"WaitingApproval", *client.FINAL_PHASES}, timeout=600)
    for pending in runs.pending_approvals():                 # every run of the namespace waiting on a human
        runs.approve(pending.run.name, approval_id=pending.approval.id, comment="looks right")
    run = runs.wait("ticket-1042", timeout=600)              # until it finished; run.phase says how
    for event in runs.steps("ticket-1042"):                  # step events as they happen (needs a DSN)
        print(event.step, event.kind)

Rule: this is the CLI's engine without the terminal. Every call is an ordinary API request with the caller's
kubeconfig identity, so RBAC and the admission policies decide exactly as for ``kubectl agentrun``: an
approval through the client is annotated, stamped and judged like one through the CLI (the same patch,
``agentrun.deciding.patch_for``). Failures are the CLI's errors (``client.Error`` is ``CliError``, with the
message the CLI prints). Results are typed snapshots (``Run``, ``Approval``) over the resource as the API
server returned it (``Run.resource``). ``trace`` and ``effects`` read through the API server's read API as the
caller, as ``agentrun trace`` does; with a DSN (``AGENTRUN_DSN`` or ``dsn=``, the cluster admin's) they read
Postgres directly. ``steps`` follows the ledger in Postgres and needs that DSN.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
import time
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from agentrun import cluster, deciding, steer_cli, trace, trace_cli, watching
from agentrun_core import kube, store
from agentrun_core.api import protocol
from agentrun_core.api import status as api_status
from agentrun_core.store import connect, rows

Error = cluster.CliError
FINAL_PHASES = protocol.FINAL_PHASES


class Timeout(Error):
    """``wait`` ran out of time; ``.run`` is the last snapshot seen."""

    def __init__(self, message: str, run: Run) -> None:
        super().__init__(message)
        self.run = run


@dataclasses.dataclass(frozen=True)
class Approval:
    """The pending approval of a run: its id (what ``approve`` names), the graph's prompt, its deadline."""

    id: str
    prompt: Any
    deadline: str | None


@dataclasses.dataclass(frozen=True)
class Run:
    """One AgentRun as the API server had it. ``phase`` is ``Pending`` until the operator wrote a status."""

    name: str
    namespace: str
    uid: str
    phase: str
    message: str
    attempts: int
    current_step: str | None
    pending_approval: Approval | None
    conditions: Mapping[str, Mapping[str, Any]]
    effects: Mapping[str, int]
    resource: Mapping[str, Any]

    @property
    def finished(self) -> bool:
        return self.phase in FINAL_PHASES

    @classmethod
    def of(cls, resource: Mapping[str, Any]) -> Run:
        meta, status = resource.get("metadata") or {}, resource.get("status") or {}
        pending = status.get("pendingApproval") or {}
        return cls(
            name=str(meta.get("name")),
            namespace=str(meta.get("namespace")),
            uid=str(meta.get("uid")),
            phase=str(status.get("phase") or api_status.PENDING),
            message=str(status.get("message") or ""),
            attempts=int(status.get("attempts") or 0),
            current_step=status.get("currentStep"),
            pending_approval=(
                Approval(str(pending["id"]), pending.get("prompt"), pending.get("deadline"))
                if pending.get("id")
                else None
            ),
            conditions={str(c.get("type")): dict(c) for c in status.get("conditions") or ()},
            effects={str(k): int(v or 0) for k, v in (status.get("effects") or {}).items()},
            resource=resource,
        )


@dataclasses.dataclass(frozen=True)
class Pending:
    """A run waiting on a human, and the approval it waits on."""

    run: Run
    approval: Approval


def reached(run: Run, until: Collection[str]) -> bool:
    """``run`` is in one of the phases ``until``. A final phase counts only once its Finished condition is
    of the current spec: right after a retry the old outcome is still shown until the operator has seen it
    (as for ``agentrun wait``). Pure."""
    if run.phase not in until:
        return False
    return run.phase not in FINAL_PHASES or steer_cli.finished(dict(run.resource)) is not None


class Client:
    """AgentRuns of one namespace (``namespace=``, else the kubeconfig context's), as the caller."""

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        dsn: str | None = None,
    ) -> None:
        self.api, default_ns = cluster.connect(kubeconfig, context)
        self.namespace = namespace or default_ns
        self._dsn = dsn

    # --- the resource (API server only) ---------------------------------------------------------------

    def create(
        self,
        name: str,
        *,
        graph: str,
        input: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        **spec: Any,
    ) -> Run:
        """A new AgentRun. ``spec`` takes the other spec fields by their CRD names (``approval={...}``,
        ``worker={...}``, ``lease={...}``); the API server validates them against the CRD."""
        body = {
            "apiVersion": kube.runs.API_VERSION,
            "kind": "AgentRun",
            "metadata": {"name": name, **({"labels": dict(labels)} if labels else {})},
            "spec": {"graph": graph, "input": dict(input or {}), **spec},
        }
        return Run.of(cluster.create_run(self.api, self.namespace, body))

    def get(self, name: str) -> Run:
        return Run.of(cluster.get_run(self.api, self.namespace, name))

    def list(
        self,
        *,
        selector: str | None = None,
        phases: Collection[str] | None = None,
        all_namespaces: bool = False,
    ) -> builtins.list[Run]:
        """The runs (sorted by namespace and name), filtered by a label selector and phases."""
        wanted = watching.phases(",".join(phases)) if phases else None
        where = None if all_namespaces else self.namespace
        items, _ = cluster.list_runs_at(self.api, where, selector=selector, name=None)
        return [Run.of(i) for i in watching.keep(items, wanted)]

    def wait(
        self,
        name: str,
        *,
        until: Collection[str] = FINAL_PHASES,
        timeout: float | None = None,
        interval: float = 1.0,
    ) -> Run:
        """The run once its phase is one of ``until`` (default: finished; a final phase only once the
        operator wrote it for the current spec). Transient API errors are ridden out until ``timeout``;
        ``Timeout`` (with the last snapshot) after it."""
        watching.phases(",".join(until))  # an unknown phase is refused before waiting for it
        deadline = None if timeout is None else time.monotonic() + timeout
        last: Run | None = None
        while True:
            try:
                last = self.get(name)
                if reached(last, until):
                    return last
            except Error as exc:
                if not cluster.transient(exc):
                    raise
            if deadline is not None and time.monotonic() >= deadline:
                seen = last.phase if last is not None else "unknown (API server unreachable)"
                raise Timeout(
                    f"AgentRun {self.namespace}/{name}: not {'/'.join(sorted(until))} after {timeout:g}s "
                    f"(phase {seen})",
                    last if last is not None else Run.of({"metadata": {"name": name}}),
                )
            time.sleep(interval)

    def watch(self, name: str | None = None, *, selector: str | None = None) -> Iterator[Run]:
        """The run (or the selected runs) now, then each change as the API server reports it, forever."""
        items, version = cluster.list_runs_at(self.api, self.namespace, selector=selector, name=name)
        if name is not None and not items:
            raise Error(f'AgentRun "{name}" not found in namespace "{self.namespace}"')
        for item in items:
            yield Run.of(item)
        for obj in watching.changes(self.api, self.namespace, version, selector=selector, name=name):
            yield Run.of(obj)

    # --- humans ----------------------------------------------------------------------------------------

    def pending_approvals(self, *, all_namespaces: bool = False) -> builtins.list[Pending]:
        found = self.list(phases=[api_status.WAITING_APPROVAL], all_namespaces=all_namespaces)
        return [Pending(r, r.pending_approval) for r in found if r.pending_approval is not None]

    def approve(self, name: str, *, approval_id: str | None = None, comment: str | None = None) -> str:
        """Approve the pending approval (``approval_id``: the one you saw; required once the run has asked
        several). Returns the id decided. The admission policies decide whether the caller may."""
        return self._decide("approve", name, approval_id, comment)

    def reject(self, name: str, *, approval_id: str | None = None, comment: str | None = None) -> str:
        return self._decide("reject", name, approval_id, comment)

    def _decide(self, decision: str, name: str, wanted: str | None, comment: str | None) -> str:
        resource = cluster.get_run(self.api, self.namespace, name)
        status = dict(resource.get("status") or {})
        approval_id = deciding.choose(status, f"{self.namespace}/{name}", wanted, interactive=False)
        patch = deciding.patch_for(decision, approval_id, comment)
        cluster.annotate(self.api, self.namespace, name, patch)
        return approval_id

    # --- the ledger (Postgres, with a DSN) ------------------------------------------------------------

    def dsn(self) -> str:
        found = self._dsn or os.environ.get("AGENTRUN_DSN")
        if not found:
            raise Error("no ledger database: pass dsn= or set AGENTRUN_DSN")
        return found

    def trace(self, name: str) -> dict[str, Any]:
        """What ``agentrun trace NAME -o json`` prints: attempts, steps, effects, approvals, interventions."""
        if not (self._dsn or os.environ.get("AGENTRUN_DSN")):
            view = trace_cli.read_view(self.api, self.namespace, name, "agentruntraces")
            data: dict[str, Any] = view["trace"]
            return data
        resource = cluster.get_run(self.api, self.namespace, name)
        return trace.build(trace_cli.gather(resource, self.dsn()))

    def effects(self, name: str) -> builtins.list[dict[str, Any]]:
        """The run's effect ledger, as ``agentrun ledger NAME -o json``."""
        if not (self._dsn or os.environ.get("AGENTRUN_DSN")):
            view = trace_cli.read_view(self.api, self.namespace, name, "agentruneffects")
            found: builtins.list[dict[str, Any]] = view["effects"]
            return found
        effects: builtins.list[dict[str, Any]] = self.trace(name)["effects"]
        return effects

    def steps(self, name: str, *, interval: float = 1.0) -> Iterator[rows.StepEvent]:
        """The run's step events in order, each once, as they are recorded; ends when the run finished
        and every event of it was yielded."""
        uid = self.get(name).uid
        seen = 0
        while True:
            done = self.get(name).finished
            try:
                with connect.connect(self.dsn(), timeout_seconds=5) as conn:
                    events = store.list_step_events(conn, uid)
            except connect.Error as exc:
                raise Error(f"cannot read the ledger: {exc}") from exc
            yield from events[seen:]
            seen = max(seen, len(events))
            if done:
                return
            time.sleep(interval)
