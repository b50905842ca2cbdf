"""Which errors end an attempt as an infrastructure loss (exit 14) rather than a graph failure."""

from __future__ import annotations

import psycopg
import psycopg_pool

from agent_worker import infra
from agentrun_core import errors
from agentrun_core.api import protocol


def _raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as caught:
        return caught


def test_postgres_connection_losses_are_infra_wherever_they_sit_in_the_chain() -> None:
    shutdown = psycopg.errors.AdminShutdown("terminating connection due to administrator command")
    assert infra.cause(shutdown) is shutdown
    wrapped = _raised_from(RuntimeError("node failed"), shutdown)  # graph code re-raised it
    assert infra.cause(wrapped) is shutdown
    assert infra.cause(psycopg_pool.PoolTimeout("couldn't get a connection")) is not None
    assert infra.cause(psycopg.OperationalError("server closed the connection unexpectedly")) is not None


def test_graph_and_worker_errors_are_not_infra() -> None:
    assert infra.cause(ValueError("the graph failed on purpose")) is None
    assert infra.cause(errors.Fenced("refused")) is None
    assert infra.cause(psycopg.errors.UniqueViolation("duplicate key")) is None  # a bug, not an outage


def test_lost_keeps_the_cause_and_exits_14() -> None:
    shutdown = psycopg.errors.AdminShutdown("terminating connection\nmore")
    lost = infra.lost(shutdown, "a checkpoint write")
    assert lost.exit_code == 14 and lost.__cause__ is shutdown
    assert str(lost) == (
        "infrastructure failure during a checkpoint write: AdminShutdown: terminating connection"
    )
    assert infra.lost(lost, "again") is lost


def test_the_operator_attributes_exit_14_as_infra_not_failed() -> None:
    from agent_operator.decide import model, pods
    from agent_operator.observe import metrics

    lost = model.PodInfo("r-1", 1, phase="Failed", terminated_reason="Error", exit_code=protocol.EXIT_INFRA)
    reason, message = pods.end_reason(lost)
    assert reason == "infra" and "Postgres" in message
    assert reason in metrics.ATTEMPT_REASONS  # a label of agentrun_attempts_started_total, not "other"
    failed = model.PodInfo("r-1", 1, phase="Failed", terminated_reason="Error", exit_code=1)
    assert pods.end_reason(failed)[0] == "failed"
