"""Canonical encoding of effect arguments: the same logical arguments give the same bytes in every process.

Accepted (recursively): ``str``, ``int``, ``bool``, ``None``, finite ``float``, ``list`` and ``tuple`` (both
encode as a JSON array: ``(1, 2)`` and ``[1, 2]`` are the same arguments), ``dict`` with ``str`` keys (keys
sorted), and dataclass instances (encoded as ``{"__dataclass__": "module.QualName", fields...}`` so two
dataclasses with equal fields but different types differ). Everything else — sets (no stable order), bytes,
datetimes, NaN/inf, objects — is refused with a ``TypeError`` naming the path (``args.items[2].when``): a key
built from ``repr()`` or ``id()`` would silently differ between processes and re-send the effect.

The encoding is JSON with sorted keys, no whitespace and ASCII escapes; the hash is sha256 of it. Nothing
depends on ``PYTHONHASHSEED`` (no ``hash()``, no set iteration).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any


class CanonicalError(TypeError):
    """An argument cannot be canonicalised. The message names the path and the type."""


def normalise(value: Any, path: str = "args") -> Any:
    """Return a JSON-ready structure, or raise ``CanonicalError`` naming where the bad value sits."""
    # bool before int: bool is an int subclass but must stay a JSON boolean.
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CanonicalError(f"{path}: non-finite float {value!r} cannot be part of an idempotency key")
        return value
    if isinstance(value, list | tuple):
        return [normalise(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalError(
                    f"{path}: dict key {key!r} is {type(key).__name__}; only str keys are accepted"
                )
            out[key] = normalise(item, f"{path}.{key}")
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        out = {"__dataclass__": f"{cls.__module__}.{cls.__qualname__}"}
        for field in dataclasses.fields(value):
            out[field.name] = normalise(getattr(value, field.name), f"{path}.{field.name}")
        return out
    raise CanonicalError(
        f"{path}: {type(value).__module__}.{type(value).__qualname__} is not accepted in effect arguments "
        "(accepted: str, int, bool, None, finite float, list, tuple, dict with str keys, dataclasses)"
    )


def encode(value: Any) -> str:
    """Canonical JSON text of ``value``."""
    normal = normalise(value)
    return json.dumps(normal, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def digest(value: Any) -> str:
    """sha256 hex of the canonical encoding."""
    return hashlib.sha256(encode(value).encode("ascii")).hexdigest()
