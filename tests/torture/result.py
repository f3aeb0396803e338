"""What one torture schedule did and how it ended: the unit the long run's report adds up.

Both workloads (the core protocol driven by subprocesses, and Spark jobs) return a ScheduleResult, so
that one report counts faults and outcomes across them."""

from __future__ import annotations

import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Every fault the suite injects. The long run must inject each at least 10 times.
FAULT_KINDS: tuple[str, ...] = (
    "driver_kill",             # SIGKILL of the driver at a named crash point (coordinator/recovery)
    "task_failure",            # SIGKILL of a writer/task after it wrote (at a writer crash point)
    "broker_kill",             # SIGKILL of the broker and restart, outside a commit phase
    "broker_kill_mid_commit",  # SIGKILL of the broker while a commit phase is running
    "storage_failure",         # the checkpoint storage raises on a read or write
    "storage_slow",            # the checkpoint storage answers slowly
    "pause_past_timeout",      # the driver stops for longer than the transaction timeout
    "two_drivers",             # a second driver started on the same checkpoint
    # The control client's requests (twopc/control/faults.py), per API and transactional id:
    "request_lost",            # a request dropped before it is sent (once, or every retry)
    "answer_lost",             # the broker acted, its answer is dropped (once, or every retry)
    "request_delayed",         # an EndTxn held back past its transaction's timeout
    "expire_in_waves",         # a batch's transactions written in waves, the earliest expire
    "outside_abort",           # an operator fences an open or held id from another process
    "leader_down_during_check",  # a partition leader killed while the marker check is paused
)
# Faults only a replicated cluster can take (one broker of several killed, the others lead on).
REPLICATED_ONLY_FAULTS: tuple[str, ...] = ("leader_down_during_check",)

# Every way a batch can end. The long run must reach each at least once.
OUTCOME_KINDS: tuple[str, ...] = (
    "committed",               # committed by the first driver, no recovery needed
    "rolled_forward",          # an intent found open by recovery and committed with its epoch
    "recognised_committed",    # found committed by the log check, not written again
    "rewritten",               # lost whole (aborted or timed out) and written again
    "repaired",                # partly committed; the re-run proved identical by checksum
    "data_loss_raised",        # partly committed; the re-run differed; DataLossError raised
    "resolved_by_operator",    # an explicit, recorded operator resolution after DataLossError
    "fenced",                  # a losing driver or zombie stopped by the log or by a fence
    "loss_acknowledged",       # committed records proven aborted (StrandedCommitAborted),
                               # then an operator's `twopc recover --acknowledge-loss`
    "copied_forward",          # decided, aborted by the broker, committed from the log's copy
)
# Reached only by schedules run with copy-forward and a non-replayable source (the long run's odd
# seeds), where the re-run's DataLossError and the operator's resolution are never reached.
COPY_ONLY_OUTCOMES: tuple[str, ...] = ("copied_forward",)
# Outcomes that need a commit whose markers the broker dropped: a single broker drops them when
# it is killed with markers pending (tests/broker/test_restart_mid_commit.py); a replicated cluster
# always has a leader to send them to.
STRANDED_OUTCOMES: tuple[str, ...] = ("loss_acknowledged",)

# What the report counts besides faults and outcomes: the paths of issue 30 items 1 and 2 that the
# faults reached, each read from what twopc answered or recorded.
REACHED_KINDS: tuple[str, ...] = (
    "stranded_commit",          # a commit's markers were dropped by the broker (seen stranded)
    "release_cut_short",        # a stranded commit's release failed midway (CommitUnverified,
                                # StrandedUnreleased: "release failed at ...")
    "release_finished",         # the next check committed a half-done release (item 1, FINISH)
    "stranded_commit_aborted",  # the next check proved the stranded records aborted (item 1)
    "stranded_fenced",          # an operator fenced the held id of a release cut short (whose
                                # ABORT markers end the stranded records: twopc must say so)
    "offsets_held_back",        # a batch with source offsets ended partial or aborted after its
                                # intent: its offsets did not move (item 2)
    "offsets_moved_late",       # source offsets moved by a later call (recovery, a re-run) than
                                # the batch's commit: cut short, unproven or refused then (item 2)
    "group_checked",            # the group's offsets read (require_stable) against what is visible
)


def required_faults(replicated: bool) -> tuple[str, ...]:
    """The fault kinds a long run on this kind of cluster must inject."""
    return tuple(k for k in FAULT_KINDS if replicated or k not in REPLICATED_ONLY_FAULTS)


def required_outcomes(replicated: bool) -> tuple[str, ...]:
    """The outcome kinds a long run on this kind of cluster must reach."""
    return tuple(k for k in OUTCOME_KINDS if not replicated or k not in STRANDED_OUTCOMES)


@dataclass
class ScheduleResult:
    workload: str                      # "core", "spark-streaming" or "spark-batch"
    seed: int
    variant: str                       # the broker variant, e.g. "kafka4-tv2"
    steps: list[str] = field(default_factory=list)          # the schedule as run, human-readable
    faults: Counter[str] = field(default_factory=Counter)   # FAULT_KINDS -> times injected
    outcomes: Counter[str] = field(default_factory=Counter)  # OUTCOME_KINDS -> batches
    recovery_s: list[float] = field(default_factory=list)   # wall time of each recovery
    expected: int = 0                  # records that must be in the topic exactly once
    reported_lost: int = 0             # records DataLossError named (not expected)
    # Of those, records of a stranded commit an operator's abort lost (StrandedCommitAborted,
    # acknowledged): no repair can bring them back, copy-forward included.
    aborted_from_outside: int = 0
    found: int = 0
    duplicates: int = 0
    missing: int = 0
    open_transactions: int = 0
    stranded_released: int = 0         # commits whose markers a killed broker dropped, released
    victims: Counter[str] = field(default_factory=Counter)  # replicated cluster: role -> brokers
                                       # killed holding it (schedule.VICTIM_ROLES)
    fired: Counter[str] = field(default_factory=Counter)  # control-client faults that fired, by
                                       # "API action" (the fault log, twopc/control/faults.py)
    reached: Counter[str] = field(default_factory=Counter)  # REACHED_KINDS -> times
    passed: bool = False
    error: str | None = None           # why it failed (audit or harness), None if it passed
    seconds: float = 0.0

    def __post_init__(self) -> None:
        unknown = ((set(self.faults) - set(FAULT_KINDS)) | (set(self.outcomes) - set(OUTCOME_KINDS))
                   | (set(self.reached) - set(REACHED_KINDS)))
        if unknown:
            raise ValueError(f"unknown fault or outcome kinds {sorted(unknown)}; "
                             f"use the names in tests/torture/result.py")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["faults"], data["outcomes"] = dict(self.faults), dict(self.outcomes)
        data["victims"] = dict(self.victims)
        data["fired"], data["reached"] = dict(self.fired), dict(self.reached)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScheduleResult:
        """The inverse of to_json (a line of the long run's journal)."""
        counters = {k: Counter(data.get(k, {}))
                    for k in ("faults", "outcomes", "victims", "fired", "reached")}
        plain = {k: v for k, v in data.items()
                 if k in {f.name for f in fields(cls)} and k not in counters}
        return cls(**plain, **counters)


def run_to_verdict(result: ScheduleResult, began: float, body: Callable[[], None],
                   close: Callable[[], None]) -> ScheduleResult:
    """Run a schedule's `body` (its steps, then the audit, which sets `result.error` on a finding)
    and fill in the verdict; an exception fails the schedule with its trace, and the long run goes
    on with the next seed."""
    try:
        body()
        result.passed = result.error is None
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:2000]
        result.steps.append("harness: " + traceback.format_exc()[-1500:])
        result.passed = False
    finally:
        close()
        result.seconds = time.monotonic() - began
    return result
