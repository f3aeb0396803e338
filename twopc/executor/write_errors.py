"""The errors a task's write can end with: each says whether anything of the task is visible (never:
the transaction was aborted, or it was never this task's to end) and what to change.

Apart from the writer so that a caller (a Spark task, a test, an operator's tool) can tell them
apart without importing the producer.

Design: docs/design.md section 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from twopc.control import TransactionDescription


class WriteError(Exception):
    """Base class of the writer's errors: the task failed and its transaction is not committed."""


class RowError(WriteError):
    """A row that cannot be sent. The transaction was aborted: nothing of the task is visible."""

    def __init__(self, index: int, key: object, reason: str) -> None:
        self.index = index
        self.key = key
        self.reason = reason
        super().__init__(f"row {index} (key {describe_key(key)}) cannot be written: {reason}")


def describe_key(key: object) -> str:
    if key is None:
        return "None"
    text = repr(key)
    return text if len(text) <= 80 else text[:77] + "..."


class WriterConfigError(WriteError):
    """The producer configuration or the arguments contradict what the writer needs."""


class BrokerSecurityError(WriterConfigError):
    """The producer could not connect securely: the TLS handshake or the SASL authentication with
    the brokers failed. Nothing was written; the message names the setting to change."""


class DeliveryError(WriteError):
    """A record's delivery failed: the transaction was aborted, nothing of the task is visible."""

    def __init__(self, index: int | None, key: object, topic: str | None,
                 partition: int | None, reason: str, failed: int) -> None:
        self.index = index
        self.key = key
        self.topic = topic
        self.partition = partition
        self.reason = reason
        self.failed = failed
        row = f"row {index}" if index is not None else "a row"
        super().__init__(
            f"delivery of {row} (key {describe_key(key)}) to {topic} [{partition}] failed: "
            f"{reason} ({failed} record(s) failed in all). The transaction was aborted: nothing "
            "of this task is visible")


class TransactionBudgetExceeded(WriteError):
    """The transaction would outlive its budget: aborted before the coordinator times it out."""


class ProducerError(WriteError):
    """The producer failed outside any single row (start, flush); the transaction was aborted."""


class SpanError(WriteError):
    """A partition leader could not say what the transaction wrote there; it was aborted."""


class EpochWithoutHeadroom(WriteError):
    """The transaction's epoch is too near the end of its producer id's epochs for a release of a
    commit whose markers a broker dropped (docs/design.md section 8): it was aborted, not
    pre-committed. The task fails; its retry finds the id near the end and rotates it first."""

    def __init__(self, transactional_id: str, producer_id: int, epoch: int, highest: int) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.epoch = epoch
        super().__init__(
            f"transactional id {transactional_id!r}: the transaction has producer id "
            f"{producer_id} epoch {epoch}, above {highest}, the highest a pre-committed "
            "transaction may have (the epochs above are kept for releasing a commit whose "
            "markers a broker dropped); another process moved the id after the writer checked "
            "it. The transaction was aborted; nothing of this task is visible, and Spark's "
            "retry rotates the id's producer id first")


class IdentificationError(WriteError):
    """The producer's own view of its transaction could not be read (no statistics sample)."""


class ZombieDetected(WriteError):
    """The producer's view and the coordinator's view of the transaction disagree.

    Another process holds the transactional id (a zombie attempt that re-initialized it), or the
    coordinator already ended the transaction. The task fails; its transaction is neither
    committed nor aborted by this process.
    """

    def __init__(self, transactional_id: str, producer_view: str,
                 coordinator: TransactionDescription) -> None:
        self.transactional_id = transactional_id
        self.producer_view = producer_view
        self.coordinator = coordinator
        super().__init__(
            f"transactional id {transactional_id!r}: the producer says {producer_view}, the "
            f"coordinator says {coordinator.state.value} with producer id "
            f"{coordinator.producer_id} epoch {coordinator.producer_epoch} and partitions "
            f"{list(coordinator.partitions)[:8]}. Another process holds this id (a zombie task "
            "attempt) or the transaction already ended; this task fails and commits nothing. "
            "Spark retries it; if this repeats, check for duplicate or speculative attempts")
