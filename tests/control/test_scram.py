"""SCRAM against the published test vector of RFC 7677 (SCRAM-SHA-256)."""

from __future__ import annotations

import pytest

from twopc.control.errors import AuthenticationError
from twopc.control.scram import ScramClient

NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


def test_rfc7677_vector() -> None:
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=NONCE)
    assert c.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert c.final(SERVER_FIRST) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    c.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_wrong_server_signature_and_errors() -> None:
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=NONCE)
    c.final(SERVER_FIRST)
    with pytest.raises(AuthenticationError, match="signature"):
        c.verify(b"v=AAAA")
    with pytest.raises(AuthenticationError, match="refused"):
        c.verify(b"e=invalid-proof")
    with pytest.raises(AuthenticationError, match="nonce"):
        ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc").final(b"r=xyz,s=AAAA,i=4096")
    with pytest.raises(AuthenticationError, match="iteration"):
        ScramClient("SCRAM-SHA-512", "u", "p", nonce="abc").final(b"r=abcd,s=AAAA,i=10")
