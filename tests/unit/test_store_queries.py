import pytest

from agentrun_core.store import queries, schema


def test_parse_blocks() -> None:
    text = "-- header\n-- name: a\nSELECT 1\n\n-- name: b\n-- a comment\nSELECT 2\n"
    assert queries.parse(text) == {"a": "SELECT 1", "b": "-- a comment\nSELECT 2"}


def test_parse_refuses_duplicates_and_empty() -> None:
    with pytest.raises(ValueError, match="twice"):
        queries.parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
    with pytest.raises(ValueError, match="empty"):
        queries.parse("-- name: a\n\n-- name: b\nSELECT 1\n")


def test_shipped_queries_load() -> None:
    assert "get_run" in queries.all_queries()
    with pytest.raises(KeyError, match="no query named"):
        queries.get("nope")


def test_migrations_are_numbered_in_order() -> None:
    migrations = schema.load_migrations()
    assert [m.version for m in migrations] == sorted(m.version for m in migrations)
    assert migrations[0].name == "0001_initial.sql"


def test_pending_skips_applied() -> None:
    migrations = [schema.Migration(1, "0001_a.sql", ""), schema.Migration(2, "0002_b.sql", "")]
    assert [m.version for m in schema.pending({1}, migrations)] == [2]
