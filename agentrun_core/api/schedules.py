"""AgentRunSchedule: the names, labels and AgentRun bodies both the operator and the CLI build. Pure.

Rule: a run of a schedule's tick is named ``<schedule>-<minutes since the epoch of the tick>`` (as a CronJob
names its Jobs), so whoever creates it - the leader, a restarted operator, a second replica - creates the same
object and the API server's AlreadyExists says "done". A manual run (``agentrun schedule trigger``) is
``<schedule>-manual-<4 random characters>``. Both carry the label ``agentrun.dev/schedule`` and are owned by
the schedule (ownerReferences: deleting the schedule deletes its runs).
"""

from __future__ import annotations

import copy
import datetime
import secrets
import string
from collections.abc import Mapping
from typing import Any

from agentrun_core.api import meta, status

GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentrunschedules"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "AgentRunSchedule"
LABEL_SCHEDULE = "agentrun.dev/schedule"  # on every run of a schedule: the schedule's name
ANN_SCHEDULED_AT = "agentrun.dev/scheduled-at"  # the tick a run is for (RFC 3339, UTC); absent on manual runs
ANN_TRIGGERED_BY = "agentrun.dev/triggered-by"  # "manual" on runs of `agentrun schedule trigger`
# Who wrote the schedule's spec.runTemplate (the API server stamps it: deploy/admission/
# schedule-author-policy.yaml); the runs of its ticks carry it, as only the operator may write it on a run,
# and their author may not approve them where their creator may not.
ANN_AUTHOR = meta.SCHEDULE_AUTHOR
# An AgentRun name is at most 50 characters; "-" and 8 digits of minutes (until the year 2160) or
# "-manual-" and 4 characters leave 38 for the schedule's name (the CRD's CEL rule).
MAX_NAME = 38
FINISHED = status.FINISHED


def tick_run_name(schedule: str, tick: datetime.datetime) -> str:
    return f"{schedule}-{int(tick.timestamp()) // 60}"


def manual_run_name(schedule: str) -> str:
    alphabet = string.ascii_lowercase + string.digits
    return f"{schedule}-manual-{''.join(secrets.choice(alphabet) for _ in range(4))}"


def rfc3339(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(datetime.UTC)


def run_body(schedule: Mapping[str, Any], name: str, tick: datetime.datetime | None) -> dict[str, Any]:
    """The AgentRun of ``schedule``'s ``spec.runTemplate`` named ``name`` (for ``tick``; None: manual)."""
    metadata = schedule.get("metadata") or {}
    template = (schedule.get("spec") or {}).get("runTemplate") or {}
    tmeta = template.get("metadata") or {}
    labels = {**(tmeta.get("labels") or {}), LABEL_SCHEDULE: metadata["name"]}
    annotations = dict(tmeta.get("annotations") or {})
    # The author is the schedule's stamp, never the template's text; a manual run's creator is whoever
    # triggers it, and only the operator may carry an author onto a run (a tick's).
    annotations.pop(ANN_AUTHOR, None)
    author = (metadata.get("annotations") or {}).get(ANN_AUTHOR)
    if tick is not None and author:
        annotations[ANN_AUTHOR] = str(author)
    if tick is not None:
        annotations[ANN_SCHEDULED_AT] = rfc3339(tick)
    else:
        annotations[ANN_TRIGGERED_BY] = "manual"
    return {
        "apiVersion": "agentrun.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {
            "name": name,
            "namespace": metadata.get("namespace"),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }
