"""Settings of the support-ticket agent, built from the environment in one place (:func:`from_env`).

Variables (all optional). They are the example's own, not agentrun's: the AgentRun CRD reserves
``AGENTRUN_*`` names for the operator, so a run passes these in ``spec.worker.env``
(deploy/examples/support-ticket.yaml reads them from a ConfigMap).

- ``SUPPORT_SMTP_HOST`` (``127.0.0.1``), ``SUPPORT_SMTP_PORT`` (``2525``): the SMTP server the reply goes
  through (the dev cluster's sink in dev).
- ``SUPPORT_SMTP_API`` (unset): base URL of the mailbox's HTTP lookup (``GET /messages?message_id=``).
  Without it an email of unknown outcome cannot be reconciled and the run stops for a human.
- ``SUPPORT_SMTP_TIMEOUT_SECONDS`` (``10``): socket timeout of the SMTP and lookup calls, seconds.
- ``SUPPORT_FROM`` (``support@example.com``): the From address.
- ``SUPPORT_SIGNATURE`` (``The Support Team``): signature line of the draft.
- ``SUPPORT_LLM_BASE_URL`` (unset): an OpenAI-compatible API, e.g. ``http://localhost:11434/v1``;
  unset = the deterministic offline template.
- ``SUPPORT_LLM_MODEL`` (``gpt-4o-mini``): model name sent to it.
- ``SUPPORT_LLM_API_KEY`` (unset): sent as ``Authorization: Bearer …`` when set.
- ``SUPPORT_LLM_TIMEOUT_SECONDS`` (``60``): HTTP timeout of one completion, seconds.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from agentrun_core import envconf


@dataclasses.dataclass(frozen=True)
class LLMSettings:
    base_url: str
    model: str
    api_key: str | None = None
    timeout_seconds: float = 60.0

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclasses.dataclass(frozen=True)
class SMTPSettings:
    host: str = "127.0.0.1"
    port: int = 2525
    api_url: str | None = None  # the sink's HTTP lookup; None = no lookup possible
    timeout_seconds: float = 10.0
    sender: str = "support@example.com"


@dataclasses.dataclass(frozen=True)
class Settings:
    smtp: SMTPSettings
    llm: LLMSettings | None  # None = deterministic offline template
    signature: str = "The Support Team"


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    value = envconf.number(env, name, default, error=ValueError)  # the one parser (blank = the default)
    if value <= 0:
        raw = env.get(name, "").strip()
        raise ValueError(f"{name} must be positive, got {raw!r}")
    return value


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    port_raw = env.get("SUPPORT_SMTP_PORT", "").strip() or "2525"
    if not port_raw.isdigit():
        raise ValueError(f"SUPPORT_SMTP_PORT must be a port number, got {port_raw!r}")
    smtp = SMTPSettings(
        host=env.get("SUPPORT_SMTP_HOST", "").strip() or "127.0.0.1",
        port=int(port_raw),
        api_url=env.get("SUPPORT_SMTP_API", "").strip() or None,
        timeout_seconds=_float(env, "SUPPORT_SMTP_TIMEOUT_SECONDS", 10.0),
        sender=env.get("SUPPORT_FROM", "").strip() or "support@example.com",
    )
    base_url = env.get("SUPPORT_LLM_BASE_URL", "").strip()
    llm = (
        LLMSettings(
            base_url=base_url,
            model=env.get("SUPPORT_LLM_MODEL", "").strip() or "gpt-4o-mini",
            api_key=env.get("SUPPORT_LLM_API_KEY", "").strip() or None,
            timeout_seconds=_float(env, "SUPPORT_LLM_TIMEOUT_SECONDS", 60.0),
        )
        if base_url
        else None
    )
    return Settings(
        smtp=smtp, llm=llm, signature=env.get("SUPPORT_SIGNATURE", "").strip() or "The Support Team"
    )
