"""P5: checkpoint and agentrun bytes per step and per effect vs bare PostgresSaver, and rows left behind.

A ``chat_<n>`` graph (``add_messages``, two messages per turn) runs once through the worker path and once
bare, per durability mode. Bytes are ``pg_column_size`` of the rows each run left, per table (TOAST-compressed
sizes, as stored). Byte counts are deterministic, so they are measured once, not repeated. "Rows left" is
what stays in Postgres for a finished run: everything below stays until something deletes it. "Rows left after
retention" is what is left of those runs once retention has purged them: the run marked due as the operator
marks it when the AgentRun is gone (``ttlSecondsAfterFinished``, a delete), then purged by the operator's own
statement (``store.purge_due``), counted in every table of the schema with a ``run_id`` or ``thread_id``
column (so a table added later is counted too). It must be 0. Then the same chat with ``messages`` a
``DeltaChannel`` (bench/p5_delta.py): bytes per turn and resume time at a short and a long chat.
"""

from __future__ import annotations

import uuid

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver

from agentrun_core import store
from bench import db, graphs, p1_steps, p5_delta, stats


def _rows_referencing(dsn: str, run_ids: list[str]) -> dict[str, int]:
    """table -> rows whose run_id / thread_id is one of ``run_ids``, for every such table of the schema."""
    out: dict[str, int] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        columns = conn.execute(
            "SELECT c.table_name, c.column_name FROM information_schema.columns c"
            " JOIN information_schema.tables t USING (table_schema, table_name)"
            " WHERE c.table_schema = current_schema() AND c.column_name IN ('run_id', 'thread_id')"
            " AND t.table_type = 'BASE TABLE' ORDER BY c.table_name"
        ).fetchall()
        for table, column in columns:
            row = conn.execute(
                f'SELECT count(*) FROM "{table}" WHERE "{column}" = ANY(%s)', (run_ids,)
            ).fetchone()
            assert row is not None
            out[str(table)] = int(row[0])
    return out


def _purge(dsn: str, run_ids: list[str]) -> None:
    """Retention as the operator does it: the runs marked due now, then purged in batches."""
    with db.pool(dsn, size=1) as p:
        for run_id in run_ids:
            store.mark_for_purge(p, run_id, after_seconds=0, reason="bench: ttlSecondsAfterFinished")
        while len(store.purge_due(p, batch=100)) == 100:
            pass


def _worker_run(dsn: str, graph: str, mode: p1_steps.Durability) -> str:
    p1_steps.worker_attempt(dsn, graph, mode)
    return p1_steps.LAST_RUN_ID[0]


def _bare_run(dsn: str, graph: str, mode: p1_steps.Durability) -> str:
    thread = str(uuid.uuid4())
    with db.pool(dsn) as p:
        compiled = graphs.build(graph).compile(checkpointer=PostgresSaver(p))
        compiled.invoke({}, {"configurable": {"thread_id": thread}}, durability=mode)
    return thread


def run(report: stats.Report, *, quick: bool, reps: int) -> None:
    section = "P5 storage: bytes per step / per effect vs bare PostgresSaver, rows left after a run"
    report.section(section)
    turns = 20 if quick else 200
    n_effects = 5 if quick else 20
    with db.fresh_database("p5") as dsn:
        finished: list[str] = []
        modes: list[p1_steps.Durability] = ["sync"] if quick else ["sync", "exit"]
        for mode in modes:
            graph = f"chat_{turns}"
            finished.append(_worker_run(dsn, graph, mode))
            ours = db.run_bytes(dsn, finished[-1])
            base = db.run_bytes(dsn, _bare_run(dsn, graph, mode))
            ck_ours, ck_base = (db.total(sizes, db.CHECKPOINT_TABLES)[1] for sizes in (ours, base))
            ar_rows, ar_bytes = db.total(ours, db.AGENTRUN_TABLES)
            label = f"{turns}-turn add_messages, {mode}"
            report.add(
                section,
                stats.Row(
                    f"{label}: checkpoint bytes per step", [ck_ours / turns], [ck_base / turns], unit="B"
                ),
            )
            report.add(
                section,
                stats.Row(
                    f"{label}: checkpoint + agentrun bytes per step",
                    [(ck_ours + ar_bytes) / turns],
                    [ck_base / turns],
                    unit="B",
                ),
            )
            report.add(section, stats.Row(f"{label}: agentrun bytes per step", [ar_bytes / turns], unit="B"))
            left = ", ".join(
                f"{t.removeprefix('agentrun_')} {ours[t][0]}"
                for t in db.CHECKPOINT_TABLES + db.AGENTRUN_TABLES
                if ours[t][0]
            )
            report.add(
                section,
                stats.Row(
                    f"{label}: rows left for the finished run",
                    [float(db.total(ours, db.CHECKPOINT_TABLES)[0] + ar_rows)],
                    unit="rows",
                    note=left,
                ),
            )
        run_id = _worker_run(dsn, f"effect_{n_effects}", "sync")
        finished.append(run_id)
        sizes = db.run_bytes(dsn, run_id)
        # What the ledger and the step events cost, per step of the effect graph (one effect each).
        for table, per in (
            ("agentrun_effects", "ledger bytes per effect"),
            ("agentrun_step_batches", "step-event bytes per step"),
        ):
            figure = f"{n_effects} steps with an effect: {per}"
            report.add(section, stats.Row(figure, [sizes[table][1] / n_effects], unit="B"))
        before = sum(_rows_referencing(dsn, finished).values())
        _purge(dsn, finished)
        remaining = {t: n for t, n in _rows_referencing(dsn, finished).items() if n}
        report.add(
            section,
            stats.Row(
                f"{len(finished)} finished runs: rows left after retention purged them",
                [float(sum(remaining.values()))],
                unit="rows",
                note=(", ".join(f"{t} {n}" for t, n in remaining.items()) or "none")
                + f"; {before:,} rows before",
            ),
        )
        p5_delta.run(report, dsn, quick=quick, reps=reps)
