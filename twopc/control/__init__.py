"""twopc's control client: a small Kafka wire-protocol client that finishes, inspects and fences
transactions other processes opened (the data path stays on confluent-kafka).

Design: docs/design.md section 3.
"""

from twopc.control.client import BrokerVersionHint, ControlClient
from twopc.control.errors import (
    AuthenticationError,
    BrokerConnectionError,
    ConfigError,
    ControlError,
    KafkaApiError,
    NotAuthorizedError,
    ProtocolError,
    RetriesExhaustedError,
    TlsError,
    UnsupportedBrokerError,
)
from twopc.control.logcheck import (
    FetchProbe,
    LogCheckRequest,
    LogCheckResult,
    LogOutcome,
    UnknownReason,
)
from twopc.control.outcomes import (
    EndTxnOutcome,
    EndTxnRequest,
    FenceResult,
    OutcomeKind,
    ReleaseResult,
    TransactionDescription,
    TransactionListing,
    TxnState,
)
from twopc.control.readback import Ending, ReadProblem, SpanRecords
from twopc.control.record_batches import BatchHeader
from twopc.control.record_decode import Record

__all__ = [
    "AuthenticationError",
    "BatchHeader",
    "BrokerConnectionError",
    "BrokerVersionHint",
    "ConfigError",
    "ControlClient",
    "ControlError",
    "EndTxnOutcome",
    "EndTxnRequest",
    "Ending",
    "FenceResult",
    "FetchProbe",
    "KafkaApiError",
    "LogCheckRequest",
    "LogCheckResult",
    "LogOutcome",
    "NotAuthorizedError",
    "OutcomeKind",
    "ProtocolError",
    "ReadProblem",
    "Record",
    "ReleaseResult",
    "RetriesExhaustedError",
    "SpanRecords",
    "TlsError",
    "TransactionDescription",
    "TransactionListing",
    "TxnState",
    "UnknownReason",
    "UnsupportedBrokerError",
]
