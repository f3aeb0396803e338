"""SASL/OAUTHBEARER (RFC 7628, KIP-255, KIP-768): where the bearer token comes from, and the
messages of the exchange. Shared by both halves: the writer hands librdkafka an `oauth_cb` built
here (`librdkafka_oauth`), the control client authenticates with `TokenSource`.

Where a token comes from, in the librdkafka-style config both halves read:

- `twopc.oauth.token.provider=module:function`: the user's function, called with
  `sasl.oauthbearer.config` (as librdkafka calls `oauth_cb`), returns `(token, expiry)` or
  `(token, expiry, principal, extensions)`; `expiry` is an epoch time in seconds or milliseconds
  (aws-msk-iam-sasl-signer-python's `generate_auth_token(region)` returns milliseconds);
- `sasl.oauthbearer.method=oidc`: the client-credentials grant (RFC 6749 section 4.4) at
  `sasl.oauthbearer.token.endpoint.url` with `sasl.oauthbearer.client.id`/`.client.secret` (HTTP
  Basic) and `sasl.oauthbearer.scope`, as librdkafka does it;
- `enable.sasl.oauthbearer.unsecure.jwt=true`: an unsigned token for `principal=` in
  `sasl.oauthbearer.config` (development brokers with Kafka's unsecured validator only).

`sasl.oauthbearer.extensions=key=value,...` are sent with the token (Confluent Cloud's
`logicalCluster` and `identityPoolId`).

Kafka tells a client whose token it refuses only `{"status":"invalid_token"}` (the reason, expired
or wrong audience, is in the broker's log): `refusal_message` says what the token held and which
setting made it, and `TokenSource.token` refuses a token that has expired by its own `exp` before
any broker sees it.

What librdkafka can do and the control client cannot is refused by name, with the setting to use
instead (`unsupported_settings`): the JWT-bearer grant, metadata-based authentication (Azure IMDS,
AWS IAM) and a client certificate for the token endpoint. A provider function does any of them.

librdkafka gets a provider's tokens through an `oauth_cb` (`librdkafka_oauth`), which costs every
librdkafka client constructor about 1 s (measured: benchmarks/bench_oauth.py). Tokens and client
secrets never appear in a repr or an error (checkpoint/redact.py).

Design: docs/design.md section 7 (twopc/control), docs/control.md (Configuration).
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoint.redact import redact_text, redact_url, redact_urls_in, redacted_repr
from twopc.control.errors import AuthenticationError, ConfigError
from twopc.control.tls import ca_context

MECHANISM = "OAUTHBEARER"
TOKEN_PROVIDER_KEY = "twopc.oauth.token.provider"
# RFC 7628 section 3.1: kvsep is ^A; extension keys are ALPHA only, `auth` is reserved.
_SEP = "\x01"
_KEY_RE = re.compile(r"^[A-Za-z]+$")
_VALUE_RE = re.compile(r"^[\x21-\x7E \t\r\n]+$")
# A returned expiry above this is milliseconds (1e11 s is the year 5138; 1e11 ms is 1973).
_MS_THRESHOLD = 1e11
# Refresh a token once this fraction of its lifetime has passed (librdkafka and Kafka's Java
# client refresh at 80% too), and never hand out one with less than this many seconds left.
REFRESH_FRACTION = 0.8
MIN_REMAINING_S = 2.0


class OAuthTokenError(AuthenticationError):
    """No usable token: the provider failed, the token endpoint refused, the token has expired, or
    a broker refused it. `setting` names the configuration that produced the token."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting

    def relabel(self, setting: str) -> OAuthTokenError:
        """The same error naming the token source as `setting` (the Spark option's name, say):
        every message names the source by its `setting` text."""
        relabelled = OAuthTokenError(str(self).replace(self.setting, setting), setting)
        relabelled.__cause__ = self.__cause__
        return relabelled


@dataclass(frozen=True)
class OAuthSettings:
    method: str  # "provider", "oidc" or "unsecured"
    oauthbearer_config: str = ""  # sasl.oauthbearer.config: may hold secrets, masked in the repr
    provider: str | None = None
    client_id: str | None = None
    client_secret: str | None = None
    token_endpoint_url: str | None = None
    scope: str | None = None
    extensions: tuple[tuple[str, str], ...] = ()
    https_ca_location: str | None = None
    https_ca_pem: str | None = None
    # Not part of the identity: the writer's and the control client's sources are one.
    timeout_s: float = field(default=10.0, compare=False)

    def __repr__(self) -> str:
        return redacted_repr(self)  # client_secret, oauthbearer_config: masked

    @property
    def source(self) -> str:
        """The setting that makes the tokens, for error messages."""
        if self.method == "provider":
            return f"{TOKEN_PROVIDER_KEY}={self.provider}"
        if self.method == "oidc":
            return (f"sasl.oauthbearer.token.endpoint.url={redact_url(self.token_endpoint_url or '')}"
                    f" with sasl.oauthbearer.client.id={self.client_id}")
        return "enable.sasl.oauthbearer.unsecure.jwt=true"


def parse_extensions(raw: str | None) -> tuple[tuple[str, str], ...]:
    """`sasl.oauthbearer.extensions`: comma-separated key=value pairs (librdkafka's format)."""
    out: list[tuple[str, str]] = []
    for part in (raw or "").split(","):
        if not part.strip():
            continue
        key, sep, value = part.strip().partition("=")
        if not sep or not _KEY_RE.match(key) or key == "auth" or not _VALUE_RE.match(value):
            raise ConfigError(f"sasl.oauthbearer.extensions entry {part.strip()!r} is not "
                              "KEY=VALUE with a letters-only KEY other than 'auth' (RFC 7628)")
        out.append((key, value))
    return tuple(out)


# What librdkafka does and twopc's control client does not, each with what to use instead. A
# function of yours (twopc.oauth.token.provider) can do any of them for both halves.
_PROVIDER_INSTEAD = (f"use {TOKEN_PROVIDER_KEY}=module:function (Spark: twopc.oauthTokenProvider), "
                     "a function that gets the token that way, for the writer and the control "
                     "client alike")
_CLIENT_CERT_KEYS = ("https.certificate.location", "https.certificate.pem", "https.key.location",
                     "https.key.pem", "https.key.password", "https.keystore.location",
                     "https.keystore.password")


def unsupported_settings(cfg: Mapping[str, str]) -> None:
    """ConfigError naming the first OAuth setting the control client cannot honour."""
    grant = cfg.get("sasl.oauthbearer.grant.type")
    if grant is not None and grant.strip().lower() != "client_credentials":
        raise ConfigError(
            f"sasl.oauthbearer.grant.type={grant}: twopc's control client takes only the "
            f"client-credentials grant (the driver's commits could not authenticate); "
            f"{_PROVIDER_INSTEAD}, or use sasl.oauthbearer.client.id and "
            "sasl.oauthbearer.client.secret")
    for key in sorted(cfg):
        if key.startswith("sasl.oauthbearer.assertion."):
            raise ConfigError(
                f"{key} (a JWT assertion, the jwt-bearer grant) is not supported by twopc's "
                f"control client; {_PROVIDER_INSTEAD}")
    metadata = cfg.get("sasl.oauthbearer.metadata.authentication.type")
    if metadata is not None and metadata.strip().lower() != "none":
        raise ConfigError(
            f"sasl.oauthbearer.metadata.authentication.type={metadata} (tokens from a cloud "
            f"metadata service) is not supported by twopc's control client; {_PROVIDER_INSTEAD} "
            "(e.g. azure-identity's ManagedIdentityCredential, or for AWS MSK "
            "aws-msk-iam-sasl-signer-python's MSKAuthTokenProvider.generate_auth_token)")
    for key in _CLIENT_CERT_KEYS:
        if key in cfg:
            raise ConfigError(
                f"{key}: a client certificate for the token endpoint (mutual TLS) is not supported "
                f"by twopc's control client, nor by librdkafka; {_PROVIDER_INSTEAD}, or "
                "authenticate to the token endpoint with sasl.oauthbearer.client.secret")


def _first(cfg: Mapping[str, str], *keys: str) -> str | None:
    """The value of the first of `keys` set (librdkafka's aliases)."""
    return next((cfg[k] for k in keys if cfg.get(k)), None)


def oauth_settings(cfg: Mapping[str, str], timeout_s: float = 10.0) -> OAuthSettings:
    """The token source `cfg` configures; ConfigError naming the keys when there is none."""
    unsupported_settings(cfg)
    provider = cfg.get(TOKEN_PROVIDER_KEY)
    method = cfg.get("sasl.oauthbearer.method", "default").lower()
    unsecured = str(cfg.get("enable.sasl.oauthbearer.unsecure.jwt", "false")).lower() == "true"
    config = cfg.get("sasl.oauthbearer.config", "")
    extensions = parse_extensions(cfg.get("sasl.oauthbearer.extensions"))
    if method not in ("default", "oidc"):
        raise ConfigError(f"sasl.oauthbearer.method={method!r}: expected default or oidc")
    if sum((provider is not None, method == "oidc", unsecured)) != 1:
        raise ConfigError(
            "sasl.mechanism=OAUTHBEARER needs exactly one token source: "
            f"{TOKEN_PROVIDER_KEY}=module:function (a function returning (token, expiry)), "
            "sasl.oauthbearer.method=oidc with sasl.oauthbearer.token.endpoint.url, "
            "sasl.oauthbearer.client.id and sasl.oauthbearer.client.secret, or (development "
            "brokers only) enable.sasl.oauthbearer.unsecure.jwt=true")
    if provider is not None:
        load_provider(provider)  # fails now, naming the setting, rather than at first connect
        return OAuthSettings("provider", config, provider=provider, extensions=extensions,
                             timeout_s=timeout_s)
    if method == "oidc":
        client_id = _first(cfg, "sasl.oauthbearer.client.id",
                           "sasl.oauthbearer.client.credentials.client.id")
        secret = _first(cfg, "sasl.oauthbearer.client.secret",
                        "sasl.oauthbearer.client.credentials.client.secret")
        url = cfg.get("sasl.oauthbearer.token.endpoint.url")
        missing = [k for k, v in (("sasl.oauthbearer.token.endpoint.url", url),
                                  ("sasl.oauthbearer.client.id", client_id),
                                  ("sasl.oauthbearer.client.secret", secret)) if not v]
        if missing:
            raise ConfigError(f"sasl.oauthbearer.method=oidc needs {', '.join(missing)}")
        assert url is not None
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise ConfigError(f"sasl.oauthbearer.token.endpoint.url={redact_url(url)!r} is not an "
                              "http(s) URL")
        return OAuthSettings("oidc", config, client_id=client_id, client_secret=secret,
                             token_endpoint_url=url, scope=cfg.get("sasl.oauthbearer.scope"),
                             https_ca_location=cfg.get("https.ca.location"),
                             https_ca_pem=cfg.get("https.ca.pem"),
                             extensions=extensions, timeout_s=timeout_s)
    return OAuthSettings("unsecured", config, extensions=extensions, timeout_s=timeout_s)


def load_provider(spec: str) -> Callable[..., Any]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{TOKEN_PROVIDER_KEY}={spec!r} must be 'module:function' "
                          "(e.g. mypkg.tokens:msk_token)")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{TOKEN_PROVIDER_KEY}={spec!r} cannot be loaded ({exc}): the module "
                          "must be importable on the driver and on every executor") from exc
    if not callable(target):
        raise ConfigError(f"{TOKEN_PROVIDER_KEY}={spec!r} is not callable")
    return target  # type: ignore[no-any-return]


# --- tokens -----------------------------------------------------------------------------------

def jwt_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWT, unverified (for messages and expiry only); None if `token` is not a
    JWT (an MSK IAM token is a base64url signed URL)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (ValueError, binascii.Error):
        return None
    return claims if isinstance(claims, dict) else None


def normalize_expiry(value: object, source: str) -> float:
    """An epoch expiry in seconds, from seconds or milliseconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OAuthTokenError(f"{source} returned expiry {value!r}: expected an epoch time in "
                              "seconds or milliseconds", source)
    return float(value) / 1000.0 if value > _MS_THRESHOLD else float(value)


@dataclass(frozen=True)
class Token:
    access_token: str  # the bearer token itself: masked in the repr
    expires_at: float  # epoch seconds
    obtained_at: float
    principal: str | None = None
    extensions: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        return redacted_repr(self)

    @property
    def claims(self) -> dict[str, Any] | None:
        return jwt_claims(self.access_token)

    def remaining(self, now: float | None = None) -> float:
        return self.expires_at - (time.time() if now is None else now)

    def describe(self, now: float | None = None) -> str:
        left = self.remaining(now)
        when = f"expires in {left:.0f} s" if left > 0 else f"expired {-left:.0f} s ago"
        claims = self.claims
        if claims is None:
            return f"a token that is not a JWT, which {when}"
        shown = ", ".join(f"{k}={claims[k]!r}" for k in ("sub", "aud", "iss", "scope")
                          if k in claims)
        return f"a JWT with {shown or 'no sub, aud or iss claim'}, which {when}"


def _result_to_token(result: object, source: str, default_ext: tuple[tuple[str, str], ...]
                     ) -> Token:
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3, 4):
        raise OAuthTokenError(f"{source} returned {type(result).__name__}: expected (token, "
                              "expiry) or (token, expiry, principal, extensions)", source)
    value, expiry = result[0], result[1]
    if not isinstance(value, str) or not value:
        raise OAuthTokenError(f"{source} returned no token string", source)
    principal = result[2] if len(result) > 2 else None
    extensions = default_ext
    if len(result) == 4 and result[3]:
        extensions = tuple((str(k), str(v)) for k, v in dict(result[3]).items())
    return Token(value, normalize_expiry(expiry, source), time.time(),
                 str(principal) if principal else None, extensions)


def fetch_token(settings: OAuthSettings) -> Token:
    """A new token from the configured source (blocking: a user function or an HTTP call)."""
    if settings.method == "provider":
        assert settings.provider is not None
        fn = load_provider(settings.provider)
        try:
            result = fn(settings.oauthbearer_config)
        except Exception as exc:
            # A provider may quote its argument, whose key=value pairs may hold a secret.
            said = redact_text(str(exc), _config_pairs(settings.oauthbearer_config))
            raise OAuthTokenError(f"{settings.source} raised {type(exc).__name__}: {said}",
                                  settings.source) from exc
        token = _result_to_token(result, settings.source, settings.extensions)
    elif settings.method == "oidc":
        token = _client_credentials(settings)
    else:
        token = _unsecured(settings)
    _refuse_expired(token, settings)
    return token


def _refuse_expired(token: Token, settings: OAuthSettings) -> None:
    now = time.time()
    claims = token.claims or {}
    exp = claims.get("exp")
    expiry = min(token.expires_at, float(exp)) if isinstance(exp, (int, float)) else \
        token.expires_at
    if expiry <= now:
        raise OAuthTokenError(
            f"the OAUTHBEARER token from {settings.source} has expired ({token.describe(now)}; "
            f"its exp is {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(expiry))}): fix the "
            "token source (or this machine's clock)", settings.source)


def _client_credentials(settings: OAuthSettings) -> Token:
    # Imported here, not with the module: urllib.request brings http.client and email (~25 ms),
    # which every process with a control client would pay, OAuth or not (a cold Spark worker).
    import urllib.error
    import urllib.request

    assert settings.token_endpoint_url and settings.client_id is not None
    form = {"grant_type": "client_credentials"}
    if settings.scope:
        form["scope"] = settings.scope
    basic = base64.b64encode(f"{settings.client_id}:{settings.client_secret}".encode()).decode()
    request = urllib.request.Request(
        settings.token_endpoint_url, data=urllib.parse.urlencode(form).encode(), method="POST",
        headers={"Authorization": f"Basic {basic}", "Accept": "application/json",
                 "Content-Type": "application/x-www-form-urlencoded"})
    context = None
    if settings.token_endpoint_url.startswith("https:"):
        ca = settings.https_ca_location if settings.https_ca_location != "probe" else None
        try:
            context = ca_context(ca, settings.https_ca_pem)
        except (OSError, ssl.SSLError, ValueError) as exc:
            given = f"https.ca.location={ca}" if ca else "https.ca.pem"
            raise OAuthTokenError(f"cannot load the CA certificates of {given} for the token "
                                  f"endpoint: {exc}", settings.source) from exc
    where = f"sasl.oauthbearer.token.endpoint.url={redact_url(settings.token_endpoint_url)}"
    began = time.time()
    try:
        with urllib.request.urlopen(request, timeout=settings.timeout_s, context=context) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = _oauth_error(exc.read())
        raise OAuthTokenError(
            f"the token endpoint {where} refused client sasl.oauthbearer.client.id="
            f"{settings.client_id} (HTTP {exc.code}{detail}): check the client id, "
            "sasl.oauthbearer.client.secret and sasl.oauthbearer.scope", settings.source) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise OAuthTokenError(f"cannot get a token from {where}: {redact_urls_in(str(exc))}",
                              settings.source) from exc
    value = body.get("access_token") if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        raise OAuthTokenError(f"the token endpoint {where} answered without an access_token",
                              settings.source)
    claims = jwt_claims(value) or {}
    if isinstance(claims.get("exp"), (int, float)):
        expires = float(claims["exp"])
    elif isinstance(body.get("expires_in"), (int, float)):
        expires = began + float(body["expires_in"])
    else:
        raise OAuthTokenError(f"the token from {where} has neither an exp claim nor expires_in",
                              settings.source)
    sub = claims.get("sub")
    return Token(value, expires, began, str(sub) if sub else None, settings.extensions)


def _config_pairs(config: str) -> dict[str, str]:
    """The `key=value` words of sasl.oauthbearer.config (librdkafka's format), for redact_text."""
    return dict(p.split("=", 1) for p in config.split() if "=" in p)


def _oauth_error(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    parts = [str(body[k]) for k in ("error", "error_description") if body.get(k)]
    return f": {' - '.join(parts)}" if parts else ""


def _unsecured(settings: OAuthSettings) -> Token:
    """librdkafka's `enable.sasl.oauthbearer.unsecure.jwt`: `principal=` (required), `scope=` and
    `lifeSeconds=` (default 3600) from sasl.oauthbearer.config, space-separated."""
    options = dict(p.split("=", 1) for p in settings.oauthbearer_config.split() if "=" in p)
    principal = options.get("principal")
    if not principal:
        raise OAuthTokenError("enable.sasl.oauthbearer.unsecure.jwt=true needs principal=NAME in "
                              "sasl.oauthbearer.config", settings.source)
    now = time.time()
    life = float(options.get("lifeSeconds", "3600"))
    claims: dict[str, Any] = {"sub": principal, "iat": now, "exp": now + life}
    if options.get("scope"):
        claims["scope"] = options["scope"].split(",")

    def enc(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return Token(f"{enc({'alg': 'none'})}.{enc(claims)}.", now + life, now, principal,
                 settings.extensions)


class TokenSource:
    """One cached token per configuration, refreshed at 80% of its lifetime; thread-safe (the
    control client's connections and processes' threads share it)."""

    def __init__(self, settings: OAuthSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._token: Token | None = None
        self.fetches = 0

    def token(self, min_remaining_s: float = MIN_REMAINING_S) -> Token:
        with self._lock:
            now = time.time()
            t = self._token
            if t is not None:
                refresh_at = t.obtained_at + REFRESH_FRACTION * (t.expires_at - t.obtained_at)
                if now < refresh_at and t.remaining(now) > min_remaining_s:
                    return t
            self._token = fetch_token(self.settings)
            self.fetches += 1
            return self._token

    @property
    def current(self) -> Token | None:
        return self._token

    def invalidate(self, token: Token) -> None:
        """Forget `token` (a broker refused it): the next call fetches another."""
        with self._lock:
            if self._token is token:
                self._token = None


_SOURCES: dict[OAuthSettings, TokenSource] = {}
_SOURCES_LOCK = threading.Lock()


def token_source(settings: OAuthSettings) -> TokenSource:
    """The process's TokenSource for `settings`: one token for all of a process's clients."""
    with _SOURCES_LOCK:
        source = _SOURCES.get(settings)
        if source is None:
            source = _SOURCES[settings] = TokenSource(settings)
        return source


# --- the SASL exchange ------------------------------------------------------------------------

def initial_response(token: str, extensions: tuple[tuple[str, str], ...] = (),
                     authzid: str = "") -> bytes:
    """The client's first (and only) message, RFC 7628 section 3.1:
    gs2-header `n,[a=authzid],` then ^A-separated `auth=Bearer <token>` and extensions, ^A^A."""
    pairs = [f"auth=Bearer {token}", *(f"{k}={v}" for k, v in extensions)]
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return (gs2 + _SEP + _SEP.join(pairs) + _SEP + _SEP).encode()


# What the client sends after the server's error challenge (RFC 7628 section 3.2.3): a lone kvsep.
ERROR_ACK = _SEP.encode()


def server_error(challenge: bytes) -> dict[str, Any]:
    """The server's JSON error challenge (RFC 7628 section 3.2.2), e.g. Kafka's
    `{"status":"invalid_token"}`."""
    try:
        body = json.loads(challenge.decode("utf-8", errors="replace"))
    except ValueError:
        return {"status": challenge.decode("utf-8", errors="replace")}
    return body if isinstance(body, dict) else {"status": str(body)}


def refusal_message(broker: str, status: str, token: Token, settings: OAuthSettings) -> str:
    advice = ("a token must be unexpired, signed by a key at the brokers' "
              "sasl.oauthbearer.jwks.endpoint.url, and carry the audience (aud) and issuer (iss) "
              "the brokers expect (sasl.oauthbearer.expected.audience, "
              "sasl.oauthbearer.expected.issuer); the brokers log the reason "
              "(OAuthBearerValidatorCallbackHandler)")
    if token.claims is None:  # AWS MSK IAM: a signed URL, not a JWT
        advice = ("for AWS MSK IAM, check the AWS credentials, region and the IAM policy's "
                  "kafka-cluster:Connect permission")
    return (f"broker {broker} refused the OAUTHBEARER token ({status}) from {settings.source}: "
            f"it is {token.describe()}; {advice}")


class ProducerOAuthCallback:
    """confluent-kafka's `oauth_cb` over a TokenSource."""

    def __init__(self, source: TokenSource) -> None:
        self.tokens = source

    def __repr__(self) -> str:
        return f"ProducerOAuthCallback({self.tokens.settings.source})"

    def __call__(self, oauthbearer_config: str) -> tuple[Any, ...]:
        token = self.tokens.token()
        principal = token.principal or str((token.claims or {}).get("sub") or "")
        return token.access_token, token.expires_at, principal, dict(token.extensions)


def librdkafka_oauth(config: Mapping[str, Any]) -> dict[str, Any]:
    """The librdkafka settings that stand for `twopc.oauth.token.provider` ({} when it is not
    set): an `oauth_cb` over the process's TokenSource.

    The first token is fetched here (the driver and a reused Python worker fetch once for many
    clients): a failing provider or an expired token raises OAuthTokenError now, naming the
    setting, not librdkafka's "OAuth token not set within 10 seconds timeout" later. The callback
    hands librdkafka (token, expiry in epoch seconds, principal, extensions), and librdkafka calls
    it again at 80% of the token's remaining life.

    Cost: confluent-kafka (2.13 to 2.16 at least) makes every client given an `oauth_cb` wait for
    the first token in whole seconds (it sleeps 1 s, releasing the GIL, before it looks whether
    librdkafka's background thread has called the callback), so each Producer() takes about 1 s
    longer; the writer builds it off the caller's thread (producer.build_off_thread). Measured in
    benchmarks/bench_oauth.py: +1.0 s for a one-row task, +0.6 to +0.9 s for 100,000 rows."""
    if config.get(TOKEN_PROVIDER_KEY) is None:
        return {}
    mech = str(config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "").upper()
    if mech != MECHANISM:
        raise ConfigError(f"{TOKEN_PROVIDER_KEY} is set but sasl.mechanism is {mech or 'unset'}: "
                          "set sasl.mechanism=OAUTHBEARER (and security.protocol=SASL_SSL)")
    if config.get("oauth_cb") is not None:
        raise ConfigError(f"both oauth_cb and {TOKEN_PROVIDER_KEY} are set: give one")
    settings = oauth_settings({str(k): str(v) for k, v in config.items() if v is not None})
    source = token_source(settings)
    source.token()
    return {"oauth_cb": ProducerOAuthCallback(source)}


def describe_source(config: Mapping[str, Any]) -> str | None:
    """For an error message: the token source behind a librdkafka config made by
    `librdkafka_oauth` (the setting and what the current token holds), or None."""
    callback = config.get("oauth_cb")
    if not isinstance(callback, ProducerOAuthCallback):
        return None
    token = callback.tokens.current
    return (f"{callback.tokens.settings.source}; the token is "
            f"{token.describe() if token is not None else 'not fetched yet'}")


def librdkafka_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` for a librdkafka client (AdminClient, Consumer) other than the writer's producer:
    twopc's own keys removed (librdkafka refuses unknown ones), `twopc.oauth.token.provider`
    turned into librdkafka's settings (`librdkafka_oauth`)."""
    out = {k: v for k, v in config.items() if not str(k).startswith("twopc.")}
    out.update(librdkafka_oauth(config))
    return out
