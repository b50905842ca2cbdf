"""Building a ledger of many finished runs with real SQL (set-based INSERT ... SELECT, seconds for 10,000
runs), for the collector's plan and scrape-time checks: each finished run has an ended attempt, two
confirmed effects, three step events, a decided approval and its heartbeats; ``live`` runs are running,
with a pending effect, a pending approval and fresh heartbeats."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

_SQL = (Path(__file__).with_suffix(".sql")).read_text()
BLOCKS = dict(re.findall(r"-- name: (\w+)\n(.*?)(?=\n-- name: |\Z)", _SQL, re.S))


def _run(conn: psycopg.Connection[Any], block: str, n: int, prefix: str) -> None:
    for statement in BLOCKS[block].split(";\n"):
        if statement.strip():
            conn.execute(statement, {"n": n, "prefix": prefix})
    conn.execute("ANALYZE")  # plans as a long-running database would have them (autovacuum analyzes)


def add_finished(conn: psycopg.Connection[Any], n: int, prefix: str = "f") -> None:
    _run(conn, "finished", n, prefix)


def add_live(conn: psycopg.Connection[Any], n: int, prefix: str = "live") -> None:
    _run(conn, "live", n, prefix)
