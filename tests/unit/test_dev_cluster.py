"""``agentrun dev up``'s wait for the CRDs (``agentrun_dev.cluster.established``)."""

from __future__ import annotations

import json
from typing import Any

from agentrun_dev import cluster


def _crd(*conditions: tuple[str, str]) -> dict[str, Any]:
    status = {"conditions": [{"type": t, "status": v} for t, v in conditions]} if conditions else {}
    return {"kind": "CustomResourceDefinition", "status": status}


def test_a_crd_with_no_conditions_yet_is_waited_for_not_an_error() -> None:
    assert not cluster.established(json.dumps(_crd()))  # just created: the API server wrote nothing yet
    assert not cluster.established(json.dumps(_crd(("NamesAccepted", "True"), ("Established", "False"))))
    assert cluster.established(json.dumps(_crd(("NamesAccepted", "True"), ("Established", "True"))))


def test_a_list_is_established_only_when_every_crd_is() -> None:
    both = {"kind": "List", "items": [_crd(("Established", "True")), _crd(("Established", "True"))]}
    one = {"kind": "List", "items": [_crd(("Established", "True")), _crd()]}
    assert cluster.established(json.dumps(both)) and not cluster.established(json.dumps(one))
    assert not cluster.established(json.dumps({"kind": "List", "items": []}))
