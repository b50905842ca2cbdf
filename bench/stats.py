"""Repetitions, medians and the one output format: ``figure  agentrun  baseline  ratio``.

Variants are alternated (A B, B A, A B …) so drift on a shared, loaded machine hits both sides alike; the
spread printed is (max - min) / median of the repetitions, in percent.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO


def alternate(variants: Mapping[str, Callable[[], Any]], reps: int) -> dict[str, list[Any]]:
    """Call every variant ``reps`` times, reversing the order on every other repetition."""
    names = list(variants)
    out: dict[str, list[Any]] = {n: [] for n in names}
    for rep in range(reps):
        for name in names if rep % 2 == 0 else reversed(names):
            out[name].append(variants[name]())
    return out


def averaged(variant: Callable[[], Mapping[str, float]], k: int) -> Callable[[], dict[str, float]]:
    """One repetition made of ``k`` calls of ``variant`` in a row, each figure the mean of theirs: for runs
    so short that one alone jumps between repetitions."""

    def repetition() -> dict[str, float]:
        results = [variant() for _ in range(k)]
        return {key: sum(r[key] for r in results) / k for key in results[0]}

    return repetition


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def spread(values: list[float]) -> float:
    """(max - min) / median, in percent."""
    m = median(values)
    return 100.0 * (max(values) - min(values)) / m if values and m else 0.0


@dataclasses.dataclass
class Row:
    figure: str
    ours: list[float]
    base: list[float] | None = None
    unit: str = "ms"
    note: str = ""
    higher_is_better: bool = False  # throughput: ratio = ours / base, else ours / base too (printed as is)

    def ratio(self) -> float | None:
        if not self.base:
            return None
        b = median(self.base)
        return median(self.ours) / b if b else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "unit": self.unit,
            "median": median(self.ours),
            "spread_pct": spread(self.ours),
            "baseline_median": median(self.base) if self.base else None,
            "ratio": self.ratio(),
            "note": self.note,
            "n": len(self.ours),
        }


def _fmt(value: float, unit: str) -> str:
    if unit in ("B", "rows", "pods", "MB", "/s", "runs/min", "%", "trips", "stmts"):
        return f"{value:,.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"
    return f"{value:.3g} {unit}" if value < 100 else f"{value:,.0f} {unit}"


class Report:
    """Collects rows per section and prints them (and optionally JSON lines) as they come."""

    def __init__(self, out: TextIO = sys.stdout, json_path: str | None = None) -> None:
        self.out = out
        self.rows: list[tuple[str, Row]] = []
        self.json_path = json_path

    def section(self, title: str) -> None:
        print(f"\n== {title}", file=self.out, flush=True)

    def add(self, section: str, row: Row) -> None:
        self.rows.append((section, row))
        ours = f"{_fmt(median(row.ours), row.unit)} ±{spread(row.ours):.0f}%"
        if row.base:
            base = f"{_fmt(median(row.base), row.unit)} ±{spread(row.base):.0f}%"
            ratio = row.ratio()
            text = f"{ours:>22}  vs {base:>22}  ratio {ratio:.2f}x" if ratio else f"{ours:>22}  vs {base:>22}"
        else:
            text = f"{ours:>22}"
        note = f"  ({row.note})" if row.note else ""
        print(f"  {row.figure:<58} {text}{note}", file=self.out, flush=True)

    def note(self, text: str) -> None:
        print(f"  · {text}", file=self.out, flush=True)

    def close(self) -> None:
        if self.json_path:
            with open(self.json_path, "w") as fh:
                for section, row in self.rows:
                    fh.write(json.dumps({"section": section, **row.as_dict()}) + "\n")
