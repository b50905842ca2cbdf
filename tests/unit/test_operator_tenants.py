"""The tenant DSN and Secret the operator writes per namespace (agent_operator.act.tenants): pure parts."""

from __future__ import annotations

import psycopg.conninfo
import pytest

from agent_operator.act import tenants
from agent_operator.decide import pods


def test_worker_dsn_keeps_where_and_replaces_who() -> None:
    base = "postgresql://agentrun:op-secret@db.example:5432/agentrun?sslmode=require"
    dsn = tenants.worker_dsn(base, "agentrun_ns_0123", "p@ss word")
    got = psycopg.conninfo.conninfo_to_dict(dsn)
    assert (got["host"], got["port"], got["dbname"], got["sslmode"]) == (
        "db.example",
        "5432",
        "agentrun",
        "require",
    )
    assert (got["user"], got["password"]) == ("agentrun_ns_0123", "p@ss word")
    assert "op-secret" not in dsn  # never the operator's credentials


def test_secret_is_the_one_pods_read() -> None:
    body = tenants.secret_body("team-a", "host=x user=u password=p")
    assert body["metadata"]["name"] == pods.TENANT_SECRET and body["metadata"]["namespace"] == "team-a"
    assert body["stringData"] == {pods.TENANT_SECRET_KEY: "host=x user=u password=p"}


def test_gone_keeps_order_and_asks_kubernetes_for_each() -> None:
    asked: list[str] = []

    def exists(ns: str) -> bool:
        asked.append(ns)
        return ns == "b"

    assert tenants.gone(["a", "b", "c"], exists) == ["a", "c"]
    assert asked == ["a", "b", "c"]


def test_gone_never_guesses_when_kubernetes_cannot_tell() -> None:
    def unreachable(ns: str) -> bool:
        raise OSError("connection refused")

    with pytest.raises(OSError):  # an unreachable API server never reads as "gone"
        tenants.gone(["a"], unreachable)
