"""The SCRAM-SHA-256 verifier the operator stores for a tenant role: checked against RFC 7677's exchange, the
way Postgres checks a login with it (the client's proof against StoredKey, its own signature by ServerKey)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from agentrun_core import store

# RFC 7677, section 3: user "user", password "pencil".
SALT = "W22ZaJ0SNY7soEsUEjb6gQ=="
AUTH_MESSAGE = (
    b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
)
CLIENT_PROOF = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_SIGNATURE = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _keys(verifier: str) -> tuple[int, bytes, bytes, bytes]:
    method, rest = verifier.split("$", 1)
    assert method == "SCRAM-SHA-256"
    head, keys = rest.split("$")
    iterations, salt = head.split(":")
    stored_key, server_key = keys.split(":")
    decode = base64.b64decode
    return int(iterations), decode(salt), decode(stored_key), decode(server_key)


def test_the_verifier_accepts_the_rfc_clients_proof_and_signs_as_the_rfc_server() -> None:
    verifier = store.scram_verifier("pencil", iterations=4096, salt=base64.b64decode(SALT))
    iterations, salt, stored_key, server_key = _keys(verifier)
    assert (iterations, base64.b64encode(salt).decode()) == (4096, SALT)
    assert hmac.new(server_key, AUTH_MESSAGE, "sha256").digest() == base64.b64decode(SERVER_SIGNATURE)
    client_signature = hmac.new(stored_key, AUTH_MESSAGE, "sha256").digest()
    client_key = bytes(a ^ b for a, b in zip(base64.b64decode(CLIENT_PROOF), client_signature, strict=True))
    assert hashlib.sha256(client_key).digest() == stored_key


def test_another_password_or_salt_gives_another_verifier() -> None:
    rfc = store.scram_verifier("pencil", iterations=4096, salt=base64.b64decode(SALT))
    assert store.scram_verifier("pencils", iterations=4096, salt=base64.b64decode(SALT)) != rfc
    assert store.scram_verifier("pencil", iterations=4096) != rfc  # a fresh random salt


def test_the_operators_count_is_what_it_stores() -> None:
    iterations, salt, _, _ = _keys(store.scram_verifier("x", iterations=store.RANDOM_SECRET_ITERATIONS))
    assert iterations == store.RANDOM_SECRET_ITERATIONS and len(salt) == 16
