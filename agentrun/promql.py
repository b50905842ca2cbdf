"""Just enough PromQL reading to list the metric names an expression uses (for the dashboard/alert tests,
which fail when a query names a metric the code does not export). Not a parser: it drops strings, label
matchers, range selectors and grouping clauses, then keeps identifiers that are not functions or keywords."""

from __future__ import annotations

import re

_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "inf",
        "nan",
    }
)


def metric_names(expr: str) -> set[str]:
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"'(?:[^'\\]|\\.)*'", "''", s)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        if s[m.end() :].lstrip().startswith("(") or m.group().lower() in _KEYWORDS:
            continue
        names.add(m.group())
    return names
