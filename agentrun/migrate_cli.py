"""``agentrun migrate``: apply the run store's schema migrations (the platform admin's command).

    agentrun migrate [--dsn DSN] [--dry-run]

The same migrations the operator applies at start-up when ``AGENTRUN_MIGRATE`` is on (the default), under the
same lock (``agentrun_core.store.schema``: a concurrent operator or Job waits, each file is applied once).
Run it before the new operator (docs/upgrading.md); ``deploy/migrate`` runs it as a Kubernetes Job.
Exit codes: 0 done (or nothing pending), 1 the database refused or could not be reached, 2 usage.
"""

from __future__ import annotations

import argparse
import os
import sys

from agentrun_core import store
from agentrun_core.store import connect


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentrun migrate", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn", help="Postgres DSN of the run store, as the operator's (default: $AGENTRUN_DSN)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the pending migrations (number and name) and apply nothing",
    )
    return parser


def _label(name: str) -> str:
    """``0035_worker_compat.sql`` -> ``0035 worker_compat``."""
    stem = name.removesuffix(".sql")
    number, _, rest = stem.partition("_")
    return f"{number} {rest}"


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    dsn = (args.dsn or os.environ.get("AGENTRUN_DSN", "")).strip()
    if not dsn:
        print("agentrun migrate: no database: pass --dsn or set AGENTRUN_DSN", file=sys.stderr)
        return 2
    try:
        with connect.connect(dsn) as conn:
            pending = store.pending_migrations(conn)
            if args.dry_run:
                if not pending:
                    print(f"up to date: schema version {store.schema_version(conn)}; nothing to apply")
                    return 0
                print(f"{len(pending)} pending migration(s) (dry run: nothing applied):")
                for migration in pending:
                    print(f"  {_label(migration.name)}")
                return 0
            applied = store.migrate(conn)
            version = store.schema_version(conn)
    except connect.Error as exc:
        print(f"agentrun migrate: {type(exc).__name__}: {exc}".rstrip(), file=sys.stderr)
        return 1
    for name in applied:
        print(f"applied {_label(name)}")
    print(f"schema version {version}" + ("" if applied else "; nothing to apply (up to date)"))
    return 0
