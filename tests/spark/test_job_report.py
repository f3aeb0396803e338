"""JobReport from a commit's report (issue #17, item 5): pure, no broker and no JVM. The real-broker
cases (a concurrent run, a repair) are in test_jobs.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.protocol.strategies import batch_handles
from twopc.driver.coordinator import CommitReport
from twopc.protocol.handle import Handle, ResultKind, WriteResult
from twopc.spark.jobs import job_report

STATUSES = ["committed", "repaired", "empty", "already_committed"]


@given(batch_handles(), st.sampled_from(STATUSES), st.data())
def test_only_what_the_commit_committed_counts(handles: tuple[Handle, ...], status: str,
                                               data: st.DataObject) -> None:
    results = [WriteResult(ResultKind.PRECOMMITTED, "j", h.task_partition, 0, h, h.record_count)
               for h in handles]
    results.append(WriteResult(ResultKind.SKIPPED, "j", 99, 0))
    committed = [h for h in handles if status in ("committed", "repaired")
                 and (status == "committed" or data.draw(st.booleans()))]
    commit = CommitReport("j", status, committed=tuple(h.transactional_id for h in committed),
                          duplicates=tuple(h.transactional_id for h in handles
                                           if h not in committed))
    report = job_report("j", commit, results)
    assert report.status == status
    assert report.transactions == len(committed)
    assert report.rows == sum(h.record_count for h in committed)
    assert report.skipped == (status == "already_committed")
    if report.skipped:
        assert (report.rows, report.transactions) == (0, 0)
        assert "already committed" in str(report)
    if status == "repaired":
        assert "repair" in str(report)
