"""Which worker code runs against which schema: the compatibility rule (docs/upgrading.md). Pure.

The schema carries one number, its **compatibility level** (``agentrun_schema_compat.level``, written by
migration 35 and raised only by a migration that changes what every worker must do). Worker code declares
the range of levels it runs against (``WORKER_LEVELS``): its low end is the first level whose schema has all
the worker uses, its high end the newest level it knows. Outside the range the worker exits
``protocol.EXIT_INCOMPATIBLE`` before it takes the run's Lease or writes anything:

* **too new** (the schema's level is below the range, or the schema has no level: it was not migrated):
  run ``agentrun migrate``;
* **too old** (the schema moved past the newest level the worker knows): the run needs a newer worker image
  (``agentrun cancel NAME``, then ``agentrun retry NAME --image …``), since a run keeps the image it was
  admitted with.

Additive migrations (a table, an index, a column with a default that old workers need not write) keep the
level, so old images keep running across them.
"""

from __future__ import annotations

import dataclasses

# The level migration 35 writes. Raise it (with a migration that updates the row, and WORKER_LEVELS) only
# for a change old workers would get wrong.
SCHEMA_LEVEL = 1


@dataclasses.dataclass(frozen=True)
class Levels:
    """A closed range of schema compatibility levels."""

    low: int
    high: int

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


# The levels this release runs against: its workers (checked at every start) and its operator (checked at
# start-up when AGENTRUN_MIGRATE is false).
WORKER_LEVELS = Levels(1, SCHEMA_LEVEL)


@dataclasses.dataclass(frozen=True)
class Verdict:
    compatible: bool
    problem: str  # "" | "worker_too_new" | "worker_too_old"
    message: str


def judge(schema_level: int | None, supported: Levels = WORKER_LEVELS) -> Verdict:
    """The rule: compatible iff the schema's level is within the worker's range. ``None``: no level (the
    schema predates migration 35)."""
    if schema_level is not None and supported.low <= schema_level <= supported.high:
        return Verdict(True, "", f"schema level {schema_level} is within this worker's {supported}")
    if schema_level is None or schema_level < supported.low:
        shown = "none (not migrated past migration 35)" if schema_level is None else str(schema_level)
        return Verdict(
            False,
            "worker_too_new",
            f"this worker needs schema compatibility level {supported}, the database has {shown}: "
            "the worker is newer than the schema; run `agentrun migrate` (or the migrate Job), then the run "
            "continues by itself",
        )
    return Verdict(
        False,
        "worker_too_old",
        f"this worker runs against schema compatibility level {supported}, the database has level "
        f"{schema_level}: the worker image is older than the schema; move the run to a newer image "
        "(`agentrun cancel NAME`, then `agentrun retry NAME --image IMAGE`)",
    )
