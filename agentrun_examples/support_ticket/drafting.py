"""Drafting the reply: a deterministic template by default, an OpenAI-compatible chat model when configured.

The template is the default so the demo and the tests run offline and every run drafts the same text (the
draft becomes the email's arguments, hence its idempotency key). A chat model is used only when
``SUPPORT_LLM_BASE_URL`` is set (see :mod:`agentrun_examples.support_ticket.settings`); its draft is
checkpointed by the step that made it, so a resumed run sends the text the manager approved, not a new
sample. Calling a model is not a side effect (nothing outside changes), so it does not go through the effect
ledger.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from agentrun_examples.support_ticket import analysis, settings

_OPENERS = {
    ("high", "frustrated"): "I am sorry for the trouble, and I understand this is urgent.",
    ("high", "neutral"): "I understand this is urgent, so here is what you can do right away.",
    ("normal", "frustrated"): "I am sorry this has been frustrating.",
    ("normal", "neutral"): "Happy to help with this.",
}

_CLOSINGS = {
    "account_access": "If you still cannot sign in after these steps, reply to this email and we will look "
    "at your account directly.",
    "billing": "If anything on your invoice still looks wrong, reply with the invoice number and we will "
    "sort it out.",
    "api": "If you need more headroom, reply with your token name and expected request rate.",
    "data": "If you have any questions about your data, just reply to this email.",
    "reliability": "If the problem continues, reply with your app version and device so we can investigate.",
    "general": "If this does not answer your question, reply to this email and we will follow up.",
}

_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+")

# A passage is cited in the reply when it scores at least this fraction of the best one (the manager still
# sees all retrieved passages); weaker matches would only pad the email.
CITE_RELATIVE_SCORE = 0.5
MAX_CITED = 2


def _first_sentences(text: str, n: int = 2) -> str:
    return " ".join(_SENTENCE_RE.split(text.strip())[:n])


def subject_line(ticket: analysis.Ticket) -> str:
    return f"Re: {ticket.subject} [{ticket.ticket_id}]"


def template_body(
    ticket: analysis.Ticket, result: analysis.Analysis, passages: Sequence[dict[str, Any]], signature: str
) -> str:
    """The offline draft: greeting, opener by urgency and tone, the top passages as cited advice, closing."""
    lines = [f"Hi {ticket.customer_name},", "", f'Thank you for contacting us about "{ticket.subject}".']
    lines.append(_OPENERS[(result.urgency, result.tone)])
    lines.append("")
    if passages:
        top = float(passages[0]["score"])
        cited = [p for p in passages[:MAX_CITED] if float(p["score"]) >= CITE_RELATIVE_SCORE * top]
        for passage in cited:
            lines.append(f'From our guide "{passage["title"]}": {_first_sentences(str(passage["text"]))}')
            lines.append("")
    else:
        lines += ["A member of our team will look into this and get back to you.", ""]
    lines.append(_CLOSINGS.get(result.category, _CLOSINGS["general"]))
    lines += ["", "Best regards,", signature, f"Ticket {ticket.ticket_id}"]
    return "\n".join(lines)


def _llm_prompt(
    ticket: analysis.Ticket, passages: Sequence[dict[str, Any]], signature: str
) -> list[dict[str, str]]:
    sources = "\n\n".join(f"[{p['title']}]\n{p['text']}" for p in passages) or "(no relevant documents)"
    system = (
        "You are a customer support agent. Write a short, friendly email reply to the ticket using ONLY "
        "facts from the sources. Address the customer by name. "
        f"Sign as: {signature}. Reply with the email body only."
    )
    user = (
        f"Ticket {ticket.ticket_id} from {ticket.customer_name}\nSubject: {ticket.subject}\n\n{ticket.body}"
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"{user}\n\nSources:\n{sources}"},
    ]


class DraftError(RuntimeError):
    """The configured chat model could not produce a draft."""


def llm_body(
    config: settings.LLMSettings,
    ticket: analysis.Ticket,
    passages: Sequence[dict[str, Any]],
    signature: str,
) -> str:
    """Ask an OpenAI-compatible ``/chat/completions`` endpoint (urllib only; temperature 0)."""
    payload = {
        "model": config.model,
        "messages": _llm_prompt(ticket, passages, signature),
        "temperature": 0,
    }
    request = urllib.request.Request(
        config.base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", **config.auth_headers()},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=config.timeout_seconds) as response:
            body = json.load(response)
        text = body["choices"][0]["message"]["content"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise DraftError(f"chat model at {config.base_url} failed: {exc}") from exc
    if not isinstance(text, str) or not text.strip():
        raise DraftError(f"chat model at {config.base_url} returned an empty draft")
    return text.strip()


def draft(
    ticket: analysis.Ticket,
    result: analysis.Analysis,
    passages: Sequence[dict[str, Any]],
    config: settings.Settings,
) -> dict[str, Any]:
    """The reply to send: ``{to, subject, body, drafted_by}``."""
    if config.llm is not None:
        body, drafted_by = llm_body(config.llm, ticket, passages, config.signature), f"llm:{config.llm.model}"
    else:
        body, drafted_by = template_body(ticket, result, passages, config.signature), "template"
    return {
        "to": ticket.customer_email,
        "subject": subject_line(ticket),
        "body": body,
        "drafted_by": drafted_by,
        "sources": [str(p["doc_id"]) for p in passages],
    }
