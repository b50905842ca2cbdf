"""Constructors of OpenAPI v3 schema nodes as a CustomResourceDefinition takes them (structural schemas).

Rule: one function per node kind, with the Kubernetes extensions (CEL ``x-kubernetes-validations``,
``x-kubernetes-preserve-unknown-fields``, list-map keys) as keyword arguments; each returns a plain dict
with ``type`` and ``description`` first and unset keys left out. Pure; used by ``spec_schema`` and ``crdgen``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Schema = dict[str, Any]


def rule(rule: str, message: str, *, reason: str | None = None, field_path: str | None = None) -> Schema:
    """One ``x-kubernetes-validations`` entry (a CEL rule the API server checks)."""
    out: Schema = {"rule": rule, "message": message}
    if reason is not None:
        out["reason"] = reason
    if field_path is not None:
        out["fieldPath"] = field_path
    return out


def _node(kind: str | None, description: str | None, **keys: Any) -> Schema:
    """A schema node: ``type`` and ``description`` first, then the given keys that are set (None: unset)."""
    out: Schema = {}
    if kind is not None:
        out["type"] = kind
    if description is not None:
        out["description"] = description
    out.update({k: v for k, v in keys.items() if v is not None})
    return out


def string(
    description: str | None = None,
    *,
    enum: Sequence[str] | None = None,
    default: str | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    pattern: str | None = None,
    fmt: str | None = None,
    rules: Sequence[Schema] = (),
) -> Schema:
    return _node(
        "string",
        description,
        format=fmt,
        enum=list(enum) if enum is not None else None,
        default=default,
        minLength=min_length,
        maxLength=max_length,
        pattern=pattern,
        **_rules(rules),
    )


def integer(
    description: str | None = None,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    default: int | None = None,
    fmt: str | None = None,
) -> Schema:
    return _node("integer", description, format=fmt, minimum=minimum, maximum=maximum, default=default)


def boolean(description: str | None = None, *, default: bool | None = None) -> Schema:
    return _node("boolean", description, default=default)


def int_or_string() -> Schema:
    """A Kubernetes quantity (resources.limits/requests values)."""
    return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}


def free(description: str | None = None) -> Schema:
    """Any JSON value, kept as given."""
    return _node(None, description, **{"x-kubernetes-preserve-unknown-fields": True})


def array(
    items: Schema,
    description: str | None = None,
    *,
    max_items: int | None = None,
    list_map_keys: Sequence[str] | None = None,
) -> Schema:
    keys: Schema = {"maxItems": max_items}
    if list_map_keys is not None:  # a list of objects merged by these keys (server-side apply, conditions)
        keys |= {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(list_map_keys)}
    return _node("array", description, **keys, items=items)


def obj(
    properties: Mapping[str, Schema] | None = None,
    description: str | None = None,
    *,
    required: Sequence[str] | None = None,
    max_properties: int | None = None,
    additional: Schema | None = None,
    preserve_unknown: bool = False,
    rules: Sequence[Schema] = (),
) -> Schema:
    return _node(
        "object",
        description,
        required=list(required) if required is not None else None,
        maxProperties=max_properties,
        additionalProperties=additional,
        properties=dict(properties) if properties is not None else None,
        **({"x-kubernetes-preserve-unknown-fields": True} if preserve_unknown else {}),
        **_rules(rules),
    )


def _rules(rules: Sequence[Schema]) -> Schema:
    return {"x-kubernetes-validations": list(rules)} if rules else {}
