"""AgentRun spec bodies: the test graphs by name and the fields most tests set alike.

Most runs in the tests get a short Lease (8 s: a lost worker is noticed quickly, yet a loaded 2-core machine
renews in time) and no retry backoff (a test waits on the retry, not on a timer).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrun_dev import http_provider, smtp_sink

# tests/integration/test_operator_graphs.py: steps (appends a line per step to input.path), approval (asks,
# then appends input.line).
STEPS = "tests.integration.test_operator_graphs:steps"
APPROVAL = "tests.integration.test_operator_graphs:approval"
# tests/integration/steer_graphs.py: prepare -> act (appends a line to input.path) -> check (fails while
# input.flag does not exist, as input.fail_with says) -> finish.
FLAKY = "tests.integration.steer_graphs:flaky"
# agentrun_examples/support_ticket: drafts a reply to a ticket, asks for approval, sends it by email.
TICKET_GRAPH = "agentrun_examples.support_ticket:graph"
TICKET = {
    "id": "T-7",
    "customer": {"name": "Ada", "email": "ada@example.com"},
    "subject": "Charged twice",
    "body": "My card was charged twice for the Team plan; please refund the duplicate charge.",
}


def lines(path: Path) -> list[str]:
    """The lines a test graph appended to its ``input.path`` so far (one per step or performed effect); none
    while the file does not exist yet."""
    return path.read_text().splitlines() if path.exists() else []


def worker_env(env: Mapping[str, str]) -> dict[str, Any]:
    """``spec.worker`` with these environment variables for the worker container."""
    return {"env": [{"name": k, "value": v} for k, v in env.items()]}


def run_spec(
    graph: str,
    input_: dict[str, Any],
    *,
    lease: int = 8,
    retry: dict[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A spec of ``graph`` with ``input_``; ``retry`` defaults to no backoff; ``env`` goes to the worker;
    ``extra`` are further spec fields (approval, budget, ...)."""
    spec: dict[str, Any] = {
        "graph": graph,
        "input": input_,
        "lease": {"durationSeconds": lease},
        "retry": {"backoffSeconds": 0} if retry is None else retry,
    }
    if env is not None:
        spec["worker"] = worker_env(env)
    return {**spec, **extra}


def steps_spec(path: Path, *, max_attempts: int, lease: int = 8, **input_: Any) -> dict[str, Any]:
    """The ``steps`` graph appending to ``path``."""
    retry = {"backoffSeconds": 0, "maxAttempts": max_attempts}
    return run_spec(STEPS, {"path": str(path), **input_}, lease=lease, retry=retry)


def approval_spec(path: Path, line: str = "approved-line", **approval: Any) -> dict[str, Any]:
    """The ``approval`` graph: it asks, and once approved appends ``line`` to ``path``."""
    return run_spec(APPROVAL, {"path": str(path), "line": line}, approval=approval)


def smtp_env(prefix: str, sink: smtp_sink.SmtpSink) -> dict[str, str]:
    """Where a graph's mail tool sends (``PREFIX_SMTP_HOST``/``_PORT``) and reads back (``_API``)."""
    return {
        f"{prefix}_SMTP_HOST": sink.host,
        f"{prefix}_SMTP_PORT": str(sink.port),
        f"{prefix}_SMTP_API": sink.api_url,
    }


def upgrade_env(hp: http_provider.HttpProvider, sink: smtp_sink.SmtpSink) -> dict[str, str]:
    """The providers of tests/graphs/upgrade_graph.py."""
    return {"UPGRADE_HTTP_URL": hp.url, **smtp_env("UPGRADE", sink)}
