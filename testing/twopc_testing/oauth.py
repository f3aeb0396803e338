"""A tiny OAuth identity provider served by the test process: signs JWTs (RS256), publishes its key
at a JWKS endpoint, and hands out tokens at a client-credentials token endpoint.

The brokers validate the tokens against `jwks_url` (Kafka's OAuthBearerValidatorCallbackHandler);
librdkafka's `sasl.oauthbearer.method=oidc` and twopc's control client fetch them from `token_url`.
Plain HTTP on 127.0.0.1 only: it is a test double, not an identity provider.

JWTs are signed here by hand with `cryptography` (already the TLS tests' dependency) rather than
with a JWT library: the double only *makes* tokens, a header and claims joined and signed with
RSASSA-PKCS1-v1_5/SHA-256 (RFC 7515 appendix A.2); verifying them is the broker's job (jose4j).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

AUDIENCE = "kafka-brokers"
# The test OAuth broker's connections.max.reauth.ms on its SASL_PLAINTEXT listener (tests/conftest.py):
# short, so that every client re-authenticates its connections within a test (KIP-368).
REAUTH_MS = 3000
CLIENT_ID, CLIENT_SECRET = "twopc-writer", "twopc-writer-secret"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(value: int) -> str:
    return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


def unsigned_token(sub: str, lifetime_s: float = 3600.0, **claims: Any) -> str:
    """An unsecured JWS (`alg: none`, empty signature) for Kafka's unsecured validator: it needs
    `sub`, `iat` and `exp` (seconds; a float is fine)."""
    now = time.time()
    body = {"sub": sub, "iat": now, "exp": now + lifetime_s, **claims}
    return (f"{b64url(json.dumps({'alg': 'none'}).encode())}."
            f"{b64url(json.dumps(body).encode())}.")


@dataclass
class TokenRequest:
    """What a client sent to the token endpoint (to assert on librdkafka's requests)."""

    headers: dict[str, str]
    form: dict[str, str]


@dataclass
class IdentityProvider:
    """Start with `start()` or `with`; `jwks_url`, `token_url`, `issuer` and `mint()` then."""

    audience: str = AUDIENCE
    # Lifetime of the tokens the token endpoint hands out.
    token_lifetime_s: float = 3600.0
    client_id: str = CLIENT_ID
    client_secret: str = CLIENT_SECRET
    requests: list[TokenRequest] = field(default_factory=list)
    issued: int = 0

    def __post_init__(self) -> None:
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:12]
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def provider_config(self, **knobs: object) -> str:
        """`sasl.oauthbearer.config` for `provide_token`: this IdP's token endpoint and client,
        and test knobs (`lifetime`, `audience`, `unit=ms`)."""
        items = {"token_url": self.token_url, "client_id": self.client_id,
                 "client_secret": self.client_secret, **knobs}
        return " ".join(f"{k}={v}" for k, v in items.items())

    # --- tokens ----------------------------------------------------------------------------------
    def mint(self, sub: str = "twopc-writer", *, lifetime_s: float | None = None,
             audience: str | None = None, issuer: str | None = None,
             expires_at: float | None = None, **claims: Any) -> str:
        """A signed JWT (RS256) with `sub`, `iat`, `exp`, `aud` and `iss`, and `claims`."""
        now = int(time.time())
        lifetime = self.token_lifetime_s if lifetime_s is None else lifetime_s
        body: dict[str, Any] = {
            "sub": sub, "iat": now, "exp": int(expires_at or now + lifetime),
            "aud": audience or self.audience, "iss": issuer or self.issuer,
            "jti": uuid.uuid4().hex, **claims,
        }
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(body).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{b64url(signature)}"

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid,
                          "n": _uint(numbers.n), "e": _uint(numbers.e)}]}

    # --- the HTTP endpoints ----------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self._server is not None, "the identity provider is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def jwks_url(self) -> str:
        return f"{self.base_url}/jwks"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/token"

    @property
    def issuer(self) -> str:
        return self.base_url

    def start(self) -> IdentityProvider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Mapping[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/jwks":
                    self._send(200, provider.jwks())
                else:
                    self._send(404, {"error": "not_found"})

            def do_POST(self) -> None:
                if self.path.split("?")[0] != "/token":
                    self._send(404, {"error": "not_found"})
                    return
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size).decode() if size else ""
                form = {k: v[0] for k, v in parse_qs(raw).items()}
                provider.requests.append(TokenRequest(dict(self.headers.items()), form))
                client_id, secret = provider._client_of(self.headers.get("Authorization"), form)
                if (client_id, secret) != (provider.client_id, provider.client_secret):
                    self._send(401, {"error": "invalid_client",
                                     "error_description": "unknown client or wrong secret"})
                    return
                if form.get("grant_type") != "client_credentials":
                    self._send(400, {"error": "unsupported_grant_type"})
                    return
                # Test knobs a real IdP lacks: `lifetime` (seconds, negative: already expired)
                # and `audience` (a wrong one) in the form.
                lifetime = float(form.get("lifetime", provider.token_lifetime_s))
                claims: dict[str, Any] = {"scope": form["scope"]} if form.get("scope") else {}
                token = provider.mint(client_id, lifetime_s=lifetime,
                                      audience=form.get("audience"), **claims)
                self._send(200, {"access_token": token, "token_type": "Bearer",
                                 "expires_in": int(lifetime)})
                provider.issued += 1

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="test-identity-provider")
        self._thread.start()
        return self

    @staticmethod
    def _client_of(authorization: str | None, form: Mapping[str, str]) -> tuple[str, str]:
        if authorization and authorization.lower().startswith("basic "):
            decoded = base64.b64decode(authorization[6:].strip()).decode()
            client_id, _, secret = decoded.partition(":")
            return client_id, secret
        return form.get("client_id", ""), form.get("client_secret", "")

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> IdentityProvider:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


PROVIDER = "twopc_testing.oauth:provide_token"
# A provider whose tokens are not JWTs, as AWS MSK IAM's are not (for tests without a broker).
OPAQUE_PROVIDER = "twopc_testing.oauth:opaque_token"


def opaque_token(config: str) -> tuple[str, float, str, dict[str, str]]:
    """(token, expiry in ms, principal, extensions): a base64url string, no JWT, an hour long."""
    return b64url(b"https://kafka.example/?Action=kafka-cluster:Connect"), \
        (time.time() + 3600) * 1000, "opaque-user", {"logicalCluster": "lkc-1"}


def provide_token(config: str) -> tuple[str, float]:
    """A `twopc.oauth.token.provider` for tests, as a user would write one: it gets a token from
    the test IdP named in `sasl.oauthbearer.config` (`IdentityProvider.provider_config`), so it
    works in any process (Spark's executors too). Returns (token, expiry), the expiry in epoch
    seconds, or milliseconds with `unit=ms` (as aws-msk-iam-sasl-signer-python returns it)."""
    import urllib.request

    options = dict(part.partition("=")[::2] for part in config.split() if "=" in part)
    form: dict[str, str] = {"grant_type": "client_credentials",
            **{k: options[k] for k in ("lifetime", "audience") if k in options}}
    basic = base64.b64encode(f"{options['client_id']}:{options['client_secret']}".encode()).decode()
    request = urllib.request.Request(
        options["token_url"], data="&".join(f"{k}={v}" for k, v in form.items()).encode(),
        headers={"Authorization": f"Basic {basic}"}, method="POST")
    # The IdP is on loopback: never through a proxy (a test sets http_proxy for librdkafka's sake).
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as resp:
        body = json.loads(resp.read())
    expiry = time.time() + float(body["expires_in"])
    return body["access_token"], expiry * 1000 if options.get("unit") == "ms" else expiry
