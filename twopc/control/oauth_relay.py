"""A token endpoint on this process's loopback interface that serves librdkafka the tokens of
`twopc.oauth.token.provider`, so that librdkafka fetches them itself (`sasl.oauthbearer.method=oidc`)
instead of through confluent-kafka's `oauth_cb`.

Why: confluent-kafka (2.13 to 2.16 at least) makes every Producer(), AdminClient() and Consumer()
given an `oauth_cb` wait for the first token in whole seconds: it sleeps 1 s, releasing the GIL,
before it looks whether librdkafka's background thread has called the callback, which needs the GIL
it held until then. Every task's producer would start at least 1 s late. With `method=oidc`
librdkafka asks a token endpoint on its own thread and the constructor returns at once; this
endpoint answers with the provider's token from the process's TokenSource (oauth.py), already
fetched and checked (`librdkafka_oauth`), and refreshed there at 80% of its life.

librdkafka's OIDC client reads the JWT's `exp` and `sub`, so only such tokens can be relayed
(`Token.relayable`); an AWS MSK IAM token is no JWT and goes through `oauth_cb` (whose wait the
writer overlaps with reading rows). Nor is the relay used when libcurl would send the request to an
HTTP proxy (`proxied`): librdkafka sets no proxy options, so libcurl takes `http_proxy` from the
environment.

The endpoint binds 127.0.0.1 on a free port and answers only a client that presents this process's
random secret (HTTP Basic, compared in constant time), which lives in this process's memory and in
its librdkafka configurations (masked wherever shown). One endpoint per process, started on first
use, a daemon thread; a forked child starts its own.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import json
import os
import secrets
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from twopc.control.oauth import Token, TokenSource

CLIENT_ID = "twopc-token-relay"
_PATH = "/token/"


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class TokenRelay:
    """The process's loopback token endpoint: `register` a TokenSource, hand librdkafka
    `settings_for` it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.secret = secrets.token_urlsafe(32)
        self._sources: dict[str, TokenSource] = {}
        self._keys: dict[int, str] = {}
        self._lock = threading.Lock()
        self.served = 0
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # never log a request line: nothing here is for a log

            def _answer(self, status: int, body: Mapping[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer(405, {"error": "invalid_request"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(min(length, 65536))
                if not relay._authorized(self.headers.get("Authorization")):
                    self._answer(401, {"error": "invalid_client"})
                    return
                source = relay._sources.get(self.path[len(_PATH):]) \
                    if self.path.startswith(_PATH) else None
                if source is None:
                    self._answer(404, {"error": "invalid_request"})
                    return
                from twopc.control.oauth import OAuthTokenError

                try:
                    token = source.token()
                except OAuthTokenError as exc:
                    # librdkafka logs the failure and retries; the token it holds stays valid
                    # until it expires. The message names the source, never a secret.
                    self._answer(400, {"error": "invalid_grant", "error_description": str(exc)})
                    return
                relay.served += 1
                self._answer(200, {"access_token": token.access_token, "token_type": "bearer",
                                   "expires_in": max(1, int(token.remaining()))})

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="twopc-token-relay")
        self._thread.start()

    def _authorized(self, header: str | None) -> bool:
        if not header or not header.lower().startswith("basic "):
            return False
        try:
            given = base64.b64decode(header[6:].strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return False
        expected = f"{CLIENT_ID}:{self.secret}"
        return hmac.compare_digest(given.encode(), expected.encode())

    def register(self, source: TokenSource) -> str:
        """The URL that serves `source`'s tokens."""
        with self._lock:
            key = self._keys.get(id(source))
            if key is None:
                key = self._keys[id(source)] = str(len(self._keys))
                self._sources[key] = source
        return f"http://127.0.0.1:{self.port}{_PATH}{key}"

    def source_of(self, url: object) -> TokenSource | None:
        """The TokenSource a URL of this relay serves, for error messages."""
        prefix = f"http://127.0.0.1:{self.port}{_PATH}"
        if not isinstance(url, str) or not url.startswith(prefix):
            return None
        return self._sources.get(url[len(prefix):])

    def settings_for(self, source: TokenSource, token: Token) -> dict[str, str]:
        """librdkafka settings that fetch `source`'s tokens from here. The extensions are the
        token's (the provider's or sasl.oauthbearer.extensions)."""
        out = {"sasl.oauthbearer.method": "oidc",
               "sasl.oauthbearer.token.endpoint.url": self.register(source),
               "sasl.oauthbearer.client.id": CLIENT_ID,
               "sasl.oauthbearer.client.secret": self.secret}
        if token.extensions:
            out["sasl.oauthbearer.extensions"] = ",".join(f"{k}={v}" for k, v in token.extensions)
        return out

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


_relay: TokenRelay | None = None
_relay_lock = threading.Lock()


def relay() -> TokenRelay:
    """This process's relay, started on first use (a forked child starts its own)."""
    global _relay
    with _relay_lock:
        if _relay is None or _relay.pid != os.getpid():
            _relay = TokenRelay()
        return _relay


def current() -> TokenRelay | None:
    """The relay if this process started one (for error messages: never starts one)."""
    found = _relay
    return found if found is not None and found.pid == os.getpid() else None


def proxied() -> bool:
    """Whether libcurl would send a request to http://127.0.0.1 through a proxy: `http_proxy`
    or `all_proxy` set (libcurl reads http_proxy in lower case only) and `no_proxy` not
    covering 127.0.0.1."""
    env = {k.lower(): v for k, v in os.environ.items()
           if k in ("http_proxy", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY")}
    if not (env.get("http_proxy") or env.get("all_proxy")):
        return False
    return not any(_bypasses(entry.strip().lstrip(".")) for entry in
                   env.get("no_proxy", "").split(","))


def _bypasses(entry: str) -> bool:
    """Whether a no_proxy entry covers 127.0.0.1 (libcurl: `*`, the address, or a CIDR range)."""
    if entry in ("*", "127.0.0.1"):
        return True
    try:
        return ipaddress.ip_address("127.0.0.1") in ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False


def _reset_after_fork() -> None:
    # The parent's serving thread does not exist here, and its lock may have been held.
    global _relay, _relay_lock
    _relay, _relay_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)
