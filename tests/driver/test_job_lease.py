"""The lease of a batch job family's log (twopc/driver/lease.py; issue 30, item 4), on a real log
on local files with the driver's clock set by the test: no broker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from checkpoint import open_log
from twopc.driver.call import DriverSettings
from twopc.driver.lease import JobLeases
from twopc.errors import JobFamilyBusy
from twopc.log.session import Session
from twopc.protocol.owner import Owner
from twopc.protocol.state import JobLease


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


def leases(tmp_path: Path, clock: Clock) -> JobLeases:
    return JobLeases(open_log(str(tmp_path / "log")), DriverSettings(Owner.jobs("fam"),
                                                                     clock_ms=clock))


def held(tmp_path: Path) -> JobLease | None:
    return Session(open_log(str(tmp_path / "log"))).state.lease


def test_one_job_of_the_family_at_a_time(tmp_path: Path) -> None:
    clock = Clock()
    family = leases(tmp_path, clock)
    family.acquire("J1", "r1", 60_000)
    with pytest.raises(JobFamilyBusy, match=r"job J2 was not started: job J1 of the same family "
                                            r"is running \(run r1 on host") as refused:
        family.acquire("J2", "r2", 60_000)
    assert "run it again" in str(refused.value) and "twopc.jobLeaseMs" in str(refused.value)
    # A run of the same job takes it over (a re-run after a crash must not wait).
    family.acquire("J1", "r3", 60_000)
    lease = held(tmp_path)
    assert lease is not None and (lease.job, lease.run) == ("J1", "r3")
    assert not family.renew("J1", "r1", 60_000)  # r1 no longer holds it
    family.release("r1")  # a no-op: not r1's
    assert held(tmp_path) == lease
    family.release("r3")
    assert held(tmp_path) is None
    family.acquire("J2", "r2", 60_000)  # free again


def test_a_lease_nobody_renews_ends_at_its_expiry(tmp_path: Path) -> None:
    clock = Clock()
    family = leases(tmp_path, clock)
    family.acquire("J1", "r1", 60_000)
    clock.now_ms += 59_999
    with pytest.raises(JobFamilyBusy):
        family.acquire("J2", "r2", 60_000)
    assert family.renew("J1", "r1", 60_000)  # renewed: another 60 s from now
    clock.now_ms += 59_999
    with pytest.raises(JobFamilyBusy):
        family.acquire("J2", "r2", 60_000)
    clock.now_ms += 1
    family.acquire("J2", "r2", 60_000)  # the run of J1 is taken for dead
    lease = held(tmp_path)
    assert lease is not None and lease.job == "J2"


def test_kept_renews_while_the_tasks_run(tmp_path: Path) -> None:
    family = JobLeases(open_log(str(tmp_path / "log")), DriverSettings(Owner.jobs("fam")))
    family.acquire("J1", "r1", 1_500)
    first = held(tmp_path)
    assert first is not None
    with family.kept("J1", "r1", 1_500):
        time.sleep(1.2)  # two renewals (every 0.5 s)
    renewed = held(tmp_path)
    assert renewed is not None and renewed.until_ms > first.until_ms
    assert renewed.since_ms == first.since_ms and renewed.holder == first.holder
