"""One vocabulary: every annotation name, limit and phase of the AgentRun API is written once, in the API
package (``agentrun_core.api``), and read from there by the operator, the worker, the CLI and the dev tools.

The scan reads the source packages' syntax trees (not their text: docstrings and comments are prose for
people and may name an annotation) and fails on
  - a string literal (f-strings' literal parts too) that contains an annotation name or prefix;
  - a string literal that is exactly a phase name;
  - an integer literal equal to a limit, written as a limit: the value of a name that says LIMIT or MAX,
    an operand of a comparison, or a ``max_*=`` argument;
outside the modules that define them. The admission policies are held to the same: their templates
(agentrun_core/api/policies, rendered by ``agentrun_core.api.policygen``) and every hand-written yaml of
deploy/admission, deploy/admission-vap-only and deploy/components name no annotation, limit or phase but by
a placeholder. Each test below that feeds a scan a planted stray shows it can fail.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from agentrun_core.api import limits, meta, protocol, schedules
from agentrun_core.api import status as api_status
from tests.support import source_tree

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agentrun_core", "agent_worker", "operator/agent_operator", "agentrun", "agentrun_dev")
# The modules that define the vocabulary (the one place each value is written).
DEFINING = {
    "agentrun_core/api/meta.py",
    "agentrun_core/api/limits.py",
    "agentrun_core/api/status.py",
    "agentrun_core/api/protocol.py",
    "agentrun_core/api/schedules.py",
}
# Literals that look like the vocabulary but are another one's, each with why.
OTHER_VOCABULARIES = {
    # kubelet's Event reason for a container that failed to start (core/v1 Events), not a phase.
    ("agentrun_dev/podruntime/podworker.py", "Failed"),
    # Limits of other things that happen to share a number with a steering limit.
    ("agentrun_core/store/step_packing.py", 65536),  # events packed into one step row
    ("agentrun_core/results.py", 8192),  # bytes of a run's result kept in status
    ("agentrun_core/api/spec_schema.py", 4096),  # characters of one spec.worker command / args item
}
LIMIT_NAME = re.compile(r"LIMIT|MAX", re.IGNORECASE)


def _names(module: object, prefixes: tuple[str, ...]) -> set[str]:
    return {
        v
        for k, v in vars(module).items()
        if k.isupper() and isinstance(v, str) and any(k.startswith(p) for p in prefixes)
    }


ANNOTATIONS = (
    {v for v in vars(meta).values() if isinstance(v, str) and "agentrun.dev/" in v}
    | _names(protocol, ("LABEL_", "ANN_", "POD_FINALIZER"))
    | _names(schedules, ("LABEL_", "ANN_"))
)
PHASES = set(api_status.PHASES)
LIMITS = {v for k, v in vars(limits).items() if k.isupper() and isinstance(v, int)}
# An annotation name inside a longer text: not followed by more of a name (decided-by vs decided-by-groups;
# a full stop ends a sentence, not a name).
_ANNOTATION = re.compile(
    "|".join(
        re.escape(n) + ("" if n.endswith("/") else r"(?![A-Za-z0-9_-])(?!\.[A-Za-z0-9])")
        for n in sorted(ANNOTATIONS, key=len, reverse=True)
    )
)
# The policies' yaml: the templates, and the admission yaml nothing generates (the generated files hold the
# values by design: policygen's and agentrun_dev.input_policy's output, each checked for staleness).
TEMPLATES = ROOT / "agentrun_core" / "api" / "policies"
GENERATED_YAML = {
    ROOT / "deploy" / "admission" / "input-limits-policy.yaml",
    *(ROOT / "deploy" / p.relative_to(TEMPLATES) for p in TEMPLATES.rglob("*.yaml")),
}
PLACEHOLDER = re.compile(r"\{\{[^}]*\}\}")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (a module's, class's or function's first statement)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _as_limit(node: ast.Constant, parent: ast.AST | None) -> bool:
    """The integer ``node`` is written as a limit (see the module's docstring)."""
    if isinstance(parent, ast.Compare):
        return True
    if isinstance(parent, ast.keyword):
        # A schema's bound (max_length=64 of a name) is its own field's; only the distinctive numbers of the
        # steering limits are looked for there.
        return bool(parent.arg and parent.arg.startswith("max")) and int(node.value) >= 1024
    if isinstance(parent, ast.Assign | ast.AnnAssign):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return any(isinstance(t, ast.Name) and LIMIT_NAME.search(t.id) for t in targets)
    return False


def strays(source: str, path: str) -> Iterator[tuple[int, object]]:
    """(line, value) of each vocabulary literal in ``source`` (the module at ``path``, relative to the
    repository) that is not its defining module's and not another vocabulary's."""
    if path in DEFINING:
        return
    tree = ast.parse(source)
    docs = _docstrings(tree)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in docs:
            continue
        value = node.value
        if isinstance(value, str):
            found: list[object] = [m.group(0) for m in _ANNOTATION.finditer(value)]
            found += [value] if value in PHASES else []
        elif isinstance(value, int) and not isinstance(value, bool) and value in LIMITS:
            found = [value] if _as_limit(node, parents.get(id(node))) else []
        else:
            continue
        for item in found:
            if (path, item) not in OTHER_VOCABULARIES:
                yield node.lineno, item


def yaml_strays(text: str) -> list[tuple[int, object]]:
    """(line, value) of each annotation name, phase (a whole word) or limit (a whole number) in a policy's
    yaml text that is not a ``{{module.NAME}}`` placeholder."""
    out: list[tuple[int, object]] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = PLACEHOLDER.sub("", line)
        out += [(n, m.group(0)) for m in _ANNOTATION.finditer(line)]
        out += [(n, w) for w in re.findall(r"\b[A-Z][A-Za-z]+\b", line) if w in PHASES]
        out += [(n, int(d)) for d in re.findall(r"(?<![\w.])\d+(?![\w.])", line) if int(d) in LIMITS]
    return out


def _policy_yaml() -> Iterator[Path]:
    yield from sorted(TEMPLATES.rglob("*.yaml"))
    for where in ("deploy/admission", "deploy/admission-vap-only", "deploy/components/admission-vap-only"):
        yield from (p for p in sorted((ROOT / where).glob("*.yaml")) if p not in GENERATED_YAML)


def test_the_vocabulary_is_known() -> None:
    # The scan looks for something: a rename that emptied a set would make every test below pass.
    assert {"agentrun.dev/approve", "edit.agentrun.dev/", "agentrun.dev/run"} <= ANNOTATIONS
    assert {"Failed", "WaitingApproval"} <= PHASES
    assert {16384, 16, 4096, 65536, 8192} <= LIMITS


def test_no_stray_annotation_name_limit_or_phase_in_source() -> None:
    sources = source_tree.python_sources(PACKAGES)
    found = [f"{path}:{line}: {value!r}" for path, text in sources for line, value in strays(text, path)]
    assert not found, (
        "vocabulary written outside agentrun_core.api (import it from there: meta, limits, status):\n"
        + "\n".join(found)
    )


def test_a_planted_annotation_name_is_found() -> None:
    planted = 'ANN = "agentrun.dev/approve"\nMSG = f"set {x} with agentrun.dev/reject only"\n'
    assert list(strays(planted, "agentrun/planted.py")) == [
        (1, "agentrun.dev/approve"),
        (2, "agentrun.dev/reject"),
    ]
    assert list(strays('P = "edit.agentrun.dev/" + k\n', "agentrun/planted.py")) == [
        (1, "edit.agentrun.dev/")
    ]
    # A longer name is not the shorter one, and the defining module may write it.
    assert list(strays('A = "agentrun.dev/decided-by-groups"\n', "x.py")) == [
        (1, "agentrun.dev/decided-by-groups")
    ]
    assert list(strays('A = "agentrun.dev/approve"\n', "agentrun_core/api/meta.py")) == []


def test_a_planted_phase_is_found_but_not_in_prose() -> None:
    planted = '"""Runs end Failed."""\nif phase == "Failed":\n    pass\n# "Succeeded"\nx = "phase Failed"\n'
    assert list(strays(planted, "agentrun/planted.py")) == [(2, "Failed")]


def test_a_planted_limit_is_found_where_it_is_a_limit() -> None:
    planted = "EDIT_LIMIT = 16384\nok = len(v) <= 4096\nf(max_length=8192)\nchunk = read(65536)\nh = d[:16]\n"
    assert list(strays(planted, "agentrun/planted.py")) == [(1, 16384), (2, 4096), (3, 8192)]
    assert list(strays("f(max_length=16)\nMAX_EDITS = 16\n", "agentrun/planted.py")) == [(2, 16)]


def test_no_stray_vocabulary_in_the_admission_policies() -> None:
    paths = list(_policy_yaml())
    assert len(paths) >= 10 and any(TEMPLATES in p.parents for p in paths)  # the scan reads the policies
    found = [f"{p.relative_to(ROOT)}:{n}: {v!r}" for p in paths for n, v in yaml_strays(p.read_text())]
    assert not found, "write {{meta.NAME}}, {{limits.NAME}} or {{status.NAME}} instead:\n" + "\n".join(found)


def test_a_planted_policy_stray_is_found() -> None:
    planted = (
        "# only {{status.FAILED}} runs; agentrun.dev/reject.\n"
        "expression: \"size(variables.ann['{{meta.RESPONSE}}']) <= 4096\"\n"
        "expression: \"oldObject.?status.?phase.orValue('') in ['Failed']\"\n"
        'expression: "size(variables.editKeys) <= {{limits.EDIT_MAX_FIELDS}} && k.substring(18)"\n'
    )
    assert yaml_strays(planted) == [(1, "agentrun.dev/reject"), (2, 4096), (3, "Failed")]
