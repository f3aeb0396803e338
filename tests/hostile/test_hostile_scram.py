"""Issue 33, the SCRAM exchange against a rogue broker (or a man in the middle on
SASL_PLAINTEXT): whatever the server-first and server-final messages hold, the client answers with
AuthenticationError naming what was wrong and what to check, never an untyped error, and it never
spends more than Kafka's own maximum of iterations (16384) before authenticating."""

from __future__ import annotations

import base64
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twopc.control.errors import AuthenticationError
from twopc.control.scram import MAX_ITERATIONS, ScramClient

NONCE = "rOprNGfwEbeRWgbNEkqO"
GOOD_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
              b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
FIXES = ("check", "SASL_SSL", "sasl.")


def _typed(exc: BaseException) -> None:
    assert isinstance(exc, AuthenticationError), f"untyped {type(exc).__name__}: {exc}"
    assert any(f in str(exc) for f in FIXES), f"{exc} says nothing to do"


attribute = st.sampled_from(["r", "s", "i", "e", "v", "m", "x", ""])
value = st.text(max_size=12) | st.sampled_from(["", "====", "A", "AAAA", "AA=A", "!!", "4096",
                                               "-1", "99999999999", "1e9", "４０９６", "NaN"])
message = st.lists(st.tuples(attribute, value), max_size=5).map(
    lambda parts: ",".join(f"{k}={v}" if k else v for k, v in parts).encode())


@settings(max_examples=400, deadline=None)
@given(message | st.binary(max_size=40))
def test_any_server_final_is_typed(server_final: bytes) -> None:
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=NONCE)
    c.final(GOOD_FIRST)
    try:
        c.verify(server_final)
    except Exception as exc:  # what the test checks
        _typed(exc)
    else:
        pytest.fail(f"accepted a server-final message that is not the right signature: "
                    f"{server_final!r}")


@settings(max_examples=300, deadline=None)
@given(message | st.binary(max_size=40), st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]))
def test_any_server_first_is_typed_or_answered(server_first: bytes, mechanism: str) -> None:
    c = ScramClient(mechanism, "user", "pencil", nonce=NONCE)
    try:
        c.final(server_first)
    except Exception as exc:
        _typed(exc)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=8), st.binary(max_size=16), st.integers(-(2**40), 2**40))
def test_server_first_with_our_nonce(suffix: str, salt: bytes, iterations: int) -> None:
    msg = f"r={NONCE}{suffix},s={base64.b64encode(salt).decode()},i={iterations}".encode()
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=NONCE)
    started = time.monotonic()
    try:
        c.final(msg)
    except Exception as exc:
        _typed(exc)
        return
    assert 4096 <= iterations <= MAX_ITERATIONS
    assert time.monotonic() - started < 2.0


def test_iteration_count_is_bounded_by_kafkas_maximum() -> None:
    assert MAX_ITERATIONS == 16384
    c = ScramClient("SCRAM-SHA-512", "user", "pencil", nonce=NONCE)
    started = time.monotonic()
    with pytest.raises(AuthenticationError, match=r"2147483647.*16384"):
        c.final(f"r={NONCE}x,s=AAAA,i={2**31 - 1}".encode())
    assert time.monotonic() - started < 0.5


def test_malformed_signature_names_the_man_in_the_middle() -> None:
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=NONCE)
    c.final(GOOD_FIRST)
    with pytest.raises(AuthenticationError, match="base64"):
        c.verify(b"v=!!not-base64")
