"""Forks: a new run that starts from a checkpoint of another run of the same namespace (sql/fork.sql).

Rule: only the operator calls these, as the tables' owner, at the fork's admission. The source is looked up
in the fork's own namespace, so a tenant cannot fork (or read) another tenant's run whatever its spec says;
the copy of the checkpoint commits with the fork's admission row in one statement, or not at all.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Unpack

from psycopg.types.json import Jsonb

from agentrun_core.store import db, rows, runs


@dataclasses.dataclass(frozen=True)
class ForkSource:
    """What ``find_fork_source`` found; ``problem`` says, in words for the user, what was not."""

    run_id: str | None
    checkpoint_id: str | None
    channels: tuple[str, ...]
    steps: tuple[str, ...]
    problem: str | None = None
    # The source's approvals decided before that checkpoint ("a-… (approved)"): a fork from it carries them.
    carried: tuple[str, ...] = ()


def find_fork_source(
    conn: db.Conn,
    *,
    namespace: str,
    name: str,
    run_uid: str | None = None,
    checkpoint_id: str | None = None,
    step: str | None = None,
    set_keys: tuple[str, ...] = (),
) -> ForkSource:
    """Resolve spec.forkOf: the source run, its checkpoint (given, or after the latest ``step``), and whether
    every edited top-level key is a channel of the state there. Reads only; never raises for a bad request."""
    row = db.fetch_one(
        conn,
        "find_fork_source",
        {
            "namespace": namespace,
            "name": name,
            "run_uid": run_uid,
            "checkpoint_id": checkpoint_id,
            "step": step,
        },
    )
    row = row or {}
    channels = tuple(row.get("channels") or ())
    steps = tuple(row.get("steps") or ())
    carried = tuple(row.get("carried") or ())
    found = ForkSource(row.get("run_id"), row.get("checkpoint_id"), channels, steps, carried=carried)
    problem: str | None
    if found.run_id is None:
        which = f" with uid {run_uid}" if run_uid else ""
        problem = (
            f"no run {name!r}{which} was admitted in namespace {namespace} "
            "(a fork starts from a run of its own namespace)"
        )
    elif found.checkpoint_id is None and checkpoint_id is not None:
        problem = f"{checkpoint_id!r} is not a checkpoint of run {name} (see `agentrun trace {name}`)"
    elif found.checkpoint_id is None:
        done = ", ".join(steps) or "none"
        problem = f"run {name} has no checkpoint after a step {step!r} (steps it completed: {done})"
    else:
        unknown = [k for k in set_keys if k not in channels]
        problem = (
            f"cannot set {', '.join(repr(k) for k in unknown)}: not in the state at checkpoint "
            f"{found.checkpoint_id} of run {name} (its keys: {', '.join(channels) or 'none'})"
            if unknown
            else None
        )
    return dataclasses.replace(found, problem=problem)


def admit_fork(conn: db.Conn, *, fork_of: dict[str, Any], **admission: Unpack[runs.Admission]) -> rows.Run:
    """``admit_run`` for a fork: the row (``fork_of`` recorded, its head the copied checkpoint) and the copy
    of the source checkpoint (row, blobs, pending writes) in one statement. Idempotent."""
    params = runs.admission_params(admission)
    source = {"source_run_id": fork_of["run_id"], "checkpoint_id": fork_of["checkpoint_id"]}
    params.update(source, fork_of=Jsonb(fork_of))
    row = db.fetch_one(conn, "admit_fork", params)
    assert row is not None
    return rows.pack(rows.Run, row)


def list_forks(conn: db.Conn, run_id: str) -> list[dict[str, Any]]:
    """The runs forked from ``run_id``: run_id, namespace, name, fork_of, admitted_at."""
    return db.fetch_all(conn, "list_forks", {"run_id": run_id})
