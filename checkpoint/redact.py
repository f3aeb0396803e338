"""The one place that decides what is a secret and hides it: in option and setting maps, in URLs
(the password of `scheme://user:password@host`, secret query parameters), in the text of errors,
and in the repr of the objects that hold them. Pure.

Used by every repr, str and error that could show a setting or a URL: the Spark options
(`twopc.spark.options.SinkConfig`), the control client's settings (`twopc.control.config`), the
checkpoint log's errors, twopc's errors and the command line.

Design: docs/design.md section 6.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

MASK = "***"

# Words of a key (split at '.', '_', '-' and camelCase) that mark its value secret.
_SECRET_WORDS = frozenset({
    "password", "passwd", "pwd", "secret", "token", "credential", "credentials", "jaas",
    "passphrase", "apikey", "sas", "sig", "signature", "privatekey", "auth", "authorization",
})
# Substrings that mark a key secret wherever they appear (clientSecret, aws_secret_access_key).
_SECRET_PARTS = ("password", "secret", "token", "passphrase", "credential")
# Keys that name where a token comes from, not a token: shown, so that errors can name the source
# (a URL's credentials are still masked, by redact_url).
_NOT_SECRET_ENDINGS = ("token.endpoint.url", "token.provider", "jwks.endpoint.url")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s'\"]+)@")


def _words(key: str) -> list[str]:
    return [w for w in re.split(r"[._\-\s/]+", _CAMEL.sub(".", key).lower()) if w]


def is_secret_key(key: object) -> bool:
    """Whether a setting, option or parameter named `key` holds a secret: a password, a key, a
    token, a client secret, a JAAS or OAuth configuration, a connection string."""
    if not isinstance(key, str):
        return False
    low = key.lower()
    if ".".join(_words(key)).endswith(_NOT_SECRET_ENDINGS):
        return False
    if any(part in low for part in _SECRET_PARTS):
        return True
    words = _words(key)
    if not words:
        return False
    if any(w in _SECRET_WORDS for w in words):
        return True
    if low == "key" or low.endswith(("_key", "-key", "accountkey", "accesskey", "private.key",
                                     "secret.key", "api.key")):
        return True  # s3fs `key`, adlfs `account_key`: never a path (those end in .location)
    if "key" in words and "pem" in words:
        return True  # ssl.key.pem: the private key itself
    if "oauthbearer" in words and "config" in words:
        return True  # sasl.oauthbearer.config may hold clientSecret=...
    return "connection" in words and "string" in words


def redact_mapping(values: Mapping[Any, Any]) -> dict[Any, Any]:
    """A copy of `values` with every secret value masked, nested maps and lists included."""
    return {k: MASK if is_secret_key(k) and v is not None else _redact_any(v)
            for k, v in values.items()}


def _redact_any(value: Any) -> Any:
    if isinstance(value, Mapping):
        return redact_mapping(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_redact_any(v) for v in value)
    if isinstance(value, str) and "://" in value:
        return redact_urls_in(value)
    return value


def redact_url(url: str) -> str:
    """`url` without its secrets: the password of its user info (the whole user info when it has
    no ':', as a token often is), and the values of secret query parameters."""
    if not isinstance(url, str) or "://" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_urls_in(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, sep, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if sep else f"{MASK}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(is_secret_key(k) for k, _ in pairs):
            query = "&".join(f"{quote(k, safe='')}={MASK if is_secret_key(k) else quote(v, safe='')}"
                             for k, v in pairs)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_urls_in(text: str) -> str:
    """`text` (an error message, say) with the user info of every URL in it masked."""
    def mask(m: re.Match[str]) -> str:
        user, sep, _ = m.group("userinfo").partition(":")
        return f"{m.group('scheme')}{user}:{MASK}@" if sep else f"{m.group('scheme')}{MASK}@"

    return _URL_USERINFO.sub(mask, text)


def redact_text(text: str, secrets: Mapping[Any, Any] | None = None) -> str:
    """`text` with URL user info masked and every secret value of `secrets` (a settings map)
    replaced by the mask: for messages that quote what a library said about those settings."""
    out = redact_urls_in(text)
    for key, value in (secrets or {}).items():
        if is_secret_key(key) and isinstance(value, str) and len(value) >= 3:
            out = out.replace(value, MASK)
    return out


def redacted_repr(obj: Any) -> str:
    """`ClassName(field=value, ...)` of a dataclass, with secret fields and secrets inside maps
    and URLs masked: the `__repr__` of every object that holds settings."""
    shown = []
    for f in dataclasses.fields(obj):
        if not f.repr:
            continue
        value = getattr(obj, f.name)
        if is_secret_key(f.name) and value is not None:
            value = MASK
        elif isinstance(value, str):
            value = redact_url(value)
        else:
            value = _redact_any(value)
        shown.append(f"{f.name}={value!r}")
    return f"{type(obj).__name__}({', '.join(shown)})"
