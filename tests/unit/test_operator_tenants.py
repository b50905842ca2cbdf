"""The tenant DSN and Secret the operator writes per namespace (agent_operator.tenants): pure parts."""

from __future__ import annotations

import psycopg.conninfo

from agent_operator import pods, tenants


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
