"""The control client against a broker that stops answering: its JVM is SIGSTOPped (connections stay
open, the kernel still accepts new ones, nothing is answered), then SIGCONTed.

A driver's commit must not hang on such a broker, and must not call an EndTxn it could not confirm
committed: the answer is UNCONFIRMED (the log check decides, docs/design.md section 4), reads raise a
typed error, and all of it within the configured timeouts. Once the broker answers again the same
client finishes the transaction. The broker is the test's own: a paused shared broker would stall
every other test of the session.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.control.helpers import open_txn, read_committed
from twopc.broker.cluster import LocalKafka
from twopc.broker.under_test import VARIANTS, KafkaUnderTest
from twopc.control import ControlClient, ControlError, EndTxnRequest, OutcomeKind

pytestmark = pytest.mark.integration

# Short enough that the broker stays paused well under KRaft's broker session timeout (9 s): a
# longer pause would have the (same-process) controller fence the broker on resume.
SETTINGS = {"socket.timeout.ms": "1000", "socket.connection.setup.timeout.ms": "1000",
            "twopc.control.retry.timeout.ms": "2000"}


@pytest.fixture
def own_kafka(broker: KafkaUnderTest) -> Iterator[KafkaUnderTest]:
    """A broker of the session's variant, for this test alone."""
    spec = VARIANTS.get(broker.variant)
    if spec is None:
        pytest.skip(f"needs a broker of ours to pause; {broker.variant} is not one")
    kafka = LocalKafka(spec).start()
    try:
        yield KafkaUnderTest(broker.variant, kafka.bootstrap_servers, local=kafka)
    finally:
        for node in kafka.nodes:
            if node.pid is not None and node.alive():
                os.kill(node.pid, signal.SIGCONT)
        kafka.stop()


def test_a_broker_that_stops_answering_leaves_the_commit_unconfirmed_not_hanging(
        own_kafka: KafkaUnderTest) -> None:
    assert own_kafka.local is not None
    bootstrap = own_kafka.bootstrap_servers
    topic = own_kafka.create_topic(2)
    txn = open_txn(bootstrap, topic, count=3, timeout_ms=120000)
    req = EndTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch, True)
    client = ControlClient({"bootstrap.servers": bootstrap, **SETTINGS})
    (node,) = own_kafka.local.nodes
    assert node.pid is not None
    try:
        # Warm: the coordinator is known and a connection to it is open, as in a driver.
        client.describe_transactions([txn.transactional_id])
        os.kill(node.pid, signal.SIGSTOP)
        try:
            began = time.monotonic()
            out = client.end_txns([req], precheck=False)[txn.transactional_id]
            ended_after = time.monotonic() - began
            assert out.kind is OutcomeKind.UNCONFIRMED and not out.committed, out
            with pytest.raises(ControlError):
                client.describe_transactions([txn.transactional_id])
        finally:
            os.kill(node.pid, signal.SIGCONT)
        # Bounded by the settings (2 s of retries, 1 s per request or connection), not the
        # defaults (60 s, 30 s): generous for a loaded machine, far below a hang.
        assert ended_after < 30, f"end_txns took {ended_after:.1f} s against a silent broker"
        # The EndTxn may have reached the broker before it stopped: ending it again is safe.
        again = client.end_txns([req])[txn.transactional_id]
        assert again.kind in (OutcomeKind.COMMITTED, OutcomeKind.ALREADY_COMMITTED), again
    finally:
        client.close()
    assert sorted(read_committed(bootstrap, topic)) == sorted(f"r-{i}" for i in range(3))
