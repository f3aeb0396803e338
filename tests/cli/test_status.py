"""`twopc status` against real state left by a driver killed with SIGKILL after its intent: the pending
batch, its open transactions and their ages, an orphan, thin-margin warnings; read-only; exit codes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checkpoint import open_log
from tests.driver.support import ROOT, Scenario
from twopc.driver.observe import BatchFigures
from twopc.log.session import check_binding
from twopc.protocol.owner import Owner
from twopc.spark.journal import Journal, batch_entry


def twopc(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "twopc.cli", *args], input=stdin,
                          capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)


def status_json(scenario: Scenario, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = twopc("status", "--checkpoint", scenario.log_url, "--json", *extra)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.integration
def test_status_shows_the_pending_batch_of_a_killed_driver(scenario: Scenario) -> None:
    bootstrap = ("--bootstrap-servers", scenario.broker.bootstrap_servers)
    assert scenario.drive("commit", "0", scenario.write("0")).get("ok"), "batch 0 commits"
    results = scenario.write("1")
    assert scenario.drive("commit", "1", results, crash_at="coordinator.after_intent") == {
        "killed": True}
    # A task of batch 2 that pre-committed before the crash: open, in the pool, named by no record.
    [orphan] = scenario.write("2", [scenario.txn("2", 1, attempt=1)])
    assert orphan.handle is not None
    last_before = open_log(scenario.log_url).last()

    code, report = status_json(scenario, *bootstrap)
    assert code == 1
    assert report["healthy"] is False and report["broker_checked"] is True
    assert report["binding"] == {"owner_kind": "query", "owner_id": scenario.owner_id,
                                 "prefix": scenario.prefix}
    assert [(b["batch"], b["status"]) for b in report["batches"]] == [("0", "committed"),
                                                                       ("1", "prepared")]
    assert report["batches"][1]["transactions"] == 4
    assert report["batches"][1]["records"] == 4 * scenario.rows
    [pending] = report["pending"]
    assert pending["batch"] == "1"
    recorded = {r.handle.transactional_id: r.handle for r in results if r.handle}
    assert {t["transactional_id"] for t in pending["transactions"]} == set(recorded)
    for t in pending["transactions"]:
        h = recorded[t["transactional_id"]]
        assert (t["producer_id"], t["epoch"], t["records"]) == (h.producer_id, h.epoch, scenario.rows)
        assert t["broker"]["state"] == "Ongoing" and t["open"] is True
        assert (t["broker"]["producer_id"], t["broker"]["epoch"]) == (h.producer_id, h.epoch)
        assert t["recovery_would"] == "roll_forward"
        assert t["timeout_ms"] == scenario.timeout_ms
        assert t["age_ms"] > 0 and t["age_ratio"] == round(t["age_ms"] / t["timeout_ms"], 4)
        assert t["partitions"][0]["topic"] in scenario.topics
    [found] = report["orphans"]
    assert found["transactional_id"] == orphan.handle.transactional_id
    assert found["state"] == "Ongoing" and found["producer_id"] == orphan.handle.producer_id
    assert found["timeout_ms"] == scenario.timeout_ms and found["age_ms"] >= 0
    assert report["stuck"] == []
    assert any("batch 1 is pending" in a for a in report["attention"])
    assert any("no record names" in a for a in report["attention"])

    # Every open transaction is past a warn ratio of 0: one WARN each, pending and orphan alike.
    code, warned = status_json(scenario, *bootstrap, "--warn-ratio", "0")
    assert code == 1
    assert len(warned["warnings"]) == 5
    assert all("guard margin is thin" in w for w in warned["warnings"])

    # Without the broker: the log alone still shows the pending batch and recorded ages.
    code, offline = status_json(scenario)
    assert code == 1 and offline["broker_checked"] is False and offline["orphans"] == []
    assert all(t["broker"] is None and t["recovery_would"] is None
               for t in offline["pending"][0]["transactions"])

    text = twopc("status", "--checkpoint", scenario.log_url, *bootstrap, "--warn-ratio", "0")
    assert text.returncode == 1
    assert "pending batch 1" in text.stdout and "recovery would: roll forward" in text.stdout
    assert "WARN" in text.stdout and "orphans" in text.stdout

    # Read-only: status appended nothing (recovery would have named the roll-forward first).
    assert open_log(scenario.log_url).last() == last_before


@pytest.mark.integration
def test_status_of_a_healthy_log(scenario: Scenario) -> None:
    assert scenario.drive("commit", "0", scenario.write("0")).get("ok")
    code, report = status_json(scenario, "--bootstrap-servers", scenario.broker.bootstrap_servers)
    assert code == 0, report
    assert report["healthy"] and report["attention"] == [] and report["pending"] == []
    assert report["batches"][0]["status"] == "committed"
    assert report["batches"][0]["visible_partitions"] == [0, 1, 2, 3]
    assert report["batches"][0]["figures"] is None  # no journal: the core API keeps none
    text = twopc("status", "--checkpoint", scenario.log_url)
    assert text.returncode == 0 and "status: healthy" in text.stdout


@pytest.mark.integration
def test_status_shows_the_figures_the_spark_journal_kept(scenario: Scenario) -> None:
    assert scenario.drive("commit", "0", scenario.write("0")).get("ok")
    fig = BatchFigures("commit", "0", "committed", 8, 4, 4, 37.5, 1200, 60000, 0.02)
    Journal(scenario.log_url).write_batch("0", batch_entry(scenario.owner_id, fig))
    code, report = status_json(scenario)
    assert code == 0, report
    shown = report["batches"][0]["figures"]
    assert {k: shown[k] for k in fig.as_dict()} == fig.as_dict() and shown["at_ms"] > 0
    text = twopc("status", "--checkpoint", scenario.log_url)
    assert "commit 38 ms, oldest transaction at 2% of its timeout" in text.stdout, text.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_status_usage_and_unreachable(tmp_path: Path) -> None:
    missing = twopc("status", "--checkpoint", str(tmp_path / "nothing-here"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert not (tmp_path / "nothing-here").exists()  # status created nothing

    url = str(tmp_path / "log")
    unbound = open_log(url)  # a directory, but no twopc binding in it
    assert unbound.last() is None
    proc = twopc("status", "--checkpoint", url)
    assert proc.returncode == 2 and "no twopc log" in proc.stderr

    check_binding(open_log(url), Owner.query("q-1", "p1"), create=True)
    assert twopc("status", "--checkpoint", url).returncode == 0
    bad = twopc("status", "--checkpoint", url, "-X", "nonsense")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr
    down = twopc("status", "--checkpoint", url, "--bootstrap-servers", f"127.0.0.1:{_free_port()}",
                 "-X", "twopc.control.retry.timeout.ms=2000")
    assert down.returncode == 2 and "cannot ask the broker" in down.stderr
