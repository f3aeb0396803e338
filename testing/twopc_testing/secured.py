"""A broker with TLS and SASL listeners for the tests, and the client settings for each listener.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from twopc.broker import VARIANTS, LocalKafka

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

