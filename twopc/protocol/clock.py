"""Guards against the timeout-versus-commit data loss (docs/design.md section 4, guards 1 and 3).

The check before the intent is pure (handles, the coordinator's answers, a clock reading); the
start-time checks ask the cluster and raise UnsupportedBroker with what to change.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from twopc.control import TransactionDescription, TxnState
from twopc.protocol.handle import Handle

_log = logging.getLogger(__name__)


# A writer's reading beyond what its coordinator allows by less than this is rounding or clock
# jitter, not worth a warning (the bound applies all the same).
CLOCK_TOLERANCE_MS = 1000
# Time a transaction must have left at the intent, unless twopc.commitMarginMs says otherwise.
DEFAULT_MARGIN_MS = 5000


@dataclass(frozen=True)
class ClockEstimate:
    """The guard's estimate of the coordinators' clock, and what it rests on."""

    coordinator_now_ms: int
    skew_ms: int  # added to the driver's clock
    evidence: tuple[str, ...] = ()  # what set the skew, naming the executors
    ahead: tuple[str, ...] = ()  # executors whose clock is proven ahead of their coordinator's


def latest_coordinator_reading(h: Handle) -> int:
    """The latest the coordinator's clock can have read when the writer read its own clock.

    The coordinator started the transaction at `start_ms` (its clock); the writer read its clock at
    most `writer_elapsed_ms` later, measured on its monotonic clock from before the transaction
    began. A handle of an older writer lacks that figure: the transaction was Ongoing when read, so
    it had run for less than its timeout (give or take the coordinator's abort sweep)."""
    elapsed = h.writer_elapsed_ms if h.writer_elapsed_ms is not None else h.timeout_ms
    return h.start_ms + elapsed


def _executor(h: Handle) -> str:
    return f"executor host {h.writer_host!r}" if h.writer_host else "an executor (host not recorded)"


def estimate_clock(handles: Sequence[Handle], now_ms: int) -> ClockEstimate:
    """The coordinators' clock now, estimated from the driver's (`now_ms`) and the handles.

    Evidence only ever moves the estimate later (less time left):
    - a writer's reading, taken after its transaction started, stands for the coordinator's clock
      at that moment, so a reading ahead of the driver's clock shows the driver's clock is behind.
      It stands for the coordinator's clock only up to `latest_coordinator_reading`: the
      coordinator cannot have read later than that. A reading beyond it proves that the executor's
      clock runs ahead of the coordinator's (by at least the excess), tells nothing more about the
      coordinator, and is named in `ahead`. Without this bound one executor ahead by more than the
      timeout minus the margin would leave every batch without time, for good. With it, such a
      reading weighs as much as that of an executor whose clock agreed with the coordinator's at
      the latest moment possible: the most any reading can show of the coordinator's clock, so the
      guard keeps all the protection the evidence gives against the real timeout (the
      coordinator's start time plus the timeout, on the coordinator's own clock);
    - a coordinator start time after a writer's reading shows the coordinator's clock is ahead of
      the writer's by at least the difference. It is taken as ahead of the driver's too: a writer
      whose clock is behind both looks the same as a coordinator ahead of both, so the guard errs
      on the safe side, and its reason names the executor.
    What no evidence shows (a coordinator ahead by less than the writing took) the margin covers.
    """
    if not handles:
        return ClockEstimate(now_ms, 0)
    reading, by_reading = max(((min(h.writer_clock_ms, latest_coordinator_reading(h)), h)
                               for h in handles), key=lambda pair: pair[0])
    lead, by_lead = max(((h.start_ms - h.writer_clock_ms, h) for h in handles),
                        key=lambda pair: pair[0])
    driver_behind, coordinator_ahead = max(0, reading - now_ms), max(0, lead)
    evidence: list[str] = []
    if driver_behind:
        evidence.append(f"the clock of {_executor(by_reading)} read {driver_behind} ms ahead of "
                        f"the driver's ({by_reading.transactional_id})")
    if coordinator_ahead:
        evidence.append(f"the coordinator started {by_lead.transactional_id} {coordinator_ahead} "
                        f"ms after the clock of {_executor(by_lead)} read that time: that clock "
                        "is behind the coordinator's, or the coordinator's is ahead of the driver's")
    ahead = tuple(
        f"the clock of {_executor(h)} runs at least {excess} ms ahead of the transaction "
        f"coordinator's (transactional id {h.transactional_id}: its writer read {h.writer_clock_ms} "
        f"ms, at most {latest_coordinator_reading(h) - h.start_ms} ms after the coordinator started "
        f"the transaction at {h.start_ms} ms); its reading is not taken for the coordinator's "
        "clock. Synchronize that host's clock (NTP)"
        for h in handles
        if (excess := h.writer_clock_ms - latest_coordinator_reading(h)) > CLOCK_TOLERANCE_MS)
    skew = driver_behind + coordinator_ahead
    return ClockEstimate(now_ms + skew, skew, tuple(evidence), ahead)


def coordinator_now(handles: Sequence[Handle], now_ms: int) -> tuple[int, int]:
    """(an estimate of the coordinators' clock now, the skew it adds): see estimate_clock."""
    est = estimate_clock(handles, now_ms)
    return est.coordinator_now_ms, est.skew_ms


def warn_clock_outliers(handles: Sequence[Handle], now_ms: int) -> None:
    """Log (WARNING) each executor whose clock is proven ahead of its coordinator's."""
    for line in estimate_clock(handles, now_ms).ahead:
        _log.warning("twopc: %s", line)


def check_before_intent(handles: Sequence[Handle],
                        described: Mapping[str, TransactionDescription],
                        now_ms: int, margin_ms: int) -> dict[str, str]:
    """Reasons, per transactional id, why a handle must not be committed (empty: all may)."""
    clock = estimate_clock(handles, now_ms)
    coord_now, skew = clock.coordinator_now_ms, clock.skew_ms
    skew_note = f"estimated clock skew {skew} ms"
    if clock.evidence:
        skew_note += (": " + "; ".join(clock.evidence) + ". If an executor's clock is wrong, "
                      "synchronize it (NTP)")
    failed: dict[str, str] = {}
    for h in handles:
        d = described.get(h.transactional_id)
        if d is None or d.state is TxnState.UNKNOWN_ID:
            failed[h.transactional_id] = "the coordinator does not know the transactional id"
        elif not d.holds(h.producer_id, h.epoch):
            failed[h.transactional_id] = (
                f"held by producer id {d.producer_id} epoch {d.producer_epoch} ({d.state.value}), "
                f"not the recorded {h.producer_id}/{h.epoch}: another process used the id "
                "(a zombie attempt) or the coordinator aborted it")
        elif d.state is not TxnState.ONGOING:
            failed[h.transactional_id] = f"state {d.state.value}, not Ongoing"
        else:
            start = d.start_ms if d.start_ms > 0 else h.start_ms
            timeout = d.timeout_ms if d.timeout_ms > 0 else h.timeout_ms
            left = start + timeout - coord_now
            if left <= margin_ms:
                failed[h.transactional_id] = (
                    f"{left} ms left before transaction.timeout.ms ({timeout} ms) runs out, not "
                    f"above the margin of {margin_ms} ms ({skew_note})")
    return failed


# ---- at start ------------------------------------------------------------------------------------


