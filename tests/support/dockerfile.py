"""The project's Dockerfile read as instructions and stages, for the tests of its structure
(tests/unit/test_dockerfile.py) and of its install steps performed for real
(tests/integration/test_deploy_image.py).
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), " ".join(rest.split())))
    return result


def stages() -> dict[str, list[tuple[str, str]]]:
    """Each stage's instructions by its name (``FROM … AS name``; an unnamed stage by its index)."""
    result: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for word, args in instructions():
        if word == "FROM":
            name = args.split(" AS ")[-1].strip() if " AS " in args else str(len(result))
            current = result.setdefault(name, [])
        if current is not None:
            current.append((word, args))
    return result
