import email.message
import random
import urllib.error

import pytest

from agent_worker import retry


def _http_error(code: int, retry_after: str | None = None) -> urllib.error.HTTPError:
    headers = email.message.Message()
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return urllib.error.HTTPError("http://x", code, "err", headers, None)


def test_classify() -> None:
    assert retry.classify(_http_error(429, "3")) == retry.Failure(
        "refused", 3.0, 429, retry.classify(_http_error(429, "3")).message
    )
    assert retry.classify(_http_error(503)).kind == "refused"
    assert retry.classify(_http_error(500)).kind == "ambiguous"
    assert retry.classify(_http_error(400)).kind == "permanent"
    assert retry.classify(TimeoutError()).kind == "ambiguous"
    assert retry.classify(ConnectionRefusedError()).kind == "refused"
    assert retry.classify(ValueError("bug")).kind == "ambiguous"  # nobody classified it: may have happened
    assert retry.classify(retry.Retryable("x", retry_after=2)).retry_after == 2


def test_retry_after_http_date() -> None:
    assert retry.parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == pytest.approx(10.0)
    assert retry.parse_retry_after("soon") is None
    assert retry.parse_retry_after(None) is None


def test_backoff_is_exponential_capped_and_jittered() -> None:
    policy = retry.RetryPolicy(initial_backoff=1, multiplier=2, max_backoff=5, jitter=0.5)
    rng = random.Random(1)
    for calls, upper in [(1, 1), (2, 2), (3, 4), (4, 5), (10, 5)]:
        delays = [retry.backoff(policy, calls, rng) for _ in range(200)]
        assert max(delays) <= upper and min(delays) >= upper * 0.5
        assert len(set(delays)) > 1  # jitter


def test_decide() -> None:
    policy = retry.RetryPolicy(max_attempts=3)
    rng = random.Random(0)
    refused = retry.Failure("refused")
    assert retry.decide(policy, 1, refused, dedupes_by_key=False, rng=rng).action == "retry"
    assert retry.decide(policy, 3, refused, dedupes_by_key=False, rng=rng).action == "fail"
    after = retry.decide(policy, 1, retry.Failure("refused", retry_after=7), dedupes_by_key=False, rng=rng)
    assert after.action == "retry" and 7 <= after.delay <= 7.7
    too_long = retry.Failure("refused", retry_after=10_000)
    assert retry.decide(policy, 1, too_long, dedupes_by_key=True, rng=rng).action == "fail"
    ambiguous = retry.Failure("ambiguous")
    assert retry.decide(policy, 1, ambiguous, dedupes_by_key=False, rng=rng).action == "reconcile"
    assert retry.decide(policy, 1, ambiguous, dedupes_by_key=True, rng=rng).action == "retry"
    assert retry.decide(policy, 1, retry.Failure("permanent"), dedupes_by_key=True, rng=rng).action == "fail"


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        retry.RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        retry.RetryPolicy(jitter=2)


class _ReceiptDiskFull(OSError):
    """An OSError subclass no classifier knows (as smtplib's and ssl's errors are)."""


def test_an_unclassified_exception_is_ambiguous_not_permanent() -> None:
    import smtplib
    import ssl

    for exc in (
        _ReceiptDiskFull("no space left"),
        ssl.SSLEOFError("EOF occurred in violation of protocol"),
        smtplib.SMTPServerDisconnected("Connection unexpectedly closed"),
        OSError("anything"),
        ValueError("bug"),
    ):
        assert retry.classify(exc).kind == "ambiguous", exc


def test_the_tool_declares_what_is_permanent() -> None:
    assert retry.classify(ValueError("bad amount"), permanent=(ValueError,)).kind == "permanent"
    assert retry.classify(_ReceiptDiskFull("x"), permanent=(ValueError,)).kind == "ambiguous"
    # what the tool raises explicitly wins over its declaration
    assert retry.classify(retry.Ambiguous("x"), permanent=(Exception,)).kind == "ambiguous"
    assert retry.classify(retry.Retryable("x"), permanent=(Exception,)).kind == "refused"


def test_ambiguous_on_the_last_allowed_call_is_reconciled_never_failed() -> None:
    policy = retry.RetryPolicy(max_attempts=2)
    rng = random.Random(0)
    ambiguous = retry.Failure("ambiguous", message="TimeoutError: read timed out")
    for dedupes in (False, True):
        for calls in (2, 3):
            decision = retry.decide(policy, calls, ambiguous, dedupes_by_key=dedupes, rng=rng)
            assert decision.action == "reconcile", (dedupes, calls)
    # only a failure proven to have done nothing may fail the effect
    assert retry.Failure("refused").proves_not_performed
    assert retry.Failure("permanent").proves_not_performed
    assert not retry.Failure("ambiguous").proves_not_performed
