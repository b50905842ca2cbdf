"""Ticket validation and analysis: category, urgency, tone and a retrieval query. Pure and deterministic.

A rule-based triage is enough for the demo and keeps every run reproducible; a real deployment could swap in
a classifier model here without touching the rest of the graph.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from agentrun_examples.support_ticket import retrieval

# category -> keywords. Order matters only for ties: earlier wins.
_CATEGORY_WORDS: dict[str, str] = {
    "account_access": "password login log sign signin locked lock reset 2fa two factor authenticator "
    "recovery sso saml",
    "billing": "invoice charge charged twice refund billing payment card subscription plan price vat",
    "api": "api rate limit 429 token webhook request endpoint",
    "data": "export delete deletion gdpr backup import archive erase",
    "reliability": "outage down sync synced conflict offline slow error crash bug broken",
}
# Stemmed the same way as the ticket text, so "charges" in a ticket meets "charge" here.
CATEGORIES: dict[str, frozenset[str]] = {
    name: frozenset(retrieval.tokenize(words)) for name, words in _CATEGORY_WORDS.items()
}

_URGENT = frozenset(
    retrieval.tokenize("urgent asap immediately emergency outage production blocked critical")
)
_FRUSTRATED = frozenset(
    retrieval.tokenize("unacceptable frustrated angry ridiculous terrible again disappointed worst annoyed")
)

_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class TicketError(ValueError):
    """The ticket in the run's input is malformed (the run fails with this message)."""


@dataclasses.dataclass(frozen=True)
class Ticket:
    ticket_id: str
    customer_name: str
    customer_email: str
    subject: str
    body: str


@dataclasses.dataclass(frozen=True)
class Analysis:
    category: str
    urgency: str  # "high" | "normal"
    tone: str  # "frustrated" | "neutral"
    keywords: tuple[str, ...]
    query: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "urgency": self.urgency,
            "tone": self.tone,
            "keywords": list(self.keywords),
            "query": self.query,
        }


def parse_ticket(raw: Any) -> Ticket:
    """Validate the ``ticket`` object of the run's input::

    {"id": "T-1042", "customer": {"name": "Ada", "email": "ada@example.com"},
     "subject": "...", "body": "..."}
    """
    if not isinstance(raw, Mapping):
        raise TicketError("input.ticket must be an object with id, customer, subject and body")
    customer = raw.get("customer")
    if not isinstance(customer, Mapping):
        raise TicketError("input.ticket.customer must be an object with name and email")
    fields = {
        "id": raw.get("id"),
        "customer.name": customer.get("name"),
        "customer.email": customer.get("email"),
        "subject": raw.get("subject"),
        "body": raw.get("body"),
    }
    missing = [name for name, value in fields.items() if not isinstance(value, str) or not value.strip()]
    if missing:
        raise TicketError(f"input.ticket is missing text fields: {', '.join(missing)}")
    email = str(fields["customer.email"]).strip()
    if not _EMAIL_RE.match(email):
        raise TicketError(f"input.ticket.customer.email is not an email address: {email!r}")
    return Ticket(
        ticket_id=str(fields["id"]).strip(),
        customer_name=str(fields["customer.name"]).strip(),
        customer_email=email,
        subject=str(fields["subject"]).strip(),
        body=str(fields["body"]).strip(),
    )


def analyze(ticket: Ticket) -> Analysis:
    text = f"{ticket.subject}\n{ticket.body}"
    tokens = retrieval.tokenize(text)
    token_set = set(tokens)
    scores = {name: len(token_set & words) for name, words in CATEGORIES.items()}
    best = max(scores.values())
    category = next(name for name, score in scores.items() if score == best) if best else "general"
    urgency = "high" if token_set & _URGENT else "normal"
    tone = "frustrated" if token_set & _FRUSTRATED or "!!" in text else "neutral"
    # Keywords: the ticket's distinct content words in order of first appearance (bounded, for the prompt).
    keywords = tuple(dict.fromkeys(tokens))[:12]
    # The subject is repeated so its words weigh a little more than the body's in BM25.
    query = f"{ticket.subject} {ticket.subject} {ticket.body}"
    return Analysis(category=category, urgency=urgency, tone=tone, keywords=keywords, query=query)
