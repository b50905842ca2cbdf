"""A run of ``n`` steps, each sending one email through the effect ledger, for the lost-node benchmark (P6).

Graph reference ``agentrun_dev.mail_steps:graph``, input ``{"emails": n, "pause_seconds": p}``: step ``i``
sends email ``i`` (subject ``lost-node step <run name> <i>``) with the support-ticket agent's ``send_email``
(``dedupes_by_key=False``, a mailbox lookup for an unknown outcome) and then pauses ``p`` seconds,
heartbeating. The SMTP sink counts every message, so
a duplicate sent by a deposed worker shows there, not only in our tables.

Where the sink is: a run's attempts may run on the real node (``agentrun dev up --node=real``), where the
sink is forwarded to the node IP, and on the local pod runtime, where it is on loopback. Both get the same
Pod spec, so the address is chosen here: the node IP inside a kubelet's Pod (kubelet always sets
``KUBERNETES_SERVICE_HOST``; the pod runtime does not), else ``127.0.0.1``. Ports:
``MAIL_STEPS_SMTP_PORT`` and ``MAIL_STEPS_SMTP_API_PORT`` (the sink's HTTP lookup).
"""

from __future__ import annotations

import operator
import os
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

NODE_IP = (
    "10.213.0.1"  # agentrun_dev.node.config.NODE_IP (not imported: the image's worker needs no node code)
)
SUBJECT = "lost-node step"


class MailSteps(TypedDict, total=False):
    emails: int
    pause_seconds: float
    sent: Annotated[list[int], operator.add]


def configure_smtp(env: dict[str, str] | None = None) -> None:
    """Point the support-ticket mail settings at the sink as this node reaches it."""
    env_ = os.environ if env is None else env
    host = NODE_IP if env_.get("KUBERNETES_SERVICE_HOST") else "127.0.0.1"
    port, api_port = env_.get("MAIL_STEPS_SMTP_PORT", ""), env_.get("MAIL_STEPS_SMTP_API_PORT", "")
    if not port.isdigit() or not api_port.isdigit():
        raise ValueError("MAIL_STEPS_SMTP_PORT and MAIL_STEPS_SMTP_API_PORT must be port numbers")
    os.environ["SUPPORT_SMTP_HOST"] = host
    os.environ["SUPPORT_SMTP_PORT"] = port
    os.environ["SUPPORT_SMTP_API"] = f"http://{host}:{api_port}"


def step(state: MailSteps) -> dict[str, Any]:
    from agentrun_examples.support_ticket import tools

    i = len(state.get("sent") or [])
    run = os.environ.get("AGENTRUN_RUN_NAME", "")  # protocol.ENV_RUN_NAME: the sink's count is per run
    tools.send_email(to=f"step-{i}@example.com", subject=f"{SUBJECT} {run} {i}", body=f"step {i}")
    tools.pause(f"step-{i}", float(state.get("pause_seconds") or 0.0))
    return {"sent": [i]}


def _more(state: MailSteps) -> str:
    return "step" if len(state.get("sent") or []) < int(state.get("emails") or 1) else END


def build() -> StateGraph[MailSteps]:
    g: StateGraph[MailSteps] = StateGraph(MailSteps)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", _more, ["step", END])
    return g


def __getattr__(name: str) -> Any:
    if name == "graph":
        configure_smtp()
        return build()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
