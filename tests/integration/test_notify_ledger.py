"""The notification ledger's SQL on the dev Postgres (agentrun_core.store.notifications): fencing by the
notifier epoch inside each statement, the issued marker, retry scheduling on Postgres's clock, and a worker
that cannot read the notifier table."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentrun_core import errors, store
from agentrun_core.store import notifications as ledger
from tests.support.queries import one_row

pytestmark = pytest.mark.postgres

RUN = "run-notify-1"


@pytest.fixture
def conn(pg_dsn: str) -> psycopg.Connection[Any]:
    c: psycopg.Connection[Any] = psycopg.connect(pg_dsn, autocommit=True)
    store.admit_run(c, run_id=RUN, namespace="team-a", name="r", graph="g:g", input={}, spec_hash="h")
    return c


def reserve(conn: psycopg.Connection[Any], epoch: int, key: str = "ak-n1") -> ledger.Notification | None:
    return ledger.reserve(
        conn,
        key=key,
        run_id=RUN,
        epoch=epoch,
        step="notify/a-1",
        event="requested",
        args={"x": 1},
        args_hash="h",
    )


def test_an_older_notifier_epoch_is_refused_in_the_statement(conn: psycopg.Connection[Any]) -> None:
    old = ledger.take_epoch(conn, "operator-a")
    first = reserve(conn, old)
    assert first is not None and first.inserted and first.status == "pending" and not first.issued
    new = ledger.take_epoch(conn, "operator-b")
    assert new == old + 1
    with pytest.raises(errors.Fenced):
        reserve(conn, old)
    with pytest.raises(errors.Fenced):
        ledger.record(conn, run_id=RUN, key="ak-n1", epoch=old, status="sent", issued=False, calls=1)
    again = reserve(conn, new)
    assert again is not None and not again.inserted and again.status == "pending"
    assert ledger.record(conn, run_id=RUN, key="ak-n1", epoch=new, status="pending", issued=True)
    seen = reserve(conn, new)
    assert seen is not None and seen.issued  # a call is outstanding: the next reader treats it as unknown
    assert ledger.record(
        conn, run_id=RUN, key="ak-n1", epoch=new, status="sent", issued=False, calls=1, result={"status": 200}
    )
    done = reserve(conn, new)
    assert done is not None and (done.status, done.issued, done.attempts) == ("sent", False, 1)
    assert not ledger.record(
        conn, run_id=RUN, key="ak-n1", epoch=new, status="failed", issued=False
    )  # only pending moves


def test_a_scheduled_retry_is_due_by_postgres_clock(conn: psycopg.Connection[Any]) -> None:
    epoch = ledger.take_epoch(conn, "operator-a")
    reserve(conn, epoch)
    ledger.record(
        conn, run_id=RUN, key="ak-n1", epoch=epoch, status="pending", issued=False, calls=1, retry_seconds=30
    )
    later = reserve(conn, epoch)
    # not yet due by Postgres's clock (no tighter lower bound: a loaded machine may pause here)
    assert later is not None and 0 < later.due_in_seconds <= 30 and later.attempts == 1
    assert ledger.open_notifications(conn, RUN) == [("ak-n1", False)]


def test_no_row_for_a_run_that_was_never_admitted(conn: psycopg.Connection[Any]) -> None:
    epoch = ledger.take_epoch(conn, "operator-a")
    assert (
        ledger.reserve(
            conn, key="ak-x", run_id="nope", epoch=epoch, step="s", event="requested", args={}, args_hash="h"
        )
        is None
    )


WORKER_GRANTS = (
    "SELECT count(*) FROM information_schema.role_table_grants"
    " WHERE table_name = %s AND grantee = 'agentrun_worker'"
)


def test_workers_get_nothing_on_the_notifier_table(conn: psycopg.Connection[Any]) -> None:
    def grants(table: str) -> int:
        (count,) = one_row(conn, WORKER_GRANTS, (table,))
        return int(count)

    assert grants("agentrun_effects") > 0  # the query sees the worker role's grants at all
    assert grants("agentrun_notifier") == 0
