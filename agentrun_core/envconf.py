"""Reading settings from environment variables: one parser per kind of value, one wording of errors.

Rule: a variable that is unset, empty or only blanks means "use the default"; any other value must parse,
or the reader raises an error naming the variable, the value and what was expected — a typo in a Pod's
env stops the process at start instead of becoming a silent default. Each process keeps its own error type
(the worker's ``errors.ConfigError`` exits 2, the operator's ``SettingsError``): pass it as ``error``;
by default ``EnvError`` (a ``ValueError``).

Values come from a ``Mapping[str, str]`` (``os.environ`` or a test's dict), never from ``os.environ``
directly, so settings stay testable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})

ErrorFactory = Callable[[str], Exception]
N = TypeVar("N", int, float)


class EnvError(ValueError):
    """An environment variable has a value its reader cannot use."""


def _raw(env: Mapping[str, str], name: str) -> str:
    return (env.get(name) or "").strip()


def text(env: Mapping[str, str], name: str, default: str = "") -> str:
    """The value without surrounding blanks, or ``default`` when it is unset or blank."""
    return _raw(env, name) or default


def integer(env: Mapping[str, str], name: str, default: int, *, minimum: int | None = None,
            error: ErrorFactory = EnvError) -> int:
    """A whole number (``"8"``; not ``"8.5"``)."""
    return _parsed(env, name, default, int, "an integer", minimum, error)


def number(env: Mapping[str, str], name: str, default: float, *, minimum: float | None = None,
           error: ErrorFactory = EnvError) -> float:
    """A decimal number (``"2"``, ``"0.5"``, ``"1e3"``); the unit is the variable's (its name says it)."""
    return _parsed(env, name, default, float, "a number", minimum, error)


def flag(env: Mapping[str, str], name: str, default: bool, *, error: ErrorFactory = EnvError) -> bool:
    """true/false, also 1/0, yes/no, on/off, in any case."""
    raw = _raw(env, name).lower()
    if not raw:
        return default
    if raw in TRUE:
        return True
    if raw in FALSE:
        return False
    raise error(f"{name}={env.get(name)!r}: expected true or false")


def _parsed(env: Mapping[str, str], name: str, default: N, parse: Callable[[str], N], kind: str,
            minimum: float | None, error: ErrorFactory) -> N:
    raw = _raw(env, name)
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise error(f"{name}={raw!r} is not {kind}") from None
    if minimum is None or value >= minimum:
        return value
    if minimum == 0:
        raise error(f"{name}={raw!r}: must not be negative")
    raise error(f"{name}={raw!r}: must be at least {minimum:g}")
