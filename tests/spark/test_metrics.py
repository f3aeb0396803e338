"""`twopc.metricsPort`: the metrics exporter served in the driver by TwopcProgressListener, scraped
over HTTP during a real streaming query (local mode) on a real broker: each micro-batch's commit
counted with its latency, the topic's partitions not held back, and a transaction another producer
holds open on the topic seen pinning its partitions until it ends."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.control.helpers import open_txn
from tests.ops.scrape import pins, scrape, scrape_until, value
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.demo.drivers import write_json_files
from twopc.ops.audit import audit_topic
from twopc.spark import TwopcProgressListener

from .helpers import sink_options
from .test_streaming import PER_FILE, start_query

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def holdbacks(samples: Any, topic: str) -> list[float | None]:
    return [value(samples, "twopc_partition_lso_holdback_records", topic=topic, partition=str(p))
            for p in range(4)]


def test_the_driver_serves_the_query_s_metrics(
        spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path,
        control: ControlClient) -> None:
    options = {**sink_options(broker.bootstrap_servers, topic, tmp_path),
               "twopc.metricsPort": "0"}  # any free port: listener.metrics.port says which
    listener = TwopcProgressListener(options)
    assert listener.metrics is not None
    url = listener.metrics.url
    spark.streams.addListener(listener)
    try:
        # Before the query's first batch there is no log yet: said, while the topic is watched.
        before = scrape(url)
        assert value(before, "twopc_exporter_checkpoint_up") == 0
        assert value(before, "twopc_exporter_cluster_up") == 1
        assert holdbacks(before, topic) == [0, 0, 0, 0]

        source = tmp_path / "in"
        ids = write_json_files(source, 1, PER_FILE, "m")
        query = start_query(spark, source, tmp_path / "spark-ckpt", options)
        try:
            query.processAllAvailable()
            ids += write_json_files(source, 1, PER_FILE, "m", first=1)
            query.processAllAvailable()
            batches = query.lastProgress["batchId"] + 1
        finally:
            query.stop()
        owner = str(query.id)

        def counted(s: Any) -> bool:
            return value(s, "twopc_batches_total", owner=owner, event="commit",
                         outcome="committed") == batches

        samples = scrape_until(url, counted)
        assert batches >= 2
        assert value(samples, "twopc_exporter_checkpoint_up") == 1
        assert value(samples, "twopc_commit_latency_seconds_count", owner=owner) == batches
        latency = value(samples, "twopc_commit_latency_seconds_sum", owner=owner)
        assert latency is not None and latency > 0
        margin = value(samples, "twopc_commit_oldest_transaction_age_ratio", owner=owner)
        assert margin is not None and 0 <= margin < 1
        assert value(samples, "twopc_recoveries_total", owner=owner, where="prepare") is None
        assert audit_topic(broker.config(), topic, ids).passed
        after = scrape_until(url, lambda s: holdbacks(s, topic) == [0, 0, 0, 0])
        assert pins(after) == {}

        # Another producer's transaction on the topic: it pins, and the log does not name it.
        txn = open_txn(broker.bootstrap_servers, topic, count=8)
        try:
            # The exporter looks again at most once a second (min_interval_s): the scrape just
            # before may have been the look this one is answered from.
            held = pins(scrape_until(url, lambda s: bool(pins(s))))
            assert set(held) == {(topic, p) for p in txn.offsets}
            assert all((labels["transactional_id"], labels["role"], labels["owner"]) ==
                       (txn.transactional_id, "other", "") for labels in held.values())
        finally:
            control.fence([txn.transactional_id])
        scrape_until(url, lambda s: holdbacks(s, topic) == [0, 0, 0, 0] and not pins(s))
    finally:
        spark.streams.removeListener(listener)
        listener.stop_metrics()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)
