"""A broker with TLS and SASL listeners for the tests, and the client settings for each listener.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from twopc.broker import VARIANTS, LocalKafka, OAuthListener

if TYPE_CHECKING:
    pass


TLS_USER, TLS_PASSWORD = "alice", "alice-secret"


def start_secured_kafka(variant: str) -> LocalKafka:
    """A broker of `variant` with TLS and SASL listeners (certificates made now, user alice)."""
    if variant not in VARIANTS:
        raise RuntimeError(f"a TLS broker must be one of ours (a variant of {sorted(VARIANTS)}); "
                           f"{variant} is not: unset TWOPC_BOOTSTRAP_SERVERS / TWOPC_BROKER")
    spec = dataclasses.replace(VARIANTS[variant], tls=True, sasl_users={TLS_USER: TLS_PASSWORD})
    return LocalKafka(spec).start()


def secured_configs(kafka: LocalKafka) -> dict[str, dict[str, str]]:
    """Client settings (librdkafka names) for each secured listener of `kafka`: `SSL` (mutual TLS,
    the client key encrypted) and `SASL_SSL` (SCRAM-SHA-512 over TLS)."""
    assert kafka.tls is not None, "the broker has no TLS listeners (BrokerSpec(tls=True))"
    return {
        "SSL": {"bootstrap.servers": kafka.ssl_bootstrap_servers, "security.protocol": "SSL",
                **kafka.tls.client_config(mutual=True)},
        "SASL_SSL": {"bootstrap.servers": kafka.sasl_ssl_bootstrap_servers,
                     "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                     "sasl.username": TLS_USER, "sasl.password": TLS_PASSWORD,
                     **kafka.tls.client_config()},
    }



def start_oauth_kafka(variant: str, jwks_url: str | None, *, audience: str | None = None,
                      issuer: str | None = None, max_reauth_ms: int | None = None,
                      tls: bool = False, users: bool = False) -> LocalKafka:
    """A broker of `variant` whose SASL listener(s) take OAUTHBEARER: JWTs checked against
    `jwks_url` (None: Kafka's unsecured validator, unsigned tokens). With `tls`, a SASL_SSL listener
    too, which takes unsigned tokens (OAuthListener.unsecured_over_tls); with `users`, PLAIN and
    SCRAM for user alice as well. `max_reauth_ms` bounds the SASL_PLAINTEXT listener's sessions,
    every mechanism's (connections.max.reauth.ms, KIP-368)."""
    if variant not in VARIANTS:
        raise RuntimeError(f"an OAuth broker must be one of ours (a variant of {sorted(VARIANTS)}); "
                           f"{variant} is not: unset TWOPC_BOOTSTRAP_SERVERS / TWOPC_BROKER")
    oauth = OAuthListener(jwks_url, audience, issuer, unsecured_over_tls=tls)
    spec = dataclasses.replace(VARIANTS[variant], oauth=oauth, tls=tls,
                               sasl_users={TLS_USER: TLS_PASSWORD} if users else {},
                               sasl_max_reauth_ms=max_reauth_ms)
    return LocalKafka(spec).start()


def oauth_config(kafka: LocalKafka, **settings: str) -> dict[str, str]:
    """Client settings (librdkafka names) for the SASL_PLAINTEXT listener with OAUTHBEARER;
    `settings` name the token source (twopc.oauth.token.provider, sasl.oauthbearer.method...)."""
    return {"bootstrap.servers": kafka.sasl_bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER", **settings}
