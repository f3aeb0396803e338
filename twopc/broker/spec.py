"""What broker to run: Kafka release, transaction version, listeners, and the named test variants.

Design: docs/design.md section 7.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_KAFKA_VERSION = "4.3.1"
KAFKA3_VERSION = "3.9.2"


@dataclass(frozen=True)
class OAuthListener:
    """SASL/OAUTHBEARER on the SASL listeners (KIP-768 validation of JWTs).

    With `jwks_url`, Kafka's `OAuthBearerValidatorCallbackHandler` checks each token's signature
    against the keys published there (and `aud`/`iss` when `audience`/`issuer` are given); without
    it, Kafka's unsecured-JWS validator accepts unsigned (`alg: none`) tokens: tests only. With
    `unsecured_over_tls` the SASL_SSL listener takes unsigned tokens while the SASL_PLAINTEXT one
    checks them against `jwks_url` (one broker serves the tests of both). A session ends when its
    token expires (KIP-368), or sooner with BrokerSpec.sasl_max_reauth_ms.
    """

    jwks_url: str | None = None
    audience: str | None = None
    issuer: str | None = None
    unsecured_over_tls: bool = False


@dataclass(frozen=True)
class BrokerSpec:
    """A single-node or small KRaft cluster of real Apache Kafka brokers.

    `transaction_version` selects the transaction protocol the cluster runs (KIP-890): 2 is the
    default of a new 4.x cluster; 0 keeps the old protocol; 3.x brokers only have 0.
    """

    kafka_version: str = DEFAULT_KAFKA_VERSION
    transaction_version: int | None = None
    brokers: int = 1
    heap_mb: int = 512
    # Short sweeps so that timed-out transactions are aborted within about a second in tests.
    abort_sweep_ms: int = 1000
    # user -> password; adds a SASL_PLAINTEXT listener offering PLAIN and SCRAM-SHA-256/512.
    sasl_users: Mapping[str, str] = field(default_factory=dict)
    # Adds an SSL listener (client certificate required) and, with sasl_users, a SASL_SSL one;
    # the CA and certificates are made at start (twopc/broker/tls.py, needs `cryptography`).
    tls: bool = False
    # Adds OAUTHBEARER to the SASL listeners (a SASL_PLAINTEXT listener even without sasl_users).
    oauth: OAuthListener | None = None
    # connections.max.reauth.ms of the SASL_PLAINTEXT listener, for every mechanism (KIP-368):
    # its clients must re-authenticate their connections within it, or the broker closes them.
    # The SASL_SSL listener keeps Kafka's default (sessions unbounded but by a token's expiry).
    sasl_max_reauth_ms: int | None = None
    extra_properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def has_sasl(self) -> bool:
        return bool(self.sasl_users) or self.oauth is not None

    @property
    def major(self) -> int:
        return int(self.kafka_version.split(".")[0])

    def effective_transaction_version(self) -> int:
        if self.transaction_version is not None:
            return self.transaction_version
        return 2 if self.major >= 4 else 0

    def validate(self) -> None:
        from twopc.broker.errors import BrokerSetupError

        tv = self.effective_transaction_version()
        if tv not in (0, 2):
            raise BrokerSetupError(f"transaction version must be 0 or 2, not {tv}")
        if tv == 2 and self.major < 4:
            raise BrokerSetupError(
                f"Kafka {self.kafka_version} has no transaction version 2 (it came with 4.0): "
                "use --transaction-version 0 or a 4.x release"
            )
        if self.brokers < 1:
            raise BrokerSetupError("a cluster needs at least one broker")


# The named broker variants. The test matrix runs MATRIX_VARIANTS, one after another (two cores:
# never at once); `kafka4-3node` is a replicated cluster as users run it (3 brokers and a dedicated
# controller, replication 3, min.insync.replicas=2), for the tests that kill one broker of it and the
# torture suite (`--variant kafka4-3node`). Its heaps are small: four JVMs share two cores.
VARIANTS: dict[str, BrokerSpec] = {
    "kafka4-tv2": BrokerSpec(DEFAULT_KAFKA_VERSION, 2),
    "kafka4-tv0": BrokerSpec(DEFAULT_KAFKA_VERSION, 0),
    "kafka3.9": BrokerSpec(KAFKA3_VERSION, 0),
    "kafka4-3node": BrokerSpec(DEFAULT_KAFKA_VERSION, 2, brokers=3, heap_mb=320,
                               extra_properties={"min.insync.replicas": "2"}),
}
MATRIX_VARIANTS: tuple[str, ...] = ("kafka4-tv2", "kafka4-tv0", "kafka3.9")
REPLICATED_VARIANT = "kafka4-3node"
DEFAULT_VARIANT = "kafka4-tv2"
