"""SCRAM-SHA-256/512 client messages (RFC 5802, RFC 7677) as Kafka's SASL/SCRAM wants them. Pure.

Design: docs/design.md section 3.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from twopc.control.errors import AuthenticationError

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's own bounds (ScramMechanism: 4096 to 16384). A server asking for fewer is not a Kafka
# broker we should trust; one asking for more would make this client spend its CPU before it
# authenticates (2**31 - 1 iterations is ~35 minutes): a rogue broker, or a man in the middle on
# SASL_PLAINTEXT, could stall the driver.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
_CHECK = ("check that bootstrap.servers names a Kafka SASL listener; use SASL_SSL so that no one "
          "in the middle can answer for the broker")


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationError(
                f"malformed SCRAM message from the broker: {message[:120]!r}; {_CHECK}")
        out[part[0]] = part[2:]
    return out


class ScramClient:
    """One SCRAM exchange: first() -> final(server_first) -> verify(server_final)."""

    def __init__(self, mechanism: str, username: str, password: str,
                 nonce: str | None = None) -> None:
        if mechanism not in MECHANISMS:
            raise AuthenticationError(f"unsupported SCRAM mechanism {mechanism!r}: check "
                                      "sasl.mechanism (SCRAM-SHA-256 or SCRAM-SHA-512)")
        self._hash = MECHANISMS[mechanism]
        self._password = password.encode("utf-8")
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", errors="replace")
        attrs = _attributes(text)
        if "e" in attrs:
            raise AuthenticationError(f"SCRAM refused by the broker: {attrs['e'][:120]}; check "
                                      "sasl.username, sasl.password and sasl.mechanism")
        nonce, salt_b64, iterations_s = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationError(f"SCRAM server nonce does not extend the client nonce: "
                                      f"{_CHECK}")
        if not iterations_s.isascii() or not iterations_s.isdigit() or len(iterations_s) > 10:
            raise AuthenticationError(f"malformed SCRAM server-first message (iteration count "
                                      f"{iterations_s[:20]!r}): {_CHECK}")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
        except ValueError as exc:  # binascii.Error
            raise AuthenticationError(f"malformed SCRAM server-first message (salt is not "
                                      f"base64: {salt_b64[:40]!r}): {_CHECK}") from exc
        iterations = int(iterations_s)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise AuthenticationError(
                f"SCRAM iteration count {iterations} is outside Kafka's {MIN_ITERATIONS} to "
                f"{MAX_ITERATIONS}: not a Kafka broker's answer; {_CHECK}")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attributes(server_final.decode("utf-8", errors="replace"))
        if "e" in attrs:
            raise AuthenticationError(f"SCRAM refused by the broker: {attrs['e'][:120]}; check "
                                      "sasl.username, sasl.password and sasl.mechanism")
        if not self._server_signature:
            raise AuthenticationError("SCRAM server-final message before the client's final "
                                      f"message: {_CHECK}")
        try:
            got = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError as exc:  # binascii.Error
            raise AuthenticationError(f"the broker's SCRAM signature is not base64 "
                                      f"({attrs.get('v', '')[:40]!r}): {_CHECK}") from exc
        if not hmac.compare_digest(got, self._server_signature):
            raise AuthenticationError("the broker's SCRAM signature is wrong: it does not know "
                                      f"this user's credentials (a man in the middle?); {_CHECK}")
