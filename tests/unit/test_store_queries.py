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


def test_a_part_line_is_replaced_by_the_named_block_and_an_unknown_part_is_an_error() -> None:
    named = {"pair": "INSERT INTO t VALUES (1)", "reserve": "WITH x AS (\n    -- part: pair\n)\nSELECT 1"}
    assert queries.splice(named)["reserve"] == "WITH x AS (\nINSERT INTO t VALUES (1)\n)\nSELECT 1"
    with pytest.raises(ValueError, match="no part named 'nope'"):
        queries.splice({"q": "-- part: nope"})


def test_both_reserves_insert_the_new_effect_through_the_one_part() -> None:
    spliced = queries.all_queries()
    for name, sql in spliced.items():  # every part line was spliced
        assert not [line for line in sql.splitlines() if line.strip().startswith("-- part:")], name
    part = spliced["insert_new_effect"].strip()
    assert sum(part in sql for sql in spliced.values()) >= 3  # the part itself and both reserves
