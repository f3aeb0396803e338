"""twopc/spark/reuse.py: what a process keeps between calls is let go cleanly when it exits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twopc.broker.under_test import KafkaUnderTest

ROOT = Path(__file__).resolve().parents[2]

_KEEP_A_CLIENT_THEN_EXIT = """
import json, sys
from twopc.spark.options import parse_options
from twopc.spark.reuse import client_for, release_client

config = parse_options(json.loads(sys.argv[1]), streaming=False)
client = client_for(config)
client.list_transactions()  # connected: its connections' reader tasks are running
release_client(config, client, healthy=True)  # kept for a next call that never comes
"""


@pytest.mark.integration
def test_a_kept_control_client_is_closed_at_exit(broker: KafkaUnderTest, tmp_path: Path) -> None:
    """A batch-job driver keeps its control client for the next call and then exits: asyncio
    must not print "Task was destroyed but it is pending!" for its connections (every batch-job
    driver of the soak run did, after its job had committed)."""
    options = {"kafka.bootstrap.servers": broker.bootstrap_servers, "topic": "t",
               "twopc.checkpoint": f"file://{tmp_path}/twopc", "twopc.transactionalidprefix": "j"}
    proc = subprocess.run([sys.executable, "-c", _KEEP_A_CLIENT_THEN_EXIT, json.dumps(options)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Task was destroyed" not in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
