"""The benchmark's arithmetic and graph names (bench/stats.py, bench/graphs.py): pure, no I/O."""

from __future__ import annotations

import io

import pytest

from bench import cli, graphs, stats


def test_alternate_reverses_the_order_every_other_repetition() -> None:
    calls: list[str] = []
    out = stats.alternate({"a": lambda: calls.append("a") or 1, "b": lambda: calls.append("b") or 2}, 4)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert out == {"a": [1, 1, 1, 1], "b": [2, 2, 2, 2]}


def test_averaged_makes_a_repetition_of_k_calls_each_figure_their_mean() -> None:
    values = iter([{"t": 1.0, "u": 10.0}, {"t": 2.0, "u": 20.0}, {"t": 6.0, "u": 30.0}, {"t": 5.0, "u": 0.0}])
    repetition = stats.averaged(lambda: next(values), 3)
    assert repetition() == {"t": 3.0, "u": 20.0}
    assert next(values) == {"t": 5.0, "u": 0.0}  # exactly 3 calls


def test_median_spread_and_ratio() -> None:
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.spread([1.0, 2.0, 3.0]) == pytest.approx(100.0)
    row = stats.Row("x", [2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert row.ratio() == 2.0 and row.as_dict()["baseline_median"] == 1.0
    assert stats.Row("y", [1.0]).ratio() is None


def test_report_prints_figure_baseline_and_ratio() -> None:
    out = io.StringIO()
    report = stats.Report(out=out)
    report.add("P1", stats.Row("per step", [4.0, 6.0, 5.0], [2.0, 2.5, 2.5]))
    line = out.getvalue()
    assert "per step" in line and "5 ms" in line and "2.5 ms" in line and "ratio 2.00x" in line


def test_graph_names_are_validated() -> None:
    assert callable(graphs.noop_3)  # type: ignore[attr-defined]
    assert callable(graphs.pair_3)  # type: ignore[attr-defined]  # the ledger's floor (P1)
    with pytest.raises(AttributeError, match="no graph 'bogus_3'"):
        graphs.bogus_3  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError):
        graphs.noop_x  # type: ignore[attr-defined]  # noqa: B018


def test_cli_refuses_unknown_benchmarks_and_too_few_repetitions(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["p9"]) == 2
    assert "unknown benchmark p9" in capsys.readouterr().err
    assert cli.main(["p1", "--reps", "3"]) == 2
    assert "at least 5" in capsys.readouterr().err
