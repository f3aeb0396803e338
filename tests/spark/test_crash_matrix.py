"""The streaming crash matrix: the driver's whole process group (Python driver, JVM, Python workers)
is SIGKILLed at each named point of the commit protocol, the query is restarted from the same Spark
checkpoint and twopc log, and the audit finds every record exactly once, none missing, none open."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from twopc.broker.under_test import KafkaUnderTest
from twopc.demo.drivers import write_json_files
from twopc.ops.audit import audit_topic

from .helpers import errors_of, run_driver

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

POINTS = [
    "spark.task.precommitted.attempt0",
    "coordinator.before_intent",
    "coordinator.after_intent",
    "coordinator.after_endtxn_1",
    "coordinator.after_endtxn_n_minus_1",
    "coordinator.after_all_endtxn",
    "coordinator.after_committed_record",
    "coordinator.during_sweep",
]


@pytest.mark.parametrize("point", POINTS)
def test_driver_killed_at_point_then_restarted(
    point: str, broker: KafkaUnderTest, topic: str, tmp_path: Path
) -> None:
    source = tmp_path / "in"
    ids = write_json_files(source, 3, 40, "m")
    cfg = {
        "bootstrap": broker.bootstrap_servers, "topic": topic, "source": str(source),
        "checkpoint": (tmp_path / "twopc").as_uri(), "spark_checkpoint": str(tmp_path / "spark"),
        "prefix": "matrix",
    }
    crashed = run_driver("stream", cfg, env={"TWOPC_CRASH_AT": point, "TWOPC_CRASH_SCOPE": "session"})
    # The point must really be reached: the driver dies by SIGKILL, it does not finish.
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, errors_of(crashed.stderr))
    assert "RESULT" not in crashed.stdout
    restarted = run_driver("stream", cfg)
    assert restarted.returncode == 0, errors_of(restarted.stderr)
    report = audit_topic(broker.config(), topic, ids)
    assert report.passed, report.summary()
