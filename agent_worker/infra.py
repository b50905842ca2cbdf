"""Infrastructure failures are not graph failures.

A lost Postgres connection (a restart: ``AdminShutdown``; a killed postmaster: "server closed the connection";
the pool unable to connect) during a heartbeat, a ledger write or a checkpoint write says nothing about the
graph. The attempt ends as *lost* with exit code 14 (docs/design.md): the run stays ``running`` in Postgres,
nothing is recorded as ``GraphFailed``, and the operator starts the next attempt, which resumes from the head
checkpoint. Graph code that raises such an error itself is treated the same: retrying is right for a
transient outage, and a permanent one shows up as repeated infra losses, never as a silent success.
"""

from __future__ import annotations

import logging
import time

from agentrun_core import errors, store
from agentrun_core.api import protocol
from agentrun_core.store import connect

logger = logging.getLogger(__name__)

RECORD_SECONDS = 10.0  # how long a lost attempt keeps trying to record that before exiting

# OperationalError covers AdminShutdown / CrashShutdown / CannotConnectNow and a dropped connection;
# PoolTimeout is the pool failing to hand out a working connection while the server is down.
_INFRA_TYPES = connect.TRANSIENT_ERRORS


class InfraLost(errors.ControlSignal):
    """Postgres (or the platform) failed under the attempt: exit 14, retried by the operator. A control signal
    (agentrun_core/errors.py): graph code's ``except Exception`` cannot swallow it."""

    exit_code = protocol.EXIT_INFRA


def cause(exc: BaseException) -> BaseException | None:
    """The infrastructure error in ``exc``'s cause/context chain (``exc`` itself included), if any."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, (InfraLost, *_INFRA_TYPES)):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def lost(exc: BaseException, during: str) -> InfraLost:
    """Wrap an infrastructure error met ``during`` an operation (keeps the original as ``__cause__``)."""
    if isinstance(exc, InfraLost):
        return exc
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    wrapped = InfraLost(f"infrastructure failure during {during}: {type(exc).__name__}: {first}")
    wrapped.__cause__ = exc
    return wrapped


def record_lost(conn: store.Conn, *, run_id: str, attempt: int, lost: InfraLost) -> bool:
    """Record the attempt as ``lost`` / ``infra: ...``, best effort: a restarting Postgres is usually back
    within seconds; a down one is not waited for past ``RECORD_SECONDS`` (the operator attributes the loss
    from the exit code anyway). True if recorded."""
    deadline = time.monotonic() + RECORD_SECONDS
    while True:
        try:
            store.record_attempt_end(
                conn, run_id=run_id, attempt=attempt, outcome="lost", detail=f"infra: {lost}"
            )
            return True
        except Exception as exc:
            if time.monotonic() > deadline:
                logger.warning("could not record the lost attempt (%s)", exc)
                return False
            time.sleep(0.5)
