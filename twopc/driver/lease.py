"""One batch job of a family at a time: the lease of the family's log (docs/design.md section 5;
issue 30, item 4).

Batch jobs of one transactional id prefix share one log and one id pool (`Owner.jobs`). Two
different jobs writing at once would undo each other: the second one's recovery, before its tasks
write, rolls the first one's open intent forward (the first then loses its next append) and fences
the transactions the first has pre-committed but not recorded yet (nothing tells them from
orphans), and their tasks take the same ids. So a run takes the family's lease, a `lease` record,
before it recovers or writes anything, and a run of another job is refused (`JobFamilyBusy`) while
the lease is live. A run of the same job takes it over: the log already decides between two runs
of one job (one commits it, the other finds it committed), and a re-run after a crash must not
wait for the dead run's lease.

The lease ends with the run's release, after everything its commit sends (not at the job's
`committed` record: the run still fences the orphans that record names); a run that dies leaves
it until it expires (`twopc.jobLeaseMs` after it was last taken or renewed), or until a run of the
same job takes it over, even once that job is committed (it then finishes what the dead run left,
and lets the family go). `write_exactly_once`
renews it while its tasks run (`kept`); a `format("kafka2pc")` job cannot (no driver-side Python
process lives through its tasks), so its lease must be long enough for the whole job.

No transaction is touched here, and exactly-once never rests on the lease: the log fence, the
guards and recovery keep it whatever runs at once. What the lease buys is one clear refusal up
front instead of two jobs failing each other (or one reported failed though it is committed).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from checkpoint import Log
from twopc.driver.call import DriverSettings
from twopc.errors import JobFamilyBusy, LogOwnershipLost
from twopc.log.session import Session, check_binding
from twopc.protocol.log_records import Lease
from twopc.protocol.plans import blocking_lease, left_by_a_run_of
from twopc.protocol.state import JobLease

_log = logging.getLogger("twopc")

# How many times a lease record is tried again after another driver appended first.
_RACES = 5


def holder_name() -> str:
    return f"host {socket.gethostname()} pid {os.getpid()}"


def when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


class JobLeases:
    """Take, renew and end the lease of one job family's log."""

    def __init__(self, log: Log, settings: DriverSettings) -> None:
        self.log = log
        self.settings = settings

    def _read(self) -> Session:
        check_binding(self.log, self.settings.owner, create=True)
        return Session(self.log)

    def acquire(self, job: str, run: str, lease_ms: int) -> None:
        """Take the lease for run `run` of `job` (or take it over from another run of `job`);
        JobFamilyBusy if a live lease of another job holds the family."""
        lost: LogOwnershipLost | None = None
        for _ in range(_RACES):
            session = self._read()
            now = self.settings.clock_ms()
            blocking = blocking_lease(session.state.lease, job, now)
            if blocking is not None:
                raise busy(self.log.url, job, blocking)
            try:
                session.append(self._lease(session.state.lease, job, run, now + lease_ms, now))
                return
            except LogOwnershipLost as exc:  # another driver appended: read again, decide again
                lost = exc
        assert lost is not None
        raise lost

    def left_by_another_run(self, job: str, run: str) -> bool:
        """Whether another run of `job` still holds the family (plans.left_by_a_run_of)."""
        return left_by_a_run_of(self._read().state.lease, job, run, self.settings.clock_ms())

    def renew(self, job: str, run: str, lease_ms: int) -> bool:
        """Move the lease of `run` on; False once it no longer holds it (ended, or taken over by
        another run of the job): there is nothing to renew any more."""
        session = self._read()
        lease = session.state.lease
        if lease is None or lease.run != run:
            return False
        now = self.settings.clock_ms()
        # Another driver appended first: the next renewal reads again.
        with contextlib.suppress(LogOwnershipLost):
            session.append(self._lease(lease, job, run, now + lease_ms, now))
        return True

    def release(self, run: str) -> None:
        """End the lease if `run` still holds it (a no-op otherwise)."""
        for _ in range(_RACES):
            session = self._read()
            lease = session.state.lease
            if lease is None or lease.run != run:
                return
            try:
                session.append(Lease(lease.job, run, 0, lease.since_ms, lease.holder))
                return
            except LogOwnershipLost:
                continue

    @contextmanager
    def kept(self, job: str, run: str, lease_ms: int) -> Iterator[None]:
        """Renew the lease of `run` every third of `lease_ms` while the block runs (a batch job's
        tasks), from a thread; it stops before the block's end returns, so that no renewal races
        the commit's own appends."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(lease_ms / 3000):
                try:
                    if not self.renew(job, run, lease_ms):
                        return
                except Exception as exc:  # a storage hiccup: the lease lasts, try again later
                    _log.warning("twopc: renewing the lease of job %s failed: %s: %s", job,
                                 type(exc).__name__, exc)

        thread = threading.Thread(target=renew, name=f"twopc-lease-{job}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _lease(self, cur: JobLease | None, job: str, run: str, until_ms: int,
               now: int) -> Lease:
        since = cur.since_ms if cur is not None and cur.run == run else now
        holder = cur.holder if cur is not None and cur.run == run else holder_name()
        return Lease(job, run, until_ms, since, holder)


def busy(url: str, job: str, lease: JobLease) -> JobFamilyBusy:
    return JobFamilyBusy(url, job, lease.job, lease.run, lease.holder, when(lease.since_ms),
                         when(lease.until_ms))
