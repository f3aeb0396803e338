"""`twopc recover` against real state left by drivers killed with SIGKILL: a pending batch rolled
forward (the audit passes), and a partly committed batch whose changed re-run raised DataLossError,
shown with what was lost and then resolved by the operator (`--resolve`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from checkpoint import open_log
from tests.driver.support import ROOT, Scenario, wait_not_ongoing
from twopc.control import ControlClient
from twopc.errors import DataLossError
from twopc.log.session import Session
from twopc.protocol.handle import Handle, WriteResult
from twopc.protocol.log_records import Resolved, from_body
from twopc.protocol.state import BatchStatus

pytestmark = pytest.mark.integration


def recover(scenario: Scenario, *extra: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "twopc.cli", "recover", "--checkpoint", scenario.log_url,
         "--bootstrap-servers", scenario.broker.bootstrap_servers, "--settle-wait-ms", "30000",
         *extra],
        input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)


def recover_json(scenario: Scenario, *extra: str, stdin: str = "") -> tuple[int, dict[str, Any], str]:
    proc = recover(scenario, "--json", *extra, stdin=stdin)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def handles_of(results: list[WriteResult]) -> list[Handle]:
    return [r.handle for r in results if r.handle is not None]


def test_recover_rolls_a_killed_commit_forward(scenario: Scenario) -> None:
    results = scenario.write("0")
    assert scenario.drive("commit", "0", results, crash_at="coordinator.after_intent") == {
        "killed": True}
    [orphan] = scenario.write("1", [scenario.txn("1", 2, attempt=1)])  # died before any intent
    assert orphan.handle is not None

    code, out, stderr = recover_json(scenario)
    assert code == 0, (out, stderr)
    assert out["binding"]["prefix"] == scenario.prefix
    assert out["binding"]["owner_id"] == scenario.owner_id
    [batch] = out["recovery"]["batches"]
    assert batch["batch"] == "0" and batch["outcome"] == "committed"
    assert batch["committed_partitions"] == [0, 1, 2, 3] and batch["lost_partitions"] == []
    assert batch["recorded_seq"] is not None
    assert {t["transactional_id"] for t in batch["transactions"]} == {
        h.transactional_id for h in handles_of(results)}
    assert all(t["pass1"] == "roll_forward" and t["outcome"] == "committed"
               for t in batch["transactions"])
    assert sorted(out["recovery"]["rolled_forward"]) == sorted(
        h.transactional_id for h in handles_of(results))
    assert out["recovery"]["orphans_fenced"] == [orphan.handle.transactional_id]
    assert out["stuck"] == [] and out["undecided_error"] is None and out["resolution"] is None
    assert "recovering: [" in stderr and "4/4 transactions" in stderr  # the progress bar

    scenario.expect("0")
    scenario.audit()  # batch 0 exactly once; the orphan fenced, nothing of it visible

    again = recover(scenario)  # idempotent: nothing left to do
    assert again.returncode == 0 and "nothing to recover" in again.stdout
    status = subprocess.run([sys.executable, "-m", "twopc.cli", "status", "--checkpoint",
                             scenario.log_url, "--bootstrap-servers",
                             scenario.broker.bootstrap_servers],
                            capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert status.returncode == 0, status.stdout


def test_data_loss_is_shown_then_resolved(scenario: Scenario, control: ControlClient) -> None:
    # Batch 0: partitions 0-2 committed, partition 3 aborted by its timeout (the driver died
    # between the EndTxn calls and stayed down past partition 3's 4 s timeout).
    long = scenario.write("0", [scenario.txn("0", p) for p in range(3)])
    short = scenario.write("0", [scenario.txn("0", 3)], timeout_ms=4000)
    assert scenario.drive("commit", "0", long + short,
                          crash_at="coordinator.after_endtxn_n_minus_1", margin_ms=200) == {
        "killed": True}
    wait_not_ongoing(control, handles_of(short))

    code, out, _ = recover_json(scenario)
    assert code == 1  # partly committed: the query's re-run must repair it
    [batch] = out["recovery"]["batches"]
    assert batch["outcome"] == "partial"
    assert batch["committed_partitions"] == [0, 1, 2] and batch["lost_partitions"] == [3]
    [stuck] = out["stuck"]
    assert stuck["status"] == "partial" and stuck["data_loss"] == []
    assert [v["task_partition"] for v in stuck["visible"]] == [0, 1, 2]
    [lost] = stuck["lost"]
    assert lost["task_partition"] == 3 and lost["records"] == scenario.rows
    assert lost["transactional_id"] == handles_of(short)[0].transactional_id
    assert lost["partitions"][0]["records"] == scenario.rows

    # The re-run differs in partition 0 (a non-deterministic plan): DataLossError, nothing visible.
    changed = scenario.write("0", [scenario.txn("0", 0, tag="-changed")]
                             + [scenario.txn("0", p) for p in range(1, 4)])
    with pytest.raises(DataLossError):
        scenario.driver(control).commit("0", changed)

    code, out, _ = recover_json(scenario)
    assert code == 1 and out["recovery"]["batches"] == []
    [stuck] = out["stuck"]
    [refused] = stuck["data_loss"]
    assert refused["reason"] == "the re-run differs from the visible data"
    [loss] = refused["losses"]
    assert loss == {"task_partition": 0, "committed_records": scenario.rows,
                    "rerun_records": scenario.rows,
                    "detail": "the re-run's records differ (checksum)"}
    text = recover(scenario)
    assert text.returncode == 1
    assert "LOST: Spark partition 3" in text.stdout and "DataLossError" in text.stdout

    # The operator declines at the prompt: nothing is recorded.
    note = "ops: keep partitions 0-2, accept loss of partition 3, ticket 42"
    declined = recover(scenario, "--resolve", "0", "--decision", "committed", "--note", note,
                       stdin="n\n")
    assert declined.returncode == 1 and "nothing recorded" in declined.stderr
    assert "[y/N]" in declined.stderr
    assert Session(open_log(scenario.log_url)).state.batch("0").status is BatchStatus.PARTIAL

    code, out, _ = recover_json(scenario, "--resolve", "0", "--decision", "committed",
                                "--note", note, "--yes")
    assert code == 0, out
    assert out["resolution"] == {"batch": "0", "decision": "committed", "note": note}
    assert out["stuck"] == []
    log = open_log(scenario.log_url)
    assert Session(log).state.batch("0").status is BatchStatus.COMMITTED
    assert Resolved("0", "committed", note) in [from_body(r.body) for r in log.records()]

    # A resolution for a batch that is not stuck is refused.
    refused_again = recover(scenario, "--resolve", "0", "--decision", "aborted", "--note", "x")
    assert refused_again.returncode == 2 and "resolution refused" in refused_again.stderr

    # The query goes on; the audit holds what the operator kept, exactly once.
    coord = scenario.driver(control)
    assert coord.commit("1", scenario.write("1")).status == "committed"
    for p in range(3):
        scenario.expected.setdefault(scenario.topic_of(p), set()).update(scenario.ids("0", p))
    scenario.expect("1")
    scenario.audit()


def test_recover_usage_errors(scenario: Scenario) -> None:
    proc = recover(scenario, "--resolve", "0")
    assert proc.returncode == 2 and "--decision" in proc.stderr
    proc = recover(scenario, "--resolve", "0", "--decision", "committed", "--note", "  ")
    assert proc.returncode == 2 and "--note" in proc.stderr
    proc = recover(scenario)  # the log was never bound: no twopc log there, and none is made
    assert proc.returncode == 2 and "no checkpoint log at" in proc.stderr
    assert not os.path.exists(scenario.log_url)
