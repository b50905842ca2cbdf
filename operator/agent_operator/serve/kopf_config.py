"""kopf's settings for this operator: where kopf keeps what it needs on the objects, and what it must not do
(peering, posting Events): leadership and Events are the operator's own."""

from __future__ import annotations

from typing import Any

import kopf

from agentrun_core.api import meta


class SmallDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's last-handled-configuration without ``spec.input``.

    The input is immutable (CRD rule) and may be up to the API server's object size: kept in an annotation
    (at most 256 KiB in all) it made large runs impossible to finalize and so to delete. Nothing here reacts
    to input changes, so the diff base does not need it.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        essence = super().build(body=body, extra_fields=extra_fields)
        spec = essence.get("spec")
        if isinstance(spec, dict):
            spec.pop("input", None)
        return essence


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = meta.FINALIZER
    # Progress of kopf's own handlers (only on.delete here) in annotations: status belongs to us.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.agentrun.dev")
    settings.persistence.diffbase_storage = SmallDiffBase(
        prefix="kopf.agentrun.dev", key="last-handled-configuration"
    )
    settings.peering.standalone = True  # leadership comes from our Lease, never from kopf peering
    settings.posting.enabled = False  # the runner posts the Events of transitions itself
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
