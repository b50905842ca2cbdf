"""Unit tests of the support-ticket agent's pure parts: corpus, BM25 retrieval, triage, drafting, settings."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from agentrun_examples.support_ticket import analysis, drafting, mail, retrieval, settings

TICKET = {
    "id": "T-1042",
    "customer": {"name": "Ada Lovelace", "email": "ada@example.com"},
    "subject": "Charged twice for my subscription",
    "body": "My card was charged twice this month for the Team plan. I want a refund for the duplicate "
    "charge!!",
}


def test_corpus_is_bundled_and_parsed() -> None:
    docs = retrieval.load_corpus()
    assert len(docs) >= 12
    assert [d.doc_id for d in docs] == sorted(d.doc_id for d in docs)
    for doc in docs:
        assert doc.title and doc.title != doc.doc_id, doc.doc_id
        assert len(doc.passages) >= 2, doc.doc_id
        assert all(not p.startswith("#") for p in doc.passages)


def test_tokenize_stems_surface_forms_together_and_drops_stopwords() -> None:
    assert retrieval.tokenize("charge charged charges Charging") == ["charg"] * 4
    assert retrieval.tokenize("I cannot log in to my account") == ["log", "account"]
    assert retrieval.tokenize("") == []


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("I was charged twice and want a refund", "refunds"),
        ("lost my phone, two-factor recovery codes gone", "two-factor-auth"),
        ("API returns 429 Too Many Requests", "api-rate-limits"),
        ("how do I export all my notes as a zip", "data-export"),
        ("SAML error with Okta: wrong ACS URL", "sso"),
        ("notes not syncing between laptop and phone", "sync"),
        ("forgot password, reset email never arrives", "password-reset"),
        ("need the VAT number on my invoice PDF", "invoices"),
        ("is the service down? status page", "outages"),
    ],
)
def test_search_ranks_the_relevant_document_first(query: str, expected: str) -> None:
    results = retrieval.search(query)
    assert results, query
    assert results[0].doc_id == expected, [r.doc_id for r in results]


def test_search_returns_one_passage_per_document_best_first() -> None:
    results = retrieval.search("refund invoice charge plan subscription billing", k=5)
    assert len({r.doc_id for r in results}) == len(results) == 5
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True)
    assert all(r.score > 0 for r in results)


def test_search_without_matching_words_returns_nothing() -> None:
    assert retrieval.search("zzzz qqqq") == []
    assert retrieval.search("the and of") == []


def test_bm25_on_a_tiny_corpus_matches_the_formula() -> None:
    docs = [
        retrieval.parse_document("a", "# Fruit\n\napple banana"),
        retrieval.parse_document("b", "# Berry\n\ncherry"),
    ]
    index = retrieval.Index(docs)
    [hit] = index.search("banana")
    # Passages are indexed with their title: "fruit apple banana" (3 terms) and "berry cherry" (2 terms).
    n, df, avg_len, length = 2, 1, (3 + 2) / 2, 3
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    expected = (
        idf * (retrieval.K1 + 1) / (1 + retrieval.K1 * (1 - retrieval.B + retrieval.B * length / avg_len))
    )
    assert hit.doc_id == "a"
    assert hit.score == pytest.approx(expected)


def test_search_is_deterministic_and_serialisable() -> None:
    body = str(TICKET["body"])
    first = [p.as_dict() for p in retrieval.search(body)]
    second = [p.as_dict() for p in retrieval.Index(retrieval.load_corpus()).search(body)]
    assert first == second
    assert json.loads(json.dumps(first)) == first


def test_parse_ticket_validates_with_clear_messages() -> None:
    ticket = analysis.parse_ticket(TICKET)
    assert ticket.customer_email == "ada@example.com"
    with pytest.raises(analysis.TicketError, match="must be an object"):
        analysis.parse_ticket("hello")
    with pytest.raises(analysis.TicketError, match="customer must be an object"):
        analysis.parse_ticket({**TICKET, "customer": "ada"})
    with pytest.raises(analysis.TicketError, match="subject, body"):
        analysis.parse_ticket({**TICKET, "subject": " ", "body": None})
    with pytest.raises(analysis.TicketError, match="not an email address"):
        analysis.parse_ticket({**TICKET, "customer": {"name": "Ada", "email": "ada"}})


def _ticket(subject: str, body: str = "") -> analysis.Ticket:
    return analysis.parse_ticket({**TICKET, "subject": subject, "body": body or subject})


@pytest.mark.parametrize(
    ("subject", "category"),
    [
        ("Charged twice, need a refund", "billing"),
        ("Locked out after password reset", "account_access"),
        ("Webhook requests hit the API rate limit", "api"),
        ("Please delete my account under GDPR", "data"),
        ("Sync conflict when offline", "reliability"),
        ("Do you have a dark theme", "general"),
    ],
)
def test_analyze_categorises(subject: str, category: str) -> None:
    assert analysis.analyze(_ticket(subject)).category == category


def test_analyze_urgency_and_tone() -> None:
    calm = analysis.analyze(_ticket("Question about invoices", "Where do I find my invoices?"))
    assert (calm.urgency, calm.tone) == ("normal", "neutral")
    angry = analysis.analyze(_ticket("URGENT: production blocked", "This is unacceptable, again!!"))
    assert (angry.urgency, angry.tone) == ("high", "frustrated")


def test_template_draft_cites_the_retrieved_guide_and_is_deterministic() -> None:
    ticket = analysis.parse_ticket(TICKET)
    result = analysis.analyze(ticket)
    passages = [p.as_dict() for p in retrieval.search(result.query)]
    config = settings.from_env({})
    reply = drafting.draft(ticket, result, passages, config)
    assert reply == drafting.draft(ticket, result, passages, config)
    assert reply["to"] == "ada@example.com"
    assert reply["subject"] == "Re: Charged twice for my subscription [T-1042]"
    assert reply["drafted_by"] == "template"
    assert reply["sources"][0] == "refunds"
    body = reply["body"]
    assert body.startswith("Hi Ada Lovelace,")
    assert 'From our guide "Refunds and double charges"' in body
    assert "duplicate charge and we refund it in full" in body
    assert "sorry" in body  # the "!!" made the tone frustrated
    assert body.rstrip().endswith("Ticket T-1042")


def test_template_cites_only_strong_passages() -> None:
    ticket = analysis.parse_ticket(TICKET)
    result = analysis.analyze(ticket)
    strong = {"doc_id": "x", "title": "Strong", "text": "Strong advice.", "score": 10.0}
    weak = {"doc_id": "y", "title": "Weak", "text": "Weak advice.", "score": 2.0}
    body = drafting.template_body(ticket, result, [strong, weak], "Sig")
    assert '"Strong"' in body and '"Weak"' not in body
    assert "A member of our team" in drafting.template_body(ticket, result, [], "Sig")


def test_settings_defaults_and_validation() -> None:
    config = settings.from_env({})
    assert config.llm is None
    assert (config.smtp.host, config.smtp.port, config.smtp.api_url) == ("127.0.0.1", 2525, None)
    config = settings.from_env(
        {
            "SUPPORT_SMTP_HOST": "mail",
            "SUPPORT_SMTP_PORT": "25",
            "SUPPORT_SMTP_API": "http://mail:8025",
            "SUPPORT_LLM_BASE_URL": "http://llm/v1",
            "SUPPORT_LLM_API_KEY": "k",
        }
    )
    assert (config.smtp.host, config.smtp.port, config.smtp.api_url) == ("mail", 25, "http://mail:8025")
    assert config.llm is not None and config.llm.model == "gpt-4o-mini"
    assert config.llm.auth_headers() == {"Authorization": "Bearer k"}
    with pytest.raises(ValueError, match="SUPPORT_SMTP_PORT"):
        settings.from_env({"SUPPORT_SMTP_PORT": "smtp"})
    with pytest.raises(ValueError, match="SUPPORT_LLM_TIMEOUT_SECONDS"):
        settings.from_env({"SUPPORT_LLM_BASE_URL": "http://x", "SUPPORT_LLM_TIMEOUT_SECONDS": "-1"})


def test_message_id_embeds_the_key_and_refuses_unsafe_keys() -> None:
    assert mail.message_id("k-abc123") == "<k-abc123@agentrun.invalid>"
    for bad in ["", "a b", "a@b", "<x>"]:
        with pytest.raises(ValueError):
            mail.message_id(bad)
    msg = mail.build_message(settings.SMTPSettings(), key="k-1", to="a@b.co", subject="S", body="B")
    assert msg["Message-ID"] == "<k-1@agentrun.invalid>" and msg["X-Idempotency-Key"] == "k-1"


def test_lookup_without_api_is_unavailable() -> None:
    with pytest.raises(mail.LookupUnavailable, match="SUPPORT_SMTP_API"):
        mail.lookup(settings.SMTPSettings(), "k-1")


# A loopback HTTP server stands in for a chat model: it is a real socket, not a patched urllib.
class _FakeModel(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []
    reply: Any = {"choices": [{"message": {"content": "  Hello from the model.  "}}]}

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        data = json.dumps(type(self).reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def model_url() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _FakeModel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _FakeModel.requests = []
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_llm_draft_uses_the_openai_compatible_endpoint(model_url: str) -> None:
    ticket = analysis.parse_ticket(TICKET)
    result = analysis.analyze(ticket)
    passages = [p.as_dict() for p in retrieval.search(result.query)]
    config = settings.from_env(
        {"SUPPORT_LLM_BASE_URL": model_url, "SUPPORT_LLM_MODEL": "tiny", "SUPPORT_LLM_API_KEY": "sk-x"}
    )
    reply = drafting.draft(ticket, result, passages, config)
    assert reply["body"] == "Hello from the model."
    assert reply["drafted_by"] == "llm:tiny"
    [request] = _FakeModel.requests
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer sk-x"
    assert request["body"]["model"] == "tiny" and request["body"]["temperature"] == 0
    assert "Refunds and double charges" in request["body"]["messages"][1]["content"]


def test_llm_failure_is_a_clear_error(model_url: str) -> None:
    _FakeModel.reply = {"unexpected": True}
    try:
        config = settings.from_env({"SUPPORT_LLM_BASE_URL": model_url})
        ticket = analysis.parse_ticket(TICKET)
        with pytest.raises(drafting.DraftError, match="failed"):
            drafting.draft(ticket, analysis.analyze(ticket), [], config)
    finally:
        _FakeModel.reply = {"choices": [{"message": {"content": "  Hello from the model.  "}}]}


# --- the graph, up to and after the approval, with an in-memory checkpointer (no worker, no effects) ---


def _compiled() -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    from agentrun_examples import support_ticket

    return support_ticket.graph.compile(checkpointer=InMemorySaver())


def test_graph_reference_resolves_to_a_state_graph() -> None:
    import importlib

    from langgraph.graph import StateGraph

    module = importlib.import_module("agentrun_examples.support_ticket")
    assert isinstance(module.graph, StateGraph)
    assert isinstance(module.build_graph(), StateGraph)
    with pytest.raises(AttributeError):
        _ = module.nope


def test_graph_drafts_then_waits_for_approval_with_the_draft_as_prompt() -> None:
    from langgraph.types import Command

    app = _compiled()
    config = {"configurable": {"thread_id": "t1"}}
    out = app.invoke({"ticket": TICKET}, config)
    [pending] = out["__interrupt__"]
    prompt = pending.value
    assert prompt["to"] == "ada@example.com" and prompt["ticket"] == "T-1042"
    assert "Refunds and double charges" in prompt["body"]
    state = app.get_state(config)
    assert state.next == ("review",)
    assert state.values["analysis"]["category"] == "billing"
    assert state.values["passages"][0]["doc_id"] == "refunds"
    # Rejected: the run closes without sending.
    done = app.invoke(Command(resume={"approved": False, "approval_id": "a-1", "by": "bob"}), config)
    assert done["outcome"] == "rejected"
    assert "email" not in done


def test_graph_expired_approval_closes_without_sending() -> None:
    from langgraph.types import Command

    app = _compiled()
    config = {"configurable": {"thread_id": "t2"}}
    app.invoke({"ticket": TICKET}, config)
    done = app.invoke(Command(resume={"approved": False, "expired": True, "read_only": True}), config)
    assert done["outcome"] == "expired"


def test_graph_refuses_a_malformed_ticket_and_bad_pause() -> None:
    app = _compiled()
    with pytest.raises(analysis.TicketError, match="subject"):
        app.invoke({"ticket": {**TICKET, "subject": ""}}, {"configurable": {"thread_id": "t3"}})
    with pytest.raises(ValueError, match=r"pause_seconds\.analyze"):
        app.invoke(
            {"ticket": TICKET, "options": {"pause_seconds": {"analyze": "soon"}}},
            {"configurable": {"thread_id": "t4"}},
        )


def test_graph_pause_sleeps_in_the_named_step() -> None:
    import time

    app = _compiled()
    started = time.monotonic()
    app.invoke(
        {"ticket": TICKET, "options": {"pause_seconds": {"retrieve": 0.3}}},
        {"configurable": {"thread_id": "t5"}},
    )
    assert time.monotonic() - started >= 0.3
