"""A batch job aborted after its intent outlives the purge (issue 31), on the real broker.

Job 0 decided its commit, then its driver stayed down past the transactions' timeout: the broker
aborted them, and the next run of the family (another job) recorded it, with the decided records
still in the Kafka log. Before this fix the purge took job 0 like any finished batch once
`retain_batches` later jobs had finished, and its re-run, weeks later, found nothing recorded and
committed its own rows (other rows, for a source that cannot replay) instead of copying the decided
ones. Now the purge keeps it until it is repaired, `twopc status` names it, and an operator may
give its records up (`twopc recover --resolve 0 --decision aborted`), after which it goes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.driver.support import ROOT, Scenario
from tests.driver.test_copy_forward import decided_then_timed_out, driver, rerun_with_other_rows
from tests.driver.test_job_index import commit_later_jobs as later_jobs
from tests.driver.test_job_index import purged
from twopc.control import ControlClient

pytestmark = pytest.mark.integration


def cli(scenario: Scenario, *args: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "twopc.cli", *args, "--checkpoint", scenario.log_url,
         "--bootstrap-servers", scenario.broker.bootstrap_servers, "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    if not proc.stdout:  # refused: the reason is on stderr
        return proc.returncode, {"error": proc.stderr[-3000:]}
    return proc.returncode, json.loads(proc.stdout)


def awaiting(scenario: Scenario, batch: str) -> None:
    """`twopc status` names the job as stuck, awaiting repair, with its lost records: exit 1."""
    rc, out = cli(scenario, "status")
    [row] = [s for s in out["stuck"] if s["batch"] == batch]
    assert rc == 1 and row["awaits_repair"] and len(row["lost"]) == scenario.partitions, out
    assert any(f"batch {batch} was aborted after its intent" in a for a in out["attention"]), out


def test_a_job_aborted_after_its_intent_is_kept_and_copied_when_re_run(
        scenario: Scenario, control: ControlClient) -> None:
    scenario.owner_kind = "job"
    decided_then_timed_out(scenario, control, (0, 1, 2, 3))  # job 0: nothing of it visible
    later_jobs(scenario, ["K1", "K2", "K3"])
    # Kept (K2 and K3 finished after it; the purge keeps 1), and with it every later job: the purge's
    # mark is a low-water mark.
    assert not purged(scenario, "0") and not purged(scenario, "K1")
    awaiting(scenario, "0")
    # The re-run, whose source cannot replay: the decided records are copied, its rows fenced.
    report = driver(scenario, control).commit("0", rerun_with_other_rows(scenario))
    assert report.status == "copied", report
    rc, out = cli(scenario, "status")
    assert rc == 0 and out["stuck"] == [], out
    later_jobs(scenario, ["K4", "K5"])
    assert purged(scenario, "0") and purged(scenario, "K1")  # the purge goes on
    # Committed by its copy, then purged: the job index answers for it.
    again = driver(scenario, control).commit("0", rerun_with_other_rows(scenario))
    assert again.status == "already_committed", again
    scenario.expect("0")
    scenario.audit()


def test_an_operator_gives_up_the_records_of_a_job_awaiting_repair(
        scenario: Scenario, control: ControlClient) -> None:
    scenario.owner_kind = "job"
    decided_then_timed_out(scenario, control, (0, 1, 2, 3))
    later_jobs(scenario, ["K1", "K2"])
    awaiting(scenario, "0")
    # "committed" would say the job is done with nothing of it visible: refused, naming the choices.
    rc, out = cli(scenario, "recover", "--resolve", "0", "--decision", "committed",
                  "--note", "ops: test", "--yes")
    assert rc == 2 and "resolve it aborted" in out["error"], out
    rc, out = cli(scenario, "recover", "--resolve", "0", "--decision", "aborted",
                  "--note", "ops: re-published from the source, ticket 1", "--yes")
    assert rc == 0 and out["resolution"]["decision"] == "aborted", out
    later_jobs(scenario, ["K3", "K4"])
    assert purged(scenario, "0")  # given up: the purge takes it like any finished job
    # Its re-run now writes afresh: its own rows, not the given-up ones.
    rerun = rerun_with_other_rows(scenario)
    report = driver(scenario, control).commit("0", rerun)
    assert report.status == "committed", report
    for p in range(scenario.partitions - 1):  # the re-run wrote nothing for the last one
        scenario.expected.setdefault(scenario.topic_of(p), set()).update(
            scenario.ids("0", p, "-rerun"))
    scenario.audit()
