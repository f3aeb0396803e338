"""The broker ledger: CI stops the brokers its run started, and nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from twopc.broker import VARIANTS, LocalKafka
from twopc.broker.ledger import LEDGER_VAR, record, start_time, stop_all


def test_a_process_that_is_not_the_recorded_broker_is_left_alone(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    ledger = tmp_path / "ledger"
    monkeypatch.setenv(LEDGER_VAR, str(ledger))
    # A process that names the data directory but is no Kafka, and one recorded with the wrong
    # start time (its pid reused): neither may be killed.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "kafka.Kafka"],
                             start_new_session=True)
    try:
        record(other.pid, str(tmp_path))  # its command line lacks the data directory
        ledger.open("a").write(json.dumps({"pid": other.pid, "start": 1,
                                           "data_dir": "kafka.Kafka"}) + "\n")
        assert stop_all(ledger) == []
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


@pytest.mark.integration
def test_a_recorded_broker_still_running_is_stopped(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "ledger"
    monkeypatch.setenv(LEDGER_VAR, str(ledger))
    kafka = LocalKafka(VARIANTS["kafka4-tv2"]).start()
    try:
        [entry] = [json.loads(line) for line in ledger.read_text().splitlines()]
        pid = kafka.brokers[0].pid
        assert entry["pid"] == pid and entry["start"] == start_time(pid)
        assert stop_all(ledger) == [pid]
        deadline = time.monotonic() + 30
        while start_time(pid) is not None and time.monotonic() < deadline:
            kafka.brokers[0].process.poll()  # type: ignore[union-attr]  # reap our child
            time.sleep(0.1)
        assert start_time(pid) is None
        assert stop_all(ledger) == []  # nothing left: a second stop touches nothing
    finally:
        kafka.stop()
