"""A statement that addresses one row by its key reaches that row through the key's unique index, and one
that lists a run's rows searches an index by the run, in the plan Postgres caches for it, whatever the table
holds.

Why generic plans: a worker's connections prepare each statement at its second execution and keep one
generic plan for it (``plan_cache_mode=force_generic_plan``, agentrun_core/store/connect.py); other prepared
statements get one from their sixth execution when it looks no worse. A generic plan is made without the
parameters' values, with the statistics of that moment: on a fresh table (a new install, a burst before
autovacuum's ANALYZE) every index looks as cheap as the primary key, and ``record_effect``, which also
checks the row's run, was planned through ``agentrun_effects_run_idx`` and read every effect of the run to
update one: each effect cost more than the one before (measured in one run of 4,000 effects: 0.19 ms
per record at its start, 0.58 ms at its end). ``EXPLAIN (GENERIC_PLAN)`` shows, deterministically, the plan
such a statement gets on an empty table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from agentrun_core.store import queries

pytestmark = pytest.mark.postgres

# statement -> {table: the unique indexes it may read that table through}
BY_KEY: dict[str, dict[str, set[str]]] = {
    "reserve_effect": {"agentrun_effects": {"agentrun_effects_pkey"}},
    # inserts its row (no read of the effects) after reading the run by its key
    "reserve_new_effect": {"agentrun_runs": {"agentrun_runs_pkey"}},
    "record_effect": {"agentrun_effects": {"agentrun_effects_pkey"}},
    "confirm_effect": {"agentrun_effects": {"agentrun_effects_pkey"}},
    "get_effect": {"agentrun_effects": {"agentrun_effects_pkey"}},
    "resolve_effect": {"agentrun_effects": {"agentrun_effects_pkey"}},
    "reserve_notification": {"agentrun_effects": {"agentrun_effects_pkey"}},
    "record_notification": {"agentrun_effects": {"agentrun_effects_pkey"}},
    # the one pending approval of a run is unique too (a partial unique index on run_id)
    "decide_approval": {"agentrun_approvals": {"agentrun_approvals_pkey", "agentrun_approvals_one_pending"}},
    "get_approval": {"agentrun_approvals": {"agentrun_approvals_pkey"}},
    "mark_approval_resumed": {"agentrun_approvals": {"agentrun_approvals_pkey"}},
}


# statement -> the table it lists one run's rows of
BY_RUN: dict[str, str] = {
    "list_effects": "agentrun_effects",
    "list_notifications": "agentrun_effects",
    "list_open_notifications": "agentrun_effects",
    "list_needs_human_effects": "agentrun_effects",
    "list_approvals": "agentrun_approvals",
    "list_attempts": "agentrun_attempts",
    "list_heartbeats": "agentrun_heartbeats",
    "list_step_events": "agentrun_step_batches",  # through the view agentrun_step_events
    "list_interventions": "agentrun_interventions",
    "model_usage_total": "agentrun_model_usage",  # spec.budget: a worker's start, status.usage
    "model_usage_by_step": "agentrun_model_usage",  # the trace
}


def _positional(statement: str) -> str:
    """``%(name)s`` placeholders as ``$n`` (what psycopg sends), numbered by first appearance."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, statement)


def _scans(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if "Relation Name" in plan:
        yield plan
    for child in plan.get("Plans", []):
        yield from _scans(child)


def _generic_plan(conn: psycopg.Connection[Any], name: str) -> dict[str, Any]:
    row = conn.execute("EXPLAIN (GENERIC_PLAN, FORMAT JSON) " + _positional(queries.get(name))).fetchone()
    assert row is not None
    data = row[0] if isinstance(row[0], list) else json.loads(row[0])
    plan: dict[str, Any] = data[0]["Plan"]
    return plan


def test_the_positional_form_numbers_each_name_once() -> None:
    assert _positional("a = %(x)s AND b = %(y)s OR c = %(x)s") == "a = $1 AND b = $2 OR c = $1"


@pytest.mark.parametrize("name", sorted(BY_KEY))
def test_a_statement_by_key_reads_its_row_through_a_unique_index(pg_dsn: str, name: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        plan = _generic_plan(conn, name)
    read = [
        (scan["Relation Name"], scan["Node Type"], scan.get("Index Name"))
        for scan in _scans(plan)
        if scan["Relation Name"] in BY_KEY[name] and scan["Node Type"] != "ModifyTable"
    ]
    assert read, f"{name}: no read of {sorted(BY_KEY[name])} in its plan"
    for table, node, index in read:
        assert index in BY_KEY[name][table], (
            f"{name} reads {table} by {node} {index or ''}, not by {sorted(BY_KEY[name][table])}: "
            "a generic plan that scans more rows as the table grows"
        )


@pytest.mark.parametrize("name", sorted(BY_RUN))
def test_a_statement_by_run_searches_an_index_by_the_run(pg_dsn: str, name: str) -> None:
    """A run's rows are found by searching for its id, never by walking an index of every run's rows (as
    ``list_needs_human_effects`` did for its order, through the pending effects of all runs)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        plan = _generic_plan(conn, name)
    scans = [scan for scan in _scans(plan) if scan["Relation Name"] == BY_RUN[name]]
    assert scans, f"{name}: no read of {BY_RUN[name]} in its plan"
    for scan in scans:
        searched = scan.get("Index Cond") or scan.get("Recheck Cond") or ""
        how = scan["Node Type"]
        assert "run_id = $1" in searched, f"{name} reads {BY_RUN[name]} by {how}, not by its run"
