"""BM25 retrieval over the support corpus bundled with this package.

Pure Python and deterministic: no network, no model, no third-party dependency. The corpus is a dozen short
Markdown documents (``corpus/*.md``); each document is split into passages (paragraphs) and every passage is
indexed with its document's title, so a query that names the topic ("two-factor") finds the right document
even when the paragraph itself does not repeat the words.

Ranking is Okapi BM25 (k1=1.5, b=0.75) over passages; :func:`search` keeps the best passage per document so
a reply cites several documents rather than three paragraphs of one. Ties are broken by document id and
passage number, so equal inputs always give equal results (the draft, and with it the email's idempotency
key, depends on this).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

# BM25 parameters: k1 saturates term frequency, b normalises by passage length (the usual defaults).
K1 = 1.5
B = 0.75

_TOKEN_RE = re.compile(r"[a-z0-9]+")

# A small English stop list: words that carry no topic in a support ticket.
_STOPWORD_TEXT = """
a about after again all also am an and any are as at be been before being but by can cannot could did do
does doing don for from get got had has have having he her here hi hello his how i if in into is it its
just me my no not now of on once only or our out please so some still than thank thanks that the their
them then there these they this those to too up us very was we were what when where which while who why
will with would you your yours
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def _stem(token: str) -> str:
    """Strip a few English suffixes so "charged"/"charges"/"charge" meet. Crude on purpose: it only has to
    map the same surface forms to the same key, for queries and documents alike."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(token) > len(suffix) + 3 and token.endswith(suffix) and not token.endswith("ss"):
            token = token[: -len(suffix)]
            break
    # "charge" / "charged" / "charges" all end as "charg".
    if len(token) > 4 and token.endswith("e"):
        token = token[:-1]
    return token


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens without stop words, lightly stemmed."""
    return [_stem(t) for t in _TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


@dataclasses.dataclass(frozen=True)
class Document:
    doc_id: str  # file name without extension, e.g. "refunds"
    title: str
    passages: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Passage:
    doc_id: str
    title: str
    text: str
    score: float

    def as_dict(self) -> dict[str, object]:
        # Rounded so the checkpointed state (and the draft built from it) is stable across platforms.
        return {"doc_id": self.doc_id, "title": self.title, "text": self.text, "score": round(self.score, 4)}


def parse_document(doc_id: str, text: str) -> Document:
    """A document is ``# Title`` then paragraphs separated by blank lines (a paragraph's lines join)."""
    title = doc_id
    paragraphs: list[str] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = [line.strip() for line in block.strip().splitlines() if line.strip()]
        if not lines:
            continue
        if lines[0].startswith("# "):
            title = lines[0][2:].strip()
            lines = lines[1:]
        if lines:
            paragraphs.append(" ".join(lines))
    return Document(doc_id=doc_id, title=title, passages=tuple(paragraphs))


def load_corpus() -> tuple[Document, ...]:
    """The bundled corpus, sorted by id (read from the installed package, so it works from a wheel)."""
    root = importlib.resources.files(__package__ or "agentrun_examples.support_ticket").joinpath("corpus")
    docs = [
        parse_document(entry.name.removesuffix(".md"), entry.read_text(encoding="utf-8"))
        for entry in root.iterdir()
        if entry.name.endswith(".md")
    ]
    return tuple(sorted(docs, key=lambda d: d.doc_id))


class Index:
    """A BM25 index over the passages of some documents."""

    def __init__(self, documents: Iterable[Document]) -> None:
        self._entries: list[tuple[Document, int, Counter[str], int]] = []
        doc_freq: Counter[str] = Counter()
        for doc in documents:
            title_tokens = tokenize(doc.title)
            for number, passage in enumerate(doc.passages):
                terms = Counter(title_tokens + tokenize(passage))
                length = sum(terms.values())
                self._entries.append((doc, number, terms, length))
                doc_freq.update(terms.keys())
        n = len(self._entries)
        self._avg_len = (sum(e[3] for e in self._entries) / n) if n else 0.0
        # The "plus one" BM25 idf variant: never negative, so very common words still count a little.
        self._idf = {term: math.log(1.0 + (n - df + 0.5) / (df + 0.5)) for term, df in doc_freq.items()}

    def _score(self, query_terms: Sequence[str], terms: Counter[str], length: int) -> float:
        score = 0.0
        for term in query_terms:
            tf = terms.get(term, 0)
            if tf:
                norm = K1 * (1.0 - B + B * length / self._avg_len)
                score += self._idf[term] * tf * (K1 + 1.0) / (tf + norm)
        return score

    def search(self, query: str, k: int = 3) -> list[Passage]:
        """The best passage of each of the ``k`` best-matching documents (score > 0), best first."""
        # Repeated query words count once: "refund" said five times is not five times as relevant.
        query_terms = sorted(set(tokenize(query)))
        best: dict[str, tuple[float, int, Document]] = {}
        for doc, number, terms, length in self._entries:
            score = self._score(query_terms, terms, length)
            if score <= 0.0:
                continue
            current = best.get(doc.doc_id)
            if current is None or score > current[0]:
                best[doc.doc_id] = (score, number, doc)
        ranked = sorted(best.values(), key=lambda item: (-item[0], item[2].doc_id, item[1]))
        return [
            Passage(doc_id=doc.doc_id, title=doc.title, text=doc.passages[number], score=score)
            for score, number, doc in ranked[:k]
        ]


@functools.cache
def default_index() -> Index:
    """The index over the bundled corpus, built once per process (a few milliseconds)."""
    return Index(load_corpus())


def search(query: str, k: int = 3) -> list[Passage]:
    return default_index().search(query, k)
