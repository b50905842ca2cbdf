import dataclasses
import datetime

import pytest

from agentrun_core import canonical


@dataclasses.dataclass
class Point:
    x: int
    y: list[int]


@dataclasses.dataclass
class Other:
    x: int
    y: list[int]


def test_dict_order_and_tuple_list_do_not_matter() -> None:
    assert canonical.encode({"b": 1, "a": (1, 2)}) == canonical.encode({"a": [1, 2], "b": 1})
    assert canonical.encode({"a": "é"}) == '{"a":"\\u00e9"}'


def test_bool_is_not_int() -> None:
    assert canonical.digest(True) != canonical.digest(1)
    assert canonical.digest(1.0) != canonical.digest(True)


def test_dataclasses_carry_their_type() -> None:
    assert canonical.digest(Point(1, [2])) == canonical.digest(Point(1, [2]))
    assert canonical.digest(Point(1, [2])) != canonical.digest(Other(1, [2]))


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": {1, 2}}, "args.a"),
        ({"items": [1, {"when": datetime.date(2020, 1, 1)}]}, "args.items[1].when"),
        ({"x": float("nan")}, "args.x"),
        ({"x": float("inf")}, "args.x"),
        ({1: "int key"}, "args"),
        ({"b": b"bytes"}, "args.b"),
        ({"o": object()}, "args.o"),
    ],
)
def test_refuses_with_path(value: object, path: str) -> None:
    with pytest.raises(TypeError) as info:
        canonical.encode(value)
    assert str(info.value).startswith(f"{path}: ")
