"""The embedded Kafka broker: a real Apache Kafka cluster from Maven Central, for demo, tests, benchmarks.

Design: docs/design.md section 7.
"""

from twopc.broker.cluster import LocalKafka, free_port
from twopc.broker.errors import BrokerError, BrokerSetupError, BrokerStartError
from twopc.broker.spec import (
    DEFAULT_VARIANT,
    MATRIX_VARIANTS,
    REPLICATED_VARIANT,
    VARIANTS,
    BrokerSpec,
    OAuthListener,
)

__all__ = [
    "DEFAULT_VARIANT",
    "MATRIX_VARIANTS",
    "REPLICATED_VARIANT",
    "VARIANTS",
    "BrokerError",
    "BrokerSetupError",
    "BrokerSpec",
    "BrokerStartError",
    "LocalKafka",
    "OAuthListener",
    "free_port",
]
