"""The metrics exporter against a real broker and a real checkpoint log, scraped over HTTP: a batch
whose driver was SIGKILLed after its intent holds its partitions open (the LSO holdback, the pinning
transactions' ids, ages and batch), an orphan of the pool pins one once the batch is committed,
and nothing pins anything once recovery has settled it all; the journal's figures are counted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.driver.support import Scenario
from tests.ops.scrape import Sample, pins, scrape, scrape_until, value
from twopc.control import ControlClient, EndTxnRequest
from twopc.driver.observe import BatchFigures
from twopc.ops.audit import wait_until_stable
from twopc.ops.metrics import MetricsServer, Target, serve
from twopc.spark.journal import Journal, batch_entry, recovery_entry

pytestmark = pytest.mark.integration


@pytest.fixture
def exporter(scenario: Scenario) -> Iterator[MetricsServer]:
    server = serve(Target(scenario.broker.config(), scenario.topics, scenario.log_url), port=0,
                   address="127.0.0.1", log_interval_s=0.0)
    yield server
    server.stop()


def holdback(samples: list[Sample], topic: str, partition: int) -> float | None:
    return value(samples, "twopc_partition_lso_holdback_records", topic=topic,
                 partition=str(partition))


@pytest.mark.all_variants  # DescribeProducers, ListTransactions by producer id: on every broker
def test_scrape_while_a_batch_holds_partitions_open_and_after(
        scenario: Scenario, control: ControlClient, exporter: MetricsServer) -> None:
    assert scenario.drive("commit", "0", scenario.write("0")).get("ok"), "batch 0 commits"
    results = scenario.write("1")
    assert scenario.drive("commit", "1", results, crash_at="coordinator.after_intent") == {
        "killed": True}
    handles = [r.handle for r in results if r.handle is not None]
    [orphan] = scenario.write("2", [scenario.txn("2", 1, attempt=1)])
    assert orphan.handle is not None
    parts = {(s.topic, s.partition) for s in orphan.handle.spans}

    # The intent's transactions are open: each pins the partition it wrote.
    samples = scrape(exporter.url)
    assert value(samples, "twopc_exporter_cluster_up") == 1
    assert value(samples, "twopc_exporter_checkpoint_up") == 1
    assert value(samples, "twopc_exporter_unreadable_partitions") == 0
    pinned = pins(samples)
    assert len(pinned) == 4 == len(handles)
    for h in handles:
        [span] = h.spans
        where = (span.topic, span.partition)
        assert pinned[where] == {
            "topic": span.topic, "partition": str(span.partition),
            "transactional_id": h.transactional_id, "producer_id": str(h.producer_id),
            "producer_epoch": str(h.epoch), "state": "Ongoing", "owner": scenario.owner_id,
            "batch": "1", "role": "pending"}
        hw = value(samples, "twopc_partition_high_watermark_offset", topic=span.topic,
                   partition=str(span.partition))
        lso = value(samples, "twopc_partition_last_stable_offset", topic=span.topic,
                    partition=str(span.partition))
        assert lso == span.first_offset and hw is not None and hw > lso
        assert holdback(samples, *where) == hw - lso >= scenario.rows
        age = value(samples, "twopc_open_transaction_age_seconds", topic=span.topic,
                    partition=str(span.partition))
        assert age is not None and 0 <= age < 60
        assert value(samples, "twopc_open_transaction_timeout_seconds", topic=span.topic,
                     partition=str(span.partition)) == scenario.timeout_ms / 1000
        ratio = value(samples, "twopc_open_transaction_age_ratio", topic=span.topic,
                      partition=str(span.partition))
        assert ratio is not None and abs(ratio - age / 60) < 0.01
        expected_open = 2 if where in parts else 1  # the orphan shares one partition
        assert value(samples, "twopc_partition_open_transactions", topic=span.topic,
                     partition=str(span.partition)) == expected_open

    # Batch 1 committed (what recovery's roll-forward sends): the orphan, an id of the pool that
    # no record names, is all that still pins anything.
    ended = control.end_txns([EndTxnRequest(h.transactional_id, h.producer_id, h.epoch, True)
                              for h in handles])
    assert all(o.committed for o in ended.values()), ended
    samples = scrape_until(exporter.url, lambda s: len(pins(s)) == 1)
    [(where, labels)] = pins(samples).items()
    assert where in parts
    assert (labels["transactional_id"], labels["producer_id"], labels["role"], labels["batch"],
            labels["owner"]) == (orphan.handle.transactional_id, str(orphan.handle.producer_id),
                                 "pool", "", scenario.owner_id)
    [span] = orphan.handle.spans
    assert value(samples, "twopc_partition_last_stable_offset", topic=where[0],
                 partition=str(where[1])) == span.first_offset
    # Its records, and the marker of batch 1's transaction written after them: offsets, not records.
    assert holdback(samples, *where) == scenario.rows + 1
    others = [(t, p) for t in scenario.topics for p in (0, 1) if (t, p) != where]
    assert all(holdback(samples, *tp) == 0 for tp in others)

    # Recovery records batch 1's outcome and fences the orphan: nothing holds anything back.
    journal = Journal(scenario.log_url)  # what the Spark sink leaves beside the log
    report = scenario.driver(control).recover()
    assert report.orphans_fenced == (orphan.handle.transactional_id,)
    journal.write_recovery(recovery_entry(scenario.owner_id, {
        "event": "recovery_report", "where": "prepare", "acted": True, "summary": "s",
        "batches": {"1": "committed"}, "rolled_forward": [], "orphans_fenced": ["x"]}))
    fig = BatchFigures("commit", "1", "committed", 20, 4, 4, 1500.0, 2000, 60000, 0.0333)
    journal.write_batch("1", batch_entry(scenario.owner_id, fig))
    for topic in scenario.topics:
        assert wait_until_stable(scenario.broker.config(), topic, 60)
    samples = scrape_until(exporter.url, lambda s: not pins(s))
    assert all(holdback(samples, t, p) == 0 for t in scenario.topics for p in (0, 1))
    assert all(value(samples, "twopc_partition_open_transactions", topic=t, partition=str(p))
               == 0 for t in scenario.topics for p in (0, 1))
    assert not [s for s in samples if s.name.startswith("twopc_open_transaction_")]
    owner = scenario.owner_id
    assert value(samples, "twopc_batches_total", owner=owner, event="commit",
                 outcome="committed") == 1
    assert value(samples, "twopc_commit_latency_seconds_count", owner=owner) == 1
    assert value(samples, "twopc_commit_latency_seconds_sum", owner=owner) == 1.5
    assert value(samples, "twopc_commit_latency_seconds_bucket", owner=owner, le="2.5") == 1
    assert value(samples, "twopc_commit_latency_seconds_bucket", owner=owner, le="1.0") == 0
    assert value(samples, "twopc_commit_oldest_transaction_age_ratio", owner=owner) == 0.0333
    assert value(samples, "twopc_recoveries_total", owner=owner, where="prepare") == 1
    assert value(samples, "twopc_recovered_batches_total", owner=owner, outcome="committed") == 1
    assert value(samples, "twopc_recovery_transactions_total", owner=owner,
                 action="orphan_fenced") == 1
    # Counted once: scraped again, nothing new.
    again = scrape(exporter.url)
    assert value(again, "twopc_batches_total", owner=owner, event="commit",
                 outcome="committed") == 1
    assert value(again, "twopc_recoveries_total", owner=owner, where="prepare") == 1


def test_an_unreachable_cluster_is_reported_not_raised(scenario: Scenario) -> None:
    dead = {"bootstrap.servers": "127.0.0.1:1", "twopc.control.retry.timeout.ms": "500"}
    server = serve(Target(dead, scenario.topics), port=0, address="127.0.0.1")
    try:
        samples = scrape(server.url)
        assert value(samples, "twopc_exporter_cluster_up") == 0
        assert not [s for s in samples if s.name.startswith("twopc_partition_")]
    finally:
        server.stop()
