"""The project's Python sources, for the tests that read the tree itself (module size, vocabulary strays,
shadowed API modules): one list of the source packages, walked in one order."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Every package that ships or runs from this repository (tests/ is not one of them).
PACKAGES = (
    "agentrun_core",
    "agent_worker",
    "operator/agent_operator",
    "agentrun",
    "agentrun_dev",
    "agentrun_examples",
    "bench",
)


def python_sources(packages: Iterable[str] = PACKAGES) -> Iterator[tuple[str, str]]:
    """(path relative to the repository, with ``/``; text) of every ``.py`` file of ``packages``, in order."""
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text()
