"""The limits of the steering contract and of ``spec.input``, enforced three times with one number: by the
API server (the admission policies, rendered from these values by ``python -m agentrun_core.api.policygen``
and ``python -m agentrun_dev.input_policy``; the CRD's schema by ``crdgen``), by the CLI before it sends
anything (a clear error instead of an admission refusal), and by the operator before it applies a decision
(a cluster without the policies, an object written before them).

tests/unit/test_vocabulary.py fails when one of these numbers is written as a limit anywhere else in source.
"""

from __future__ import annotations

from typing import Final

# --- What a decision carries (agentrun_core.api.meta) --------------------------------------------
EDIT_MAX_CHARS: Final = 16384  # characters of one edited field (edit.agentrun.dev/<field>)
EDIT_MAX_FIELDS: Final = 16  # edited fields in one approval
RESPONSE_MAX_CHARS: Final = 4096  # characters of agentrun.dev/response, and of a batch decision's message
DECISIONS_MAX_CHARS: Final = 65536  # characters of agentrun.dev/decisions
RESOLVE_RESULT_MAX_BYTES: Final = 8192  # bytes of agentrun.dev/resolve-result

# --- A fork (spec.forkOf.set / setJson values: the CRD's maxLength) --------------------------------------
FORK_VALUE_MAX_CHARS: Final = 16384

# --- spec.input (checked before admission, docs/operator.md "Input bounds") ------------------------------
# The API server accepts objects nested ~10,000 deep and ~1.4 MiB large, which the operator must survive but
# never runs.
INPUT_MAX_DEPTH: Final = 64  # levels; the input object itself is level 1
INPUT_MAX_BYTES: Final = 256 * 1024  # as JSON, counted as agent_operator.decide.phases.input_problem counts
# Values one nesting level may hold before the admission policy's walk stops there (refused): flattening
# many small maps and lists is superlinear in CEL, and a 20,000-item list of objects kept the API server
# busy past its request timeout.
INPUT_MAX_LEVEL_VALUES: Final = 4096
