"""No function shadows a module of the API package it reads from: ``meta = body["metadata"]`` in a module
that imported ``agentrun_core.api.meta`` turns ``meta.CREATED_BY`` into a dict lookup that fails only at
run time (mypy sees the dict as ``Any``). The scheduler shipped exactly that once; this keeps it out."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.support import source_tree

SOURCES = ("agentrun_core", "agent_worker", "operator/agent_operator", "agentrun", "agentrun_dev", "bench")


def shadowed(source: str) -> Iterator[tuple[int, str]]:
    """(line, name) of each local binding of a name the module imported from ``agentrun_core.api``."""
    tree = ast.parse(source)
    api = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == "agentrun_core.api"
        for alias in node.names
    }
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        args = fn.args
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None and arg.arg in api:
                yield arg.lineno, arg.arg
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in api:
                yield node.lineno, node.id


def test_no_function_shadows_an_api_module_it_imports() -> None:
    sources = source_tree.python_sources(SOURCES)
    found = [f"{path}:{line}: {name}" for path, text in sources for line, name in shadowed(text)]
    assert not found, "a local hides an agentrun_core.api module (rename the local):\n" + "\n".join(found)


def test_the_check_finds_a_planted_shadow() -> None:
    planted = (
        "from agentrun_core.api import meta\n"
        "def create(body):\n"
        "    meta = body.setdefault('metadata', {})\n"
        "    meta['annotations'] = {meta.CREATED_BY: 'x'}\n"
        "def keep(status, limits=None):\n"
        "    return status\n"
    )
    assert list(shadowed(planted)) == [(3, "meta")]
    assert list(shadowed("from agentrun_core.api import limits\ndef f(limits): pass\n")) == [(2, "limits")]
