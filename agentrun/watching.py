"""``-w/--watch`` and the list filters of the read commands: the runs as they change, kubectl's way.

Rule: a watch starts from the resourceVersion of the list just printed, so no change between the two is
lost; when the server ends the stream (its timeout) the watch goes on from the last version seen; when that
version is too old (410 Gone) the runs are listed again and printed once more. Transient API errors are
ridden out with a growing pause; anything else ends the command with the server's message. The phase filter
is applied to every object, listed or changed. Pure helpers first; the one loop with I/O last.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from agentrun import cluster
from agentrun_core import kube
from agentrun_core.api import protocol
from agentrun_core.api import status as api_status


def phases(text: str | None) -> frozenset[str] | None:
    """``--phase Failed,WaitingApproval`` as a set (None: no filter); an unknown name is refused. Pure."""
    if not text:
        return None
    wanted = frozenset(p.strip() for p in text.split(",") if p.strip())
    unknown = sorted(wanted - set(protocol.PHASES))
    if unknown or not wanted:
        raise cluster.CliError(
            f"unknown phase {', '.join(unknown) or repr(text)}: choose from {', '.join(protocol.PHASES)}"
        )
    return wanted


def phase_of(obj: dict[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase") or api_status.PENDING)


def keep(items: Sequence[dict[str, Any]], wanted: frozenset[str] | None) -> list[dict[str, Any]]:
    """The runs whose phase is wanted (all with None); a run with no status yet counts as Pending. Pure."""
    return [i for i in items if wanted is None or phase_of(i) in wanted]


def without_header(table: str) -> str:
    """A table's rows without its header line: what a watch prints for each change. Pure."""
    return "\n".join(table.splitlines()[1:])


def changes(
    api: kube.ApiClient,
    namespace: str | None,
    version: str,
    *,
    selector: str | None,
    name: str | None,
    pause: float = 1.0,
) -> Iterator[dict[str, Any]]:
    """Every changed run after ``version``, forever (the caller stops on Ctrl-C)."""
    failures = 0
    while True:
        try:
            for event in kube.runs.watch(
                api, namespace, version, label_selector=selector, field_selector=cluster.name_field(name)
            ):
                obj = event.get("object") or {}
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                failures = 0
                if event.get("type") != "BOOKMARK":
                    yield obj
        except kube.Gone:
            items, version = cluster.list_runs_at(api, namespace, selector=selector, name=name)
            yield from items
        except kube.KubeError as exc:
            said = cluster.message(exc, "watch agentruns", namespace or "", name)
            error = cluster.CliError(said, exc.status)
            if not cluster.transient(error):
                raise error from exc
            failures += 1
            time.sleep(min(pause * 2**failures, 30.0))
