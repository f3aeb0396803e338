"""What a re-run's "already committed" answer, a commit another driver took over, and a second
acknowledgment of a batch's loss prove, with the log checks answered from a table (no broker:
tests/driver/test_stranded.py's `_FirstLookDoor`). Found by a review of the change that made the
re-run look first (coordinator.py `_commit`, `_finish_commit`); the real-broker cases are
tests/driver/test_outside_abort_before_commit.py and test_orphans.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from checkpoint import open_log
from tests.driver.support import DriverUnderTest
from tests.driver.test_stranded import _committed_job, _FirstLookDoor
from twopc.control.logcheck import LogCheckResult, LogOutcome, UnknownReason
from twopc.driver.call import DriverCall
from twopc.driver.coordinator import CommitReport, CommitStatus, _finish_commit
from twopc.errors import CommitUnverified, ResolutionRefused, StrandedCommitAborted
from twopc.log.session import Session
from twopc.protocol.handle import Handle, PartitionSpan, ResultKind, WriteResult
from twopc.protocol.log_records import Committed, Orphans, Prepared

PID, EPOCH = 4000, 7
ABORTED = LogCheckResult(LogOutcome.ABORTED, detail="aborted from offset 5")


def _handles() -> tuple[Handle, Handle]:
    return (Handle("q-0-0", PID, EPOCH, (PartitionSpan("t", 0, 5, 5, 1),), 1, "c", 0, 60000, 0,
                   0, 0),
            Handle("q-1-0", PID + 1, EPOCH, (PartitionSpan("t", 1, 5, 5, 1),), 1, "c", 0, 60000,
                   1, 0, 0))


def _died_before_its_check(tmp_path: Path, answer: LogCheckResult) -> DriverUnderTest:
    """Batch 7 recorded committed by a process that died before its check; the log check of
    q-1-0's span answers `answer`."""
    coord = DriverUnderTest(open_log(str(tmp_path / "log")), cast(Any, None), "query", "q", "q")
    coord.bind()
    session = Session(coord.log)
    session.append(Committed("7", session.append(Prepared("7", _handles())), ()))
    door = _FirstLookDoor(session.state, {("t", 1, 5): answer})
    coord.coordinator.control = cast(Any, door)
    coord.recovery.control = cast(Any, door)
    return coord


@pytest.mark.parametrize("answer", [
    LogCheckResult(LogOutcome.UNKNOWN, UnknownReason.FETCH_ERROR, "leader unknown"),
    LogCheckResult(LogOutcome.NOT_YET_STABLE),
], ids=["fetch-error", "not-stable"])
def test_already_committed_is_not_answered_while_the_look_cannot_answer(
        tmp_path: Path, answer: LogCheckResult) -> None:
    """The re-run's tasks skip, so Spark records the batch on this answer: not before the log
    shows its records ended committed (as a re-run of a committed job: `look_at`)."""
    coord = _died_before_its_check(tmp_path, answer)
    skipped = [WriteResult(ResultKind.SKIPPED, "7", p, 0) for p in range(2)]
    for _ in range(2):  # and not the next time either: held, not remembered as looked at
        with pytest.raises(CommitUnverified, match="q-1-0"):
            coord.commit("7", skipped)


def test_already_committed_raises_a_loss_the_look_proves(tmp_path: Path) -> None:
    coord = _died_before_its_check(tmp_path, ABORTED)
    skipped = [WriteResult(ResultKind.SKIPPED, "7", p, 0) for p in range(2)]
    with pytest.raises(StrandedCommitAborted, match="batch 7"):
        coord.commit("7", skipped)


@pytest.mark.parametrize("kind", ["job", "query"])
def test_a_commit_another_driver_took_over_still_raises_the_loss_it_proves(
        tmp_path: Path, kind: str) -> None:
    """Another driver appends after this call's `committed` record (its orphans' fence finds
    it): this call's own check cannot record holds, and must neither say the batch committed nor
    hide the loss behind the lost append (before: CommitUnverified, or a job's "committed")."""
    coord = DriverUnderTest(open_log(str(tmp_path / "log")), cast(Any, None), kind, "q", "q")
    coord.bind()
    door = _FirstLookDoor(Session(coord.log).state, {("t", 1, 5): ABORTED})
    call = DriverCall(coord.log, cast(Any, door), coord.settings)
    call.append(Committed("7", call.append(Prepared("7", _handles())), ("q-9-0",)))
    Session(coord.log).append(Orphans(("q-8-0",)))  # the other driver
    report = CommitReport("7", CommitStatus.COMMITTED, committed=("q-0-0", "q-1-0"))
    with pytest.raises(StrandedCommitAborted, match="batch 7"):
        _finish_commit(call, "7", ("q-9-0",), None, report, own=True)


def test_a_second_loss_of_a_batch_is_acknowledged_in_an_entry_of_its_own(tmp_path: Path) -> None:
    coord, checks = _committed_job(tmp_path, {("t", 1, 5): ABORTED})
    assert coord.recovery.acknowledge_loss("job-1", "one") == ("q-1-0",)
    with pytest.raises(ResolutionRefused, match="acknowledged already"):
        coord.recovery.acknowledge_loss("job-1", "again")
    checks.answers[("t", 0, 5)] = ABORTED  # a second loss proven later
    assert coord.recovery.acknowledge_loss("job-1", "two") == ("q-0-0",)
    second = coord.log.index.get("loss:job-1#2")
    assert second is not None and second["keys"] == [["q-0-0", PID, EPOCH]], second
    with pytest.raises(ResolutionRefused, match="acknowledged already"):
        coord.recovery.acknowledge_loss("job-1", "three")


def test_an_acknowledgment_racing_another_acknowledges_only_what_is_left(tmp_path: Path) -> None:
    """Another operator makes the next entry, for the same loss, while this one is in flight:
    this one reads again and is refused (nothing is left), rather than overwrite or repeat it."""
    coord, _ = _committed_job(tmp_path, {("t", 1, 5): ABORTED})
    create = coord.log.index.create
    raced: list[str] = []

    def racing(key: str, body: dict[str, Any]) -> None:
        if not raced:
            raced.append(key)
            create(key, {**body, "note": "the other operator"})
        create(key, body)

    coord.log.index.create = racing  # type: ignore[method-assign]
    with pytest.raises(ResolutionRefused, match="acknowledged already"):
        coord.recovery.acknowledge_loss("job-1", "mine")
    assert raced == ["loss:job-1"]
    entry = coord.log.index.get("loss:job-1")
    assert entry is not None and entry["note"] == "the other operator"
    assert coord.log.index.get("loss:job-1#2") is None


def test_an_entry_written_before_keys_covers_its_ids_and_the_next_loss_gets_its_own(
        tmp_path: Path) -> None:
    coord, _ = _committed_job(tmp_path, {("t", 1, 5): ABORTED, ("t", 0, 5): ABORTED})
    coord.log.index.create("loss:job-1", {"ids": ["q-1-0"], "note": "before keys"})
    assert coord.recovery.acknowledge_loss("job-1", "the other one") == ("q-0-0",)
    coord.recovery.look_at("job-1")  # both acknowledged: quiet
