"""``-o json|yaml|wide|name`` for every read command: one place decides what each format prints.

Rule: a read command builds its data once and hands it to :func:`emit` with two renderings of its own — a
table (narrow or wide) and the names of the objects it shows. ``json`` and ``yaml`` print the same data
(machine-readable, lossless: the structure a script sees is the one the table was drawn from), ``name``
prints one ``resource/name`` per line as kubectl does (to pipe into the steering verbs), ``table`` / ``wide``
the human view. A new read command (``fork``'s preview, ``status``, ...) adds nothing here: it calls
:func:`add_argument` and :func:`emit`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import yaml

FORMATS = ("table", "wide", "json", "yaml", "name")
# kubectl prints a custom resource's name as <plural-or-singular>.<group>/<name>.
RESOURCE = "agentrun.agentrun.dev"


def add_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="table",
        help="output format: table (default), wide (more columns), json, yaml, name (resource/name lines)",
    )


def plain(data: Any) -> Any:
    """The data as JSON types only (datetimes and other values become strings), so json and yaml agree."""
    return json.loads(json.dumps(data, default=str))


@dataclasses.dataclass(frozen=True)
class View:
    """What a read command shows: ``data`` (json/yaml), ``table(wide)`` (humans), ``names`` (-o name)."""

    data: Any
    table: Callable[[bool], str]
    names: Sequence[str]
    empty: str | None = None  # the table's text when there is nothing to show (json/yaml still print data)


def emit(fmt: str, view: View) -> str:
    """The text a read command prints for ``fmt`` (one of FORMATS)."""
    if fmt == "json":
        return json.dumps(plain(view.data), indent=2)
    if fmt == "yaml":
        return yaml.safe_dump(plain(view.data), sort_keys=False, default_flow_style=False).rstrip("\n")
    if fmt == "name":
        return "\n".join(view.names)
    if fmt not in ("table", "wide"):
        raise ValueError(f"unknown output format {fmt!r}")
    if not view.names and view.empty is not None:
        return view.empty
    return view.table(fmt == "wide")


def run_name(name: str) -> str:
    return f"{RESOURCE}/{name}"


def as_list(items: Sequence[Any]) -> dict[str, Any]:
    """Several objects in one document, the way ``kubectl get -o json`` prints a list."""
    return {"apiVersion": "v1", "kind": "List", "items": list(items), "metadata": {"resourceVersion": ""}}
