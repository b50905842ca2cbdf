"""Named SQL queries from the ``sql/*.sql`` files (``queries.sql``, ``fork.sql``): blocks introduced by
``-- name: foo`` lines. A name is unique across all the files. A line ``-- part: foo`` inside a block stands
for the block named foo: SQL that several statements must share word for word is written once.

Queries use psycopg named placeholders (``%(run_id)s``). Loading is pure text parsing, cached once.
"""

from __future__ import annotations

import functools
import importlib.resources
import re

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$")
_PART = re.compile(r"^--\s*part:\s*([a-z_][a-z0-9_]*)\s*$")


def parse(text: str) -> dict[str, str]:
    """Split a queries file into {name: sql}. Comment lines inside a block are kept (harmless to Postgres)."""
    queries: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []

    def flush() -> None:
        if current is not None:
            body = "\n".join(lines).strip()
            if not body:
                raise ValueError(f"query {current!r} is empty")
            queries[current] = body

    for line in text.splitlines():
        match = _NAME.match(line.strip())
        if match:
            flush()
            current = match.group(1)
            if current in queries:
                raise ValueError(f"query {current!r} defined twice")
            lines = []
        elif current is not None:
            lines.append(line)
    flush()
    return queries


def splice(queries: dict[str, str]) -> dict[str, str]:
    """Every ``-- part: foo`` line replaced by the block named foo (one level: a part holds no part)."""

    def expand(line: str) -> str:
        match = _PART.match(line.strip())
        if match is None:
            return line
        if match.group(1) not in queries:
            raise ValueError(f"no part named {match.group(1)!r}")
        return queries[match.group(1)]

    return {name: "\n".join(expand(line) for line in sql.splitlines()) for name, sql in queries.items()}


@functools.cache
def all_queries() -> dict[str, str]:
    root = importlib.resources.files("agentrun_core.store") / "sql"
    merged: dict[str, str] = {}
    for path in sorted((p for p in root.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name):
        for name, sql in parse(path.read_text(encoding="utf-8")).items():
            if name in merged:
                raise ValueError(f"query {name!r} defined twice ({path.name})")
            merged[name] = sql
    return splice(merged)


def get(name: str) -> str:
    try:
        return all_queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in agentrun_core/store/sql/queries.sql") from None
