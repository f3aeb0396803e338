"""Run only by tests/test_interrupted_run.py (not collected by itself: no `test_` prefix): a
test holding the session's broker until its run is stopped by a signal."""

from __future__ import annotations

import time

from twopc.broker.under_test import KafkaUnderTest


def test_holds_the_broker_until_stopped(broker: KafkaUnderTest) -> None:
    print("broker up", broker.bootstrap_servers, flush=True)
    time.sleep(600)
