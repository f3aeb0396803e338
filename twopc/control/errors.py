"""Kafka error codes, their classification, and the typed exceptions of the control client.

Pure: no I/O. The code table follows the protocol guide's error list; codes this table does not know
are still reported, by number.

Design: docs/design.md section 3.
"""

from __future__ import annotations

_NAMES = (  # noqa: SIM905
    "NONE OFFSET_OUT_OF_RANGE CORRUPT_MESSAGE UNKNOWN_TOPIC_OR_PARTITION INVALID_FETCH_SIZE "
    "LEADER_NOT_AVAILABLE NOT_LEADER_OR_FOLLOWER REQUEST_TIMED_OUT BROKER_NOT_AVAILABLE "
    "REPLICA_NOT_AVAILABLE MESSAGE_TOO_LARGE STALE_CONTROLLER_EPOCH OFFSET_METADATA_TOO_LARGE "
    "NETWORK_EXCEPTION COORDINATOR_LOAD_IN_PROGRESS COORDINATOR_NOT_AVAILABLE NOT_COORDINATOR "
    "INVALID_TOPIC_EXCEPTION RECORD_LIST_TOO_LARGE NOT_ENOUGH_REPLICAS "
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND INVALID_REQUIRED_ACKS ILLEGAL_GENERATION "
    "INCONSISTENT_GROUP_PROTOCOL INVALID_GROUP_ID UNKNOWN_MEMBER_ID INVALID_SESSION_TIMEOUT "
    "REBALANCE_IN_PROGRESS INVALID_COMMIT_OFFSET_SIZE TOPIC_AUTHORIZATION_FAILED "
    "GROUP_AUTHORIZATION_FAILED CLUSTER_AUTHORIZATION_FAILED INVALID_TIMESTAMP "
    "UNSUPPORTED_SASL_MECHANISM ILLEGAL_SASL_STATE UNSUPPORTED_VERSION TOPIC_ALREADY_EXISTS "
    "INVALID_PARTITIONS INVALID_REPLICATION_FACTOR INVALID_REPLICA_ASSIGNMENT INVALID_CONFIG "
    "NOT_CONTROLLER INVALID_REQUEST UNSUPPORTED_FOR_MESSAGE_FORMAT POLICY_VIOLATION "
    "OUT_OF_ORDER_SEQUENCE_NUMBER DUPLICATE_SEQUENCE_NUMBER INVALID_PRODUCER_EPOCH "
    "INVALID_TXN_STATE INVALID_PRODUCER_ID_MAPPING INVALID_TRANSACTION_TIMEOUT "
    "CONCURRENT_TRANSACTIONS TRANSACTION_COORDINATOR_FENCED TRANSACTIONAL_ID_AUTHORIZATION_FAILED "
    "SECURITY_DISABLED OPERATION_NOT_ATTEMPTED KAFKA_STORAGE_ERROR LOG_DIR_NOT_FOUND "
    "SASL_AUTHENTICATION_FAILED UNKNOWN_PRODUCER_ID REASSIGNMENT_IN_PROGRESS "
    "DELEGATION_TOKEN_AUTH_DISABLED DELEGATION_TOKEN_NOT_FOUND DELEGATION_TOKEN_OWNER_MISMATCH "
    "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED DELEGATION_TOKEN_AUTHORIZATION_FAILED "
    "DELEGATION_TOKEN_EXPIRED INVALID_PRINCIPAL_TYPE NON_EMPTY_GROUP GROUP_ID_NOT_FOUND "
    "FETCH_SESSION_ID_NOT_FOUND INVALID_FETCH_SESSION_EPOCH LISTENER_NOT_FOUND "
    "TOPIC_DELETION_DISABLED FENCED_LEADER_EPOCH UNKNOWN_LEADER_EPOCH UNSUPPORTED_COMPRESSION_TYPE "
    "STALE_BROKER_EPOCH OFFSET_NOT_AVAILABLE MEMBER_ID_REQUIRED PREFERRED_LEADER_NOT_AVAILABLE "
    "GROUP_MAX_SIZE_REACHED FENCED_INSTANCE_ID ELIGIBLE_LEADERS_NOT_AVAILABLE ELECTION_NOT_NEEDED "
    "NO_REASSIGNMENT_IN_PROGRESS GROUP_SUBSCRIBED_TO_TOPIC INVALID_RECORD UNSTABLE_OFFSET_COMMIT "
    "THROTTLING_QUOTA_EXCEEDED PRODUCER_FENCED RESOURCE_NOT_FOUND DUPLICATE_RESOURCE "
    "UNACCEPTABLE_CREDENTIAL INCONSISTENT_VOTER_SET INVALID_UPDATE_VERSION FEATURE_UPDATE_FAILED "
    "PRINCIPAL_DESERIALIZATION_FAILURE SNAPSHOT_NOT_FOUND POSITION_OUT_OF_RANGE UNKNOWN_TOPIC_ID "
    "DUPLICATE_BROKER_REGISTRATION BROKER_ID_NOT_REGISTERED INCONSISTENT_TOPIC_ID "
    "INCONSISTENT_CLUSTER_ID TRANSACTIONAL_ID_NOT_FOUND FETCH_SESSION_TOPIC_ID_ERROR "
    "INELIGIBLE_REPLICA NEW_LEADER_ELECTED OFFSET_MOVED_TO_TIERED_STORAGE FENCED_MEMBER_EPOCH "
    "UNRELEASED_INSTANCE_ID UNSUPPORTED_ASSIGNOR STALE_MEMBER_EPOCH MISMATCHED_ENDPOINT_TYPE "
    "UNSUPPORTED_ENDPOINT_TYPE UNKNOWN_CONTROLLER_ID UNKNOWN_SUBSCRIPTION_ID TELEMETRY_TOO_LARGE "
    "INVALID_REGISTRATION TRANSACTION_ABORTABLE"
).split()

ERROR_NAMES: dict[int, str] = {-1: "UNKNOWN_SERVER_ERROR", **dict(enumerate(_NAMES))}
ERROR_CODES: dict[str, int] = {name: code for code, name in ERROR_NAMES.items()}

NONE = 0


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"UNKNOWN_ERROR_{code}")


# The coordinator moved, is loading its partition, or is not elected yet: find it again and retry.
COORDINATOR_RETRIABLE = frozenset(
    ERROR_CODES[n] for n in ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS",
                             "COORDINATOR_NOT_AVAILABLE"))
# Same coordinator, try again shortly: a commit or abort of this id is still being written, or the
# request timed out on the broker side.
RETRY_SAME = frozenset(
    ERROR_CODES[n] for n in ("CONCURRENT_TRANSACTIONS", "REQUEST_TIMED_OUT", "NETWORK_EXCEPTION"))
# A partition leader moved: refresh metadata and retry the fetch.
LEADER_RETRIABLE = frozenset(
    ERROR_CODES[n] for n in ("NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE",
                             "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "REPLICA_NOT_AVAILABLE",
                             "KAFKA_STORAGE_ERROR"))
AUTHORIZATION = frozenset(
    ERROR_CODES[n] for n in ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED",
                             "CLUSTER_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"))


def is_retriable(code: int) -> bool:
    return code in COORDINATOR_RETRIABLE or code in RETRY_SAME or code in LEADER_RETRIABLE


class ControlError(Exception):
    """Base of every error the control client raises."""


class ConfigError(ControlError):
    """The client configuration is invalid or names something this client does not support."""


class ProtocolError(ControlError):
    """A response could not be decoded: truncated, malformed, or not what the request asked for."""


class BrokerConnectionError(ControlError):
    """A broker could not be reached, or the connection broke before its answer arrived."""


class AuthenticationError(ControlError):
    """SASL or SSL authentication with a broker failed (credentials, mechanism, certificate)."""


class TlsError(AuthenticationError):
    """The TLS handshake with a broker failed: its certificate is not signed by a trusted CA, does
    not name the broker's address, or the broker wants a client certificate. The message, and
    `advice` alone, name the ssl.* setting to change."""

    def __init__(self, message: str, advice: str = "") -> None:
        super().__init__(message)
        self.advice = advice


class UnsupportedBrokerError(ControlError):
    """The broker is too old or lacks an API this client needs."""


class KafkaApiError(ControlError):
    """A broker answered with an error code that the caller has to act on."""

    def __init__(self, code: int, context: str, message: str | None = None) -> None:
        self.code = code
        self.name = error_name(code)
        self.context = context
        detail = f": {message}" if message else ""
        super().__init__(f"{context}: broker answered {self.name} ({code}){detail}")

    @property
    def retriable(self) -> bool:
        return is_retriable(self.code)


class NotAuthorizedError(KafkaApiError):
    """The principal lacks an ACL the request needs (e.g. WRITE on the transactional id)."""


class RetriesExhaustedError(KafkaApiError):
    """A retriable error persisted past the client's retry budget."""


def api_error(code: int, context: str, message: str | None = None) -> KafkaApiError:
    if code in AUTHORIZATION:
        return NotAuthorizedError(code, context, message)
    return KafkaApiError(code, context, message)
