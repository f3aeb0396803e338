"""What the coordinator said, as typed values, and the pure mapping from EndTxn answers to outcomes.

The client never reports a transaction as lost: every answer that does not prove the outcome is
UNCONFIRMED, to be settled by the log check (docs/design.md sections 3 and 4).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from twopc.control import errors as e


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    DEAD = "Dead"
    UNKNOWN_ID = "UnknownId"  # the coordinator has no such transactional id

    @classmethod
    def parse(cls, wire: str) -> TxnState:
        try:
            return cls(wire)
        except ValueError:
            raise e.ProtocolError(f"unknown transaction state {wire!r} from the broker") from None

    @property
    def committing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)

    @property
    def aborting(self) -> bool:
        return self in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: TxnState
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    partitions: tuple[tuple[str, int], ...]
    error_code: int = 0
    coordinator_id: int = -1

    def holds(self, producer_id: int, epoch: int) -> bool:
        return self.producer_id == producer_id and self.producer_epoch == epoch


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: TxnState
    coordinator_id: int


@dataclass(frozen=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    epoch: int
    commit: bool


class OutcomeKind(enum.Enum):
    COMMITTED = "committed"
    ALREADY_COMMITTED = "already_committed"
    ABORTED = "aborted"
    ALREADY_ABORTED = "already_aborted"
    UNCONFIRMED = "unconfirmed"
    UNKNOWN_ID = "unknown_id"
    PRODUCER_ID_CHANGED = "producer_id_changed"
    NOT_AUTHORIZED = "not_authorized"
    INVALID_STATE = "invalid_state"


@dataclass(frozen=True)
class EndTxnOutcome:
    transactional_id: str
    kind: OutcomeKind
    error: str | None = None  # the broker's error name behind the outcome, if any
    detail: str = ""

    @property
    def committed(self) -> bool:
        return self.kind in (OutcomeKind.COMMITTED, OutcomeKind.ALREADY_COMMITTED)

    @property
    def aborted(self) -> bool:
        return self.kind in (OutcomeKind.ABORTED, OutcomeKind.ALREADY_ABORTED)


@dataclass(frozen=True)
class FenceResult:
    transactional_id: str
    producer_id: int
    epoch: int
    error: str | None = None

    @property
    def fenced(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ReleaseResult:
    """What `ControlClient.release_stranded` did: InitProducerId gave (`producer_id`, `epoch`),
    AddPartitionsToTxn named `partitions`, EndTxn committed. `error` names the broker answer of
    the step (`step`) that stopped it; None when the markers-only commit was acknowledged."""

    transactional_id: str
    producer_id: int
    epoch: int
    partitions: tuple[tuple[str, int], ...]
    error: str | None = None
    step: str = ""  # "init_producer_id", "add_partitions", "end_txn" when error is set

    @property
    def released(self) -> bool:
        return self.error is None


def classify_end_txn(req: EndTxnRequest, code: int,
                     prior: TransactionDescription | None) -> EndTxnOutcome:
    """The outcome of one EndTxn answer `code`; `prior` is the coordinator's view of the id just
    before the request (None if not asked), used only to tell a retry ("already ...") apart."""
    name = e.error_name(code)
    tid = req.transactional_id
    ours = prior is not None and prior.holds(req.producer_id, req.epoch)
    if code == e.NONE:
        if req.commit:
            kind = OutcomeKind.ALREADY_COMMITTED if ours and prior and prior.state.committing \
                else OutcomeKind.COMMITTED
        else:
            kind = OutcomeKind.ALREADY_ABORTED if ours and prior and prior.state.aborting \
                else OutcomeKind.ABORTED
        return EndTxnOutcome(tid, kind)
    if code == e.ERROR_CODES["INVALID_TXN_STATE"]:
        # The coordinator proves the other ending only while it still holds our producer id and
        # epoch in a completed state; anything else (e.g. Empty: no partition was ever added).
        if ours and prior and prior.state.aborting and req.commit:
            return EndTxnOutcome(tid, OutcomeKind.ALREADY_ABORTED, name)
        if ours and prior and prior.state.committing and not req.commit:
            return EndTxnOutcome(tid, OutcomeKind.ALREADY_COMMITTED, name)
        state = prior.state.value if prior else "not described"
        return EndTxnOutcome(tid, OutcomeKind.INVALID_STATE, name, f"coordinator state {state}")
    if code == e.ERROR_CODES["INVALID_PRODUCER_ID_MAPPING"]:
        if prior is not None and prior.state is TxnState.UNKNOWN_ID:
            return EndTxnOutcome(tid, OutcomeKind.UNKNOWN_ID, name)
        return EndTxnOutcome(tid, OutcomeKind.PRODUCER_ID_CHANGED, name)
    if code == e.ERROR_CODES["TRANSACTIONAL_ID_NOT_FOUND"]:
        return EndTxnOutcome(tid, OutcomeKind.UNKNOWN_ID, name)
    if code in e.AUTHORIZATION:
        return EndTxnOutcome(tid, OutcomeKind.NOT_AUTHORIZED, name,
                             "the principal needs WRITE on the transactional id")
    # PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE, exhausted retries, and
    # anything new: the transaction may have committed or aborted; only the log can tell.
    return EndTxnOutcome(tid, OutcomeKind.UNCONFIRMED, name,
                         "settle with the log check at the transaction's first offset")
