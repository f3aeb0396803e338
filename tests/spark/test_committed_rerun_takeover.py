"""A re-run of a committed batch job whose earlier run died after the job's `committed` record,
before its release (docs/design.md section 5): it takes the lease over, finishes what that run
left and lets the family go, and it reports the job committed whatever happens to the lease.
And a commit call whose fences another driver took over reports what it did. Unit tests over a
real local log and a fake control client (no broker); written from a review of 6dfc379, each
failing on it. The real-broker tests: tests/spark/test_lease_ends_before_fences.py."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from checkpoint import open_log
from twopc.control import TxnState
from twopc.control.logcheck import LogCheckRequest, LogCheckResult, LogOutcome
from twopc.control.outcomes import FenceResult, TransactionListing
from twopc.driver.call import DriverCall, DriverSettings
from twopc.driver.coordinator import CommitReport, CommitStatus, Coordinator, _finish_commit
from twopc.driver.lease import JobLeases
from twopc.driver.recovery import Recovery
from twopc.errors import CommitUnverified, LogOwnershipLost
from twopc.log.gate import Gate
from twopc.log.session import Session, check_binding
from twopc.protocol.handle import Handle, PartitionSpan, ResultKind, WriteResult
from twopc.protocol.log_records import Committed, Lease, Prepared
from twopc.protocol.owner import Owner
from twopc.spark import driver as sd
from twopc.spark.options import SinkConfig
from twopc.spark.reuse import DriverSide

PID, EPOCH = 4000, 7
NOW = 10_000_000
LEASE_MS = 30 * 60 * 1000


class Clock:
    now_ms = NOW

    def __call__(self) -> int:
        return self.now_ms


class FakeControl:
    """Log checks from a table; every partition stable unless `stuck`; a pool listing."""

    def __init__(self, answers: dict[tuple[str, int, int], LogCheckResult] | None = None,
                 open_ids: Sequence[str] = ()) -> None:
        self.answers = answers or {}
        self.open_ids = list(open_ids)
        self.fenced: list[str] = []
        self.on_list = None

    def wait_stable(self, past: dict[tuple[str, int], int], within_s: float) -> dict:
        return {tp: first + 100 for tp, first in past.items()}

    def log_checks(self, checks: Sequence[LogCheckRequest], budget_s: float | None = None):
        return [self.answers.get((c.topic, c.partition, c.offset),
                                 LogCheckResult(LogOutcome.COMMITTED)) for c in checks]

    def list_transactions(self, prefix: str, states: Any = None) -> list[TransactionListing]:
        listed = [TransactionListing(t, PID, TxnState.ONGOING, 0) for t in self.open_ids]
        if self.on_list is not None:  # another driver runs while this answer is on its way
            hook, self.on_list = self.on_list, None
            hook()
        return listed

    def start_list_transactions(self, prefix: str, states: Any = None
                                ) -> Future[list[TransactionListing]]:
        answer: Future[list[TransactionListing]] = Future()
        answer.set_result(self.list_transactions(prefix, states))
        return answer

    def describe_transactions(self, ids: Sequence[str]) -> dict:
        return {}

    def fence(self, ids: Sequence[str]) -> dict[str, FenceResult]:
        self.fenced.extend(ids)
        self.open_ids = [t for t in self.open_ids if t not in ids]
        return {t: FenceResult(t, PID, EPOCH + 1) for t in ids}


def _handles() -> tuple[Handle, Handle]:
    a = Handle("q-0-0", PID, EPOCH, (PartitionSpan("t", 0, 5, 5, 1),), 1, "c", 0, 60000, 0, 0, 0)
    b = Handle("q-1-0", PID + 1, EPOCH, (PartitionSpan("t", 1, 5, 5, 1),), 1, "c", 0, 60000, 1,
               0, 0)
    return a, b


def _family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, control: FakeControl,
            orphans: tuple[str, ...] = ("q-0-1",)) -> tuple[SinkConfig, Owner, Clock]:
    """job-1 committed by run-dead, which died after its `committed` record (its lease live)."""
    url = str(tmp_path / "log")
    owner = Owner.jobs("q")
    clock = Clock()
    settings = DriverSettings(owner, clock_ms=clock)
    log = open_log(url)
    check_binding(log, owner, create=True)
    s = Session(log)
    s.append(Lease("job-1", "run-dead", NOW + LEASE_MS, NOW, "host dead"))
    intent = s.append(Prepared("job-1", _handles()))
    s.append(Committed("job-1", intent, orphans))

    @contextlib.contextmanager
    def side(config: SinkConfig, owner_: Owner) -> Iterator[DriverSide]:
        yield DriverSide(Coordinator(log, control, settings), Recovery(log, control, settings),
                         Gate(log, owner), JobLeases(log, settings))

    monkeypatch.setattr(sd, "driver_side", side)
    monkeypatch.setattr(sd, "check_at_start", lambda *a, **k: None)
    config = SinkConfig({}, url, "q", topic="t", job_lease_ms=LEASE_MS)
    return config, owner, clock


def _lease(config: SinkConfig):
    return Session(open_log(config.checkpoint_url)).state.lease


def _another_job_takes_the_family_first(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
    """Between seeing the dead run's lease and taking it over, the lease expires and job-2
    takes the family."""
    real = JobLeases.left_by_another_run

    def racing(self: JobLeases, job: str, run: str) -> bool:
        answer = real(self, job, run)
        clock.now_ms = NOW + LEASE_MS + 1
        self.acquire("job-2", "run-3", LEASE_MS)
        return answer

    monkeypatch.setattr(JobLeases, "left_by_another_run", racing)


def test_a_rerun_takes_over_and_lets_the_family_go(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    control = FakeControl(open_ids=["q-0-1"])
    config, owner, _ = _family(tmp_path, monkeypatch, control)
    assert sd.prepare(config, owner, "job-1", "run-2") is True
    assert control.fenced == ["q-0-1"]  # the orphan the dead run's record names
    assert _lease(config) is None
    assert sd.prepare(config, owner, "job-2", "run-3") is False


def test_a_rerun_takes_over_even_when_the_dead_runs_markers_cannot_be_proven_yet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dead run died before its markers' check, and t[1] is not stable (markers a broker
    kill dropped). The takeover comes first (before: the re-run's read-only look raised
    CommitUnverified at every re-run, and the family stayed refused for 30 minutes): recovery's
    own check holds what it cannot prove (no task takes the id, every later check looks again,
    a loss it then proves is raised), the orphan is fenced, and the family is let go; the
    re-run does not say "already committed" of records not known visible (CommitUnverified, as
    any re-run's look says it; found by a review of a4a68c5)."""
    control = FakeControl({("t", 1, 5): LogCheckResult(LogOutcome.NOT_YET_STABLE)},
                          open_ids=["q-0-1"])
    config, owner, _ = _family(tmp_path, monkeypatch, control)
    with pytest.raises(CommitUnverified, match=r"batch job-1 .*q-1-0 held"):
        sd.prepare(config, owner, "job-1", "run-2")
    assert "q-1-0" in Session(open_log(config.checkpoint_url)).state.stranded  # held
    assert control.fenced == ["q-0-1"]
    assert _lease(config) is None
    assert sd.prepare(config, owner, "job-2", "run-3") is False


def test_a_committed_job_is_reported_committed_when_another_job_took_the_family_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between seeing the dead run's lease and taking it over, the lease expired and job-2 took
    the family: the re-run of committed job-1 still reports it committed (not JobFamilyBusy)."""
    control = FakeControl()
    config, owner, clock = _family(tmp_path, monkeypatch, control)
    _another_job_takes_the_family_first(monkeypatch, clock)
    assert sd.prepare(config, owner, "job-1", "run-2") is True
    lease = _lease(config)
    assert lease is not None and lease.job == "job-2"  # untouched


def test_two_reruns_of_a_committed_job_both_report_it_committed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both take the lease over; the one whose recovery loses the log to the other reports the
    job committed too (not LogOwnershipLost)."""
    control = FakeControl(open_ids=["q-0-1"])
    config, owner, _ = _family(tmp_path, monkeypatch, control)
    results: list[bool] = []
    control.on_list = lambda: results.append(sd.prepare(config, owner, "job-1", "run-3"))
    assert sd.prepare(config, owner, "job-1", "run-2") is True
    assert results == [True]
    assert _lease(config) is None


def _overtaken(tmp_path: Path, owner: Owner) -> tuple[DriverCall, FakeControl]:
    """A commit call that appended its `committed` record (naming orphan q-0-1); then another
    driver (a re-run taking the job over) appended."""
    log = open_log(str(tmp_path / "log"))
    check_binding(log, owner, create=True)
    control = FakeControl(open_ids=["q-0-1"])
    call = DriverCall(log, control, DriverSettings(owner))  # type: ignore[arg-type]
    call.append(Committed("job-1", call.append(Prepared("job-1", _handles())), ("q-0-1",)))
    Session(log).append(Lease("job-1", "run-2", NOW + LEASE_MS, NOW, "host rerun"))
    return call, control


def test_a_job_whose_fences_a_rerun_took_over_reports_its_own_commit(tmp_path: Path) -> None:
    call, control = _overtaken(tmp_path, Owner.jobs("q"))
    report = CommitReport("job-1", CommitStatus.COMMITTED)
    _finish_commit(call, "job-1", ("q-0-1",), None, report)
    assert control.fenced == []  # that driver's to send: its recovery swept it
    assert report.status is CommitStatus.COMMITTED
    assert "committed by this call" in report.notes[0] and "by another driver" not in report.notes[0]


def test_a_query_driver_whose_fences_another_took_over_stops(tmp_path: Path) -> None:
    call, control = _overtaken(tmp_path, Owner.query("query-1", "q"))
    with pytest.raises(LogOwnershipLost) as stopped:
        _finish_commit(call, "job-1", ("q-0-1",), None, CommitReport("job-1", CommitStatus.COMMITTED))
    assert control.fenced == []
    assert any("committed by this call" in n for n in getattr(stopped.value, "__notes__", []))


def test_a_rerun_that_loses_the_race_for_the_lease_still_looks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another job took the family first: the re-run reports job-1 committed only after the
    look any re-run makes (here the log proves t[1]'s records aborted: the loss is said)."""
    from twopc.errors import StrandedCommitAborted

    control = FakeControl({("t", 1, 5): LogCheckResult(LogOutcome.ABORTED, detail="aborted")})
    config, owner, clock = _family(tmp_path, monkeypatch, control)
    _another_job_takes_the_family_first(monkeypatch, clock)
    with pytest.raises(StrandedCommitAborted, match="batch job-1"):
        sd.prepare(config, owner, "job-1", "run-2")


def test_a_query_driver_overtaken_after_its_commit_gets_one_true_note(tmp_path: Path) -> None:
    """The query's driver stops (two drivers of one query), with the note that its batch is
    committed by itself, not also one saying another driver committed it."""
    call, _ = _overtaken(tmp_path, Owner.query("query-1", "q"))
    coord = Coordinator(call.log, call.control, call.settings)
    with pytest.raises(LogOwnershipLost) as stopped:
        _finish_commit(call, "job-1", ("q-0-1",), None, CommitReport("job-1", CommitStatus.COMMITTED))
    with pytest.raises(LogOwnershipLost) as again:
        coord._committed_by_another("job-1", [
            WriteResult(ResultKind.PRECOMMITTED, "job-1", p, 0, h, 1)
            for p, h in enumerate(_handles())], stopped.value)
    notes = getattr(again.value, "__notes__", [])
    assert len(notes) == 1 and "committed by this call" in notes[0]
